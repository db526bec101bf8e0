"""status / logs / stop / list of recorded runs, from any shell."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from verlctl.errors import RuntimeFailure, VerlctlError
from verlctl.runtime.executor import DockerExecutor, Executor, HostExecutor
from verlctl.runtime.records import RunRecord, all_runs, resolve_run

TAIL_BYTES = 4 * 1024 * 1024


def target(record: RunRecord, client: Any = None) -> tuple[Executor | None, dict[str, Any]]:
    """The executor for a run's target and the container's state (None when it is gone / not running)."""
    if record.runtime == "host":
        return HostExecutor(), {"runtime": "host"}
    if client is None:
        client = _client_for(record, record.head_address)
    import docker

    try:
        c = client.containers.get(record.container_id or record.container_name)
    except docker.errors.NotFound:
        return None, {"name": record.container_name, "id": record.container_id, "state": "removed"}
    info = {"name": c.name, "id": c.id[:12], "state": c.status, "image": (c.image.tags or [c.image.id])[0]}
    if c.status != "running":
        return None, info
    return DockerExecutor(client, c.id, c.name), info


def _client_for(record: RunRecord, address: str | None) -> Any:
    from verlctl.runtime import containers

    if address is None:
        return containers.connect()
    from verlctl.runtime.nodes import node_client

    return node_client(address, record.ssh_user, record.ssh_port, record.remote_docker_socket, record.ssh_config)


def worker_targets(record: RunRecord) -> list[tuple[Any, Executor | None, dict[str, Any]]]:
    """(handle, executor or None, container info) for every worker node of a multi-node run."""
    import docker

    out: list[tuple[Any, Executor | None, dict[str, Any]]] = []
    for w in record.workers:
        try:
            client = _client_for(record, w.address)
            c = client.containers.get(w.container_id or w.container_name)
        except docker.errors.NotFound:
            out.append((w, None, {"node": w.address, "state": "removed"}))
            continue
        except VerlctlError as exc:
            out.append((w, None, {"node": w.address, "state": f"unreachable: {exc.message}"}))
            continue
        info = {"node": w.address, "name": c.name, "id": c.id[:12], "state": c.status}
        out.append((w, DockerExecutor(client, c.id, f"{c.name}@{w.address}") if c.status == "running" else None, info))
    return out


def read_tail(ex: Executor, path: str, max_bytes: int = TAIL_BYTES) -> str:
    size = ex.file_size(path)
    if size is None:
        return ""
    start = max(0, size - max_bytes)
    data = ex.read_file(path, offset=start) or b""
    text = data.decode(errors="replace")
    if start > 0:
        text = text.split("\n", 1)[-1]
    return text


def watcher_alive(record: RunRecord) -> bool:
    if not record.watcher_pid:
        return False
    try:
        with open(f"/proc/{record.watcher_pid}/cmdline", "rb") as fh:
            cmd = fh.read().decode(errors="replace")
    except OSError:
        return False
    return record.run_id in cmd


def run_status(run_id: str | None) -> dict[str, Any]:
    record = resolve_run(run_id)
    ex, container = target(record)
    alive = bool(ex and record.pgid and ex.group_alive(record.pgid))
    doc: dict[str, Any] = {
        "run_id": record.run_id,
        "experiment": record.experiment,
        "runtime": record.runtime,
        "container": container,
        "pgid": record.pgid,
        "alive": alive,
        "state": "running" if alive else ("stopped" if record.stopped else "not running"),
        "attempts": [a.model_dump() for a in record.attempts],
        "run_log": record.run_log,
        "train_log": record.train_log,
        "checkpoints": record.checkpoints,
        "swanlab_url": record.swanlab_url,
        "watcher": {"pid": record.watcher_pid, "alive": watcher_alive(record)},
        "progress": None,
        "last_step": None,
        "last_error": None,
        "last_line": None,
    }
    if record.workers:
        doc["head"] = record.head_address
        doc["workers"] = [
            {**info, "pgid": w.pgid, "alive": bool(ex and w.pgid and ex.group_alive(w.pgid))}
            for w, ex, info in worker_targets(record)
        ]
    live = record.read_status()
    if live:
        doc["live"] = live
    if ex is not None:
        text = read_tail(ex, record.run_log)
        _summarise(text, doc)
    last_failure = next((e for e in reversed(record.events()) if e.get("event") in ("failure", "alert")), None)
    if last_failure and not doc["last_error"]:
        doc["last_error"] = {k: last_failure.get(k) for k in ("category", "reason", "message", "hint") if k in last_failure}
    _watcher_outcome(record, doc)
    return doc


def _watcher_outcome(record: RunRecord, doc: dict[str, Any]) -> None:
    """The watcher's last word on the current attempt: it gave up (with why), so the run is a failure even
    when its log ends with "training finished" (e.g. a resume that trained 0 steps)."""
    events = record.events()
    last_start = max((i for i, e in enumerate(events) if e.get("event") == "started"), default=-1)
    gave_up = next((e for e in reversed(events[last_start + 1:]) if e.get("event") == "gave_up"), None)
    doc["gave_up"] = None
    if gave_up is None:
        return
    reason = str(gave_up.get("reason") or "")
    doc["gave_up"] = {"reason": reason if reason.startswith("gave up:") else f"gave up: {reason}",
                      "category": gave_up.get("category"), "advice": gave_up.get("advice") or []}
    if not doc["alive"]:
        doc["state"] = "failed (watcher gave up)"


def _summarise(text: str, doc: dict[str, Any]) -> None:
    from verlctl.monitor.summary import diagnose_text

    if not text:
        return
    lines = [ln for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    doc["last_line"] = lines[-1][-300:] if lines else None
    if doc["state"] == "not running":
        # start_verl.sh's own last words: it finished, or it exited with a status.
        import re

        exits = list(re.finditer(r"start_verl\.sh exits with status (\d+)", text))
        finished_at = text.rfind("] training finished")
        if exits and exits[-1].start() > finished_at:
            doc["state"] = f"failed (exit {exits[-1].group(1)})"
        elif finished_at >= 0:
            doc["state"] = "finished"
    result = diagnose_text(text)
    doc["progress"] = result.progress
    if result.steps:
        step = result.steps[-1]
        doc["last_step"] = {"step": step.step, "metrics": step.metrics}
    if result.findings:
        f = result.findings[0]
        doc["last_error"] = {"category": f.category, "message": f.message, "hint": f.hint, "excerpt": f.excerpt}


def print_status(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    state_colour = "green" if doc["alive"] else "red"
    console.print(f"run [bold]{doc['run_id']}[/bold] ({doc['experiment']}): [{state_colour}]{doc['state']}[/]",
                  highlight=False)
    c = doc["container"]
    if doc["runtime"] == "docker":
        console.print(f"  container {c.get('name')} ({c.get('state')})", highlight=False)
    console.print(f"  process group {doc['pgid']}, attempts {len(doc['attempts'])}, log {doc['run_log']}",
                  highlight=False)
    if doc.get("progress"):
        p = doc["progress"]
        console.print(f"  progress: step {p.get('step')}/{p.get('total')}", highlight=False)
    if doc.get("last_step"):
        m = doc["last_step"]["metrics"]
        keys = [k for k in ("critic/score/mean", "response_length/mean", "actor/pg_loss", "timing_s/step") if k in m]
        shown = ", ".join(f"{k}={m[k]}" for k in keys)
        console.print(f"  last step {doc['last_step']['step']}: {shown}", highlight=False)
    if doc.get("last_error"):
        e = doc["last_error"]
        console.print(f"  [red]last error[/red]: {e.get('category')}: {e.get('message') or e.get('reason')}",
                      highlight=False)
        if e.get("hint"):
            console.print(f"    hint: {e['hint']}", highlight=False)
    if doc.get("gave_up"):
        console.print(f"  [red]watcher[/red]: {escape(doc['gave_up']['reason'])}", highlight=False)
        for a in doc["gave_up"]["advice"]:
            console.print(f"    advice: {escape(str(a))}", highlight=False)
    w = doc["watcher"]
    if w.get("pid"):
        console.print(f"  watcher pid {w['pid']}: {'alive' if w['alive'] else 'not running'}", highlight=False)
    if doc.get("swanlab_url"):
        console.print(f"  SwanLab: {doc['swanlab_url']}", highlight=False)


def show_logs(run_id: str | None, follow: bool, lines: int) -> int:
    record = resolve_run(run_id)
    ex, container = target(record)
    if ex is None:
        raise VerlctlError(f"the run's container is {container.get('state')}: its log cannot be read")
    size = ex.file_size(record.run_log)
    if size is None:
        raise VerlctlError(f"no log at {record.run_log} yet")
    text = read_tail(ex, record.run_log, TAIL_BYTES if lines else size)
    out = text.splitlines(keepends=True)
    if lines:
        out = out[-lines:]
    sys.stdout.write("".join(out))
    sys.stdout.flush()
    if not follow:
        return 0
    pos = size
    try:
        idle = 0.0
        while True:
            new_size = ex.file_size(record.run_log) or pos
            if new_size > pos:
                data = ex.read_file(record.run_log, offset=pos, max_bytes=new_size - pos) or b""
                sys.stdout.write(data.decode(errors="replace"))
                sys.stdout.flush()
                pos = new_size
                idle = 0.0
            else:
                idle += 0.5
                if idle >= 5 and not (record.pgid and ex.group_alive(record.pgid)):
                    return 0
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0


def stop_groups(groups: list[tuple[Executor, int, str]], grace: float) -> list[tuple[Executor, int, str]]:
    """SIGTERM every group at once, wait (one shared grace period), SIGKILL what is left; fail if any stays."""
    import signal

    for gex, pgid, _ in groups:
        gex.signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    alive = list(groups)
    while alive and time.monotonic() < deadline:
        alive = [g for g in alive if g[0].group_alive(g[1])]
        if alive:
            time.sleep(0.5)
    for gex, pgid, _ in alive:
        gex.signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while alive and time.monotonic() < deadline:
        alive = [g for g in alive if g[0].group_alive(g[1])]
        if alive:
            time.sleep(0.25)
    if alive:
        raise RuntimeFailure(f"process group {alive[0][1]} in {alive[0][2]} did not stop")
    return groups


def stop_run(run_id: str | None, remove_container: bool, grace: float) -> int:
    from rich.console import Console

    console = Console()
    record = resolve_run(run_id)
    ex, container = target(record)
    if record.watcher_pid and watcher_alive(record):
        try:
            os.kill(record.watcher_pid, 15)
            console.print(f"stopped the watcher (pid {record.watcher_pid})", highlight=False)
        except ProcessLookupError:
            pass
    groups: list[tuple[Executor, int, str]] = []
    if ex is not None and record.pgid:
        if ex.group_alive(record.pgid):
            groups.append((ex, record.pgid, ex.describe()))
        else:
            console.print(f"process group {record.pgid} had already ended", highlight=False)
    else:
        console.print(f"nothing to stop: the container is {container.get('state')}", highlight=False)
    for w, wex, _info in worker_targets(record):
        if wex is not None and w.pgid and wex.group_alive(w.pgid):
            groups.append((wex, w.pgid, f"{wex.describe()}"))
    for _gex, pgid, where in stop_groups(groups, grace):
        console.print(f"stopped process group {pgid} in {where}", highlight=False)
    record.stopped = True
    record.event("stopped", pgid=record.pgid)
    record.save()
    if remove_container:
        if record.runtime != "docker":
            console.print("no container to remove (host runtime)")
        elif not record.container_created:
            console.print(f"container {record.container_name} was not created by this run: left in place",
                          highlight=False)
        else:
            from verlctl.runtime import containers

            client = _client_for(record, record.head_address)
            c = containers.find_container(client, record.container_id or record.container_name or "")
            if c is not None:
                c.remove(force=True)
                console.print(f"removed container {record.container_name}", highlight=False)
                record.event("container_removed", container=record.container_name)
            for w in record.workers:
                if w.container_created:
                    wc = containers.find_container(_client_for(record, w.address), w.container_id or "")
                    if wc is not None:
                        wc.remove(force=True)
                        console.print(f"removed container {w.container_name} on {w.address}", highlight=False)
    return 0


def list_runs(as_json: bool) -> int:
    runs = all_runs()
    if as_json:
        sys.stdout.write(json.dumps([r.model_dump() for r in runs], indent=2, default=str) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="verlctl runs", title_justify="left", header_style="bold")
    for col in ("run", "created", "runtime", "container", "attempts", "stopped"):
        table.add_column(col)
    for r in runs:
        table.add_row(
            r.run_id,
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created_at)),
            r.runtime,
            r.container_name or "-",
            str(len(r.attempts)),
            "yes" if r.stopped else "no",
        )
    Console().print(table)
    return 0
