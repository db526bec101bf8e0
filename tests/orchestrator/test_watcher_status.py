"""`status` and `stop` know a live watcher started without a run id (`verlctl watch`, the newest run, the form
launch_and_watch uses) by the watcher lock it holds, not only by the run id in its command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from test_recovery_host import host_runs_in

from conftest import run_cli
from fault_support import started_procs, wait_for


@pytest.fixture
def host_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    yield from host_runs_in(tmp_path, monkeypatch)


@pytest.fixture
def procs():  # type: ignore[no-untyped-def]
    yield from started_procs()


def test_a_watcher_started_without_a_run_id_is_alive_in_status_and_stopped_by_stop(host_runs, procs) -> None:  # type: ignore[no-untyped-def]
    from verlctl.orchestrator.inspect import watcher_alive
    from verlctl.runtime.records import load_run

    record = host_runs.start(["Total training steps: 5"], tail="sleep 300")
    watch = subprocess.Popen([sys.executable, "-m", "verlctl", "watch"], env=host_runs.env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: any(e.get("event") == "watch_started" and e.get("pid") == watch.pid
                                    for e in record.events()), 60)
        st = run_cli("status", record.run_id, "--json", env=host_runs.env()).json()
        assert st["watcher"] == {"pid": watch.pid, "alive": True}, st
        # a process with a watcher's command line that holds no lock of this run is not its watcher
        stand_in = procs([sys.executable, "-c", "import time; time.sleep(600)", "-m", "verlctl", "watch"])
        assert not watcher_alive(load_run(record.run_id).model_copy(update={"watcher_pid": stand_in.pid}))
        res = run_cli("stop", record.run_id, "--grace", "5", env=host_runs.env())
        assert res.code == 0, res.err
        assert f"stopped the watcher (pid {watch.pid})" in res.out, res.out
        assert watch.wait(timeout=60) is not None
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
