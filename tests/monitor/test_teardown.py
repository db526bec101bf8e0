"""The end-of-run DataLoader traceback of a healthy real verl run is not a failure; the same traceback before
the last step is (reference/realverl.md, runs v3/v4: `RuntimeError: DataLoader worker (pid N) is killed by
signal: Killed.` after the final checkpoint and 'Final validation metrics', exit status 0).

The classifier and `diagnose` run on the real captured text (tests/fixtures/verl-logs/realverl-*); the watcher
and `status` on the host runtime, with a TEST DOUBLE training (a bash script printing those lines, as in
test_recovery_host.py): everything else is real.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_recovery_host import HostRuns, host_runs  # noqa: F401 - the fixture
from verlctl.monitor.catalogue import Classifier, classify_lines

from conftest import FIXTURES, run_cli

FIXTURE = FIXTURES / "verl-logs" / \
    "realverl-0.9.1-cpu-grpo-dataloader-killed-after-last-checkpoint.txt"
#: the same teardown seen live (stop 33's CI): 12 lines of frames under "Exception ignored in atexit callback"
ATEXIT = FIXTURE.with_name("realverl-0.9.1-cpu-grpo-atexit-dataloader-killed-after-last-step.txt")


def _lines(fixture: Path = FIXTURE) -> list[str]:
    return [ln for ln in fixture.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]


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


def _classified(lines: list[str]) -> Classifier:
    c = Classifier()
    for i, ln in enumerate(lines, 1):
        c.feed_line(i, ln)
    return c


def test_the_teardown_message_takes_back_the_whole_traceback_it_ends_however_deep() -> None:
    lines = _lines(ATEXIT)
    head = next(i for i, ln in enumerate(lines) if ln.endswith("Traceback (most recent call last):"))
    assert len(lines) - 1 - head == 12  # the live one: deeper than the classifier's fold window
    assert Classifier.fold_window < 12
    c = _classified(lines)
    assert c.findings() == [] and c.teardown_lines == [len(lines)]
    assert [f.category for f in classify_lines(lines[: head + 1])] == ["python_exception"]  # open: a finding
    # fifty more frames: still the traceback the message ends
    frame = lines[head + 1]
    deep = [*lines[: head + 1], *[frame] * 50, *lines[head + 1:]]
    assert classify_lines(deep) == []


def test_a_traceback_that_ended_before_the_teardown_message_stays() -> None:
    run, final, teardown = _split()
    own = ["(TaskRunnerV1) Traceback (most recent call last):", "(TaskRunnerV1) ValueError: bad"]
    message = [ln for ln in teardown if "DataLoader worker" in ln]
    at = len(run) + 3  # the exception's line (the finding states it, not the head)
    found = classify_lines(run + final + own + message)
    assert [(f.category, f.line) for f in found] == [("python_exception", at)]


def test_the_teardown_message_takes_back_its_own_process_traceback_only() -> None:
    lines = _lines(ATEXIT)
    head = next(i for i, ln in enumerate(lines) if ln.endswith("Traceback (most recent call last):"))
    other = ["(WorkerDict pid=3838) Traceback (most recent call last):",
             '(WorkerDict pid=3838)   File "/x.py", line 1, in f',
             "(WorkerDict pid=3838) ValueError: bad"]
    # another process's traceback between the head and the message: one finding by its text (the head's
    # line, seen twice), holding the other's traceback too: it stays
    mixed = [*lines[:-1], *other, lines[-1]]
    (found,) = classify_lines(mixed)
    # (its line and excerpt are those of the exception that ends the other's traceback: the head has none)
    assert (found.category, found.line, found.count) == ("python_exception", len(lines) - 1 + 3, 2), found
    assert found.excerpt == other[-1], found
    # the other's after the message: the teardown's is taken back, the other's is a finding of its own
    (later,) = classify_lines([*lines, *other])
    assert (later.category, later.line, later.count) == ("python_exception", len(lines) + 3, 1), later
    # torch's [rankN]: prefix names the process too
    ranked = [re.sub(r"^\x1b\[36m\([^)]*\)\x1b\[0m ", "[rank0]: ", ln) for ln in lines]
    assert all(ln.startswith("[rank0]: ") for ln in ranked)
    assert classify_lines(ranked) == []
    ranked = [*ranked[: head + 1], "[rank1]: Traceback (most recent call last):", *ranked[head + 1:]]
    assert [f.line for f in classify_lines(ranked)] == [head + 1]


def test_an_exception_line_just_before_the_teardown_traceback_is_of_its_incident() -> None:
    # one incident by the fold (the same category within the fold window): the teardown message takes it back
    run, final, teardown = _split()
    logged = ["(TaskRunnerV1) ValueError: a worker's queue was closed"]
    assert classify_lines(run + final + logged + teardown) == []
    assert [f.category for f in classify_lines(run + final + logged)] == ["python_exception"]


def test_after_a_teardown_traceback_is_taken_back_the_next_traceback_is_a_finding_of_its_own() -> None:
    # right after the taken-back teardown (within the fold window of its head): not folded into what is gone
    run, final, teardown = _split()
    nxt = "(WorkerDict pid=3838) ValueError: bad"
    found = classify_lines(run + final + teardown + [nxt])
    assert [(f.category, f.line, f.excerpt) for f in found] == [
        ("python_exception", len(run) + 1 + len(teardown) + 1, nxt)]


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
    assert [(f.category, f.line) for f in found] == [("python_exception", 2)]  # the exception's line


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


def test_the_watcher_calls_the_live_atexit_teardown_finished(host_runs: HostRuns) -> None:  # noqa: F811
    record = host_runs.start(_lines(ATEXIT), pause=0.05)
    res = host_runs.watch(record)
    assert res.code == 0, res.out + res.err
    kinds = [e["event"] for e in host_runs.events(record)]
    assert kinds[-1] == "finished" and "alert" not in kinds, kinds
    assert "note:" not in res.out, res.out


_UNRELATED = ["(TaskRunnerV1) Traceback (most recent call last):", "(TaskRunnerV1) ValueError: bad"]


def test_an_unclassified_traceback_after_the_last_step_of_a_finished_run_is_a_note(
        host_runs: HostRuns) -> None:  # noqa: F811
    run, final, _ = _split()
    record = host_runs.start(run + final + _UNRELATED, pause=0.05)
    res = host_runs.watch(record)
    assert res.code == 0, res.out + res.err
    kinds = [e["event"] for e in host_runs.events(record)]
    assert kinds[-1] == "finished" and "alert" not in kinds, kinds
    out = " ".join(res.out.split())
    # the traceback's own exception, not its header
    assert f"note: after the last step, log line {len(run) + 3}: ValueError: bad" in out, out
    assert "(the run finished: its teardown, not a failure)" in out, out


def test_the_same_traceback_after_the_last_step_of_a_failed_run_is_its_alert(
        host_runs: HostRuns) -> None:  # noqa: F811
    run, final, _ = _split()
    tail = 'echo "[verlctl 10:00:05] start_verl.sh exits with status 1"; exit 1'
    record = host_runs.start(run + final + _UNRELATED, tail=tail, pause=0.05)
    res = host_runs.watch(record)
    assert res.code == 1, res.out + res.err
    events = host_runs.events(record)
    (alert,) = [e for e in events if e["event"] == "alert"]
    assert alert["category"] == "python_exception" and alert["line"] == len(run) + 3, alert
    assert alert["excerpt"] == _UNRELATED[-1], alert  # the exception, not the traceback's header
    assert "finished" not in [e["event"] for e in events] and "note:" not in res.out


def test_a_mid_run_traceback_of_a_finished_run_is_its_one_alert_and_the_teardown_one_no_note(
        host_runs: HostRuns) -> None:  # noqa: F811
    # an unclassified exception mid-run (the run went on), then a traceback after the last step, past the fold
    # window (two findings); the run finishes after more than the alert delay: one alert, at the mid-run
    # exception (the root cause: the first), and no note
    run, final, _ = _split()
    mid = ["(TaskRunnerV1) KeyError: 'prompt'"]
    busy = ["(TaskRunnerV1) INFO: still training"] * Classifier.fold_window
    lines = run[:4] + mid + busy + run[4:] + final + _UNRELATED
    record = host_runs.start(lines, tail='sleep 5; echo "[verlctl 10:00:09] training finished"', pause=0.01)
    res = host_runs.watch(record)
    assert res.code == 0, res.out + res.err
    events = host_runs.events(record)
    alerts = [e for e in events if e["event"] == "alert"]
    assert [(a["category"], a["line"]) for a in alerts] == [("python_exception", 5)], alerts
    assert events[-1]["event"] == "finished" and "note:" not in res.out, res.out


def test_a_clean_finished_run_has_no_alert_and_no_note(host_runs: HostRuns) -> None:  # noqa: F811
    run, final, _ = _split()
    record = host_runs.start(run + final, pause=0.05)
    res = host_runs.watch(record)
    assert res.code == 0, res.out + res.err
    kinds = [e["event"] for e in host_runs.events(record)]
    assert kinds[-1] == "finished" and "alert" not in kinds and "note:" not in res.out, (kinds, res.out)


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
