"""`list` says what state each run is in, and why; `status` after a recovery says what recovery did instead of
repeating the error it dealt with (issue 24: N7, U15, U17, F5; U3/N8: a log on the host is read when the
container is gone). Host-runtime records with real event files, real host logs and a real process group."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import CliResult, clean_env, run_cli

RUN_OK = "20261201-080000-finished-a1b2"


def cli(state: Path, *args: str, columns: int = 200) -> CliResult:
    return run_cli(*args, env=clean_env(VERLCTL_STATE_DIR=str(state), COLUMNS=str(columns)))


def write_run(state: Path, run_id: str, log: Path | None = None, events: list[dict[str, Any]] | None = None,
              status: dict[str, Any] | None = None, attempts: int = 1, runtime: str = "host",
              **over: object) -> Path:
    d = state / "runs" / run_id
    d.mkdir(parents=True)
    offsets = over.pop("offsets", None)
    doc: dict[str, Any] = {
        "run_id": run_id, "created_at": time.time() - 600, "runtime": runtime, "workdir": "/verl",
        "scripts_dir": f"/verl/.verlctl/runs/{run_id}",
        "run_log": str(log) if log else f"/nonexistent/verlctl-{run_id}.log",
        "train_log": "", "checkpoints": "", "experiment": "exp", "verl_version": "0.7.0",
        "container_name": "verl-x" if runtime == "docker" else None,
        "pgid": 999_999 if attempts else None,
        "attempts": [{"number": i + 1, "pgid": 999_999, "started_at": time.time() - 500, "marker": f"m{i}",
                      "leader_start": 1, "log_offset": (offsets or [0] * attempts)[i],
                      "reason": "launch" if i == 0 else "device_oom"} for i in range(attempts)],
        **over,
    }
    (d / "run.json").write_text(json.dumps(doc), encoding="utf-8")
    if events is not None:
        (d / "events.jsonl").write_text("".join(json.dumps({"time": time.time() - 60, "run": run_id, **e}) + "\n"
                                                for e in events), encoding="utf-8")
    if status is not None:
        (d / "status.json").write_text(json.dumps(status), encoding="utf-8")
    return d


def started(n: int) -> dict[str, Any]:
    return {"event": "started", "pgid": 999_999, "attempt": n}


OOM_LINE = "torch_npu.npu.OutOfMemoryError: NPU out of memory. Tried to allocate 2.00 GiB\n"


def recovered_run(state: Path, tmp_path: Path) -> str:
    """Attempt 1: OOM at step 3; the watcher added offload; attempt 2 resumed and finished."""
    run_id = "20261201-081500-recovered-c3d4"
    log = tmp_path / "logs" / f"verlctl-{run_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    first = "".join(f"step:{i} - critic/score/mean:0.{i}\n" for i in (1, 2, 3)) + OOM_LINE
    first += "[verlctl 08:20:00] start_verl.sh exits with status 1\n"
    second = "".join(f"step:{i} - critic/score/mean:0.{i}\n" for i in (3, 4, 5, 6)) + "[verlctl 08:30:00] training finished\n"
    log.write_text(first + second, encoding="utf-8")
    write_run(state, run_id, log, attempts=2, offsets=[0, len(first.encode())], events=[
        {"event": "launch"}, started(1),
        {"event": "alert", "category": "device_oom", "message": "NPU out of memory", "hint": "enable the "
         "`offload` feature", "attempt": 1, "step": 3},
        {"event": "recovery", "category": "device_oom", "reason": "device_oom: restart with offload",
         "add_feature": "offload", "resumed_from": "/ckpt/global_step_2"},
        started(2), {"event": "finished", "attempt": 2}],
        status={"attempt": 2, "phase": "finished", "step": 6, "total": 6})
    return run_id


def test_status_after_a_recovery_says_what_recovery_did_not_the_old_error(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = recovered_run(state, tmp_path)
    res = cli(state, "status", run_id)
    assert res.code == 0, res.err
    # the OOM was in step 4 (step 3 was the last to finish); attempt 2 finished: recovered
    assert "recovered: attempt 2 added offload after out of memory in step 4" in res.out, res.out
    assert "last error" not in res.out and "enable the" not in res.out, res.out
    assert re.search(r": finished \(step 6/6, 2 attempts\)", res.out), res.out
    assert "/None" not in res.out  # a total the log does not give is not printed
    doc = json.loads(cli(state, "status", run_id, "--json").out)
    assert doc["state"] == "finished" and doc["last_error"] is None, doc
    assert doc["recovered"] == ["attempt 2 added offload after out of memory in step 4, resuming from global_step_2"]
    assert [r["outcome"] for r in doc["restarts"]] == ["recovered"]
    assert doc["log_read_from"] == "host" and doc["progress"]["step"] == 6


def test_status_during_the_next_attempt_shows_no_error_of_the_previous_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = "20261201-082000-restarting-e5f6"
    log = tmp_path / f"verlctl-{run_id}.log"
    first = "step:1 - x:1\nstep:2 - x:1\n" + OOM_LINE
    log.write_text(first + "[verlctl 08:21:00] starting Ray head\n", encoding="utf-8")
    write_run(state, run_id, log, attempts=2, offsets=[0, len(first.encode())], events=[
        started(1), {"event": "alert", "category": "device_oom", "message": "NPU out of memory", "step": 2},
        {"event": "recovery", "category": "device_oom", "add_feature": "offload"}, started(2)])
    doc = json.loads(cli(state, "status", run_id, "--json").out)
    # attempt 2 has not got past the failure: restarted, not recovered
    assert doc["last_error"] is None and doc["recovered"] == [], doc
    assert doc["restarts"] == [{"attempt": 2, "outcome": "running",
                                "words": "attempt 2 added offload after out of memory in step 3",
                                "line": "restarted: attempt 2 added offload after out of memory in step 3 "
                                        "(not past the failure yet)"}], doc
    # Nothing of attempt 2 runs (its recorded group is not alive), and its log says neither end.
    assert doc["state"] == "failed" and "neither" in doc["state_why"], doc


def test_a_launch_that_failed_before_any_attempt_says_never_started_and_why(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = "20261201-081238-caps-a0a0"
    write_run(state, run_id, attempts=0, events=[
        {"event": "launch"}, {"event": "launch_failed", "error": "cannot start container verl-x: unable to apply "
                              "caps: operation not permitted"}])
    doc = json.loads(cli(state, "status", run_id, "--json").out)
    assert doc["state"] == "never started" and "unable to apply caps" in doc["state_why"], doc
    assert doc["last_error"]["category"] == "launch_failed" and "caps" in doc["last_error"]["message"]
    res = cli(state, "status", run_id)
    assert "never started (the launch failed: cannot start container" in res.out, res.out
    assert "process group None" not in res.out


@pytest.fixture
def group(tmp_path: Path):  # type: ignore[no-untyped-def]
    procs: list[subprocess.Popen[bytes]] = []

    def start(marker: str) -> tuple[int, int]:
        from verlctl.runtime.procscan import leader_start

        p = subprocess.Popen(["sleep", "600"], start_new_session=True, env={**os.environ, "VERLCTL_ATTEMPT": marker},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        deadline = time.monotonic() + 30
        start_ticks = leader_start(p.pid)
        while start_ticks is None and time.monotonic() < deadline:
            time.sleep(0.05)
            start_ticks = leader_start(p.pid)
        assert start_ticks is not None
        return p.pid, start_ticks

    yield start
    for p in procs:
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_list_has_a_state_column_with_why_in_text_and_json(tmp_path: Path, group) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    recovered = recovered_run(state, tmp_path)
    # running: a real process group with the attempt's marker and start time (checked, not assumed)
    marker = "20261201-083000-running-b1b1.1.cafe"
    pid, ticks = group(marker)
    running = "20261201-083000-running-b1b1"
    d = write_run(state, running, events=[started(1)], status={"attempt": 1, "phase": "training", "step": 4,
                                                               "total": 12, "updated_at": time.time()})
    doc = json.loads((d / "run.json").read_text())
    doc["pgid"] = pid
    doc["attempts"][0].update(pgid=pid, marker=marker, leader_start=ticks)
    (d / "run.json").write_text(json.dumps(doc))
    failed = "20261201-083100-gaveup-c2c2"
    write_run(state, failed, events=[started(1), {"event": "gave_up", "category": "python_exception",
                                                  "reason": "gave up: python_exception: no automatic restart"}])
    stopped = "20261201-083200-stopped-d3d3"
    write_run(state, stopped, events=[started(1), {"event": "stopped", "pgid": 999_999}], stopped=True)
    finished_then_stopped = "20261201-083300-cleanup-e4e4"  # N9: stop of a finished run keeps "finished"
    write_run(state, finished_then_stopped, events=[started(1), {"event": "finished"}, {"event": "stopped"}],
              stopped=True)
    never = "20261201-083400-never-f5f5"
    write_run(state, never, attempts=0, events=[{"event": "launch"}, {"event": "launch_failed",
                                                                      "error": "image x is not present"}])
    exited_log = tmp_path / "exited.log"
    exited_log.write_text("Traceback ...\n[verlctl 09:00:00] start_verl.sh exits with status 2\n")
    exited = "20261201-083500-exited-a6a6"  # no watcher: the host log says how it ended
    write_run(state, exited, exited_log, events=[started(1)])
    res = cli(state, "list", "--json")
    assert res.code == 0, res.err
    states = {d["run_id"]: (d["state"], d["state_why"]) for d in json.loads(res.out)}
    assert states[recovered] == ("finished", "step 6/6, 2 attempts")
    assert states[running][0] == "running" and "attempt 1, step 4/12" in states[running][1]
    assert states[failed] == ("failed", "the watcher gave up: python_exception: no automatic restart")
    assert states[stopped][0] == "stopped" and "verlctl stop" in states[stopped][1]
    assert states[finished_then_stopped][0] == "finished"
    assert states[never] == ("never started", "the launch failed: image x is not present")
    assert states[exited] == ("failed", "start_verl.sh exited with status 2")
    text = cli(state, "list", columns=200)
    assert text.code == 0, text.err
    assert "STATE" in text.out and "why" in text.out
    for run_id, (st, _why) in states.items():
        line = next(ln for ln in text.out.splitlines() if run_id in ln)
        assert f" {st} " in line, (run_id, line)
    narrow = cli(state, "list", columns=80)
    assert "NEVER STARTED: the launch failed: image x is not present" in narrow.out, narrow.out
    assert all(len(ln) <= 80 for ln in narrow.out.splitlines()), narrow.out


def test_status_of_a_run_whose_target_is_unchecked_says_unknown_and_how_to_check(tmp_path: Path) -> None:
    from verlctl.orchestrator import runstate
    from verlctl.runtime.records import RunRecord

    rec = RunRecord(run_id="r1", created_at=0, runtime="docker", workdir="/verl", scripts_dir="/verl/x",
                    run_log="/verl/logs/x.log", train_log="", checkpoints="", experiment="e", verl_version="0.7.0",
                    pgid=5, attempts=[{"number": 1, "pgid": 5, "started_at": 0}])
    st = runstate.decide(rec, [started(1)], None, None)
    assert (st.state, st.decided_by) == ("unknown", "none") and "verlctl status r1" in st.why
    assert runstate.host_log_path(rec) is None  # inside the container's work dir: not a host file
    assert runstate.host_log_path(rec.model_copy(update={"run_log": "/data/logs/x.log"})) == "/data/logs/x.log"
    assert runstate.host_log_path(rec.model_copy(update={"run_log": "/data/logs/x.log",
                                                          "head_address": "10.0.0.2"})) is None


def test_the_host_log_is_never_read_through_a_planted_symlink(tmp_path: Path) -> None:
    from verlctl.orchestrator import runstate
    from verlctl.runtime.records import RunRecord

    secret = tmp_path / "secret"
    secret.write_text("[verlctl] training finished\n")
    link = tmp_path / "run.log"
    link.symlink_to(secret)
    rec = RunRecord(run_id="r1", created_at=0, runtime="host", workdir="/verl", scripts_dir="/x",
                    run_log=str(link), train_log="", checkpoints="", experiment="e", verl_version="0.7.0")
    assert runstate.read_host_log(rec) is None
    link.unlink()
    link.write_text("a\nb\n" + "c" * 100 + "\n")
    assert runstate.read_host_log(rec, 0, 50) == ""  # the cut first line is dropped
    assert runstate.read_host_log(rec, 2) == "b\n" + "c" * 100 + "\n"


def test_status_without_a_reachable_engine_still_reads_the_record_and_the_host_log(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = "20261201-084000-noengine-a7a7"
    log = tmp_path / "logs" / f"verlctl-{run_id}.log"
    log.parent.mkdir()
    log.write_text("step:1 - x:1\n[verlctl 08:50:00] training finished\n")
    write_run(state, run_id, log, runtime="docker", events=[started(1)])
    res = run_cli("status", run_id, "--json", env=clean_env(VERLCTL_STATE_DIR=str(state),
                                                           DOCKER_HOST="unix:///nonexistent/docker.sock"))
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["container"]["state"].startswith("unreachable") and doc["state"] == "finished", doc
