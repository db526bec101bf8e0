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
