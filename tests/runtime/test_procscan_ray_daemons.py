"""procscan's gaps from the turn-3 mutation sample (reference/mutation-turn3.md, runtime/procscan.py), on real
processes: a process group of this test's own, whose members run under Ray's Python daemon paths
(dashboard, agents, log monitor, autoscaler monitor) and carry a marker unique to this test run. Everything
signalled is that group's, verified by the marker and the leader's start time; the group is killed at the end."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from verlctl.runtime import procscan

#: Where Ray's own Python daemons live in the ray package (ray/_private/services.py starts them as
#: ``python -u <path> --flags``; the raylet starts the agents the same way).
DAEMON_PATHS = {
    "dashboard/dashboard.py": "dashboard.py",
    "dashboard/agent.py": "agent.py",
    "_private/log_monitor.py": "log_monitor.py",
    "autoscaler/_private/monitor.py": "monitor.py",
    "_private/runtime_env/agent/main.py": "main.py",
}


@dataclass
class Group:
    leader: subprocess.Popen
    start: int
    marker: str
    daemons: dict[int, str]  # pid -> expected name
    procs: list[subprocess.Popen]


def _wait(cond, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.fixture
def ray_like_group(tmp_path: Path) -> Iterator[Group]:
    ray = tmp_path / "site-packages" / "ray"
    marker = f"procscan-gaps-{uuid.uuid4().hex}"
    env = {**os.environ, procscan.MARKER_VAR: marker}
    leader = subprocess.Popen(["sleep", "600"], process_group=0, env=env)  # a new group of its own
    procs = [leader]
    group = Group(leader, 0, marker, {}, procs)
    try:
        _wait(lambda: _cmdline(leader.pid).startswith("sleep"), "the leader's exec")
        start = procscan.leader_start(leader.pid)
        assert start is not None
        group.start = start

        def spawn() -> None:
            group.daemons.clear()
            for i, (rel, name) in enumerate(DAEMON_PATHS.items()):
                script = ray / rel
                script.parent.mkdir(parents=True, exist_ok=True)
                script.write_text("import time\ntime.sleep(600)\n", encoding="utf-8")
                argv = [sys.executable, *(["-u"] if i % 2 == 0 else []), str(script), "--session-dir=/tmp/x"]
                p = subprocess.Popen(argv, process_group=leader.pid, env=env)
                procs.append(p)
                group.daemons[p.pid] = name
            for pid in group.daemons:
                _wait(lambda pid=pid: "/ray/" in _cmdline(pid), f"pid {pid}'s exec")

        group.spawn = spawn  # type: ignore[attr-defined]
        spawn()
        yield group
    finally:
        if leader.poll() is None or any(p.poll() is None for p in procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(leader.pid, signal.SIGKILL)  # the group this fixture made (process_group=0 above)
        for p in procs:
            p.wait(timeout=60)


def test_rays_python_daemons_are_named_and_listed_as_marked(ray_like_group: Group) -> None:
    g = ray_like_group
    assert procscan.ray_system("/usr/bin/python3 -u /x/ray/dashboard/dashboard.py --host=0.0.0.0") == "dashboard.py"
    assert procscan.ray_system("/usr/bin/python3 /x/ray/_private/log_monitor.py --logs-dir=/tmp") == "log_monitor.py"
    verdict = procscan.act(g.leader.pid, g.marker, g.start, 0)
    assert verdict["owned"] and "signalled" not in verdict
    assert sorted(map(tuple, verdict["daemons"])) == sorted(g.daemons.items())
    listed = {m["pid"]: m["marker"] for m in procscan.markers() if m["marker"] == g.marker}
    assert set(listed) == {g.leader.pid, *g.daemons}


def test_stopping_the_ray_daemons_only_leaves_the_rest_and_leaks_no_pidfd(ray_like_group: Group) -> None:
    """``stop``'s first phase: SIGTERM to the attempt's Ray daemons only, each by pidfd; in-process (the host
    runtime's watcher) and through the command line the docker runtime pipes into the container."""
    g = ray_like_group
    fds = len(os.listdir("/proc/self/fd"))
    verdict = procscan.act(g.leader.pid, g.marker, g.start, signal.SIGTERM, only="ray")
    assert verdict["signalled"] and len(verdict["daemons"]) == len(DAEMON_PATHS)
    assert len(os.listdir("/proc/self/fd")) == fds  # every pidfd closed again
    for p in g.procs[1:]:
        assert p.wait(timeout=60) == -signal.SIGTERM
    assert g.leader.poll() is None  # the rest of the group runs on

    g.spawn()  # type: ignore[attr-defined]
    script = Path(procscan.__file__)
    out = subprocess.run([sys.executable, str(script), "--start", str(g.leader.pid)], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    assert json.loads(out) == g.start
    out = subprocess.run([sys.executable, str(script), str(g.leader.pid), g.marker, str(g.start),
                          str(int(signal.SIGTERM)), "ray"], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    assert json.loads(out)["signalled"] is True
    for p in g.procs[1 + len(DAEMON_PATHS):]:
        assert p.wait(timeout=60) == -signal.SIGTERM
    assert g.leader.poll() is None
