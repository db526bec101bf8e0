"""A17 (issue 22): the watcher's run directory disappears under it (a clean-up of ~/.local/state, a colleague's
`rm`): one warning line, the record is written again from memory, and the watch goes on to the run's end.
The training is a TEST DOUBLE (a bash script printing verl's log lines), as in test_recovery_host."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_recovery_host import HostRuns, _progress


def test_the_watcher_survives_its_run_dir_being_moved_away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # HostRuns points VERLCTL_STATE_DIR of this process at its state dir: put back after the test
    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    runs = HostRuns(tmp_path)
    lines = ["Total training steps: 60"] + [_progress(n, 60) for n in range(60)]
    record = runs.start(lines, pause=0.5)
    proc = subprocess.Popen([sys.executable, "-m", "verlctl", "watch", record.run_id], env=runs.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (record.dir / "status.json").exists():  # the watcher is following the run
            assert proc.poll() is None and time.monotonic() < deadline, "the watcher did not start following"
            time.sleep(0.2)
        shutil.move(str(record.dir), str(tmp_path / "moved-away"))
        while not (record.dir / "run.json").exists():  # written again from memory
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the record was not written again"
            time.sleep(0.2)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in out, out
    assert proc.returncode == 0, out
    assert "cannot be written" in out and "the watch goes on" in out, out
    assert sum("warning: the run record" in ln for ln in out.splitlines()) == 1, out
    st = runs.status(record)
    assert st["state"] == "finished", st
    assert any(e["event"] == "finished" for e in runs.events(record))


def test_after_its_run_dir_is_removed_the_watcher_writes_back_the_spec_and_keeps_the_one_watcher_rule(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """N12: the record written again from memory came without the resolved spec, so the next OOM's relaunch
    gave up (`spec file not found`), and without the watcher lock, so only the missing spec refused a second
    watcher. Now the spec is written back as launched and the watcher holds the new directory's lock."""
    from verlctl.orchestrator.runs import run_for
    from verlctl.orchestrator.watcher import Watcher, become_watcher
    from verlctl.runtime.executor import HostExecutor
    from verlctl.runtime.records import load_run

    from conftest import run_cli

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    runs = HostRuns(tmp_path)
    record = runs.start(["Total training steps: 5"], tail="sleep 300")
    spec = (record.dir / record.spec_file).read_bytes()
    said: list[str] = []
    lock = become_watcher(record)
    watcher = None
    try:
        watcher = Watcher(record, HostExecutor(), record.load_spec(), say=said.append, backend=run_for(record))
        shutil.rmtree(record.dir)
        watcher.emit("notice", message="after the rm")  # the first write that fails: the record is written again
        assert (record.dir / "run.json").is_file()
        assert (record.dir / record.spec_file).read_bytes() == spec
        assert load_run(record.run_id).load_spec().spec.train.steps == 5  # what a relaunch reads
        res = run_cli("watch", record.run_id, env=runs.env(), timeout=90)
        assert res.code != 0
        assert "already watched" in res.err and "spec file not found" not in res.err, res.err
        assert sum("warning" in s for s in said) == 1, said
    finally:
        import os
        import signal

        os.close(lock)
        if watcher is not None and watcher._lock_fd is not None:
            os.close(watcher._lock_fd)
        os.killpg(record.pgid, signal.SIGKILL)
