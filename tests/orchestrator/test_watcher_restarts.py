"""The watcher as `verlctl watch` shows it, mutation round 6 (#25): what an untuned sample of orchestrator/watcher.py
left unnoticed. The training is a TEST DOUBLE (a bash script printing verl's log lines, as in
tests/orchestrator/test_recovery_host.py: verl's training step cannot run here); the watcher, the records, the process
group and the stop mark are real."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from test_recovery_host import HostRuns, host_runs_in
from test_watcher_live_status_and_stalls import _end, _script, _until, _watch
from verlctl.runtime.executor import HostExecutor
from verlctl.runtime.records import RunRecord, load_run, record_lock


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


#: TEST DOUBLE for verl's training step: each attempt waits on its gate (until the test has seen the watcher scan
#: it training), then fails with its line ($VERLCTL_TEST_FAIL_<n>, after a traceback line) or trains to the end
#: (no such line). Attempt 1 has trained step 1 and saved global_step_1 first; attempt 2 prints verl's resume
#: lines. An attempt named in $VERLCTL_TEST_LINGER leaves a process in its group that ends 8 s after the failure,
#: writing when it ended to $VERLCTL_TEST_LINGERED. $VERLCTL_TEST_THEN_<n>: a line printed after the failure's,
#: once the test creates the gate's second file (<gate><n>b). Each attempt's argv is kept (attempt-<n>, JSON).
TRAINER = r"""
import json, os, subprocess, sys, time
state = os.environ["VERLCTL_TEST_STATE"]
n = len(os.listdir(state)) + 1
with open(os.path.join(state, f"attempt-{n}"), "w") as fh:
    json.dump(sys.argv[1:], fh)
ckpt = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("trainer.default_local_dir="))
def say(line):
    print(line, flush=True)
    time.sleep(0.05)
say("Total training steps: 4")
if n == 2:
    say(f"Load from checkpoint folder: {ckpt}/global_step_1")
    say("Setting global step to 1")
gate = os.environ["VERLCTL_TEST_GATE"] + str(n)
for _ in range(1200):  # bounded: nothing is left running
    if os.path.exists(gate):
        break
    time.sleep(0.1)
if n == 1:
    say("Training Progress:  25%|##  | 1/4 [00:01<00:03,  1.00s/it]")
    say("step:1 - actor/pg_loss:0.1 - training/global_step:1")
    os.makedirs(os.path.join(ckpt, "global_step_1", "actor"), exist_ok=True)
    with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt"), "w") as fh:
        fh.write("1")
fail = os.environ.get(f"VERLCTL_TEST_FAIL_{n}")
if not fail:
    for step in range(n, 5):
        say(f"Training Progress: {25 * step:3d}%|##  | {step}/4 [00:01<00:03,  1.00s/it]")
        say(f"step:{step} - actor/pg_loss:0.1 - training/global_step:{step}")
    sys.exit(0)
say("Traceback (most recent call last):")
say(fail)
then = os.environ.get(f"VERLCTL_TEST_THEN_{n}")
if then:
    for _ in range(1200):  # bounded: nothing is left running
        if os.path.exists(gate + "b"):
            break
        time.sleep(0.1)
    say(then)
if str(n) == os.environ.get("VERLCTL_TEST_LINGER"):
    code = "import sys, time; time.sleep(8); open(sys.argv[1], 'w').write(repr(time.time()))"
    subprocess.Popen([sys.executable, "-c", code, os.environ["VERLCTL_TEST_LINGERED"]],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
sys.exit(1)
"""


def _launch_and_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: dict[int, str], linger: int,
                      then: dict[int, tuple[str, Callable[[str, Any], None]]] | None = None,
                      **sets: Any) -> tuple[int, str, RunRecord, list[Any]]:
    """`launch --yes` on the host runtime with TRAINER, then `verlctl watch` to its end, opening each attempt's
    gate once a liveness scan has seen its training: (the watcher's exit status, its output, the record, the
    attempts' process groups still alive when it ended; those are stopped). ``then``: for attempt n, a line
    printed after its failure's and what to wait for (called with the run id and the watch) before it is."""
    import time

    from host_launch_support import host_launch, launch_and_watch, scanned_after
    from test_recovery_host import OOM_LINE

    then = then or {}
    env, settings = host_launch(
        tmp_path, TRAINER, VERLCTL_TEST_LINGER=str(linger), VERLCTL_TEST_LINGERED=str(tmp_path / "lingered"),
        **{f"VERLCTL_TEST_FAIL_{n}": OOM_LINE if line == "OOM" else line for n, line in fails.items()},
        **{f"VERLCTL_TEST_THEN_{n}": line for n, (line, _) in then.items()})
    settings.update(sets)
    state, gate = tmp_path / "attempts", tmp_path / "go"
    run_id, proc = launch_and_watch(env, settings)
    monkeypatch.setenv("VERLCTL_STATE_DIR", env["VERLCTL_STATE_DIR"])
    try:
        for n in (1, 2):
            # attempt n's training script runs (waiting on its gate) and the watcher's liveness scan (every
            # 2.5 s) has seen it
            _until(f"attempt {n} to start", lambda n=n: (state / f"attempt-{n}").exists(), proc, timeout=200)
            _until(f"a scan of attempt {n}", scanned_after(load_run(run_id), time.time(), 2.5), proc)
            Path(f"{gate}{n}").touch()
            if n in then:
                then[n][1](run_id, proc)
                Path(f"{gate}{n}b").touch()
    finally:
        for n in (1, 2):
            Path(f"{gate}{n}").touch()
            Path(f"{gate}{n}b").touch()
    try:
        code, out = _end(proc, timeout=300)
    finally:
        record = load_run(run_id)
        left = [a.ref for a in record.attempts if a.ref is not None and HostExecutor().group_alive(a.ref)]
        for ref in left:
            HostExecutor().stop_group(ref, grace_s=2)
    return code, out, record, left


def test_a_relaunched_attempt_that_cannot_be_recovered_is_given_up_after_what_it_left_has_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An OOM in attempt 1 is relaunched with the OOM ladder's one rung; attempt 2 runs out of memory too (the
    ladder is used up) and leaves a process in its group for 8 s. The watcher waits (up to 30 s) for what is
    left of THAT attempt, the current one, before it gives up: nothing of the run still runs when it says so.
    The launch, the rendered scripts, `start_verl.sh` and the watcher are real; `ray`, `npu-smi` and the
    training step are TEST DOUBLES (tests/doubles/bin/ray, a real npu-smi capture, TRAINER above)."""
    code, out, record, left = _launch_and_watch(tmp_path, monkeypatch, {1: "OOM", 2: "OOM"}, linger=2,
                                                **{"recovery.max_oom_retries": 1})
    events = record.events()
    kinds = [e["event"] for e in events]
    assert code == 1, (out, kinds)
    assert [a.number for a in record.attempts] == [1, 2], kinds
    gave_up = next(e for e in events if e["event"] == "gave_up")
    # The budget (recovery.max_oom_retries: 1) ends it, not the ladder (seed 9713's `oom_retries += 0` survivor
    # gave up only because the ladder had no rung left).
    assert gave_up["category"] == "device_oom", gave_up
    assert gave_up["reason"] == "gave up: out of memory after 1 recovery attempt(s): giving up", gave_up
    assert left == [], (left, out)  # the watcher gave up only after attempt 2's group had ended
    lingered = tmp_path / "lingered"
    assert lingered.exists() and float(lingered.read_text()) <= gave_up["time"], (gave_up, out)


HCCL_TIMEOUT = ("EI0006: 2024-08-05-18:15:21.270.506 Getting socket times out. Reason: Remote Rank did not send the "
                "data in time. Please check the reason for the rank being stuck")


def test_a_restart_after_a_failure_other_than_an_oom_lets_the_attempt_s_processes_end_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only after a device OOM does the watcher stop what is left of the attempt as soon as the training
    script has ended (the relaunch should not wait). After another failure (an HCCL timeout, restarted by
    `recovery.restart_on`) the attempt's own processes end by themselves (start_verl.sh stops its Ray and says
    its exit status; here a process that ends 8 s later): the relaunch comes after them, and attempt 2 trains to
    the end from global_step_1."""
    code, out, record, left = _launch_and_watch(tmp_path, monkeypatch, {1: HCCL_TIMEOUT}, linger=1,
                                                **{"recovery.restart_on": "hccl_timeout", "recovery.max_restarts": 1})
    events = record.events()
    kinds = [e["event"] for e in events]
    assert code == 0, (out, kinds)
    recovery = next(e for e in events if e["event"] == "recovery")
    assert recovery["category"] == "hccl_timeout", recovery
    lingered = tmp_path / "lingered"
    assert lingered.exists(), (out, kinds)  # not stopped by the watcher's teardown
    assert float(lingered.read_text()) <= recovery["time"], (recovery, out)
    assert kinds[-1] == "finished" and [a.number for a in record.attempts] == [1, 2], kinds
    assert left == [], left


def test_restarts_stop_at_recovery_max_restarts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An HCCL timeout in both attempts, restarted by `recovery.restart_on` at most once
    (`recovery.max_restarts: 1`): the watcher gives up after the second attempt, and starts no third (seed 9713's
    survivor: `restarts += 1` -> `+= 0` relaunched without end)."""
    code, out, record, left = _launch_and_watch(tmp_path, monkeypatch, {1: HCCL_TIMEOUT, 2: HCCL_TIMEOUT}, linger=0,
                                                **{"recovery.restart_on": "hccl_timeout", "recovery.max_restarts": 1})
    events = record.events()
    kinds = [e["event"] for e in events]
    assert code == 1, (out, kinds)
    assert [a.number for a in record.attempts] == [1, 2], kinds
    assert kinds.count("recovery") == 1 and kinds[-1] == "gave_up", kinds
    gave_up = events[-1]
    assert gave_up["category"] == "hccl_timeout", gave_up
    assert left == [], left
