"""orchestrator/runstate.py: the gaps of the turn-5 mutation sample (seed 7389, docs/development/mutation.md): `status`
of a live run names the step its log shows when no watcher reports one, and says "starting" before any step."""

from __future__ import annotations

from verlctl.orchestrator import runstate
from verlctl.runtime.records import RunRecord


def record(attempts: int = 1) -> RunRecord:
    return RunRecord(run_id="r1", created_at=0, runtime="host", workdir="/verl", scripts_dir="/x",
                     run_log="/data/logs/x.log", train_log="", checkpoints="", experiment="e", verl_version="0.7.0",
                     pgid=5, attempts=[{"number": i + 1, "pgid": 5, "started_at": 0} for i in range(attempts)])


def started(n: int) -> dict[str, object]:
    return {"event": "started", "pgid": 5, "attempt": n}


def test_a_live_run_without_a_watcher_names_the_step_its_log_shows() -> None:
    """`status` reads the step from the log (``progress``) when no watcher reports one: "attempt 2, step 7/20"."""
    st = runstate.decide(record(2), [started(1), started(2)], None, None, alive=True, now=100.0,
                         progress={"step": 7, "total": 20})
    assert (st.state, st.decided_by) == ("running", "process")
    assert st.why == "attempt 2, step 7/20"
    # a watcher's own step wins over the log's
    live = {"attempt": 2, "step": 9, "total": 20, "updated_at": 40.0, "phase": "training"}
    st = runstate.decide(record(2), [started(1), started(2)], live, None, alive=True, now=100.0,
                         progress={"step": 7, "total": 20})
    assert st.why == "attempt 2, step 9/20, seen 60s ago"
    # a log without a step yet: nothing to add
    st = runstate.decide(record(1), [started(1)], None, None, alive=True, now=100.0, progress={"step": None})
    assert st.why == "attempt 1, starting (no step seen yet)"


def test_a_live_run_before_its_first_step_says_it_is_starting() -> None:
    st = runstate.decide(record(1), [started(1)], None, None, alive=True, now=100.0)
    assert st.why == "attempt 1, starting (no step seen yet)"
    # the watcher of an older attempt says nothing about this one
    st = runstate.decide(record(2), [started(1), started(2)], {"attempt": 1, "phase": "training", "step": 3}, None,
                         alive=True, now=100.0)
    assert st.why == "attempt 2, starting (no step seen yet)"
    # the watcher of this attempt in another phase says which
    st = runstate.decide(record(1), [started(1)], {"attempt": 1, "phase": "validating"}, None, alive=True, now=100.0)
    assert st.why == "attempt 1, validating"
