"""The local backend: one host's Docker engine, Docker engines on SSH nodes (``runtime/nodes.py``), or the host
itself (``container.runtime: host``). It knows its target (containers, executors, SSH nodes, the host runtime:
create, start, stop, read a log, remove) and nothing of verl: the orchestrator (``orchestrator/launch.py``, ``orchestrator/runs.py``)
walks the stages, composes what the target needs from verl (the proxy environment, the rendered scripts) and
hands it down as plain data."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verlctl.errors import RuntimeFailure, VerlctlError
from verlctl.runtime.executor import (
    KILL_WAIT_S,
    RAY_DAEMON_GRACE_S,
    DockerExecutor,
    Executor,
    GroupRef,
    HostExecutor,
)
from verlctl.runtime.records import RunRecord, all_runs


def attempt_marker(run_id: str, attempt: int, node: str | None = None) -> str:
    """The identity every process of one attempt carries in its environment (random: never guessed)."""
    import secrets

    where = f"@{node}" if node else ""
    return f"{run_id}/{attempt}{where}/{secrets.token_hex(8)}"  # '/' is never in a run id


@dataclass
class NodeTarget:
    """Another node of a multi-node run (the head is the backend's own client / plan)."""

    address: str
    client: Any
    plan: Any
    executor: Executor | None = None


def engine_id(client: Any) -> str:
    try:
        return str(client.info().get("ID") or id(client))
    except Exception:  # noqa: BLE001 - an engine that does not say: treat as distinct
        return str(id(client))


class DockerBackend:
    """The target of one local launch (its engine clients, container plans, executors, worker nodes) and the
    target operations on a recorded run. ``report`` prints the progress lines (``step`` / ``note`` / ``warn``)."""

    name = "local"

    def __init__(self, console: Any, report: Any) -> None:
        self.console = console  # the launch's own: an image pull's progress goes where its other output goes
        self.report = report
        self.client: Any = None
        self.container: Any = None
        self.container_plan: Any = None
        self.executor: Executor | None = None
        self.workers: list[NodeTarget] = []
        self.blocked: list[str] = []  # container plans that could not be made (the verdict says why)

    # ------------------------------------------------------------------------------- a launch

    def plan_containers(self, spec: Any, *, multi: bool, pull: bool, image_explicit: bool,
                        name_explicit: bool) -> None:
        """The container plans of a Docker launch (the head's, and every other node's over ssh); nothing is
        changed. A refusal is kept in :attr:`blocked` (the verdict's rules say it too)."""
        from verlctl.runtime import containers
        from verlctl.runtime.nodes import node_client

        c = spec.cluster
        head = c.master_addr if multi else None
        try:  # its refusals are the verdict's rules too: the dry run lists them all, with the actions
            self.client = (
                node_client(head, c.ssh_user, c.ssh_port, c.remote_docker_socket, c.ssh_config) if head
                else containers.connect()
            )
            self.container_plan = containers.plan_container(
                self.client, spec, allow_pull=pull, image_explicit=image_explicit,
                name_explicit=name_explicit
            )
        except VerlctlError as exc:
            self.blocked.append(exc.message)
        engines = {engine_id(self.client)} if self.client is not None else set()
        for i, address in enumerate(n for n in c.nodes if multi and n != head and self.client is not None):
            client = node_client(address, c.ssh_user, c.ssh_port, c.remote_docker_socket, c.ssh_config)
            # Nodes that share one Docker engine (a test rig, or two addresses of one machine) cannot share
            # a container name: the extra ones get a node suffix.
            engine = engine_id(client)
            name = f"{spec.container.name}-node{i + 1}" if engine in engines else None
            engines.add(engine)
            plan = containers.plan_container(client, spec, allow_pull=pull, image_explicit=image_explicit,
                                             name=name, name_explicit=name_explicit)
            self.workers.append(NodeTarget(address, client, plan))

    def adopt_created_container(self, record: RunRecord) -> None:
        """A container created for this run whose id was not recorded yet (interrupted inside the create
        call): found by its ``io.verlctl.run`` label, so that the clean-up can remove it."""
        if record.runtime != "docker" or record.container_id or self.client is None:
            return
        from verlctl.runtime import containers

        with contextlib.suppress(Exception):
            found = self.client.containers.list(all=True, filters={"label": f"{containers.LABEL_PREFIX}.run={record.run_id}"})
            if len(found) == 1:
                record.container_id = found[0].id
                record.container_created = True

    def clean_up_failed(self, record: RunRecord) -> dict[str, Any]:
        """After a failed launch: stop what it started (verified), remove the key file it placed, and
        remove the containers it created (only those, and only when no other run uses them)."""
        from verlctl.render.render import ENV_FILE, SWANLAB_STORE

        done: dict[str, Any] = {}
        targets: list[tuple[Executor | None, Any, Any, bool, str]] = [
            (self.executor, self.client, record.container_id, record.container_created, "")]
        targets += [(w.executor, w.client, h.container_id, h.container_created, f" on {w.address}")
                    for w, h in zip(self.workers, record.workers, strict=False)]
        ref = record.ref
        for i, (ex, client, cid, created, where) in enumerate(targets):
            if ex is None and not (created and cid):
                continue
            try:
                if ex is not None:
                    group = ref if i == 0 else record.workers[i - 1].ref
                    if group is not None and ex.group_alive(group):
                        ex.stop_group(group, grace_s=20)
                    ex.run(["rm", "-rf", "--", f"{record.scripts_dir}/{ENV_FILE}",
                            f"{record.scripts_dir}/{SWANLAB_STORE}"], timeout=30)
                if created and cid and record.runtime == "docker":
                    from verlctl.runtime import containers

                    c = containers.find_container(client, cid)
                    label = (c.labels or {}).get(f"{containers.LABEL_PREFIX}.run") if c is not None else None
                    if c is not None and label == record.run_id and not container_users(record, c, client):
                        c.remove(force=True)
                        self.report.step(f"removed container {c.name}{where} (created by this failed launch)")
                        done.setdefault("removed_containers", []).append(c.name)
                        # no executor into a removed container: a second clean-up (an interrupt during the
                        # first) neither acts on it nor warns that it is gone
                        if i == 0:
                            self.executor = None
                        else:
                            self.workers[i - 1].executor = None
            except Exception as exc:  # noqa: BLE001 - clean-up must not hide the launch error
                self.report.warn(f"clean-up after the failed launch{where}: {exc}")
        return done

    def prepare_target(self, record: RunRecord, spec: Any, proxies: dict[str, str]) -> Executor:
        """The head's target: this host (``container.runtime: host``), or its container reused, started, or
        pulled and created (with ``proxies``, the environment the orchestrator composed for it)."""
        if spec.container.runtime == "host":
            from verlctl.runtime.executor import HostExecutor

            env = f", Python environment {spec.container.python_env}" if spec.container.python_env else ""
            self.report.step(f"run on this host (container.runtime: host{env})")
            return HostExecutor(spec.container.python_env)
        from verlctl.runtime import containers
        from verlctl.runtime.executor import DockerExecutor

        plan = self.container_plan
        if plan.exists:
            container = containers.find_container(self.client, spec.container.name)
            if container is None:
                raise RuntimeFailure(f"container {spec.container.name} disappeared")
            self.report.step(f"reuse container {spec.container.name} ({container.status})")
            if container.status != "running":
                self.report.step(f"start container {spec.container.name}")
                containers.start_container(container)
            record.container_created = False
        else:
            if plan.pull:
                self.report.step(f"pull image {spec.container.image}")
                containers.pull_image(self.client, spec.container.image, self.console)
            for m in plan.added_mounts:
                self.report.note(f"adding mount {m.host} (covers {m.why})")
            self.report.step(f"create container {spec.container.name} from {spec.container.image}")
            container = containers.create_container(
                self.client,
                spec,
                plan,
                containers.labels_for(record.run_id, record.experiment),
                proxies,
            )
            record.container_created = True
            record.container_id = container.id
            record.save()
            self.report.step(f"start container {spec.container.name}")
            containers.start_container(container)
        self.container = container
        record.container_id = container.id
        record.save()
        return DockerExecutor(self.client, container.id, spec.container.name)

    def prepare_worker(self, record: RunRecord, w: NodeTarget, spec: Any, proxies: dict[str, str]) -> Executor:
        """Another node's container, reused or created there (its handle recorded)."""
        from verlctl.runtime import containers
        from verlctl.runtime.executor import DockerExecutor
        from verlctl.runtime.records import NodeHandle

        name = w.plan.name
        handle = NodeHandle(address=w.address, container_name=name)
        if w.plan.exists:
            container = containers.find_container(w.client, name)
            if container is None:
                raise RuntimeFailure(f"container {name} on {w.address} disappeared")
            self.report.step(f"reuse container {name} on {w.address} ({container.status})")
            if container.status != "running":
                containers.start_container(container)
        else:
            if w.plan.pull:
                self.report.step(f"pull image {spec.container.image} on {w.address}")
                containers.pull_image(w.client, spec.container.image, self.console)
            self.report.step(f"create container {name} on {w.address}")
            container = containers.create_container(
                w.client, spec, w.plan, containers.labels_for(record.run_id, record.experiment),
                proxies,
            )
            handle.container_created = True
            containers.start_container(container)
        handle.container_id = container.id
        record.workers.append(handle)
        record.save()
        return DockerExecutor(w.client, container.id, f"{name}@{w.address}")

    def start_workers(self, record: RunRecord, reason: str) -> None:
        """Start the script on every other node as a Ray worker (it retries joining the head)."""
        from verlctl.render.render import START_SCRIPT

        for w, handle in zip(self.workers, record.workers, strict=True):
            if w.executor is None:
                continue
            self.report.step(f"start {START_SCRIPT} on {w.address} (Ray worker, {reason})")
            ref = w.executor.start_group(
                ["bash", f"{record.scripts_dir}/{START_SCRIPT}"], record.run_log,
                attempt_marker(record.run_id, len(record.attempts) + 1, w.address), cwd=record.workdir,
                env={"VERLCTL_ROLE": "worker"},
            )
            handle.pgid, handle.marker, handle.leader_start = ref.pgid, ref.marker, ref.start
            handle.container_started_at = ref.container_started_at
            record.event("worker_started", node=w.address, pgid=handle.pgid, reason=reason)
        record.save()

    def stop_workers(self, record: RunRecord) -> None:
        for w, handle in zip(self.workers, record.workers, strict=False):
            if w.executor is not None and handle.ref is not None:
                w.executor.stop_group(handle.ref, grace_s=20)

    # ----------------------------------------------------------------------------- a recorded run

    def target(self, handle: RunRecord) -> tuple[Executor | None, dict[str, Any]]:
        return target(handle)


def executor_for(record: RunRecord) -> Executor:
    """The running target of a recorded run (its host, or its running container); refused when it is gone."""
    if record.runtime == "host":
        return HostExecutor(record.python_env)
    ex, info = target(record)
    if ex is None:
        raise VerlctlError(f"the run's container is {info.get('state')}: nothing to watch")
    return ex


TAIL_BYTES = 4 * 1024 * 1024


def target(record: RunRecord, client: Any = None) -> tuple[Executor | None, dict[str, Any]]:
    """The executor for a run's target and the container's state (None when it is gone / not running)."""
    if record.runtime == "host":
        return HostExecutor(record.python_env), {"runtime": "host"}
    if client is None:
        client = client_for(record, record.head_address)
    import docker

    try:
        c = client.containers.get(record.container_id or record.container_name)
    except docker.errors.NotFound:
        return None, {"name": record.container_name, "id": record.container_id, "state": "removed"}
    # the image reference the container was created from, read from the container's own record (c.image
    # would be one more engine call)
    image = (c.attrs.get("Config") or {}).get("Image") or c.attrs.get("Image") or "?"
    info = {"name": c.name, "id": c.id[:12], "state": c.status, "image": image,
            "started_at": c.attrs.get("State", {}).get("StartedAt")}
    if c.status != "running":
        return None, info
    return DockerExecutor(client, c.id, c.name), info


def log_target(record: RunRecord) -> tuple[Executor | None, dict[str, Any], str | None]:
    """Where the run's log can be read: its target, or, once its container is removed or stopped, this host
    when the log is a host file there (``paths.logs`` is bind-mounted at the same path). The third item is a
    note saying so (None when read from the target)."""
    ex, container = target(record)
    if ex is not None:
        return ex, container, None
    host = host_log(record)
    if host is None:
        return None, container, None
    return HostExecutor(), container, (f"the run's container is {container.get('state')}: reading its log from "
                                       f"this host ({record.run_log})")


def host_log(record: RunRecord) -> str | None:
    """The run log as a host file, when a single-node Docker run's log is one: named as verlctl names it, outside
    the container's own work dir, a regular file (never a symlink planted at its name)."""
    import stat as stat_

    p = record.run_log
    if record.runtime != "docker" or record.head_address or not p.startswith("/"):
        return None
    if os.path.basename(p) != f"verlctl-{record.run_id}.log" or p.startswith(record.workdir.rstrip("/") + "/"):
        return None
    try:
        st = os.lstat(p)
    except OSError:
        return None
    return p if stat_.S_ISREG(st.st_mode) else None


def client_for(record: RunRecord, address: str | None) -> Any:
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
            client = client_for(record, w.address)
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
    data = ex.read_log(path, offset=start)[0] or b""  # a symlink planted at the log's name, a FIFO: not read
    text = data.decode(errors="replace")
    if start > 0:
        text = text.split("\n", 1)[-1]
    return text


def read_from(ex: Executor, path: str, offset: int, max_bytes: int) -> str:
    size = ex.file_size(path)
    if size is None:
        return ""
    start = max(offset, size - max_bytes)
    if start > size:  # the log was truncated or replaced: read its end
        start = max(0, size - max_bytes)
    data = ex.read_log(path, offset=start)[0] or b""  # a FIFO or a link at the log's name: nothing read
    text = data.decode(errors="replace")
    if start > offset:
        text = text.split("\n", 1)[-1]
    return text


Group = tuple[Executor, GroupRef, str]


def stop_groups(groups: list[Group], grace: float, say: Any = None, kill_wait: float = KILL_WAIT_S) -> list[Group]:
    """SIGTERM every verified group (and the processes of its attempt in other groups, e.g. Ray workers) at
    once, wait (one shared grace period), SIGKILL what is left; fail if any stays ``kill_wait`` s after that. Ray's own daemons of an
    attempt get SIGKILL after ``RAY_DAEMON_GRACE_S`` (the training's processes keep the whole grace). Each
    signal is sent only after the group's identity is verified again, in the target's PID namespace."""
    import signal

    for gex, ref, _ in groups:
        gex.signal_group(ref, signal.SIGTERM)
    started = time.monotonic()
    deadline = started + grace
    alive = list(groups)
    escalated = False
    while alive and time.monotonic() < deadline:
        alive = [g for g in alive if g[0].group_alive(g[1])]
        if alive and not escalated and time.monotonic() - started >= min(RAY_DAEMON_GRACE_S, grace):
            escalated = True
            for gex, ref, where in alive:
                killed = gex.kill_ray_daemons(ref)
                if killed and say is not None:
                    say(f"SIGKILL to Ray's daemons still running {RAY_DAEMON_GRACE_S:g}s after SIGTERM in {where}: "
                        + ", ".join(f"{name} (pid {pid})" for pid, name in killed))
        if alive:
            time.sleep(0.2)
    for gex, ref, _ in alive:
        gex.signal_group(ref, signal.SIGKILL)
    deadline = time.monotonic() + kill_wait
    while alive and time.monotonic() < deadline:
        alive = [g for g in alive if g[0].group_alive(g[1])]
        if alive:
            time.sleep(0.2)
    if alive:
        raise RuntimeFailure(f"process group {alive[0][1].pgid} in {alive[0][2]} did not stop")
    return groups


def stop_followers(record: RunRecord, ex: Executor | None, say: Callable[[str], None], warnings: list[str]) -> list[int]:
    """A18: stop the run's log followers (a watcher's ``tail -F``) left in its target, also those of a watcher
    killed with -9 (whose own clean-up never ran); each verified as the run's own there, just before its
    signal (runtime/procscan.py, stop_followers). Their pids (in the target's namespace)."""
    if ex is None or not record.run_log:
        return []
    try:
        done = ex.stop_followers(record.run_id, record.run_log)
    except VerlctlError as exc:
        warnings.append(f"the run's log followers were not checked: {exc.message}")
        say(f"warning: {warnings[-1]}")
        return []
    pids = [int(p) for p in done.get("signalled") or []]
    if pids:
        say(f"stopped {len(pids)} log follower{'s' if len(pids) != 1 else ''} of the run (a watcher's `tail -F`, "
            f"pid {', '.join(map(str, pids))} in {ex.describe()})")
    for why in done.get("refused") or []:
        warnings.append(f"a log follower of the run was not stopped: {why}")
        say(f"warning: {warnings[-1]}")
    return pids


def remove_key_files(record: RunRecord, ex: Executor | None, say: Callable[[str], None]) -> list[str]:
    """Remove the run's 0600 env file (it holds the SwanLab key) on the head and every worker node: nothing
    reads it once the run is stopped, has finished, or is given up (a relaunch would read it). Returns the
    warnings, each also said."""
    from verlctl.render.render import ENV_FILE, SWANLAB_STORE

    targets: list[Executor] = [ex] if ex is not None else []
    targets += [wex for _w, wex, _ in worker_targets(record) if wex is not None]
    warnings = []
    # The env file and the run's SwanLab login store (a directory start_verl.sh writes) both hold the key: the
    # file with `rm -f` (anything else in its place is a failure to report), the store with `rm -rf`.
    removals = [(["rm", "-f", "--", f"{record.scripts_dir}/{ENV_FILE}"], f"{record.scripts_dir}/{ENV_FILE}"),
                (["rm", "-rf", "--", f"{record.scripts_dir}/{SWANLAB_STORE}"], f"{record.scripts_dir}/{SWANLAB_STORE}")]
    for t in targets:
        for argv, path in removals:
            try:
                res = t.run(argv, timeout=30)
            except VerlctlError as exc:  # the target is gone or unreachable: nothing there to remove now
                warnings.append(f"could not remove {path} in {t.describe()}: {exc.message}")
                say(f"warning: {warnings[-1]}")
                break  # one warning for an unreachable target: the second removal would fail the same way
            if not res.ok:
                warnings.append(f"could not remove {path} in {t.describe()}: {res.err.strip()[:200]}")
                say(f"warning: {warnings[-1]}")
    return warnings


KEEP_ALIVE = "sleep infinity"  # the command of a container verlctl creates (runtime/containers.py)


def container_users(record: RunRecord, container: Any, client: Any) -> list[str]:
    """Why ``container`` must not be removed for ``record``: other runs that use it (recorded and not
    stopped; for a running container, alive in it), and every live process in it other than its init, its
    keep-alive (``sleep infinity``) and this run's own (its marker, its watcher's ``tail -F`` of its log):
    a colleague's ``docker exec`` has no marker and is as much in use. Empty when only this run uses it."""
    from verlctl.runtime.executor import DockerExecutor

    reasons: list[str] = []
    running = container.status == "running"
    ex = DockerExecutor(client, container.id, container.name) if running else None
    for other in all_runs():
        if other.run_id == record.run_id or other.container_id != container.id or other.stopped:
            continue
        if ex is None:
            reasons.append(f"run {other.run_id} uses it and is not stopped")
            continue
        oref = other.ref
        if oref is not None and ex.group_alive(oref):
            reasons.append(f"run {other.run_id} is running in it")
    if ex is not None:
        others = []
        for p in ex.residents():
            cmd = str(p.get("cmd") or "")
            if p.get("pid") == 1 or (p.get("ppid") == 1 and cmd == KEEP_ALIVE):
                continue
            owner = str(p.get("marker") or "").split("/", 1)[0]  # markers are <run id>/<attempt>/<token>
            if owner == record.run_id or (p.get("follower") and record.run_log and record.run_log in cmd):
                continue
            who = f"run {owner}" if owner else f"uid {p.get('uid')}"
            others.append(f"pid {p.get('pid')} ({who}): {cmd[:60]}")
        if others:
            more = f", and {len(others) - 1} more" if len(others) > 1 else ""
            reasons.append(f"{len(others)} other process{'es' if len(others) != 1 else ''} live in it: "
                           f"{others[0]}{more}")
    return reasons


def remove_one(record: RunRecord, client: Any, cid: str | None, name: str | None, created: bool,
                where: str, console: Any, node: str | None = None) -> dict[str, Any]:
    from verlctl.runtime import containers

    label = f"{containers.LABEL_PREFIX}.run"
    c = containers.find_container(client, cid or "") if cid else None
    shown = f"{name}{where}"
    outcome: dict[str, Any] = {"name": name, "node": node, "action": "kept", "why": None}
    if c is None:
        console.print(f"container {shown} is already gone", highlight=False, markup=False)
        return {**outcome, "action": "gone"}
    if not created or (c.labels or {}).get(label) != record.run_id:
        owner = (c.labels or {}).get(label)
        why = f"not created by this run ({'created by run ' + owner if owner else 'not created by verlctl'})"
        console.print(f"container {shown} was {why}: left in place", highlight=False, markup=False)
        return {**outcome, "why": why}
    users = container_users(record, c, client)
    if users:
        console.print(f"container {shown} is in use ({users[0]}): left in place", highlight=False, markup=False)
        return {**outcome, "why": f"in use ({users[0]})"}
    c.remove(force=True)
    console.print(f"removed container {shown}", highlight=False, markup=False)
    with contextlib.suppress(OSError):
        record.event("container_removed", container=name, node=node)
    return {**outcome, "action": "removed"}


def remove_own_containers(record: RunRecord, console: Any) -> list[dict[str, Any]]:
    """Remove the containers this run created (label checked), when no other run uses them."""
    client = client_for(record, record.head_address)
    out = [remove_one(record, client, record.container_id, record.container_name, record.container_created, "",
                       console, record.head_address)]
    for w in record.workers:
        try:
            wclient = client_for(record, w.address)
        except VerlctlError as exc:
            console.print(f"container {w.container_name} on {w.address}: {exc.message}", highlight=False,
                          markup=False)
            out.append({"name": w.container_name, "node": w.address, "action": "kept", "why": exc.message})
            continue
        out.append(remove_one(record, wclient, w.container_id, w.container_name, w.container_created,
                               f" on {w.address}", console, w.address))
    return out
