"""The watcher's view of a Docker target (orchestrator/watcher.py: `target_state`, the lost target), with a real engine and
real containers: running, exited with its code, OOM-killed by its memory limit, removed, an engine that does not
answer and one that comes back. The training step is a TEST DOUBLE (tests/orchestrator/test_recovery_host.py's bash script on
the host): only the accelerator's work cannot exist here."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from test_recovery_host import HostRuns, host_runs_in

pytestmark = pytest.mark.docker


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostRuns]:
    yield from host_runs_in(tmp_path, monkeypatch)


def _executor(client: Any, container: Any) -> Any:
    from verlctl.runtime.executor import DockerExecutor

    return DockerExecutor(client, container.id, container.name)


def _wait_exited(container: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        container.reload()
        if container.status == "exited":
            return
        assert time.monotonic() < deadline, container.status
        time.sleep(0.2)


def _watcher(runs: HostRuns, record: Any, ex: Any, said: list[str]) -> Any:
    from verlctl.orchestrator.runs import run_for
    from verlctl.orchestrator.watcher import Watcher
    from verlctl.spec.resolve import load_spec

    return Watcher(record, ex, load_spec(runs.root / "spec.yaml", use_env=False), say=said.append,
                   backend=run_for(record))


def test_the_target_state_is_what_the_engine_says(docker_engine: Any, container_factory: Any, tmp_path: Path) -> None:
    import docker

    from verlctl.orchestrator.watcher import ENGINE_ERROR_CHARS, target_state
    from verlctl.runtime.executor import HostExecutor

    assert target_state(HostExecutor()) == {"state": "host"}
    running = container_factory(command=["sleep", "600"])
    st = target_state(_executor(docker_engine, running))
    assert (st["state"], st["exit_code"], st["oom_killed"]) == ("running", 0, False), st
    ended = container_factory(command=["sh", "-c", "exit 3"])
    _wait_exited(ended)
    st = target_state(_executor(docker_engine, ended))
    assert (st["state"], st["exit_code"], st["oom_killed"]) == ("exited", 3, False) and st["finished_at"], st
    ex = _executor(docker_engine, ended)
    ended.remove(force=True)
    assert target_state(ex) == {"state": "removed"}
    # no engine at the socket: its error, on one line
    client = docker.DockerClient(base_url=f"unix://{tmp_path}/gone.sock", version="1.41", timeout=5)
    st = target_state(_executor(client, running))
    assert st["state"] == "engine unreachable" and set(st) == {"state", "error"}, st
    assert "No such file or directory" in st["error"], st
    # something at the socket that answers no HTTP (a long line with runs of blanks): cut at ENGINE_ERROR_CHARS
    import socket

    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(tmp_path / "garbage.sock"))
    srv.listen(4)

    def answer() -> None:
        with contextlib.suppress(OSError):
            conn, _ = srv.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"not   an engine " * 100 + b"\r\n\r\n")

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    client = docker.DockerClient(base_url=f"unix://{tmp_path}/garbage.sock", version="1.41", timeout=5)
    try:
        st = target_state(_executor(client, running))
    finally:
        srv.close()
        t.join(timeout=10)
    assert st["state"] == "engine unreachable" and set(st) == {"state", "error"}, st
    assert len(st["error"]) == ENGINE_ERROR_CHARS and "not an engine not an engine" in st["error"], st
    assert "  " not in st["error"], st


def test_a_container_killed_by_its_memory_limit_is_host_oom_not_a_relaunch(
        runs: HostRuns, docker_engine: Any, container_factory: Any) -> None:
    """The run's container ended, OOM-killed by the engine (its memory limit): the watcher says it lost the
    container with its state, records `target_lost` with the exit code and the OOM flag, and gives up with host
    OOM as the cause (never the device OOM ladder: offload would move memory to the host) and where the
    checkpoints are."""
    box = container_factory(command=["python3", "-c", "b = bytearray(512 * 2**20); import time; time.sleep(60)"],
                            mem_limit="64m", memswap_limit="64m")
    _wait_exited(box)
    record = runs.start(["Total training steps: 5"])
    said: list[str] = []
    assert _watcher(runs, record, _executor(docker_engine, box), said).run() == 1
    events = runs.events(record)
    lost = next(e for e in events if e["event"] == "target_lost")
    assert (lost["state"], lost["exit_code"], lost["oom_killed"], lost["attempt"]) == ("exited", 137, True, 1), lost
    assert f"verlctl watch: lost the run's container {box.name}: exited (" in "\n".join(said), said
    gave_up = events[-1]
    assert gave_up["event"] == "gave_up" and gave_up["category"] == "host_oom", gave_up
    assert gave_up["reason"] == (f"gave up: the run's container {box.name} is exited (exit code 137, OOM-killed): the "
                                 f"training cannot continue there; checkpoints are kept in {runs.ckpt}"), gave_up
    assert "recovery" not in [e["event"] for e in events]


def test_an_engine_that_comes_back_is_said_and_the_run_s_state_then_decides(
        runs: HostRuns, docker_engine: Any, container_factory: Any, tmp_path: Path) -> None:
    """The engine does not answer the liveness scan (its socket is gone), then answers again within the wait:
    `engine_back` with the container's state; the container runs but its process group cannot be reached, and
    that is the reason given, not the engine."""
    import docker

    box = container_factory(command=["sleep", "600"])
    sock = tmp_path / "engine.sock"
    client = docker.DockerClient(base_url=f"unix://{sock}", version="1.41", timeout=10)
    record = runs.start(["Total training steps: 5"])
    said: list[str] = []
    watcher = _watcher(runs, record, _executor(client, box), said)
    watcher.engine_wait_s = 60.0

    def engine_returns() -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any(e["event"] == "target_lost" for e in runs.events(record)):
            time.sleep(0.1)
        sock.symlink_to("/var/run/docker.sock")

    t = threading.Thread(target=engine_returns, daemon=True)
    t.start()
    started = time.monotonic()
    outcome = watcher.watch_attempt()
    t.join()
    assert time.monotonic() - started < 60
    events = runs.events(record)
    kinds = [e["event"] for e in events]
    assert kinds.index("target_lost") < kinds.index("engine_back"), kinds
    lost = next(e for e in events if e["event"] == "target_lost")
    assert lost["state"] == "engine unreachable" and "engine_error" in lost, lost
    back = next(e for e in events if e["event"] == "engine_back")
    assert back["state"] == "running" and back["attempt"] == 1, back
    assert outcome.kind == "lost", outcome
    assert outcome.detail.startswith(f"cannot reach the run's process group in container {box.name}: "), outcome
    assert outcome.finding is None


def test_a_worker_node_s_group_is_followed_unreachable_back_and_ended(
        runs: HostRuns, docker_engine: Any, container_factory: Any, tmp_path: Path) -> None:
    """A multi-node run whose worker is a container on this host's engine (its address is local: no ssh): each
    liveness scan checks the worker's process group by identity. Paused (the engine refuses its exec): one
    `node_unreachable` line and event; resumed: `node_back`; its group ended: one `node_ended` naming the group.
    The head's training, which then finishes, decides the outcome."""
    import os

    from test_watcher_live_status_and_stalls import _script
    from verlctl.runtime.executor import DockerExecutor, HostExecutor
    from verlctl.runtime.records import NodeHandle

    box = container_factory(command=["sleep", "600"])
    wex = DockerExecutor(docker_engine, box.id, box.name)
    ref = wex.start_group(["sleep", "600"], "/tmp/worker.log", f"worker/1/{os.urandom(8).hex()}")
    gate = tmp_path / "go"
    record = runs.start([], tail=_script("Total training steps: 3", ("gate", str(gate)),
                                         ("sh", 'echo "[verlctl 10:00:09] training finished"')))
    record.workers = [NodeHandle(address="127.0.0.1", container_id=box.id, container_name=box.name, pgid=ref.pgid,
                                 marker=ref.marker, leader_start=ref.start, container_started_at=ref.container_started_at)]
    record.save()
    said: list[str] = []
    watcher = _watcher(runs, record, HostExecutor(), said)  # the head's training runs on this host
    watcher.liveness_every_s = 0.2

    def kinds() -> list[str]:
        return [e["event"] for e in runs.events(record)]

    def wait(kind: str) -> None:
        deadline = time.monotonic() + 90
        while kind not in kinds():
            assert time.monotonic() < deadline, (kind, kinds())
            time.sleep(0.1)

    def fault() -> None:
        try:
            wait("started")
            time.sleep(1.0)  # a few healthy scans of the worker first
            box.pause()
            wait("node_unreachable")
            box.unpause()
            wait("node_back")
            wex.stop_group(ref, grace_s=2)
            wait("node_ended")
        finally:
            with contextlib.suppress(Exception):
                box.unpause()
            gate.touch()

    t = threading.Thread(target=fault, daemon=True)
    t.start()
    outcome = watcher.watch_attempt()
    t.join()
    assert outcome.kind == "finished", outcome
    events = [e for e in runs.events(record) if e["event"].startswith("node_")]
    assert [(e["event"], e["node"]) for e in events] == [("node_unreachable", "127.0.0.1"), ("node_back", "127.0.0.1"),
                                                        ("node_ended", "127.0.0.1")], events
    assert events[0]["reason"].startswith("unreachable: "), events
    assert events[2]["reason"] == f"its process group {ref.pgid} ended", events
    lines = [s for s in said if s.startswith("verlctl watch: worker node 127.0.0.1: ")]
    assert lines == [f"verlctl watch: worker node 127.0.0.1: {events[0]['reason']}",
                     f"verlctl watch: worker node 127.0.0.1: {events[2]['reason']}"], said



def test_a_failed_attempt_s_teardown_stops_its_worker_node_s_group_too(
        runs: HostRuns, docker_engine: Any, container_factory: Any) -> None:
    """A device OOM on a two-node run: before the next attempt, the teardown stops what is left of the failed one on
    every node, the worker's process group included (verified by identity in its container); here the relaunch then
    cannot start (a cloud run whose key is gone) and the watch gives up, with nothing of the run left running."""
    import os

    from test_recovery_host import OOM_LINE, _progress
    from verlctl.runtime.executor import DockerExecutor, HostExecutor
    from verlctl.runtime.records import NodeHandle

    box = container_factory(command=["sleep", "600"])
    wex = DockerExecutor(docker_engine, box.id, box.name)
    ref = wex.start_group(["sleep", "600"], "/tmp/worker.log", f"worker/1/{os.urandom(8).hex()}")
    bystander = wex.start_group(["sleep", "600"], "/tmp/other.log", f"other/1/{os.urandom(8).hex()}")
    lines = ["Total training steps: 5", _progress(1, 5), "Traceback (most recent call last):", OOM_LINE]
    record = runs.start(lines, tail='echo "[verlctl 10:00:05] start_verl.sh exits with status 1"; exit 1', pause=0.1,
                        cloud=True, env_file="SWANLAB_MODE=cloud\n", top={"recovery": {"memory_release_timeout_s": 1}})
    record.workers = [NodeHandle(address="127.0.0.1", container_id=box.id, container_name=box.name, pgid=ref.pgid,
                                 marker=ref.marker, leader_start=ref.start, container_started_at=ref.container_started_at)]
    record.save()
    said: list[str] = []
    assert wex.group_alive(ref)
    assert _watcher(runs, record, HostExecutor(), said).run() == 1
    gave_up = next(e for e in runs.events(record) if e["event"] == "gave_up")
    assert gave_up["reason"].startswith("gave up: cannot relaunch"), gave_up
    assert not wex.group_alive(ref), said  # the worker's group was stopped by the teardown
    assert wex.group_alive(bystander)  # and nothing else in its container
