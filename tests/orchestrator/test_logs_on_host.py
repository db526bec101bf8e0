"""N8/A10 (issue 22): `logs`, `status --plot` and `report` of a Docker run whose container is removed read the
run log on the host when it is a host file (paths.logs is bind-mounted at the same path); a run log deleted
under a started run is said to be gone (not "no log yet"), and the trainer's own log is shown instead."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

import pytest

from conftest import clean_env, run_cli

LINES = "".join(f"step:{n} - actor/pg_loss:0.{n} - critic/score/mean:0.{n} - training/global_step:{n}\n"
                for n in range(1, 6))


def _engine() -> None:
    try:
        import docker

        docker.from_env(timeout=30).ping()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no Docker engine answers: {exc}")


def write_record(state: Path, run_id: str, **fields: object) -> None:
    d = state / "runs" / run_id
    d.mkdir(parents=True)
    doc = {"run_id": run_id, "created_at": time.time(), "runtime": "docker", "workdir": "/verl",
           "scripts_dir": f"/verl/.verlctl/runs/{run_id}", "train_log": "", "checkpoints": "/c",
           "experiment": "exp", "verl_version": "0.7.0", "container_created": True,
           "attempts": [{"number": 1, "pgid": 4242, "started_at": time.time()}], "pgid": 4242, **fields}
    (d / "run.json").write_text(json.dumps(doc))


def test_logs_plot_and_report_of_a_removed_container_read_the_host_log(tmp_path: Path) -> None:
    _engine()
    run_id = f"20260101-000000-removed-{secrets.token_hex(2)}"
    log = tmp_path / "logs" / f"verlctl-{run_id}.log"
    log.parent.mkdir()
    log.write_text(LINES)
    state = tmp_path / "state"
    write_record(state, run_id, run_log=str(log), container_name=f"verlctl-test-no-such-{secrets.token_hex(4)}",
                 container_id=None)
    env = clean_env(VERLCTL_STATE_DIR=str(state))
    res = run_cli("logs", run_id, env=env)
    assert res.code == 0, res.err
    assert res.out == LINES
    assert "container is removed: reading its log from this host" in res.err, res.err
    res = run_cli("status", run_id, "--plot", "--json", env=env)
    assert res.code == 0, res.err
    assert "Traceback" not in res.err and "container is removed" not in res.out, res.out
    rep = tmp_path / "rep.html"
    res = run_cli("report", run_id, "-o", str(rep), env=env)
    assert res.code == 0, res.err
    assert "5 steps charted" in res.out, res.out


def test_a_log_inside_the_container_only_is_still_refused(tmp_path: Path) -> None:
    _engine()
    run_id = f"20260101-000000-inside-{secrets.token_hex(2)}"
    state = tmp_path / "state"
    write_record(state, run_id, run_log=f"/verl/logs/verlctl-{run_id}.log",
                 container_name=f"verlctl-test-no-such-{secrets.token_hex(4)}", container_id=None)
    res = run_cli("logs", run_id, env=clean_env(VERLCTL_STATE_DIR=str(state)))
    assert res.code != 0 and "container is removed: its log cannot be read" in res.err, res.err
    assert "Traceback" not in res.err


def test_a_deleted_run_log_is_gone_and_the_trainer_log_is_shown(tmp_path: Path) -> None:
    run_id = f"20260101-000000-deleted-{secrets.token_hex(2)}"
    train = tmp_path / "logs" / "exp.log"
    train.parent.mkdir()
    train.write_text(LINES)
    state = tmp_path / "state"
    write_record(state, run_id, runtime="host", workdir=str(tmp_path),
                 scripts_dir=str(tmp_path / "s" / run_id),
                 run_log=str(tmp_path / "logs" / f"verlctl-{run_id}.log"), train_log=str(train))
    res = run_cli("logs", run_id, "-n", "2", env=clean_env(VERLCTL_STATE_DIR=str(state)))
    assert res.code == 0, res.err
    assert res.out == "".join(LINES.splitlines(keepends=True)[-2:])
    assert "is gone (deleted or moved)" in res.err and "yet" not in res.err, res.err
    os.unlink(train)
    res = run_cli("logs", run_id, env=clean_env(VERLCTL_STATE_DIR=str(state)))
    assert res.code != 0 and "is gone" in res.err and "Traceback" not in res.err, res.err


def test_a_removed_containers_deleted_host_log_is_gone_and_the_trainer_log_is_shown(tmp_path: Path) -> None:
    """N13: the run log was a host file (paths.logs) and was deleted after the container was removed: said
    to be gone, with the trainer's own log beside it, not "inside the container only"."""
    _engine()
    run_id = f"20260101-000000-gone-{secrets.token_hex(2)}"
    train = tmp_path / "logs" / "exp.log"
    train.parent.mkdir()
    train.write_text(LINES)
    state = tmp_path / "state"
    write_record(state, run_id, run_log=str(tmp_path / "logs" / f"verlctl-{run_id}.log"), train_log=str(train),
                 container_name=f"verlctl-test-no-such-{secrets.token_hex(4)}", container_id=None)
    res = run_cli("logs", run_id, "-n", "2", env=clean_env(VERLCTL_STATE_DIR=str(state)))
    assert res.code == 0, res.err
    assert res.out == "".join(LINES.splitlines(keepends=True)[-2:])
    assert "is gone (deleted or moved)" in res.err and "inside the container only" not in res.err, res.err


def test_logs_n_0_prints_a_log_larger_than_one_read_whole(tmp_path: Path) -> None:
    """`logs -n 0` (all of it) reads the log a piece at a time (runtime.follow.write_whole, as a Slurm run's
    output): every byte, a character split between two reads whole; `-n 2` the last two lines."""
    _engine()
    from verlctl.runtime.follow import WHOLE_CHUNK

    run_id = f"20260101-000000-whole-{secrets.token_hex(2)}"
    log = tmp_path / "logs" / f"verlctl-{run_id}.log"
    log.parent.mkdir()
    body = "x" * (WHOLE_CHUNK - 1) + "\u00e9 one\n" + "y" * WHOLE_CHUNK + "\ntwo\nthree\n"
    log.write_text(body, encoding="utf-8")
    state = tmp_path / "state"
    write_record(state, run_id, run_log=str(log), container_name=f"verlctl-test-no-such-{secrets.token_hex(4)}",
                 container_id=None)
    env = clean_env(VERLCTL_STATE_DIR=str(state))
    res = run_cli("logs", run_id, "-n", "0", env=env)
    assert res.code == 0, res.err
    assert res.out == body
    res = run_cli("logs", run_id, "-n", "2", env=env)
    assert res.code == 0 and res.out == "two\nthree\n", res.out[-200:]
