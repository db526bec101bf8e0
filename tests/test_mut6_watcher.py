"""The watcher as `verlctl watch` shows it, mutation round 6 (#25): what an untuned sample of ops/watcher.py
left unnoticed. The training is a TEST DOUBLE (a bash script printing verl's log lines, as in
tests/test_recovery_host.py: verl's training step cannot run here); the watcher, the records, the process
group and the stop mark are real."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from test_mut5_watcher import _end, _script, _until, _watch
from test_recovery_host import HostRuns, host_runs_in
from verlctl.runtime.executor import HostExecutor
from verlctl.runtime.records import load_run, record_lock


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostRuns]:
    yield from host_runs_in(tmp_path, monkeypatch)


def test_a_watch_of_a_run_stopped_with_verlctl_stop_ends_with_status_0(runs: HostRuns, tmp_path: Path) -> None:
    """A user's `verlctl stop` is no failure of the watch: the watcher sees the stop mark (written as stop writes
    it, before stop signals anything), says so in the events and exits 0, without giving up or relaunching."""
    gate = tmp_path / "never"  # the double trains until the fixture stops it (or 120 s)
    record = runs.start([], tail=_script("Total training steps: 5", ("gate", str(gate))))
    proc = _watch(runs, record)
    try:
        _until("the watch to start",
               lambda: "watch_started" in [e["event"] for e in runs.events(record)], proc)
        with record_lock(record):
            marked = load_run(record.run_id)
            marked.stopped = True
            marked.save()
        code, out = _end(proc)
    finally:
        gate.touch()
    assert code == 0, out
    events = [e["event"] for e in runs.events(record)]
    assert events[-1] == "watch_stopped", events
    assert "gave_up" not in events and "recovery" not in events, events
    assert len(load_run(record.run_id).attempts) == 1
    HostExecutor().stop_group(record.ref, grace_s=2)
