"""status / logs / stop / list of recorded runs, from any shell."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from verlctl.backends.docker import (
    TAIL_BYTES,
    Group,
    client_for,
    log_target,
    read_from,
    read_tail,
    remove_key_files,
    remove_own_containers,
    stop_followers,
    stop_groups,
    target,
    worker_targets,
)
from verlctl.errors import VerlctlError
from verlctl.runtime.executor import (
    KILL_WAIT_S,
    RAY_DAEMON_GRACE_S,
    Executor,
    GroupRef,
    HostExecutor,
)
from verlctl.runtime.records import (
    WATCH_LOCK,
    RunRecord,
    load_run,
    record_lock,
    record_trust,
    resolve_run,
    scan_runs,
)


def watcher_alive(record: RunRecord) -> bool:
    """The recorded watcher pid is still `verlctl watch <this run>`, run by this user (not any process that
    merely mentions the run id, e.g. `tail -f .../<run id>/events.jsonl`)."""
    if not record.watcher_pid:
        return False
    try:
        with open(f"/proc/{record.watcher_pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read(65536).split(b"\0")]
        uid = os.stat(f"/proc/{record.watcher_pid}").st_uid
    except OSError:
        return False
    if uid != os.getuid() or "watch" not in argv:
        return False
    i = argv.index("watch")
    if not (i > 0 and (argv[i - 1] == "verlctl" or argv[i - 1].endswith("/verlctl"))):
        return False
    if record.run_id in argv[i + 1:]:
        return True
    # `verlctl watch` without a run id (the newest run, as launch_and_watch starts it): it is this run's
    # watcher when it holds this run's watcher lock
    return holds_watch_lock(record.watcher_pid, record.dir / WATCH_LOCK)


def holds_watch_lock(pid: int, lock: Path) -> bool:
    """Whether process ``pid`` holds the flock on ``lock`` (the kernel's table, /proc/locks: no lock is taken
    here, so a watcher starting now is never refused because of this look)."""
    try:
        st = os.stat(lock, follow_symlinks=False)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            table = fh.read(4 * 1024 * 1024)
    except OSError:
        return False
    # by inode (an overlay file system may show another device number than stat() gives)
    want = str(st.st_ino)
    for line in table.splitlines():
        parts = line.split()
        if "->" in parts:  # a waiter, not a holder
            continue
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[4] == str(pid) and parts[5].rsplit(":", 1)[-1] == want:
            return True
    return False


def run_status(run_id: str | None) -> dict[str, Any]:
    record = resolve_run(run_id)
    from verlctl.orchestrator import runstate

    events = record.events()
    try:
        ex, container = target(record)
    except VerlctlError as exc:  # no engine: the record and a host log still tell most of the story
        ex, container = None, {"name": record.container_name, "id": record.container_id,
                               "state": f"unreachable: {exc.message}"}
    ref = record.ref
    verdict = ex.verdict(ref) if ex is not None and ref is not None else None
    alive = bool(verdict and verdict["owned"])
    doc: dict[str, Any] = {
        "run_id": record.run_id,
        "experiment": record.experiment,
        "runtime": record.runtime,
        "container": container,
        "pgid": record.pgid,
        "alive": alive,
        "state": "running" if alive else "unknown",
        "state_why": None,
        "identity": (verdict or {}).get("reason") or None,
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
        "recovered": [r.words for r in runstate.restarts(events) if r.recovered],
        "restarts": [r.as_dict() for r in runstate.restarts(events)],
        "log_read_from": None,
    }
    if record.workers:
        doc["head"] = record.head_address
        doc["workers"] = [
            {**info, "pgid": w.pgid, "alive": bool(ex and w.ref is not None and ex.group_alive(w.ref))}
            for w, ex, info in worker_targets(record)
        ]
    live = record.read_status()
    if live:
        doc["live"] = live
    # Only the current attempt's part of the log: an error that recovery has dealt with is not this run's
    # last error any more.
    offset = record.attempts[-1].log_offset if record.attempts else 0
    text = runstate.read_host_log(record, offset, TAIL_BYTES)
    if text is not None:
        doc["log_read_from"] = "host"
    elif ex is not None:
        text = read_from(ex, record.run_log, offset, TAIL_BYTES)
        doc["log_read_from"] = "target"
    if text:
        summarise(text, doc)
    from verlctl.monitor.health import evaluate_text, record_settings, run_warnings

    found = evaluate_text(text, record_settings(record)) if text else []
    doc["health"] = run_warnings(found, events)  # the watcher's over every attempt, where the tail has no more
    current = runstate.current_events(events) if record.attempts else events
    last_failure = next((e for e in reversed(current) if e.get("event") in ("failure", "alert")), None)
    if last_failure and not doc["last_error"]:
        doc["last_error"] = {k: last_failure.get(k) for k in ("category", "reason", "message", "hint") if k in last_failure}
    launch_failed = next((e for e in reversed(current) if e.get("event") == "launch_failed"), None)
    if launch_failed and not doc["last_error"]:
        doc["last_error"] = {"category": "launch_failed", "message": launch_failed.get("error")}
    watcher_outcome(record, doc, events)
    if doc["last_error"] and doc["last_error"].get("category"):
        # what to do after what recovery did (a rung already tried is not advised again; a give-up's advice)
        doc["last_error"]["hint"] = runstate.hint_after_recovery(
            doc["last_error"]["category"], doc["last_error"].get("hint"), events,
            watching=bool(doc["watcher"]["alive"]))
    # A removed or stopped container has no process left: the group has ended (unknown when unreachable).
    reachable = not str(container.get("state") or "").startswith("unreachable")
    probed = (alive if ex is not None else (False if reachable else None)) if ref is not None else None
    st = runstate.decide(record, events, live, text, alive=probed, watcher=doc["watcher"]["alive"],
                         progress=doc["progress"])
    doc["state"], doc["state_why"] = st.state, st.why
    return doc


def stop_ended_it(record: RunRecord) -> bool:
    """Whether `stop` ended the run (signalled a live attempt), rather than marking a run that had already
    finished or failed: that run keeps its verdict (finished, failed, gave up). A record without the field
    (an older verlctl) or stopped just now (no event yet) counts as ended by the stop."""
    last = next((e for e in reversed(record.events()) if e.get("event") == "stopped"), None)
    return last is None or bool(last.get("signalled", True))


def watcher_outcome(record: RunRecord, doc: dict[str, Any], events: list[dict[str, Any]] | None = None) -> None:
    """The watcher's last word on the current attempt: it gave up (with why), so the run is a failure even
    when its log ends with "training finished" (e.g. a resume that trained 0 steps)."""
    if events is None:
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
        doc["state"] = "failed (watcher gave up)"  # (Slurm's status; a local run's state is decided after)


def summarise(text: str, doc: dict[str, Any]) -> None:
    from verlctl.monitor.summary import diagnose_text

    lines = [ln for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    doc["last_line"] = lines[-1][-300:] if lines else None
    result = diagnose_text(text)
    doc["progress"] = result.progress
    if result.steps:
        step = result.steps[-1]
        doc["last_step"] = {"step": step.step, "metrics": step.metrics}
    if result.findings:
        f = result.findings[0]
        doc["last_error"] = {"category": f.category, "message": f.message, "hint": f.hint, "excerpt": f.excerpt}


STATE_COLOURS = {"running": "green", "finished": "green", "failed": "red", "stopped": "yellow",
                 "never started": "red", "unknown": "yellow"}


def print_status(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape

    from verlctl.report import print_words

    console = Console()
    state_colour = STATE_COLOURS.get(str(doc["state"]), "red" if not doc["alive"] else "green")
    why = f" ({escape(str(doc['state_why']))})" if doc.get("state_why") else ""
    from rich.text import Text

    from verlctl.report import print_wrapped

    print_wrapped(console, Text.from_markup(f"run [bold]{escape(str(doc['run_id']))}[/bold] "
                                            f"({escape(str(doc['experiment']))}): "
                                            f"[{state_colour}]{escape(str(doc['state']))}[/]{why}"), 0, 4)
    c = doc["container"]
    if doc["runtime"] == "docker":
        console.print(f"  container {c.get('name')} ({c.get('state')})", highlight=False, markup=False)
    if doc["runtime"] == "slurm":
        j = doc.get("slurm") or {}
        console.print(f"  Slurm job {j.get('job_id')} ({j.get('state')}{', ' + j['reason'] if j.get('reason') else ''}"
                      f"{', nodes ' + j['nodes'] if j.get('nodes') else ''}), attempts {len(doc['attempts'])}, "
                      f"log {doc['run_log']}", highlight=False, markup=False)
    else:
        group = f"process group {doc['pgid']}, " if doc.get("pgid") is not None else ""
        print_words(console, f"  {group}attempts {len(doc['attempts'])}, log {doc['run_log']}", 0, 4)
    if doc.get("identity") and not doc["alive"] and doc.get("state") not in ("finished", "failed", "stopped"):
        console.print(f"  process check: {doc['identity']}", highlight=False, markup=False)
    restarts = doc.get("restarts")
    if restarts is None:  # a document of an older verlctl
        restarts = [{"line": f"recovered: {line}"} for line in doc.get("recovered") or []]
    for r in restarts:
        print_words(console, f"  {r['line']}", 0, 4)
    advice = (doc.get("gave_up") or {}).get("advice") or []
    if doc.get("gave_up"):  # the watcher's last word leads: what to do now
        console.print(f"  [red]watcher[/red]: {escape(doc['gave_up']['reason'])}", highlight=False)
        for a in advice:
            console.print(f"    advice: {escape(str(a))}", highlight=False)
    if doc.get("progress"):
        p = doc["progress"]
        total = f"/{p['total']}" if p.get("total") else ""
        console.print(f"  progress: step {p.get('step')}{total}", highlight=False, markup=False)
    if doc.get("last_step"):
        m = doc["last_step"]["metrics"]
        keys = [k for k in ("critic/score/mean", "response_length/mean", "actor/pg_loss", "timing_s/step") if k in m]
        shown = ", ".join(f"{k}={m[k]}" for k in keys)
        console.print(f"  last step {doc['last_step']['step']}: {shown}", highlight=False, markup=False)
    for w in doc.get("health") or []:  # warnings: the run goes on (recovery.health.stop_on would stop it)
        from verlctl.monitor.health import warning_line

        console.print(f"  [yellow]{escape(warning_line(w))}[/yellow]", highlight=False)
        print_words(console, f"    hint: {w.get('hint')}", 0, 6)
    if doc.get("last_error"):
        e = doc["last_error"]
        error = f"{e.get('category')}: {e.get('message') or e.get('reason')}"
        console.print(f"  [red]last error[/red]: {escape(error)}",
                      highlight=False)
        if e.get("hint") and not advice:  # (after a give-up, its advice above is what to do)
            print_words(console, f"    hint: {e['hint']}", 0, 6)
    w = doc["watcher"]
    if w.get("pid"):
        console.print(f"  watcher pid {w['pid']}: {'alive' if w['alive'] else 'not running'}", highlight=False, markup=False)
    if doc.get("swanlab_url"):
        console.print(f"  SwanLab: {doc['swanlab_url']}", highlight=False, markup=False)


def _print_log(ex: Executor, path: str, size: int, lines: int) -> None:
    """The log's last ``lines`` (within its last TAIL_BYTES), or with 0 all of it, a piece at a time."""
    from verlctl.runtime.follow import write_whole

    if lines:
        sys.stdout.write("".join(read_tail(ex, path, TAIL_BYTES).splitlines(keepends=True)[-lines:]))
    else:
        write_whole(lambda offset, n: ex.read_log(path, offset=offset, max_bytes=n)[0], size, sys.stdout.write)
    sys.stdout.flush()


def show_logs(run_id: str | None, follow: bool, lines: int) -> int:
    record = resolve_run(run_id)
    ex, container, note = log_target(record)
    from verlctl.orchestrator.runstate import host_log_path

    if ex is None and host_log_path(record) is not None:  # a host file (paths.logs) that is not there any more:
        ex = HostExecutor()  # said below as gone, with the trainer's own log when that is still on this host
    if ex is None:
        raise VerlctlError(f"the run's container is {container.get('state')}: its log cannot be read",
                           hint="the log is inside the container only (paths.logs is not a host directory)")
    if note:
        sys.stderr.write(f"note: {note}\n")
    size = ex.file_size(record.run_log)
    if size is None:
        if not record.attempts:
            raise VerlctlError(f"no log at {record.run_log} yet")
        # The run started, so its log existed: it was deleted (or its directory moved).
        train = record.train_log
        tsize = ex.file_size(train) if train.startswith("/") else None
        if tsize is None:
            raise VerlctlError(f"the run log {record.run_log} is gone (deleted or moved) and the trainer's log "
                               f"{train or '-'} cannot be read either")
        sys.stderr.write(f"note: the run log {record.run_log} is gone (deleted or moved): showing the trainer's "
                         f"own log {train}\n")
        _print_log(ex, train, tsize, lines)
        return 0
    _print_log(ex, record.run_log, size, lines)
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
                if idle >= 5 and not (record.ref is not None and ex.group_alive(record.ref)):
                    return 0
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0


def _describe_wait(verdict: dict[str, Any], ref: GroupRef, where: str) -> str:
    n_group = len(verdict.get("group") or [])
    n_strays = len(verdict.get("strays") or [])
    text = f"process group {ref.pgid} in {where} ({n_group} process{'es' if n_group != 1 else ''})"
    if n_strays:
        text += f" and {n_strays} process{'es' if n_strays != 1 else ''} of the run in other groups (Ray workers)"
    daemons = sorted({str(name) for _pid, name in verdict.get("daemons") or []})
    if daemons:
        text += f", of which Ray's daemons ({', '.join(daemons)}) get SIGKILL after {RAY_DAEMON_GRACE_S:g}s"
    return text


def stop_watcher(record: RunRecord, watching: bool, console: Any) -> int | None:
    """End the run's watcher (first, so that it never relaunches a stopped run); its pid, or None when none
    was watching. ``watching``: it was alive before the run was marked stopped. A watcher that saw the mark
    and ended by itself is stopped all the same; one still alive gets SIGTERM (its identity checked now)."""
    pid = record.watcher_pid
    if not watching or not pid:
        return None
    if watcher_alive(record):
        from verlctl.runtime import procscan

        procscan.deliver_watcher(pid, record.run_id, 15)  # checked again there, just before the signal
    console.print(f"stopped the watcher (pid {pid})", highlight=False, markup=False)
    return pid


def mark_stopped(run_id: str | None, console: Any) -> tuple[RunRecord, bool, dict[str, Any]]:
    """The first part of every backend's stop: refuse a record that is not trusted, then mark the run stopped
    under its lock (a watcher then never restarts it). (record as it is now, whether a watcher was alive
    before the mark, the ``stop --json`` object so far)."""
    record = resolve_run(run_id)
    refusal, trust_warnings = record_trust(record)
    if refusal is not None:
        raise VerlctlError(f"run {record.run_id} is not stopped: {refusal}; nothing was changed or signalled",
                           hint="stop another user's run as that user (or ask its owner); a record in a "
                                "directory others can write may name any process")
    result: dict[str, Any] = {"run_id": record.run_id, "watcher_stopped": None, "signalled": [],
                              "not_signalled": None, "containers": [], "warnings": list(trust_warnings)}
    for text in trust_warnings:
        console.print(f"warning: {text}", highlight=False, markup=False)
    # Whether a watcher follows the run is seen before the mark below: it ends by itself once it sees the mark,
    # possibly before it would be signalled (stop_watcher).
    # Mark the run stopped before anything else can fail: a watcher then never restarts it. Under the record's
    # lock, on the record as it is now: a relaunch either finished recording its attempt (stopped below) or
    # sees the mark and starts nothing (orchestrator/watcher.py, Watcher._restart).
    try:
        with record_lock(record):
            record = load_run(record.run_id)
            watching = watcher_alive(record)
            record.stopped = True
            record.save()
    except OSError as exc:
        raise VerlctlError(
            f"cannot mark run {record.run_id} stopped ({exc.strerror or exc}: {record.dir}): nothing was signalled",
            hint="make the run's record directory writable, then run `verlctl stop` again",
        ) from None
    except VerlctlError as exc:  # the record's lock cannot be taken, or the record is damaged now
        raise VerlctlError(f"cannot mark run {record.run_id} stopped ({exc.message}): nothing was signalled",
                           hint=exc.hint or "make the run's record directory writable, then run `verlctl stop` "
                                "again") from None
    return record, watching, result


def stop_run(run_id: str | None, remove_container: bool, grace: float, console: Any = None,
             kill_wait: float = KILL_WAIT_S) -> dict[str, Any]:
    """Stop a run; prints what it does on ``console`` and returns it as the ``stop --json`` object:
    ``run_id``, ``watcher_stopped`` (pid or null), ``signalled`` ([{pgid, where}]), ``not_signalled`` (why
    nothing was signalled, or null), ``containers`` ([{name, node, action: removed|kept|gone|not_docker,
    why}]; empty without --remove-container), ``followers_stopped`` ([pid] of the run's leftover log
    followers, in the target's namespace), ``mode`` (the run's trainer mode, from its recorded spec),
    ``mode_processes`` ([{name, role, side, found, pid, where, stopped}]: each of the mode's Ray actors, verl/modes.py
    process_names, found among the verified processes or not, and gone after the stop by a fresh scan), ``warnings``."""
    from rich.markup import escape

    if console is None:
        from rich.console import Console

        console = Console()
    record, watching, result = mark_stopped(run_id, console)
    result["watcher_stopped"] = stop_watcher(record, watching, console)
    ex, container = target(record)
    groups: list[Group] = []
    waits: list[str] = []
    found: list[Found] = []  # the Ray actors among the verified processes
    mode = run_mode(record)
    ref = record.ref
    if ref is None:
        result["not_signalled"] = "no process group was recorded for this run"
        console.print("nothing to stop: no process group was recorded for this run", highlight=False)
    elif ex is None:
        result["not_signalled"] = f"the container is {container.get('state')}"
        console.print(f"nothing to stop: the container is {container.get('state')}", highlight=False)
    else:
        verdict = ex.verdict(ref)
        if verdict["owned"]:
            groups.append((ex, ref, ex.describe()))
            waits.append(_describe_wait(verdict, ref, ex.describe()))
            found += [(ex, ref, a, ex.describe()) for a in verdict.get("actors") or []]
        else:
            result["not_signalled"] = verdict["reason"]
            console.print(f"nothing signalled: {escape(verdict['reason'])}", highlight=False)
    for w, wex, _info in worker_targets(record):
        wref = w.ref
        if wex is not None and wref is not None:
            wverdict = wex.verdict(wref)
            if wverdict["owned"]:
                groups.append((wex, wref, wex.describe()))
                waits.append(_describe_wait(wverdict, wref, wex.describe()))
                found += [(wex, wref, a, wex.describe()) for a in wverdict.get("actors") or []]
    if waits:
        console.print(f"waiting up to {grace:g}s (SIGTERM, then SIGKILL) for: {escape('; '.join(waits))}",
                      highlight=False)
    def say(text: str) -> None:
        console.print(text, highlight=False, markup=False)

    mode_found = mode_processes(mode, found)
    for line in mode_found_lines(mode, mode_found):
        say(line)
    for _gex, gref, where in stop_groups(groups, grace, say, kill_wait):
        result["signalled"].append({"pgid": gref.pgid, "where": where})
        console.print(f"stopped process group {gref.pgid} in {escape(where)}", highlight=False)
    result["mode"] = mode
    result["mode_processes"] = mode_gone(mode, mode_found)
    for p in result["mode_processes"]:
        if p["found"]:
            say(f"the {p['role']} ({p['name']}, pid {p['pid']} in {p['where']}) "
                + ("stopped" if p["stopped"] else "is STILL RUNNING"))
    result["followers_stopped"] = stop_followers(record, ex, say, result["warnings"])
    result["warnings"] += _remove_key_files(record, ex, console)
    if not result["signalled"]:
        console.print("the run was not running: its verdict (finished, failed) is kept; it is marked stopped, so "
                      "no watcher restarts it", highlight=False)
    try:
        record.event("stopped", pgid=record.pgid, signalled=bool(result["signalled"]))
    except OSError as exc:
        result["warnings"].append(f"the stop event was not appended to events.jsonl: {exc.strerror or exc}")
        console.print(f"warning: the stop event was not appended to events.jsonl: {exc.strerror or exc}",
                      highlight=False, markup=False)
    if remove_container:
        if record.runtime != "docker":
            result["containers"].append({"name": None, "node": None, "action": "not_docker",
                                         "why": "host runtime: no container"})
            console.print("no container to remove (host runtime)")
        else:
            result["containers"] += remove_own_containers(record, console)
    return result


def run_mode(record: RunRecord) -> str | None:
    """The run's trainer mode, from its recorded spec (None when that cannot be read)."""
    import yaml

    try:  # a plain file of the run's own directory, never through a symlink (the record is input)
        doc = yaml.safe_load(record.read_file(record.spec_file).decode("utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    mode = doc.get("mode") if isinstance(doc, dict) else None
    return mode if isinstance(mode, str) else None


#: A Ray actor among an attempt's verified processes: (its target, the attempt's group, [pid, class, start], where).
Found = tuple[Executor, GroupRef, list[Any], str]


def mode_processes(mode: str | None, found: list[Found]) -> list[Found]:
    """Of the Ray actors found among the run's verified processes, the ones of its mode (verl/modes.py
    process_names; every mode's when the mode is not known)."""
    from verlctl.verl.modes import process_names

    names = set(process_names(mode if mode else None))
    return [(fex, fref, a, where) for fex, fref, a, where in found if len(a) == 3 and a[1] in names]


def mode_found_lines(mode: str | None, mode_found: list[Found]) -> list[str]:
    from verlctl.verl.modes import PROCESSES, process_names

    names = process_names(mode) if mode else ()
    if not mode_found and not names:
        return []
    shown = ", ".join(f"the {PROCESSES[a[1]].role} ({a[1]}, pid {a[0]} in {where})" for _x, _r, a, where in mode_found)
    missing = [n for n in names if n not in {a[1] for _x, _r, a, _w in mode_found}]
    line = f"{mode or 'the run'}'s processes among the run's verified ones: {shown or 'none running'}"
    if missing and mode_found:
        line += f"; not running: {', '.join(missing)}"
    elif missing:
        line += f" ({', '.join(missing)})"
    return [line]


def mode_gone(mode: str | None, mode_found: list[Found]) -> list[dict[str, Any]]:
    """Each of the mode's processes: found (pid, where) and gone now (no longer among its attempt's live
    verified processes, scanned again in its own target), or not found."""
    from verlctl.verl.modes import PROCESSES, process_names

    still: dict[tuple[int, int], list[list[Any]]] = {}
    out: list[dict[str, Any]] = []
    for fex, fref, (pid, name, start), where in mode_found:
        key = (id(fex), fref.pgid)
        if key not in still:
            still[key] = list(fex.verdict(fref).get("actors") or [])
        p = PROCESSES[name]
        out.append({"name": name, "role": p.role, "side": p.side, "found": True, "pid": pid, "where": where,
                    "stopped": [pid, name, start] not in still[key]})
    seen = {d["name"] for d in out}
    for name in process_names(mode) if mode else ():
        if name not in seen:
            p = PROCESSES[name]
            out.append({"name": name, "role": p.role, "side": p.side, "found": False, "pid": None, "where": None,
                        "stopped": None})
    return out


def _remove_key_files(record: RunRecord, ex: Executor | None, console: Any) -> list[str]:
    return remove_key_files(record, ex, lambda text: console.print(text, highlight=False, markup=False))


def run_states(runs: list[RunRecord]) -> dict[str, Any]:
    """run id -> :class:`runstate.RunState` for ``list``: from each run's record and host log; the runs these
    leave undecided get the process check (concurrently, one Docker client for this machine's runs)."""
    from verlctl.orchestrator import runstate

    states: dict[str, Any] = {}
    undecided: list[tuple[RunRecord, list[dict[str, Any]], dict[str, Any] | None, str | None]] = []
    for r in runs:
        events = r.events()
        live = r.read_status()
        offset = r.attempts[-1].log_offset if r.attempts else 0
        text = runstate.read_host_log(r, offset, 256 * 1024) if r.runtime != "slurm" else None
        st = runstate.decide(r, events, live, text, watcher=watcher_alive(r))
        states[r.run_id] = st
        if st.decided_by in ("none",) or (st.state == "running" and st.decided_by == "events"):
            undecided.append((r, events, live, text))
    if not undecided:
        return states
    import concurrent.futures

    clients: dict[str, Any] = {}

    def probe(item: tuple[RunRecord, list[dict[str, Any]], dict[str, Any] | None, str | None]) -> Any:
        r, events, live, text = item
        if r.runtime == "slurm" or r.ref is None:
            return states[r.run_id]
        try:
            client = None
            if r.runtime == "docker" and r.head_address is None:
                if "local" not in clients:
                    clients["local"] = client_for(r, None)
                client = clients["local"]
            ex, _container = target(r, client)
            alive = bool(ex.verdict(r.ref)["owned"]) if ex is not None else False
        except (VerlctlError, OSError) as exc:
            why = exc.message if isinstance(exc, VerlctlError) else str(exc)
            return runstate.RunState("unknown", f"its target cannot be checked: {why}", "process")
        except Exception as exc:  # noqa: BLE001 - the Docker SDK's errors: one run's state, not the list
            return runstate.RunState("unknown", f"its target cannot be checked: {exc}", "process")
        return runstate.decide(r, events, live, text, alive=alive, watcher=watcher_alive(r))

    if any(r.runtime == "docker" and r.head_address is None for r, *_ in undecided):
        try:
            clients["local"] = client_for(undecided[0][0], None)
        except VerlctlError as exc:
            for r, *_ in undecided:
                if r.runtime == "docker" and r.head_address is None:
                    states[r.run_id] = runstate.RunState("unknown", f"not checked: {exc.message}", "process")
            undecided = [u for u in undecided if not (u[0].runtime == "docker" and u[0].head_address is None)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, max(1, len(undecided)))) as pool:
        for (r, *_), st in zip(undecided, pool.map(probe, undecided), strict=True):
            states[r.run_id] = st
    return states


def list_runs(as_json: bool) -> int:
    runs, damaged = scan_runs()
    states = run_states(runs)
    if as_json:
        docs = [{**r.model_dump(), "state": states[r.run_id].state, "state_why": states[r.run_id].why}
                for r in runs] + [{"run_id": d.run_id, "damaged": d.reason, "owner": d.owner, "state": "unknown",
                                   "state_why": d.summary} for d in damaged]
        sys.stdout.write(json.dumps(docs, indent=2, default=str) + "\n")
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from verlctl.report import print_words
    from verlctl.runtime.records import runs_dir

    console = Console()
    if not runs and not damaged:
        console.print(f"no runs recorded under {runs_dir()}: start one with `verlctl launch`", highlight=False,
                      markup=False)
        return 0
    rows = [
        (r.run_id, time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created_at)), states[r.run_id].state,
         states[r.run_id].why, str(len(r.attempts) or len(r.slurm_jobs)), r.runtime, r.container_name or "-")
        for r in runs
    ] + [(d.run_id, "-", "unknown", d.summary, "-", "-", "-") for d in damaged]
    table = Table(title="verlctl runs", title_justify="left", header_style="bold")
    columns = ("run", "created", "state", "why", "attempts", "runtime", "container")
    table.add_column(columns[0], no_wrap=True, min_width=max(len(row[0]) for row in rows))
    for col in columns[1:]:
        table.add_column(col.upper() if col == "state" else col, no_wrap=col != "why",
                         min_width=24 if col == "why" else None)
    for row in rows:
        cells = [escape(cell) for cell in row]
        colour = STATE_COLOURS.get(row[2])
        if colour:
            cells[2] = f"[{colour}]{cells[2]}[/]"
        table.add_row(*cells)
    from rich.measure import Measurement

    if Measurement.get(console, console.options.update_width(100_000), table).minimum <= console.width:
        console.print(table)
        return 0
    # Too narrow for the table: one run per block, the id alone on its line, never cut (it is what
    # status/logs/stop take); the rest wraps between words.
    for i, row in enumerate(rows):
        if i:
            console.print()
        console.print(row[0], highlight=False, markup=False, no_wrap=True, overflow="ignore", crop=False)
        print_words(console, f"  {row[2].upper()}: {row[3]}", 0, 4)
        facts = ", ".join(f"{name} {cell}" for name, cell in zip(columns[1:], row[1:], strict=True)
                          if name not in ("state", "why"))
        print_words(console, f"  {facts}", 0, 2)
    return 0


#: The most of a run's log that ``status --plot`` reads (its newest part).
PLOT_BYTES = 64 * 1024 * 1024


def step_series(run_id: str | None) -> dict[str, Any]:
    """The charted metrics over the steps in the newest PLOT_BYTES of the run's log (``status --plot``)."""
    from verlctl.monitor.charts import SeriesSink
    from verlctl.monitor.diagnose import diagnose_bytes
    from verlctl.orchestrator import runstate

    record = resolve_run(run_id)
    ex, container, _note = log_target(record)
    if ex is None:
        return {"available": False, "why": f"the run's container is {container.get('state')}", "series": {}}
    text = read_tail(ex, record.run_log, PLOT_BYTES)
    sink = SeriesSink()
    diagnose_bytes(text.encode("utf-8", errors="replace"), sink)
    return {"available": True, "why": None, "series": sink.series(),
            "markers": runstate.restart_markers(record.events())}


def print_plots(doc: dict[str, Any], width: int) -> None:
    from rich.console import Console

    from verlctl.monitor.charts import shown, text_chart

    console = Console()
    if not doc["available"]:
        console.print(f"no charts: {doc['why']}", highlight=False, markup=False)
        return
    markers = [tuple(m) for m in doc.get("markers") or []]
    for spec in shown(doc["series"]):
        console.print(text_chart(spec, doc["series"].get(spec.name, []), width=width, markers=markers),
                      highlight=False, markup=False)
        console.print()

