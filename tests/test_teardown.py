"""The end-of-run DataLoader traceback of a healthy real verl run is not a failure; the same traceback before
the last step is (reference/realverl.md, runs v3/v4: `RuntimeError: DataLoader worker (pid N) is killed by
signal: Killed.` after the final checkpoint and 'Final validation metrics', exit status 0).

The classifier and `diagnose` run on the real captured text (tests/fixtures/verl-logs/realverl-*); the watcher
and `status` on the host runtime, with a TEST DOUBLE training (a bash script printing those lines, as in
test_recovery_host.py): everything else is real.
"""

from __future__ import annotations

from pathlib import Path

from test_recovery_host import HostRuns, host_runs  # noqa: F401 - the fixture
from verlctl.monitor.catalogue import Classifier, classify_lines

from conftest import run_cli

FIXTURE = Path(__file__).parent / "fixtures" / "verl-logs" / \
    "realverl-0.9.1-cpu-grpo-dataloader-killed-after-last-checkpoint.txt"


def _lines() -> list[str]:
    return [ln for ln in FIXTURE.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]


def _split() -> tuple[list[str], list[str], list[str]]:
    """(the run up to the final-validation line, that line, the teardown traceback)."""
    lines = _lines()
    at = next(i for i, ln in enumerate(lines) if "Final validation metrics" in ln)
    return lines[:at], [lines[at]], lines[at + 1:]


def test_the_teardown_traceback_after_the_last_step_is_no_finding() -> None:
    lines = _lines()
    assert any("DataLoader worker (pid 13197) is killed by signal: Killed." in ln for ln in lines)
    c = Classifier()
    for i, ln in enumerate(lines, 1):
        c.feed_line(i, ln)
    assert c.findings() == []
    assert c.finished_at is not None and c.teardown_lines == [len(lines)]


def test_the_same_traceback_before_the_last_step_is_the_root_cause() -> None:
    run, _final, teardown = _split()
    mid = run[:4] + teardown + run[4:]  # killed after step 1, before the final-validation line
    (f,) = classify_lines(mid)
    assert f.category == "dataloader_worker_killed" and "pid 13197" in f.message and "Killed" in f.message
    assert "data.dataloader_num_workers" in f.hint
    # a run that never reached the end (no final line at all) likewise
    assert [f.category for f in classify_lines(run + teardown)] == ["dataloader_worker_killed"]


def test_after_the_last_step_other_errors_still_count() -> None:
    run, final, _ = _split()
    other = ["(TaskRunnerV1) Traceback (most recent call last):",
             "(TaskRunnerV1) OSError: [Errno 28] No space left on device"]
    assert [f.category for f in classify_lines(run + final + other)] == ["disk_full"]
    # an unclassified traceback after the end, not ended by the DataLoader message, stays a finding
    plain = ["(TaskRunnerV1) Traceback (most recent call last):", "(TaskRunnerV1) ValueError: bad"]
    assert [f.category for f in classify_lines(run + final + plain)] == ["python_exception"]


def test_a_traceback_before_the_end_is_not_taken_back_by_the_teardown_message() -> None:
    run, final, teardown = _split()
    early = ["(TaskRunnerV1) Traceback (most recent call last):", "(TaskRunnerV1) ValueError: bad"]
    found = classify_lines(early + run + final + teardown)
    assert [(f.category, f.line) for f in found] == [("python_exception", 1)]


def test_diagnose_calls_the_real_run_clean_and_the_mid_run_kill_a_failure(tmp_path: Path) -> None:
    res = run_cli("diagnose", str(FIXTURE))
    assert res.code == 0 and "no known failure" in res.out.lower(), res.out + res.err
    run, _final, teardown = _split()
    mid = tmp_path / "mid.log"
    mid.write_text("\n".join(run + teardown) + "\n", encoding="utf-8")
    res = run_cli("diagnose", str(mid), "--json")
    assert res.code == 1, res.out + res.err
    assert [f["category"] for f in res.json()["findings"]] == ["dataloader_worker_killed"]


def test_the_watcher_and_status_call_the_real_teardown_finished(host_runs: HostRuns) -> None:  # noqa: F811
    record = host_runs.start(_lines(), pause=0.05)
    res = host_runs.watch(record)
    assert res.code == 0, res.out + res.err
    events = host_runs.events(record)
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "finished" and "alert" not in kinds, events
    st = host_runs.status(record)
    assert st["state"].startswith("finished"), st


def test_the_watcher_reports_a_mid_run_dataloader_kill(host_runs: HostRuns) -> None:  # noqa: F811
    run, _final, teardown = _split()
    tail = 'echo "[verlctl 10:00:05] start_verl.sh exits with status 1"; exit 1'
    record = host_runs.start(run[:4] + teardown, tail=tail, pause=0.05)
    res = host_runs.watch(record)
    assert res.code == 1, res.out + res.err
    events = host_runs.events(record)
    alert = next(e for e in events if e["event"] == "alert")
    assert alert["category"] == "dataloader_worker_killed", alert
    assert "finished" not in [e["event"] for e in events]
