"""The watcher's own behaviour on the host runtime, as `verlctl watch` shows it to a user (turn-5 mutation
work, #25): the live `status.json` while a run starts and trains, the stall limits, `--notify-cmd`, the
checkpoint and resume events, the resumed run that had nothing left to train, an OOM that leaves the job
hanging, a run log deleted under the watcher.

The training is a TEST DOUBLE, as in tests/orchestrator/test_recovery_host.py: a bash script printing verl's log lines
(verl's training step cannot run here). Everything else is real: `verlctl watch` as a subprocess (or the
Watcher in-process where a test needs a shorter limit than the CLI gives), the run records, the process group,
the log file. The double waits on gate files that the test creates once it has seen what it checks (bounded:
a gate opens by itself after 120 s, so that nothing is left running)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from host_launch_support import scanned_after
from test_recovery_host import OOM_LINE, HostRuns, host_runs_in
from verlctl.orchestrator.watcher import DEAD_CONFIRM_S, LOG_CATCH_UP_S, STALL_CONFIRM_S
from verlctl.runtime.executor import HostExecutor
from verlctl.runtime.records import RunRecord

FINISHED = 'echo "[verlctl 10:00:09] training finished"'
FAILED = 'echo "[verlctl 10:00:09] start_verl.sh exits with status 1"; exit 1'


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostRuns]:
    yield from host_runs_in(tmp_path, monkeypatch)


def _script(*parts: str | tuple[str, str]) -> str:
    """The double's body: a str is a log line (echoed), ("gate", path) waits until the test creates path,
    ("sh", code) is bash run as is."""
    out = []
    for p in parts:
        if isinstance(p, tuple):
            kind, value = p
            if kind == "gate":
                out.append(f'i=0; while [ ! -e {json.dumps(value)} ] && [ "$i" -lt 1200 ]; do sleep 0.1; '
                           'i=$((i + 1)); done')
            else:
                out.append(value)
        else:
            out.append(f"echo {json.dumps(p)}")
    return "\n".join(out)


def _progress(n: int, total: int, rate: str = "2.00s/it", remaining: str = "00:06") -> str:
    return f"Training Progress: {100 * n // total:3d}%|          | {n}/{total} [00:04<{remaining}, {rate}]"


def _watch(runs: HostRuns, record: RunRecord, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "verlctl", "watch", record.run_id, *args], env=runs.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _until(what: str, cond: Any, proc: subprocess.Popen[str] | None = None, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the watcher ended before {what}: {proc.communicate()[0]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _end(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out


def _watch_attempt_beside(watcher: Any, beside: Any, gate: Path) -> Any:
    """``watcher.watch_attempt()`` while ``beside()`` runs in a thread; ``gate`` is created once ``beside`` has
    ended, whatever happened in it (the double waits on it), and again at the end."""
    def run() -> None:
        try:
            beside()
        finally:
            gate.touch()

    t = threading.Thread(target=run)
    t.start()
    try:
        return watcher.watch_attempt()
    finally:
        t.join()
        gate.touch()


def _given_up(runs: HostRuns, tmp_path: Path, lines: list[str | tuple[str, str]], recovery: dict[str, Any]) -> str:
    """The double prints ``lines`` and then waits on a gate that never opens, under `verlctl watch` with these
    ``recovery`` settings, until the watch gives up (exit 1): what it printed."""
    gate = tmp_path / "never"
    record = runs.start([], tail=_script(*lines, ("gate", str(gate)), ("sh", FINISHED)), top={"recovery": recovery})
    proc = _watch(runs, record)
    try:
        code, out = _end(proc)
    finally:
        gate.touch()
    assert code == 1, out
    return out


def _status_with(record: RunRecord, **want: Any) -> Any:
    def check() -> dict[str, Any] | None:
        st = record.read_status()
        return st if st is not None and all(st.get(k) == v for k, v in want.items()) else None
    return check


def test_the_live_status_follows_the_phases_and_the_last_step(runs: HostRuns, tmp_path: Path) -> None:
    """What `verlctl status` reads while the run starts and trains: the phase (starting → ray up → workers
    starting → training), the step of the total, the ETA and time per step from tqdm, the score and the
    response length of the last step line; at the end the phase is finished and the numbers stay."""
    gates = [tmp_path / f"go{i}" for i in range(4)]
    body = _script(
        ("gate", str(gates[0])),
        "2026-12-01 10:00:01,000\tINFO worker.py:1821 -- Started a local Ray instance. View the dashboard at "
        "127.0.0.1:8265",
        ("gate", str(gates[1])),
        "(TaskRunner pid=12) colocated worker base class <class 'verl.single_controller.base.worker.Worker'>",
        ("gate", str(gates[2])),
        "Total training steps: 4",
        _progress(0, 4, rate="?s/it", remaining="?"),
        "step:1 - critic/score/mean:0.250 - response_length/mean:123.000 - actor/pg_loss:0.1 - "
        "training/global_step:1",
        _progress(1, 4),
        ("gate", str(gates[3])),
        ("sh", FINISHED),
    )
    record = runs.start([], tail=body)
    proc = _watch(runs, record)
    try:
        first = _until("the first status", record.read_status, proc)
        assert first["phase"] == "starting" and first["attempt"] == 1 and first["step"] is None, first
        gates[0].touch()
        _until("phase ray up", _status_with(record, phase="ray up"), proc)
        gates[1].touch()
        _until("phase workers starting", _status_with(record, phase="workers starting"), proc)
        gates[2].touch()
        st = _until("step 1 of 4", _status_with(record, phase="training", step=1, seconds_per_step=2.0), proc)
        assert st["total"] == 4 and st["eta_s"] == 6.0, st
        assert st["score"] == 0.25 and st["response_length"] == 123.0, st
        assert st["last_progress_at"] <= st["updated_at"], st
    finally:
        for g in gates:
            g.touch()
    code, out = _end(proc)
    assert code == 0, out
    st = record.read_status()
    assert st is not None and st["phase"] == "finished" and st["step"] == 1 and st["total"] == 4, st
    assert st["score"] == 0.25, st


def test_a_start_up_that_never_reaches_a_step_is_stalled_and_the_notify_command_hears_of_it(
        runs: HostRuns, tmp_path: Path) -> None:
    """No step within recovery.stall_startup_s: one `stalled` line and event with the limit, then the watcher
    gives up (restart_on_stall is off). `--notify-cmd` gets exactly the stalled and gave_up events as JSON on
    stdin, nothing of the healthy part."""
    heard = tmp_path / "heard.jsonl"
    gate = tmp_path / "never"
    body = _script("Total training steps: 4", ("gate", str(gate)), ("sh", FINISHED))
    record = runs.start([], tail=body, top={"recovery": {"stall_startup_s": 2}})
    proc = _watch(runs, record, "--notify-cmd", f"cat >> '{heard}'; echo >> '{heard}'")
    try:
        code, out = _end(proc)
    finally:
        gate.touch()
    assert code == 1, out
    m = re.search(r"verlctl watch: stalled: no progress for (\d+)s during start-up \(limit 2s\)", out)
    assert m and int(m.group(1)) >= 2, out
    events = runs.events(record)
    stalled = next(e for e in events if e["event"] == "stalled")
    assert stalled["attempt"] == 1 and "during start-up (limit 2s)" in stalled["reason"], stalled
    assert "py-spy dump" in stalled["hint"], stalled
    gave_up = next(e for e in events if e["event"] == "gave_up")
    assert gave_up["category"] == "stalled", gave_up
    # the stalled run still holds its devices: said, with the command that frees them (RV4-6)
    assert f"left running (to inspect them, e.g. `py-spy dump`) and hold the devices: free them with " \
           f"`verlctl stop {record.run_id}`" in out, out
    told = [json.loads(ln) for ln in heard.read_text().splitlines() if ln.strip()]
    assert [t["event"] for t in told] == ["stalled", "gave_up"], told
    assert told[0]["reason"] == stalled["reason"] and told[0]["run"] == record.run_id, told
    st = record.read_status()
    assert st is not None and st["phase"] == "failed" and st["reason"] == gave_up["reason"], st
    assert st["attempt"] == 1 and st["total"] == 4, st  # what `status` knew of the run stays beside the reason


@pytest.mark.parametrize("kind", ["progress", "step lines"])
def test_a_training_that_stops_advancing_is_stalled_by_its_step_time_not_the_start_up_limit(
        runs: HostRuns, tmp_path: Path, kind: str) -> None:
    """Once steps run, the limit is max(stall_min_s, stall_step_factor × the median step time): here 1 s, far
    below the start-up limit of 20 s. The steps are timed from tqdm's progress bar, or from verl's step lines
    alone (a log without the bar; seed 9846's survivor: those steps were not timed). The start-up before step 1
    (5 s here) is no step time (seed 9488's survivor timed step 1 from the watch's start: a limit of 8 s)."""
    lines: list[str | tuple[str, str]] = ["Total training steps: 9", ("sh", "sleep 5")]
    for n in range(1, 4):
        line = _progress(n, 9, rate="0.20s/it") if kind == "progress" else f"step:{n} - actor/pg_loss:0.1"
        lines += [line, ("sh", "sleep 0.2")]
    out = _given_up(runs, tmp_path, lines, {"stall_startup_s": 20, "stall_min_s": 1, "stall_step_factor": 1.5})
    m = re.search(r"stalled: no progress for (\d+)s during training \(limit (\d+)s\)", out)
    assert m, out
    idle, limit = int(m.group(1)), int(m.group(2))
    assert 1 <= limit < 5 and idle >= limit, out


def test_a_progress_bar_redrawn_at_the_same_step_is_no_progress(runs: HostRuns, tmp_path: Path) -> None:
    """tqdm redraws its bar at the same step (a refresh, a postfix update): that is no step. The stall clock keeps
    counting from step 1, and no step time of the redraw's period is taken (seed 9562's survivor, `>` → `>=`:
    each redraw reset the clock, so the start-up stall never came and a 1 s training limit did instead)."""
    redraw = _progress(1, 9, rate="0.30s/it")
    out = _given_up(runs, tmp_path,
                    ["Total training steps: 9", redraw,
                     ("sh", f"for i in $(seq 40); do echo {json.dumps(redraw)}; sleep 0.3; done")],
                    {"stall_startup_s": 3, "stall_min_s": 1, "stall_step_factor": 1.5})
    assert re.search(r"stalled: no progress for \d+s during start-up \(limit 3s\)", out), out


def test_a_watcher_that_was_not_scheduled_reads_the_log_before_it_calls_a_stall(
        runs: HostRuns, tmp_path: Path) -> None:
    """The watcher is frozen (SIGSTOP, as a loaded machine or a suspended terminal leaves it) for longer than the
    start-up limit while the training writes its first steps. Once it runs again it reads those steps before it
    calls any stall: the run goes on and finishes, nothing said. (Stop 34's CI: under load the watcher's check ran
    before its read and called a healthy run stalled, "no progress for 71s during start-up (limit 20s)". Without
    the StallJudge's read-after-suspicion rule this test saw that line in 1 of 3 runs: which thread runs first after
    SIGCONT decides. The test that fails every time without the rule is the unreadable log's, below.)"""
    go, end = tmp_path / "go", tmp_path / "end"
    lines: list[str | tuple[str, str]] = ["Total training steps: 9", ("gate", str(go))]
    for n in range(1, 4):
        lines += [_progress(n, 9, rate="0.20s/it"), ("sh", "sleep 0.2")]
    body = _script(*lines, ("gate", str(end)), ("sh", FINISHED))
    record = runs.start([], tail=body, top={"recovery": {"stall_startup_s": 4, "stall_min_s": 60}})
    proc = _watch(runs, record)
    try:
        _until("the first status", record.read_status, proc)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            go.touch()
            _until("step 3 in the log", lambda: "3/9" in Path(record.run_log).read_text(encoding="utf-8"))
            time.sleep(5)  # the start-up limit (4 s) passes while the watcher is stopped
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        _until("step 3 read", _status_with(record, phase="training", step=3), proc)
        time.sleep(3)  # past the judge's confirmation: a stall suspected on waking would be called by now
        assert proc.poll() is None, proc.communicate()[0]
    finally:
        end.touch()
    code, out = _end(proc)
    assert code == 0 and "stalled" not in out, out
    assert [e["event"] for e in runs.events(record) if e["event"] == "stalled"] == []


def test_a_log_that_could_not_be_read_for_longer_than_the_limit_is_read_before_a_stall_is_called(
        runs: HostRuns, tmp_path: Path) -> None:
    """The run log cannot be read for longer than the start-up limit (here moved away and back, as a shared file
    system that stops answering for a while leaves it) while the training writes its first steps into it. The
    watcher waits for a read of the log before it calls the stall, and reads the steps once the log is back: no
    stall. Without the StallJudge's read-after-suspicion rule the stall is called at the limit, the log unread."""
    go, end = tmp_path / "go", tmp_path / "end"
    lines: list[str | tuple[str, str]] = ["Total training steps: 9", ("gate", str(go))]
    for n in range(1, 4):
        lines += [_progress(n, 9, rate="0.20s/it"), ("sh", "sleep 0.2")]
    body = _script(*lines, ("gate", str(end)), ("sh", FINISHED))
    limit = 8
    record = runs.start([], tail=body, top={"recovery": {"stall_startup_s": limit, "stall_min_s": 60}})
    log, away = Path(record.run_log), Path(record.run_log + ".away")
    proc = _watch(runs, record)
    try:
        first = _until("the first status", record.read_status, proc)
        log.rename(away)  # the training keeps writing into it: its file descriptor follows the file
        try:
            go.touch()
            _until("step 3 written", lambda: "3/9" in away.read_text(encoding="utf-8"))
            # the limit counts from the watch's start (the status's last_progress_at): a stall is suspected at
            # limit s; it would be called by its fallback a further limit s later, the log still unread
            time.sleep(max(0.0, first["last_progress_at"] + limit + STALL_CONFIRM_S + 1 - time.time()))
            assert proc.poll() is None, proc.communicate()[0]
        finally:
            away.rename(log)
        _until("step 3 read", _status_with(record, phase="training", step=3), proc)
        time.sleep(STALL_CONFIRM_S + 1)
        assert proc.poll() is None, proc.communicate()[0]
    finally:
        end.touch()
    code, out = _end(proc)
    assert code == 0 and "stalled" not in out, out


def test_a_training_that_ended_while_its_log_could_not_be_read_is_judged_on_the_log_s_last_lines(
        runs: HostRuns, tmp_path: Path) -> None:
    """The training writes its last lines ("training finished") and exits while its log cannot be read (moved away
    and back, as a shared file system that stops answering leaves it). The watcher sees the process gone and reads
    the log to its end before it judges the attempt: finished. A verdict as soon as the process is seen gone (no
    catch-up with the log) fails the attempt with no error line, the finish unread."""
    go = tmp_path / "go"
    body = _script("Total training steps: 2", _progress(1, 2), ("gate", str(go)), _progress(2, 2), ("sh", FINISHED))
    record = runs.start([], tail=body)
    log, away = Path(record.run_log), Path(record.run_log + ".away")
    watcher = _watcher(runs, record, [], liveness_every_s=0.2)
    result: dict[str, Any] = {}
    judge = threading.Thread(target=lambda: result.update(outcome=watcher.watch_attempt()), daemon=True)
    judge.start()
    try:
        _until("step 1 read", _status_with(record, step=1))
        log.rename(away)  # the training keeps writing into it: its file descriptor follows the file
        try:
            go.touch()
            _until("the training's end", lambda: not HostExecutor().group_alive(record.ref))
            # seen gone within liveness_every_s; a verdict that does not wait for the log comes DEAD_CONFIRM_S later
            time.sleep(DEAD_CONFIRM_S + 2)
            assert judge.is_alive(), result  # still waiting for the log (at most LOG_CATCH_UP_S)
        finally:
            away.rename(log)
        judge.join(timeout=LOG_CATCH_UP_S + 30)
    finally:
        go.touch()
    outcome = result["outcome"]
    assert (outcome.kind, outcome.finding) == ("finished", None), outcome


def test_a_healthy_run_tells_the_notify_command_nothing(runs: HostRuns, tmp_path: Path) -> None:
    heard = tmp_path / "heard.jsonl"
    record = runs.start(["Total training steps: 2", _progress(1, 2), _progress(2, 2)], pause=0.1)
    code, out = _end(_watch(runs, record, "--notify-cmd", f"cat >> '{heard}'"))
    assert code == 0, out
    assert not heard.exists(), heard.read_text()


def test_each_saved_checkpoint_is_one_event_with_its_step(runs: HostRuns) -> None:
    ckpt = runs.ckpt
    lines = ["Total training steps: 2", _progress(1, 2),
             f"(WorkerDict pid=7) [Rank 0] Saved model to {ckpt}/global_step_1/actor/model_world_size_2_rank_0.pt",
             f"(WorkerDict pid=8) [Rank 1] Saved model to {ckpt}/global_step_1/actor/model_world_size_2_rank_1.pt",
             _progress(2, 2),
             f"(WorkerDict pid=7) [Rank 0] Saved model to {ckpt}/global_step_2/actor/model_world_size_2_rank_0.pt"]
    record = runs.start(lines, pause=0.1)
    code, out = _end(_watch(runs, record))
    assert code == 0, out
    saved = [e["step"] for e in runs.events(record) if e["event"] == "checkpoint_saved"]
    assert saved == [1, 2], runs.events(record)


@pytest.mark.parametrize(("first_step", "resumed"), [(1, False), (3, True)])
def test_a_resumed_attempt_is_checked_against_its_checkpoint(runs: HostRuns, first_step: int,
                                                            resumed: bool) -> None:
    """The first step of an attempt resumed from global_step_3: one `resume_check` event; a trainer that
    started before the checkpoint is one warning line (the run still finishes once it trains past it)."""
    ckpt = str(runs.ckpt / "global_step_3")
    lines = ["Total training steps: 5", f"Load from checkpoint folder: {ckpt}"]
    lines += [_progress(n, 5) for n in range(first_step, 6)]
    record = runs.start(lines, pause=0.1, resumed_from=ckpt)
    code, out = _end(_watch(runs, record))
    assert code == 0, out
    checks = [e for e in runs.events(record) if e["event"] == "resume_check"]
    assert len(checks) == 1, checks
    assert checks[0]["first_step_seen"] == first_step and checks[0]["resumed"] is resumed, checks
    assert checks[0]["expected_checkpoint"] == ckpt, checks
    warning = f"verlctl watch: warning: the trainer started at step {first_step}, not after the checkpoint {ckpt}"
    assert (warning in out) is not resumed, out
    advanced = [e for e in runs.events(record) if e["event"] == "resume_advanced"]
    assert [e["step"] for e in advanced] == [4], advanced


def test_a_resume_from_the_last_step_that_trains_nothing_has_finished(runs: HostRuns) -> None:
    """The checkpoint was the run's last step (global_step_5 of 5): verl exits 0 with nothing left to train,
    which is the end of the training, not a failed resume."""
    ckpt = str(runs.ckpt / "global_step_5")
    record = runs.start(["Total training steps: 5", f"Load from checkpoint folder: {ckpt}", _progress(5, 5)],
                        pause=0.1, resumed_from=ckpt)
    code, out = _end(_watch(runs, record))
    assert code == 0, out
    kinds = [e["event"] for e in runs.events(record)]
    assert "resume_failed" not in kinds and kinds[-1] == "finished", kinds


@pytest.mark.parametrize(("lines", "seen"), [
    (["Total training steps: 5", _progress(2, 5), _progress(3, 5)], "(last seen: step 3 of 5)"),
    (["Load from checkpoint folder: somewhere"], "(last seen: no step)"),
])
def test_a_resume_that_trains_nothing_says_the_last_step_it_saw(runs: HostRuns, lines: list[str],
                                                               seen: str) -> None:
    ckpt = str(runs.ckpt / "global_step_3")
    record = runs.start(lines, pause=0.1, resumed_from=ckpt)
    code, out = _end(_watch(runs, record))
    assert code == 1, out
    failed = next(e for e in runs.events(record) if e["event"] == "resume_failed")
    assert (f"attempt 1 exited 0 having trained 0 steps {seen} after resuming from global_step_3: "
            in failed["reason"]), failed
    assert failed["reason"].endswith(f"(resumed from {ckpt})"), failed


def _watcher(runs: HostRuns, record: RunRecord, said: list[str], **kw: Any) -> Any:
    from verlctl.orchestrator.runs import run_for
    from verlctl.orchestrator.watcher import Watcher
    from verlctl.spec.resolve import load_spec

    return Watcher(record, HostExecutor(), load_spec(record.dir / "spec.resolved.yaml", use_env=False),
                   say=said.append, backend=run_for(record), **kw)


def test_an_oom_that_leaves_the_job_hanging_fails_the_attempt_after_the_grace(runs: HostRuns,
                                                                             tmp_path: Path) -> None:
    """A device OOM, then the job hangs (a driver waiting on a dead actor): after error_grace_s the attempt is
    failed as "out of memory, process still hanging", with one alert at the OOM's line and step."""
    gate = tmp_path / "never"
    body = _script("Total training steps: 5", _progress(0, 5), "step:1 - actor/pg_loss:0.1 - training/global_step:1",
                   _progress(1, 5), "Traceback (most recent call last):", OOM_LINE, ("gate", str(gate)),
                   ("sh", FAILED))
    record = runs.start([], tail=body)
    said: list[str] = []
    watcher = _watcher(runs, record, said, error_grace_s=2.0, alert_delay_s=0.5)
    started = time.monotonic()
    try:
        outcome = watcher.watch_attempt()
        took = time.monotonic() - started
        assert HostExecutor().group_alive(record.ref)  # it is still hanging: the watcher decided without it
    finally:
        gate.touch()
    assert outcome.kind == "failed" and outcome.detail == "out of memory, process still hanging", outcome
    assert outcome.finding is not None and outcome.finding.category == "device_oom", outcome
    assert took < 60, took
    alerts = [e for e in runs.events(record) if e["event"] == "alert"]
    assert len(alerts) == 1, alerts
    assert (alerts[0]["category"], alerts[0]["line"], alerts[0]["step"], alerts[0]["attempt"]) == \
        ("device_oom", 6, 1, 1), alerts
    assert said[0] == f"verlctl watch: device_oom at log line 6: {alerts[0]['message']}", said
    assert said[1] == f"  hint: {alerts[0]['hint']}", said


def test_a_run_log_deleted_under_the_watcher_is_said_once(runs: HostRuns, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The run log is removed while the attempt runs: one warning and one `log_gone` event naming it (the
    check runs every LOG_CHECK_EVERY_S, shortened here), and the watch goes on to the attempt's end."""
    from verlctl.orchestrator import watcher as watcher_module

    monkeypatch.setattr(watcher_module, "LOG_CHECK_EVERY_S", 0.2)
    gate = tmp_path / "go"
    body = _script("Total training steps: 5", _progress(1, 5), ("gate", str(gate)), ("sh", "sleep 2"),
                   ("sh", FAILED))
    record = runs.start([], tail=body)
    said: list[str] = []
    watcher = _watcher(runs, record, said, liveness_every_s=0.2)

    def remove_when_followed() -> None:
        _until("the watcher following step 1", _status_with(record, step=1), timeout=90)
        Path(record.run_log).unlink()
        # the attempt runs on until the watcher has said so (its check runs only while the attempt lives)
        _until("the log_gone event", lambda: any(e["event"] == "log_gone" for e in runs.events(record)), timeout=90)

    outcome = _watch_attempt_beside(watcher, remove_when_followed, gate)
    assert outcome.kind == "failed", outcome
    gone = [e for e in runs.events(record) if e["event"] == "log_gone"]
    assert len(gone) == 1 and gone[0]["path"] == record.run_log and gone[0]["attempt"] == 1, gone
    warnings = [s for s in said if s.startswith("verlctl watch: warning: the run log")]
    assert warnings == [f"verlctl watch: warning: {gone[0]['message']}"], said
    assert f"the run log {record.run_log} is gone (deleted or moved) while attempt 1 runs" in warnings[0]


def test_a_ray_head_daemon_that_dies_mid_run_is_seen_by_the_scan_and_the_attempt_stopped(
        runs: HostRuns, tmp_path: Path) -> None:
    """The head's gcs_server dies while the training script runs (no log line says so): two scans without it
    and the watcher reports the head gone, naming the daemon and its pid, and stops what is left of the
    attempt. Ray's daemons are real processes renamed with `exec -a` (as in tests/runtime/test_ownership.py)."""
    gate = tmp_path / "never"
    train = tmp_path / "run_training.sh"  # the training script's name is what the scan looks for
    # The training waits for the kill on a gate of its own, longer than the shared 120 s one: the test's two waits
    # below may take up to 2 x 90 s under load (the watcher's stop, or the fixture's, ends it).
    wait_gate = f'i=0; while [ ! -e {json.dumps(str(gate))} ] && [ "$i" -lt 9000 ]; do sleep 0.1; i=$((i + 1)); done'
    train.write_text(_script("Total training steps: 50", _progress(1, 50), ("sh", wait_gate), ("sh", FAILED))
                     + "\n", encoding="utf-8")
    # The daemons outlive every wait of the test too: with `sleep 120`, the raylet's own end under load was once
    # the "death" the watcher reported.
    body = _script(("sh", "(exec -a gcs_server sleep 900) &"), ("sh", "(exec -a raylet sleep 900) &"),
                   ("sh", f"bash {json.dumps(str(train))}"))
    record = runs.start([], tail=body)
    ex = HostExecutor()
    said: list[str] = []
    watcher = _watcher(runs, record, said, liveness_every_s=0.2)
    killed: list[int] = []

    def kill_the_gcs_once_scanned() -> None:
        try:
            verdict = _until("the daemons and the training script", lambda: (
                (v := ex.verdict(record.ref)) and len(v["ray"]) == 2 and "run_training.sh" in v["scripts"]
                and v), timeout=90)
            # the watcher must have seen them before one dies: a daemon never seen is one not started yet
            _until("a scan of the daemons", scanned_after(record, time.time(), 0.2), timeout=90)
            killed.append(int(verdict["ray"]["gcs_server"]))
            os.kill(killed[0], signal.SIGKILL)
        finally:
            if not killed:
                gate.touch()

    t = threading.Thread(target=kill_the_gcs_once_scanned)
    t.start()
    try:
        outcome = watcher.watch_attempt()
    finally:
        t.join()
        gate.touch()
    assert killed, said
    assert outcome.kind == "failed" and outcome.detail == f"the Ray head of process group {record.ref} died", outcome
    assert outcome.finding is not None and outcome.finding.category == "ray_gcs_unreachable", outcome
    assert outcome.finding.excerpt == f"gcs_server (pid {killed[0]}) ended", outcome.finding
    assert outcome.max_step == 1 and outcome.total == 50, outcome
    alert = next(e for e in runs.events(record) if e["event"] == "alert")
    assert alert["message"].startswith(f"the Ray head of attempt 1 is gone: gcs_server (pid {killed[0]}) ended"), alert
    assert f"verlctl watch: stopping what is left of attempt 1 (process group {record.ref})" in said, said
    deadline = time.monotonic() + 30
    while ex.group_alive(record.ref):  # stopped by the watcher (SIGTERM, then SIGKILL after its grace)
        assert time.monotonic() < deadline, "the watcher left the attempt running"
        time.sleep(0.1)


def _can_mount_privately() -> bool:
    res = subprocess.run(["unshare", "-m", "sh", "-c", 'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs "$d" '
                          '&& umount "$d"; rmdir "$d"'], capture_output=True, check=False)
    return res.returncode == 0


@pytest.mark.parametrize("full", [True, False])
def test_a_run_that_ends_without_an_error_line_on_a_full_checkpoint_disk_is_disk_full(
        runs: HostRuns, full: bool) -> None:
    """The training exits 1 without an error line: with paths.checkpoints on a full file system (a 64 KiB tmpfs,
    filled, mounted in the watcher's own mount namespace only) that is the named cause; on a disk with room
    the watcher gives up without inventing one. `df` is the real one."""
    if not _can_mount_privately():
        pytest.skip("needs `unshare -m` and mount (root) for a private full file system")
    lines = ["Total training steps: 5", _progress(1, 5), "step:3 - actor/pg_loss:0.1 - training/global_step:3",
             _progress(3, 5)]
    record = runs.start(lines, tail=FAILED, pause=0.1)
    ckpt = runs.ckpt
    ckpt.mkdir(exist_ok=True)
    fill = (f'mount -t tmpfs -o size=64k tmpfs {json.dumps(str(ckpt))} && '
            f'(head -c 200000 /dev/zero > {json.dumps(str(ckpt / "fill"))} 2>/dev/null; true) && ') if full else ""
    proc = subprocess.run(["unshare", "-m", "sh", "-c", f'{fill}exec "$0" -m verlctl watch "$1"', sys.executable,
                           record.run_id], env=runs.env(), capture_output=True, text=True, timeout=180, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out
    events = runs.events(record)
    gave_up = next(e for e in events if e["event"] == "gave_up")
    alerts = [e for e in events if e["event"] == "alert"]
    if not full:
        assert alerts == [] and gave_up["category"] is None, events
        return
    assert gave_up["category"] == "disk_full", gave_up
    assert len(alerts) == 1 and alerts[0]["category"] == "disk_full", alerts
    assert alerts[0]["message"] == (f"the run ended without an error line and paths.checkpoints {ckpt} is full "
                                    "(0 KiB free): nothing more could be written there"), alerts
    assert alerts[0]["excerpt"] == f"df {ckpt}: 0 KiB free" and alerts[0]["step"] == 3, alerts
    # at the log line where the run ended (the last one it could write), not at a number of another kind
    assert alerts[0]["line"] == len(Path(record.run_log).read_text().splitlines()), alerts
    from verlctl.monitor.catalogue import CATALOGUE

    assert alerts[0]["hint"] == next(c.hint for c in CATALOGUE if c.name == "disk_full"), alerts  # the fix for it


# ---------------------------------------------------------------- an OOM recovery, launched and relaunched on the host

#: TEST DOUBLE for verl's training step (python3 -m verl.trainer.main_ppo ...), one behaviour per attempt: the
#: first trains step 1, saves global_step_1 (as verl writes it) and runs out of device memory at step 2; the
#: next prints verl's resume lines and trains to the end. Each attempt's argv is kept for the test.
TRAINER = r'''
import json, os, sys, time
state = os.environ["VERLCTL_TEST_STATE"]
n = len(os.listdir(state)) + 1
with open(os.path.join(state, f"attempt-{n}.json"), "w") as fh:
    json.dump(sys.argv[1:], fh)
ckpt = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("trainer.default_local_dir="))
def say(line):
    print(line, flush=True)
    time.sleep(0.05)
say("Total training steps: 4")
if n == 1:
    gate = os.environ["VERLCTL_TEST_GATE"]
    for _ in range(1200):  # until the test's watcher follows the run (bounded: nothing is left running)
        if os.path.exists(gate):
            break
        time.sleep(0.1)
    say("Training Progress:  25%|##  | 1/4 [00:01<00:03,  1.00s/it]")
    say("step:1 - actor/pg_loss:0.1 - training/global_step:1")
    os.makedirs(os.path.join(ckpt, "global_step_1", "actor"), exist_ok=True)
    with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt"), "w") as fh:
        fh.write("1")
    say(f"(WorkerDict pid=7) [Rank 0] Saved model to {ckpt}/global_step_1/actor/model_world_size_4_rank_0.pt")
    say("Traceback (most recent call last):")
    say(OOM_LINE)
    import subprocess
    # a worker that lingers in the attempt's group after the training script ended: the watcher stops it
    subprocess.Popen(["sleep", "120"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sys.exit(1)
say(f"Load from checkpoint folder: {ckpt}/global_step_1")
say("Setting global step to 1")
for step in range(2, 5):
    say(f"Training Progress: {25 * step:3d}%|##  | {step}/4 [00:01<00:03,  1.00s/it]")
    say(f"step:{step} - actor/pg_loss:0.1 - training/global_step:{step}")
'''


def test_a_device_oom_is_recovered_by_a_relaunch_that_resumes_from_the_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`launch` on the host runtime, then `watch`: a device OOM at step 2 → what is left of the attempt (a
    lingering worker) is stopped,
    device memory is seen released (`npu-smi info`), the next rung of the OOM ladder is added and attempt 2
    starts with resume from global_step_1 (the checkpoint the run wrote); it trains to the end and the watcher
    ends 0. The launch, the rendered scripts, `start_verl.sh` and the watcher are real; `ray`, `npu-smi` and
    the training step are TEST DOUBLES (tests/doubles/bin/ray; a real npu-smi capture; TRAINER above)."""
    from host_launch_support import host_launch, launch_watch_and_scan
    from verlctl.runtime.records import load_run

    env, sets = host_launch(tmp_path, f"OOM_LINE = {OOM_LINE!r}\n" + TRAINER)
    state, gate, ckpt = tmp_path / "attempts", tmp_path / "go", tmp_path / "ckpt"
    try:
        run_id, proc, record = launch_watch_and_scan(env, sets, monkeypatch)
    finally:
        gate.touch()
    try:
        code, out = _end(proc, timeout=300)
    finally:
        record = load_run(run_id)
        left = [a.ref for a in record.attempts if a.ref is not None and HostExecutor().group_alive(a.ref)]
        for ref in left:  # whatever the watcher did not stop (the assertion below names it)
            HostExecutor().stop_group(ref, grace_s=2)
    events = record.events()
    kinds = [e["event"] for e in events]
    assert code == 0, (out, kinds)
    alert = next(e for e in events if e["event"] == "alert")
    assert alert["category"] == "device_oom" and alert["attempt"] == 1 and alert["step"] == 1, alert
    # the watcher's own hint says what it does next, not "enable offload (the watcher's OOM ladder does this)"
    assert alert["hint"].startswith("nothing to do yet: this watcher restarts the run with `"), alert
    assert "enable the `offload` feature" not in out, out
    recovery = next(e for e in events if e["event"] == "recovery")
    assert recovery["category"] == "device_oom" and recovery["add_feature"], recovery
    assert recovery["features_added"] == [recovery["add_feature"]], recovery
    assert recovery["resumed_from"] == f"{ckpt}/global_step_1", recovery
    assert recovery["teardown_s"] >= 0, recovery
    assert recovery["prepared_early"] is True, recovery  # composed from the moment the OOM was seen
    assert kinds.index("memory_released") < kinds.index("recovery"), kinds
    assert [a.number for a in record.attempts] == [1, 2] and record.attempts[1].resumed_from == recovery["resumed_from"]
    assert left == [], left  # attempt 1's lingering worker was stopped before the relaunch; attempt 2 ended
    first, second = (json.loads((state / f"attempt-{n}.json").read_text()) for n in (1, 2))
    assert "trainer.resume_mode=auto" in second and second != first, second
    check = next(e for e in events if e["event"] == "resume_check")
    assert check["resumed"] is True and check["first_step_seen"] == 2, check
    # The relaunched attempt trained past its checkpoint: said once, for attempt 2 (seed 9713's survivor: a
    # relaunch that left the previous attempt's "advance seen" set never said it).
    advanced = [e for e in events if e["event"] == "resume_advanced"]
    assert [(e["resumed_from"], e["step"]) for e in advanced] == [(f"{ckpt}/global_step_1", 2)], advanced
    assert kinds[-1] == "finished" and kinds.count("started") == 2, kinds
    assert f"verlctl watch: {recovery['reason']}; resuming from {ckpt}/global_step_1" in out, out
    st = record.read_status()
    assert st is not None and st["attempt"] == 2 and st["phase"] == "finished" and st["step"] == 4, st


def test_a_watch_whose_engine_is_gone_gives_up_with_where_the_checkpoints_are(runs: HostRuns, tmp_path: Path) -> None:
    """The whole watch (Watcher.run) of a run whose Docker engine is gone: it gives up at once, exit 1, with the
    target's state and the checkpoint directory in the reason (`status` shows it), not a relaunch."""
    import docker

    from verlctl.runtime.executor import DockerExecutor

    record = runs.start(["Total training steps: 5"])
    record.runtime, record.container_name = "docker", "verlctl-test-engine-gone"  # its container's engine is gone
    record.save()
    client = docker.DockerClient(base_url=f"unix://{tmp_path / 'gone.sock'}", version="1.41", timeout=5)
    ex = DockerExecutor(client, "f" * 64, "verlctl-test-engine-gone")
    said: list[str] = []
    from verlctl.orchestrator.runs import run_for
    from verlctl.orchestrator.watcher import Watcher
    from verlctl.spec.resolve import load_spec

    watcher = Watcher(record, ex, load_spec(record.dir / "spec.resolved.yaml", use_env=False), say=said.append,
                      backend=run_for(record))
    watcher.engine_wait_s = 1.0
    assert watcher.run() == 1
    events = runs.events(record)
    kinds = [e["event"] for e in events]
    assert "recovery" not in kinds and kinds[-1] == "gave_up", kinds
    gave_up = events[-1]
    assert gave_up["reason"] == ("gave up: the run's container verlctl-test-engine-gone is engine unreachable: the "
                                 f"training cannot continue there; checkpoints are kept in {runs.ckpt}"), gave_up
    st = record.read_status()
    assert st is not None and st["phase"] == "failed" and st["reason"] == gave_up["reason"], st
    assert said[0].startswith(f"verlctl watch: watching run {record.run_id}: process group {record.pgid} (attempt 1) "
                              "in container verlctl-test-engine-gone, log "), said
    assert f"verlctl watch: {gave_up['reason']}" in said, said


def test_the_first_step_after_a_resume_shows_its_metrics_in_the_status(runs: HostRuns, tmp_path: Path) -> None:
    """A resumed attempt: the step line of the first step past the checkpoint (the one that says the resume
    advanced) is in `status` too: its score and response length, as for every other step (they were dropped)."""
    ckpt = str(runs.ckpt / "global_step_3")
    gate = tmp_path / "go"
    body = _script("Total training steps: 9", f"Load from checkpoint folder: {ckpt}", _progress(3, 9),
                   "step:4 - critic/score/mean:0.500 - response_length/mean:77.000 - training/global_step:4",
                   _progress(4, 9), ("gate", str(gate)), ("sh", FINISHED))
    record = runs.start([], tail=body, resumed_from=ckpt)
    proc = _watch(runs, record)
    try:
        _until("the resume advanced", lambda: any(e["event"] == "resume_advanced" for e in runs.events(record)), proc)
        _until("step 4 in the status", _status_with(record, step=4), proc)
        st = _until("the first step's metrics", _status_with(record, step=4, score=0.5), proc, timeout=60)
        assert st["response_length"] == 77.0, st
    finally:
        gate.touch()
    code, out = _end(proc)
    assert code == 0, out


def test_a_worker_node_that_cannot_be_reached_is_said_once_and_the_head_decides(runs: HostRuns) -> None:
    """A multi-node run whose worker node does not answer (its name does not resolve: ssh fails at once): the
    start line counts the node, one warning and one `node_unreachable` event name it (not one per scan), and
    the head's training, which finishes, decides the outcome."""
    from verlctl.runtime.records import NodeHandle

    lines = ["Total training steps: 3"] + [_progress(n, 3) for n in range(1, 4)]
    record = runs.start(lines, pause=0.5)
    record.workers = [NodeHandle(address="worker.invalid", container_name="verlctl-test-worker")]
    record.save()
    code, out = _end(_watch(runs, record))
    assert code == 0, out
    assert ", 1 worker node(s), log " in out.splitlines()[0], out
    said = [ln for ln in out.splitlines() if ln.startswith("verlctl watch: worker node worker.invalid: ")]
    assert len(said) == 1 and "unreachable: cannot reach the Docker engine of worker.invalid over ssh" in said[0], out
    down = [e for e in runs.events(record) if e["event"].startswith("node_")]
    assert [(e["event"], e["node"]) for e in down] == [("node_unreachable", "worker.invalid")], down
    assert said[0] == f"verlctl watch: worker node worker.invalid: {down[0]['reason']}", (said, down)
    assert runs.events(record)[-1]["event"] == "finished"
