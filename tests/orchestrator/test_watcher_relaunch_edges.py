"""The watcher as `verlctl watch` shows it, mutation round 8 (#25): the paths of orchestrator/watcher.py that no test ran
(coverage of the watcher's test set): a run stopped while its next attempt was prepared, a `--notify-cmd` that
hangs, events the run record cannot take, device memory that stays busy (NPU and GPU device tools), a full disk
whose `df` cannot answer.

The training step and the device tools are TEST DOUBLES (a bash script printing verl's log lines, as in
tests/orchestrator/test_recovery_host.py; real `npu-smi` / `nvidia-smi` captures printed by `cat`): verl's training step and
the accelerator cannot exist here. The watcher, the launch, the records, the process groups, the record lock and
`df` are real."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from host_launch_support import scanned_after
from test_recovery_host import KEY, OOM_LINE, HostRuns, _progress, host_runs_in
from test_watcher_live_status_and_stalls import (
    TRAINER,
    _end,
    _script,
    _until,
    _watch_attempt_beside,
    _watcher,
)
from test_watcher_restarts import HCCL_TIMEOUT
from verlctl.runtime.executor import HostExecutor
from verlctl.runtime.records import load_run, record_lock

from conftest import FIXTURES


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostRuns]:
    yield from host_runs_in(tmp_path, monkeypatch)


def test_a_run_stopped_while_its_next_attempt_is_prepared_is_not_relaunched_and_the_watch_ends_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A device OOM: the watcher tears the attempt down and prepares the next one, then takes the record's lock
    to start it. `verlctl stop` marked the run meanwhile (it holds the same lock while it marks): the watcher
    starts nothing, says why, records `watch_stopped` and exits 0 (a user's stop is no failure of the watch)."""
    from host_launch_support import holds_record_lock, host_launch, launch_watch_and_scan

    env, sets = host_launch(tmp_path, f"OOM_LINE = {OOM_LINE!r}\n" + TRAINER)
    gate = tmp_path / "go"
    proc = None
    run_id = ""
    try:
        run_id, proc, record = launch_watch_and_scan(env, sets, monkeypatch)
        with record_lock(record):
            gate.touch()  # attempt 1 runs out of device memory
            _until("the recovery", lambda: any(e["event"] == "recovery" for e in record.events()), proc, timeout=180)
            _until("the watcher waiting on the record's lock", lambda: holds_record_lock(proc.pid), proc)
            marked = load_run(run_id)  # what `stop` does under the lock, before it signals anything
            marked.stopped = True
            marked.save()
        code, out = _end(proc, timeout=120)
    finally:
        gate.touch()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for a in (load_run(run_id).attempts if run_id else []):
            if a.ref is not None and HostExecutor().group_alive(a.ref):
                HostExecutor().stop_group(a.ref, grace_s=2)
    events = load_run(run_id).events()
    kinds = [e["event"] for e in events]
    assert code == 0, (out, kinds)
    why = "the run was stopped while the next attempt was prepared: not relaunched"
    assert f"verlctl watch: {why}" in out.splitlines(), out
    assert events[-1]["event"] == "watch_stopped" and events[-1]["detail"] == why, events[-1]
    assert [a.number for a in load_run(run_id).attempts] == [1], kinds
    assert kinds.count("started") == 1 and "gave_up" not in kinds, kinds


def test_a_notify_command_that_hangs_is_cut_off_and_said_and_the_event_is_kept(
        runs: HostRuns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--notify-cmd` gets NOTIFY_TIMEOUT_S per event (shortened here): one that hangs is killed, one line says
    so, the event is in the record all the same; events the user is not told of never start the command."""
    from verlctl.orchestrator import watcher as watcher_module

    monkeypatch.setattr(watcher_module, "NOTIFY_TIMEOUT_S", 0.5)
    started = tmp_path / "started"
    record = runs.start(["Total training steps: 5"])
    said: list[str] = []
    w = _watcher(runs, record, said, notify_cmd=f"echo >> '{started}'; exec sleep 30")
    t0 = time.monotonic()
    w.emit("checkpoint_saved", step=1)
    assert not started.exists() and said == []
    ev = w.emit("alert", category="device_oom", line=3)
    assert time.monotonic() - t0 < 20
    assert said == ["verlctl watch: --notify-cmd took longer than 0.5 s for the alert event: killed; the watch goes "
                    "on"], said
    assert started.read_text() == "\n"
    kept = [e for e in runs.events(record) if e["event"] == "alert"]
    assert kept == [ev] and ev["category"] == "device_oom" and ev["line"] == 3, kept


def test_a_notify_command_that_fails_is_said_with_its_status(runs: HostRuns) -> None:
    record = runs.start(["Total training steps: 5"])
    said: list[str] = []
    w = _watcher(runs, record, said, notify_cmd="cat >/dev/null; exit 3")
    w.emit("recovery", reason="r")
    w.emit("notice", message="not told")
    w = _watcher(runs, record, said, notify_cmd="true")
    w.emit("gave_up", reason="r")
    assert said == ["verlctl watch: --notify-cmd exited with status 3 for the recovery event"], said


def test_events_the_record_cannot_take_are_warned_once_and_still_reach_the_notify_command(
        runs: HostRuns, tmp_path: Path) -> None:
    """The run's events file cannot be written (here a directory stands at its name): one warning naming the
    record, the watch goes on, and the user's notify command still gets each event it is told of, whole."""
    heard = tmp_path / "heard.jsonl"
    record = runs.start(["Total training steps: 5"])
    events_file = record.dir / "events.jsonl"
    events_file.unlink()
    events_file.mkdir()
    said: list[str] = []
    w = _watcher(runs, record, said, notify_cmd=f"cat >> '{heard}'; echo >> '{heard}'")
    before = time.time()
    first = w.emit("alert", category="device_oom", line=7)
    second = w.emit("stalled", reason="no progress")
    assert (first["event"], first["run"], first["category"], first["line"]) == ("alert", record.run_id, "device_oom", 7)
    assert second["event"] == "stalled" and second["reason"] == "no progress" and first["time"] >= before
    warned = [s for s in said if "cannot be written" in s]
    assert len(warned) == 1 and warned[0].startswith(f"verlctl watch: warning: the run record {record.dir} cannot "
                                                     "be written ("), said
    assert warned[0].endswith("writing it again from memory; the watch goes on"), said
    told = [json.loads(ln) for ln in heard.read_text().splitlines() if ln.strip()]
    assert told == [first, second], told
    assert (record.dir / "run.json").exists()


def _device_tool(tmp_path: Path, name: str, capture: str) -> Path:
    """TEST DOUBLE of the device tool: prints a real capture."""
    bindir = tmp_path / f"{name}-bin"
    bindir.mkdir(exist_ok=True)
    text = bindir / "capture.txt"
    text.write_text((FIXTURES / name / capture).read_text())
    tool = bindir / name
    tool.write_text(f"#!/bin/sh\nexec cat '{text}'\n")
    tool.chmod(0o755)
    return bindir


@pytest.mark.parametrize(("device", "capture", "devices", "released"), [
    ("npu", "info-910B1-8card-23.0.rc2.b090-training-busy-elided.txt", [0, 1, 2, 3], False),
    ("npu", "info-910B1-8card-23.0.rc2.b090-training-busy-elided.txt", [4], True),  # busy: 0, 1, 7 (elided)
    ("npu", "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt", [0, 1, 2, 3], True),
    ("gpu", "default-580-1gpu-h200-busy-1proc-verlctl-device-check.txt", [0], False),
    ("gpu", "default-580-1gpu-h200-idle-verlctl-device-check.txt", [0], True),
])
def test_the_relaunch_waits_for_the_run_s_own_devices_to_be_released(
        runs: HostRuns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str, capture: str,
        devices: list[int], released: bool) -> None:
    """After a device OOM the teardown asks the device tool (`npu-smi info`, `nvidia-smi`) until no process holds
    one of the run's devices: `memory_released`; a process on another device does not count. Still busy after
    recovery.memory_release_timeout_s: one warning and `memory_release_timeout`, and the relaunch goes on (here
    it cannot: a cloud run whose key is gone, so the watch gives up after the teardown)."""
    tool = _device_tool(tmp_path, "npu-smi" if device == "npu" else "nvidia-smi", capture)
    monkeypatch.setenv("PATH", f"{tool}:{os.environ['PATH']}")
    lines = ["Total training steps: 5", _progress(1, 5), "Traceback (most recent call last):", OOM_LINE]
    tail = 'echo "[verlctl 10:00:05] start_verl.sh exits with status 1"; exit 1'
    record = runs.start(lines, tail=tail, pause=0.1, cloud=True, env_file="SWANLAB_MODE=cloud\n",
                        top={"device": device, "cluster": {"devices": devices},
                             "recovery": {"memory_release_timeout_s": 3}},
                        train={"tensor_parallel": 1})
    said: list[str] = []
    w = _watcher(runs, record, said)
    t0 = time.monotonic()
    assert w.run() == 1
    took = time.monotonic() - t0
    kinds = [e["event"] for e in runs.events(record)]
    warning = "verlctl watch: warning: device memory still in use after the wait; relaunching anyway"
    if released:
        assert "memory_released" in kinds and "memory_release_timeout" not in kinds, kinds
        assert warning not in said, said
    else:
        assert "memory_release_timeout" in kinds and "memory_released" not in kinds, kinds
        assert said.count(warning) == 1, said
        assert took >= 3, took  # it waited the whole timeout, asking every MEMORY_POLL_S
    assert kinds.index("memory_release_timeout" if not released else "memory_released") < kinds.index("gave_up")
    gave_up = next(e for e in runs.events(record) if e["event"] == "gave_up")
    assert gave_up["reason"].startswith("gave up: cannot relaunch: SwanLab cloud mode needs an API key"), gave_up
    assert KEY not in "\n".join(said)


def test_a_ray_head_daemon_missing_from_one_scan_is_only_a_suspect() -> None:
    """The head's daemons as the liveness scans see them: one scan without a daemon (a scan that raced the process
    table under load) is a suspect, not a death; seen again, all is well; missing from two scans in a row, it
    ended. A daemon never seen yet (Ray still starting) is nothing."""
    from verlctl.orchestrator.watcher import HeadDaemons

    head = HeadDaemons()
    assert head.update({}) is None  # before Ray started
    assert head.update({"ray": {"gcs_server": 11, "raylet": 12}}) is None
    assert head.update({"ray": {"gcs_server": 11}}) == "suspect"
    assert head.update({"ray": {"gcs_server": 11, "raylet": 12}}) is None
    assert head.update({"ray": {"gcs_server": 11}}) == "suspect"
    assert head.update({"ray": {"gcs_server": 11}}) == "raylet (pid 12) ended"


def test_a_watch_started_after_a_relaunch_names_the_current_attempt(runs: HostRuns) -> None:
    """`verlctl watch` of a run already relaunched (its watcher was stopped during attempt 2) follows attempt 2:
    its first line names that attempt's process group, not the first one's (seed 9713's `attempts[-1]` -> `[0]`
    survivor)."""
    from verlctl.runtime.records import Attempt

    record = runs.start(["Total training steps: 5"])
    first = record.attempts[0]
    ref = HostExecutor().start_group(["sleep", "60"], str(runs.root / "logs" / "attempt-2.log"),
                                     f"{record.run_id}/2/{os.urandom(8).hex()}")
    try:
        assert ref.pgid != first.pgid
        record.attempts.append(Attempt(number=2, pgid=ref.pgid, started_at=time.time(), reason="device_oom",
                                       marker=ref.marker, leader_start=ref.start))
        record.pgid = ref.pgid
        record.save()
        line = _watcher(runs, load_run(record.run_id), []).started_line()
        assert line.startswith(f"verlctl watch: watching run {record.run_id}: process group {ref.pgid} (attempt 2) "
                               "in this host, log "), line
    finally:
        HostExecutor().stop_group(ref, grace_s=1)


@pytest.mark.parametrize(("tail", "detail"), [
    ('echo "[verlctl 10:00:09] start_verl.sh exits with status 3"; exit 3', "ended (exit status 3)"),
    ("exit 1", "ended"),  # no status line: nothing is made up
])
def test_an_attempt_whose_group_ended_says_so_with_its_exit_status(runs: HostRuns, tail: str, detail: str) -> None:
    """The failed attempt's detail names the group and, when start_verl.sh said it, its exit status (seed
    9713's survivor: the status was shown only when there was none)."""
    record = runs.start(["Total training steps: 5", _progress(0, 5)], tail=tail, pause=0.1)
    outcome = _watcher(runs, record, []).watch_attempt()
    assert outcome.kind == "failed" and outcome.detail == f"process group {record.pgid} {detail}", outcome



def test_a_sigkill_after_another_error_is_a_kill_that_names_that_error(runs: HostRuns) -> None:
    """Exit 137 after an HCCL timeout in the log: the root cause is the SIGKILL (who sent it is the question),
    and the HCCL error is named beside it, not taken as the cause (seed 9713's survivor: only a device OOM
    root was turned into the kill)."""
    record = runs.start(["Total training steps: 5", _progress(0, 5), "Traceback (most recent call last):",
                         HCCL_TIMEOUT],
                        tail='echo "[verlctl 10:00:09] start_verl.sh exits with status 137"; exit 137', pause=0.1)
    outcome = _watcher(runs, record, []).watch_attempt()
    assert outcome.kind == "failed" and outcome.finding is not None, outcome
    assert outcome.finding.category == "killed", outcome.finding
    assert outcome.finding.excerpt == "start_verl.sh exits with status 137", outcome.finding
    assert "(the log also shows hccl_timeout at line 4)" in outcome.finding.message, outcome.finding


class _StopLandsDuringTheScan(HostExecutor):
    """The real host executor. When its scan finds the attempt's group ended, `verlctl stop`'s first step (the
    record marked stopped, inspect.mark_stopped) lands before the watcher reads the record again: the two
    race in use (a stop typed just as the training ends); here the order is made certain."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def verdict(self, ref: object) -> dict[str, object]:
        import io

        from rich.console import Console

        from verlctl.orchestrator.inspect import mark_stopped

        verdict = super().verdict(ref)  # type: ignore[arg-type]
        if not verdict["owned"] and not load_run(self.run_id).stopped:
            mark_stopped(self.run_id, Console(file=io.StringIO()))
        return verdict


def test_a_stop_that_lands_as_the_group_is_seen_ended_is_a_stop_not_a_failure(
        runs: HostRuns, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed attempt is relaunched; one the user stopped is not: a stop marked during the scan that confirms
    the group's end makes the attempt "stopped" (seed 9713's survivor: `return AttemptOutcome("stopped")` ->
    `return None`). The end is confirmed on the first scan that sees it (the watcher's 0.5 s wait for the
    log's last lines set to 0): that scan is the one the stop lands in, not an earlier one."""
    import verlctl.orchestrator.watcher as watcher_module

    monkeypatch.setattr(watcher_module, "DEAD_CONFIRM_S", 0.0)
    from verlctl.orchestrator.runs import run_for
    from verlctl.orchestrator.watcher import Watcher
    from verlctl.spec.resolve import load_spec

    record = runs.start(["Total training steps: 5", _progress(0, 5)], tail="exit 1", pause=0.1)
    watcher = Watcher(record, _StopLandsDuringTheScan(record.run_id),
                      load_spec(record.dir / "spec.resolved.yaml", use_env=False), say=[].append,
                      backend=run_for(record))
    outcome = watcher.watch_attempt()
    assert outcome is not None and outcome.kind == "stopped", outcome
    assert load_run(record.run_id).stopped


def test_an_early_preparation_for_another_recovery_than_the_final_one_is_not_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A device OOM is seen first: the watcher prepares the OOM ladder's next attempt (offload added) while the
    attempt ends. Then the log says the NPUs are still held by another process (EJ0001, ranked before the
    OOM as the root cause): the recovery is a plain restart (`recovery.restart_on: device_held`), and the
    attempt started is the plain restart's, not the early preparation's with offload (seed 9713's survivor:
    the early preparation was used whenever there was one). The alert of the OOM, and a scan after it (two
    status writes), show that the watcher's scan has started the preparation before the EJ0001 line is printed."""
    from test_watcher_restarts import _launch_and_watch

    def after_the_oom_was_prepared_for(run_id: str, proc: Any) -> None:
        record = load_run(run_id)
        alert = _until("the OOM's alert", lambda: next((e for e in record.events() if e["event"] == "alert"), None),
                       proc)
        assert alert["category"] == "device_oom", alert
        # A scan of the watch loop after the alert (the one mechanism every "the watcher has scanned" wait uses).
        _until("a scan after the alert", scanned_after(record, alert["time"], 2.5), proc)

    held = ("(TaskRunner pid=467613) EJ0001: [PID: 468348] 2025-04-24-16:14:56.975.866 Failed to initialize the "
            "HCCP process. Reason: Maybe the last training process is running.")
    code, out, record, left = _launch_and_watch(
        tmp_path, monkeypatch, {1: "OOM"}, linger=0, then={1: (held, after_the_oom_was_prepared_for)},
        **{"recovery.restart_on": "device_held", "recovery.max_restarts": 1})
    events = record.events()
    kinds = [e["event"] for e in events]
    assert code == 0, (out, kinds)
    recovery = next(e for e in events if e["event"] == "recovery")
    assert recovery["category"] == "device_held" and recovery["add_feature"] is None, recovery
    assert recovery["prepared_early"] is False and recovery["features_added"] == [], recovery
    assert [a.number for a in record.attempts] == [1, 2] and left == [], (kinds, left)
    assert record.attempts[1].features == record.attempts[0].features, record.attempts
    first, second = (json.loads((tmp_path / "attempts" / f"attempt-{n}").read_text()) for n in (1, 2))
    assert "trainer.resume_mode=auto" in first and second == first, (first, second)  # the same command again
    assert kinds[-1] == "finished", kinds


def test_a_head_whose_group_cannot_be_stopped_is_said_and_the_run_still_gives_up(runs: HostRuns) -> None:
    """The head's `ray start` said its daemons exited: the watcher alerts and stops what is left of the attempt.
    Here the stop is refused: `verlctl watch` was started from inside the attempt (it carries the attempt's
    marker, so it is one of the attempt's processes, and procscan.deliver never signals itself, so it refuses
    the whole set). The watcher says it could not stop the group, with why, and still ends the run (gave up,
    exit 1) instead of failing with a traceback."""
    from verlctl.runtime.procscan import MARKER_VAR

    from conftest import run_cli

    lines = ["Total training steps: 600", _progress(0, 600),
             "step:1 - actor/pg_loss:0.1 - training/global_step:1", _progress(1, 600),
             "2026-12-01 04:05:12,066\tERR scripts.py:1307 -- Some Ray subprocesses exited unexpectedly:",
             "2026-12-01 04:05:12,066\tERR scripts.py:87 -- gcs_server [exit code=-9]"]
    record = runs.start(lines, tail="sleep 120", pause=0.1)
    ref = record.attempts[-1].ref
    assert ref.marker
    try:
        res = run_cli("watch", record.run_id, env={**runs.env(), MARKER_VAR: ref.marker}, timeout=180)
        alive = HostExecutor().group_alive(ref)
    finally:
        HostExecutor().stop_group(ref, grace_s=2)
    assert res.code == 1, res.out + res.err
    out = res.out + res.err
    assert f"verlctl watch: stopping what is left of attempt 1 (process group {ref.pgid})" in out, out
    assert (f"verlctl watch: warning: could not stop process group {ref}: host: process group {ref.pgid} was not "
            "signalled: pid ") in out and "is never signalled" in out, out
    assert "Traceback" not in out, out
    assert alive, "the refused stop signalled nothing: the attempt still ran"
    gave_up = runs.events(record)[-1]
    assert gave_up["event"] == "gave_up" and gave_up["category"] == "ray_gcs_unreachable", gave_up


def test_after_a_device_oom_the_attempt_is_over_when_its_training_ends_not_its_last_process(
        runs: HostRuns, tmp_path: Path) -> None:
    """A device OOM, then the training script exits while the attempt's group lives on (start_verl.sh stopping
    its Ray takes seconds; here a process that stays): the attempt is over when the training ends, so that its
    teardown and relaunch need not wait for the rest (seed 9846's survivor: without it the watcher waited out
    `error_grace_s` and called the attempt "still hanging")."""
    gate = tmp_path / "go"
    train = tmp_path / "run_training.sh"  # the training script's name is what the scan looks for
    train.write_text(_script("Total training steps: 5", _progress(1, 5), ("gate", str(gate)),
                             "Traceback (most recent call last):", OOM_LINE, ("sh", "exit 1")) + "\n",
                     encoding="utf-8")
    body = _script(("sh", "sleep 900 &"), ("sh", f"bash {json.dumps(str(train))}"), ("sh", "wait"))
    record = runs.start([], tail=body)
    ref = record.attempts[-1].ref
    ex = HostExecutor()
    watcher = _watcher(runs, record, [], liveness_every_s=0.2, error_grace_s=30.0)

    def open_once_scanned() -> None:
        _until("the training script", lambda: "run_training.sh" in (ex.verdict(ref).get("scripts") or []))
        _until("a scan of it", scanned_after(record, time.time(), 0.2))

    try:
        outcome = _watch_attempt_beside(watcher, open_once_scanned, gate)
        alive = ex.group_alive(ref)
    finally:
        ex.stop_group(ref, grace_s=2)
    assert outcome.kind == "failed", outcome
    assert outcome.finding is not None and outcome.finding.category == "device_oom", outcome
    assert outcome.detail == f"the training of process group {ref.pgid} ended" and outcome.group_alive, outcome
    assert alive  # the process left in the group is the teardown's to stop, not a reason to wait
