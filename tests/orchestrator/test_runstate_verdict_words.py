"""The run state's words (orchestrator/runstate.py ``decide``, ``recoveries``, ``restart_markers``): how long ago a run
stopped, a run stopped before its first attempt, a failure reason cut to one line, the watcher's own "gave up"
words, a finished log's attempt count, stops of older records, restart markers on the charts, what a live watcher
vouches for, and a host log read without leaking a descriptor."""

from __future__ import annotations

from pathlib import Path

import pytest

NOW = 2_000_000_000.0


def run_record(attempts: int = 1, **over: object):  # type: ignore[no-untyped-def]
    from verlctl.runtime.records import RunRecord

    return RunRecord(run_id="r1", created_at=0, runtime="docker", workdir="/verl", scripts_dir="/verl/x",
                     run_log="/verl/logs/x.log", train_log="", checkpoints="", experiment="e", verl_version="0.7.0",
                     pgid=5 if attempts else None,
                     attempts=[{"number": i + 1, "pgid": 5, "started_at": 0} for i in range(attempts)], **over)


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(0, "0s ago"), (119, "119s ago"), (120, "2 min ago"), (7199, "120 min ago"), (7200, "2 h ago"),
     (172_799, "48 h ago"), (172_800, "2 days ago"), (-30, "0s ago")],  # a clock step back is "0s", not negative
)
def test_a_stopped_run_says_how_long_ago_in_the_unit_a_person_reads(seconds: int, words: str) -> None:
    from verlctl.orchestrator.runstate import decide

    st = decide(run_record(), [{"event": "started", "attempt": 1},
                               {"event": "stopped", "time": NOW - seconds, "signalled": True}], now=NOW)
    assert (st.state, st.why) == ("stopped", f"stopped with `verlctl stop` {words}")


def test_a_run_stopped_before_its_first_attempt_says_so() -> None:
    from verlctl.orchestrator.runstate import decide

    st = decide(run_record(attempts=0, stopped=True), [{"event": "launch", "time": NOW - 5}], now=NOW)
    assert (st.state, st.why) == ("never started", "stopped before any attempt started")
    st = decide(run_record(attempts=0), [{"event": "launch", "time": NOW - 5}], now=NOW)
    assert st.state == "never started" and "(launched 5s ago)" in st.why


@pytest.mark.parametrize("length", [159, 160, 161, 400])
def test_a_failure_reason_is_its_first_line_cut_to_160_characters(length: int) -> None:
    from verlctl.orchestrator.runstate import decide

    reason = "x" * length
    st = decide(run_record(), [{"event": "started", "attempt": 1}, {"event": "gave_up", "reason": reason + "\nmore"}],
                now=NOW)
    assert st.state == "failed"
    assert st.why == (reason if length <= 160 else "x" * 159 + "…")
    assert len(st.why) == min(length, 160)


@pytest.mark.parametrize(
    ("kind", "field", "text", "why"),
    [("gave_up", "reason", "gave up: no progress for 30 min", "the watcher gave up: no progress for 30 min"),
     ("gave_up", "reason", "no progress for 30 min", "no progress for 30 min"),
     ("launch_failed", "error", "gave up: pulling the image", "gave up: pulling the image")],
)
def test_only_the_watchers_own_gave_up_words_are_reworded(kind: str, field: str, text: str, why: str) -> None:
    from verlctl.orchestrator.runstate import decide

    st = decide(run_record(), [{"event": "started", "attempt": 1}, {"event": kind, field: text}], now=NOW)
    assert (st.state, st.why) == ("failed", why)


def test_a_log_that_says_training_finished_reads_as_finished_with_the_attempt_count() -> None:
    from verlctl.orchestrator.runstate import decide

    log = "[verlctl 10:00:00] starting\nstep:5 - actor/loss:0.1\n[verlctl 10:05:00] training finished\n"
    st = decide(run_record(attempts=2), [{"event": "started", "attempt": 2}], log_text=log, now=NOW)
    assert (st.state, st.why, st.decided_by) == ("finished", "2 attempts", "log")


def test_a_stop_event_of_an_older_record_without_signalled_counts_as_a_stop_that_signalled() -> None:
    """Records written before `stopped` events said whether anything was signalled: such a stop is the verdict,
    even when the log's last words say the script exited (the stop's SIGTERM made it exit)."""
    from verlctl.orchestrator.runstate import decide

    log = "[verlctl 10:00:00] start_verl.sh exits with status 143\n"
    events = [{"event": "started", "attempt": 1}, {"event": "stopped", "time": NOW - 60}]
    st = decide(run_record(), events, log_text=log, now=NOW)
    assert (st.state, st.why) == ("stopped", "stopped with `verlctl stop` 60s ago")
    # and one that says it signalled nothing keeps the log's verdict (N9)
    events[-1]["signalled"] = False
    st = decide(run_record(), events, log_text=log, now=NOW)
    assert (st.state, st.why) == ("failed", "start_verl.sh exited with status 143")


@pytest.mark.parametrize(("category", "words"), [("device_oom", None), ("disk_quota_gone", "disk quota gone"),
                                                 ("", "a failure")])
def test_a_restart_for_a_failure_without_words_names_its_category_or_a_failure(category: str,
                                                                             words: str | None) -> None:
    from verlctl.orchestrator.runstate import CATEGORY_WORDS, recoveries

    events = [{"event": "started", "attempt": 1}, {"event": "recovery", "category": category},
              {"event": "started", "attempt": 2}]
    want = CATEGORY_WORDS["device_oom"] if words is None else words
    assert recoveries(events) == [f"attempt 2 restarted after {want}"]


def test_the_charts_mark_a_restart_at_the_checkpoint_it_resumed_from_else_at_the_failures_step() -> None:
    from verlctl.orchestrator.runstate import CATEGORY_WORDS, restart_markers

    oom = CATEGORY_WORDS["device_oom"]
    events = [{"event": "started", "attempt": 1}, {"event": "alert", "category": "device_oom", "step": 7},
              {"event": "recovery", "category": "device_oom", "add_feature": "offload",
               "resumed_from": "/data/ckpt/run1/global_step_5/"},
              {"event": "started", "attempt": 2}, {"event": "alert", "category": "device_oom", "step": 9},
              {"event": "recovery", "category": "device_oom"},
              {"event": "started", "attempt": 3}, {"event": "recovery", "category": "device_oom"}]  # no step known
    assert restart_markers(events) == [(5, f"attempt 2: offload added after {oom}"),
                                       (9, f"attempt 3: restarted after {oom}"),
                                       (0, f"attempt 4: restarted after {oom}")]


@pytest.mark.parametrize(("watcher", "phase", "state"), [(False, "training", "unknown"), (True, "training", "running"),
                                                         (True, "starting", "running"), (True, "finished", "unknown")])
def test_a_live_watcher_vouches_for_a_starting_or_training_run_only(watcher: bool, phase: str, state: str) -> None:
    from verlctl.orchestrator.runstate import decide

    live = {"phase": phase, "attempt": 1, "step": 3, "total": 10}
    kw = {"watcher": True} if watcher else {}  # the default: no watcher known to be alive
    st = decide(run_record(), [{"event": "started", "attempt": 1}], live, **kw, now=NOW)
    assert st.state == state, st
    if state == "running":
        assert st.why.endswith("(from its watcher)") and st.decided_by == "events"


def test_a_restart_before_any_recorded_start_is_attempt_2() -> None:
    """An events file that begins mid-run (the start event lost): the first restart starts attempt 2."""
    from verlctl.orchestrator.runstate import CATEGORY_WORDS, recoveries

    assert recoveries([{"event": "recovery", "category": "device_oom"}]) == [
        f"attempt 2 restarted after {CATEGORY_WORDS['device_oom']}"]


def test_reading_the_host_log_leaves_no_descriptor_open(tmp_path: Path) -> None:
    """`status` and the watcher read the host log again and again: every read closes what it opened."""
    import os

    from verlctl.orchestrator.runstate import read_host_log

    log = tmp_path / "run.log"
    log.write_text("[verlctl 10:00:00] training finished\n")
    rec = run_record().model_copy(update={"runtime": "host", "run_log": str(log)})
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        assert read_host_log(rec) == "[verlctl 10:00:00] training finished\n"
    assert len(os.listdir("/proc/self/fd")) == before
