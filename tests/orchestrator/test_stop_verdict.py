"""N9 (issue 22): `stop` of a run that had already ended keeps its verdict (finished, failed) in `status` and
`report`; a stop that ended a live run still says "stopped". Host runtime, real process groups."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import clean_env, run_cli


def host_run(tmp_path: Path, run_id: str, script: str) -> tuple[Path, object]:
    from verlctl.runtime.executor import HostExecutor
    from verlctl.runtime.records import Attempt, RunRecord

    state = tmp_path / "state"
    log = tmp_path / "logs" / f"verlctl-{run_id}.log"
    ref = HostExecutor().start_group(["bash", "-c", script], str(log), f"{run_id}/1/{os.urandom(8).hex()}")
    os.environ["VERLCTL_STATE_DIR"] = str(state)
    try:
        rec = RunRecord(run_id=run_id, created_at=time.time(), runtime="host", workdir=str(tmp_path),
                        scripts_dir=str(tmp_path / "s" / run_id), run_log=str(log), train_log="",
                        checkpoints=str(tmp_path / "ckpt"), experiment="exp", verl_version="0.7.0", pgid=ref.pgid,
                        attempts=[Attempt(number=1, pgid=ref.pgid, started_at=time.time(), marker=ref.marker,
                                          leader_start=ref.start)])
        rec.save()
    finally:
        del os.environ["VERLCTL_STATE_DIR"]
    return state, ref


def wait_ended(ref: object, timeout: float = 120) -> None:
    from verlctl.runtime.executor import HostExecutor

    ex = HostExecutor()
    deadline = time.monotonic() + timeout
    while ex.group_alive(ref):  # type: ignore[arg-type]
        assert time.monotonic() < deadline, "the group did not end"
        time.sleep(0.1)


def status(state: Path, run_id: str) -> dict:
    res = run_cli("status", run_id, "--json", env=clean_env(VERLCTL_STATE_DIR=str(state)))
    assert res.code == 0, res.err
    return json.loads(res.out)


@pytest.mark.parametrize(("script", "verdict"), [
    ("echo '[verlctl 10:00:00] training finished'", "finished"),
    ("echo 'boom'; echo '[verlctl 10:00:00] start_verl.sh exits with status 3'; exit 3", "failed"),
])
def test_stop_of_an_ended_run_keeps_its_verdict(tmp_path: Path, script: str, verdict: str) -> None:
    run_id = "20260101-000000-ended-aaaa"
    state, ref = host_run(tmp_path, run_id, script)
    wait_ended(ref)
    before = status(state, run_id)
    assert before["state"] == verdict
    env = clean_env(VERLCTL_STATE_DIR=str(state))
    res = run_cli("stop", run_id, env=env)
    assert res.code == 0, res.err
    assert "verdict" in res.out and "kept" in res.out, res.out
    after = status(state, run_id)
    assert (after["state"], after["state_why"]) == (verdict, before["state_why"])
    rep = tmp_path / "rep.html"
    assert run_cli("report", run_id, "-o", str(rep), env=env).code == 0
    assert ">stopped</span>" not in rep.read_text()


def test_stop_of_a_live_run_says_stopped(tmp_path: Path) -> None:
    run_id = "20260101-000000-live-aaaa"
    state, ref = host_run(tmp_path, run_id, "echo started; exec sleep 600")
    env = clean_env(VERLCTL_STATE_DIR=str(state))
    res = run_cli("stop", run_id, "--grace", "30", env=env)
    assert res.code == 0, res.err
    wait_ended(ref)
    assert status(state, run_id)["state"] == "stopped"
