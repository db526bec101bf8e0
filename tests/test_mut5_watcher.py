"""The watcher's own behaviour on the host runtime, as `verlctl watch` shows it to a user (turn-5 mutation
work, #25): the live `status.json` while a run starts and trains, the stall limits, `--notify-cmd`, the
checkpoint and resume events, the resumed run that had nothing left to train, an OOM that leaves the job
hanging, a run log deleted under the watcher.

The training is a TEST DOUBLE, as in tests/test_recovery_host.py: a bash script printing verl's log lines
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

from test_recovery_host import OOM_LINE, HostRuns, host_runs_in
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
    told = [json.loads(ln) for ln in heard.read_text().splitlines() if ln.strip()]
    assert [t["event"] for t in told] == ["stalled", "gave_up"], told
    assert told[0]["reason"] == stalled["reason"] and told[0]["run"] == record.run_id, told
    st = record.read_status()
    assert st is not None and st["phase"] == "failed" and st["reason"] == gave_up["reason"], st


def test_a_training_that_stops_advancing_is_stalled_by_its_step_time_not_the_start_up_limit(
        runs: HostRuns, tmp_path: Path) -> None:
    """Once steps run, the limit is max(stall_min_s, stall_step_factor × the median step time): here 1 s, far
    below the start-up limit of 20 s."""
    gate = tmp_path / "never"
    lines: list[str | tuple[str, str]] = ["Total training steps: 9"]
    for n in range(1, 4):
        lines += [_progress(n, 9, rate="0.20s/it"), ("sh", "sleep 0.2")]
    body = _script(*lines, ("gate", str(gate)), ("sh", FINISHED))
    record = runs.start([], tail=body,
                        top={"recovery": {"stall_startup_s": 20, "stall_min_s": 1, "stall_step_factor": 1.5}})
    proc = _watch(runs, record)
    try:
        code, out = _end(proc)
    finally:
        gate.touch()
    assert code == 1, out
    m = re.search(r"stalled: no progress for (\d+)s during training \(limit (\d+)s\)", out)
    assert m, out
    idle, limit = int(m.group(1)), int(m.group(2))
    assert 1 <= limit < 20 and idle >= limit, out


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
    assert f"attempt 1 resumed from {ckpt} and exited 0 having trained 0 steps {seen}:" in failed["reason"], failed


def _watcher(runs: HostRuns, record: RunRecord, said: list[str], **kw: Any) -> Any:
    from verlctl.backends import backend_for
    from verlctl.ops.watcher import Watcher
    from verlctl.spec.resolve import load_spec

    return Watcher(record, HostExecutor(), load_spec(record.dir / "spec.resolved.yaml", use_env=False),
                   say=said.append, backend=backend_for(record), **kw)


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
    from verlctl.ops import watcher as watcher_module

    monkeypatch.setattr(watcher_module, "LOG_CHECK_EVERY_S", 0.2)
    gate = tmp_path / "go"
    body = _script("Total training steps: 5", _progress(1, 5), ("gate", str(gate)), ("sh", "sleep 2"),
                   ("sh", FAILED))
    record = runs.start([], tail=body)
    said: list[str] = []
    watcher = _watcher(runs, record, said, liveness_every_s=0.2)

    def remove_when_followed() -> None:
        try:
            _until("the watcher following step 1", _status_with(record, step=1), timeout=90)
            Path(record.run_log).unlink()
        finally:
            gate.touch()

    t = threading.Thread(target=remove_when_followed)
    t.start()
    try:
        outcome = watcher.watch_attempt()
    finally:
        t.join()
        gate.touch()
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
    attempt. Ray's daemons are real processes renamed with `exec -a` (as in tests/test_ownership.py)."""
    gate = tmp_path / "never"
    train = tmp_path / "run_training.sh"  # the training script's name is what the scan looks for
    train.write_text(_script("Total training steps: 50", _progress(1, 50), ("gate", str(gate)), ("sh", FAILED))
                     + "\n", encoding="utf-8")
    body = _script(("sh", "(exec -a gcs_server sleep 120) &"), ("sh", "(exec -a raylet sleep 120) &"),
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
            seen_at = time.time()
            # A status written 0.5 s after this means a liveness scan ran after it (scans come every 0.2 s).
            _until("a scan of the daemons", lambda: (record.read_status() or {}).get("updated_at", 0) > seen_at + 0.5,
                   timeout=90)
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
