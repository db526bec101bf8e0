"""Run records on a shared machine: one damaged record spoils nothing for the other runs, a damaged record is
named (never silently skipped), `stop` marks the run stopped before anything that can fail, and run ids from
records never leave the state directory (adversarial review D6, D7, D24)."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import CliResult, clean_env, run_cli

GOOD = "20260101-000000-good-aaaa"


def record(run_id: str, **over: object) -> dict:
    doc = {
        "run_id": run_id, "created_at": time.time(), "runtime": "host", "workdir": "/tmp",
        "scripts_dir": f"/tmp/.verlctl/runs/{run_id}", "run_log": f"/tmp/verlctl-test-no-such-{run_id}.log",
        "train_log": "", "checkpoints": "", "experiment": "exp", "verl_version": "0.7.0",
    }
    doc.update(over)
    return doc


def write_record(state: Path, dir_name: str, **over: object) -> Path:
    d = state / "runs" / dir_name
    d.mkdir(parents=True, exist_ok=True)
    doc = record(dir_name)
    doc.update(over)
    (d / "run.json").write_text(json.dumps(doc), encoding="utf-8")
    return d


def cli(state: Path, *args: str, unprivileged: bool = False) -> CliResult:
    env = clean_env(VERLCTL_STATE_DIR=str(state), COLUMNS="250")
    if unprivileged and os.geteuid() == 0:
        # root reads a mode-000 file anyway: drop the capabilities that let it, as a plain user has none.
        import subprocess
        import sys

        caps = "-dac_override,-dac_read_search"
        proc = subprocess.run(["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", sys.executable, "-m",
                               "verlctl", *args], capture_output=True, text=True, env=env, timeout=120)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)
    return run_cli(*args, env=env)


def damage(d: Path, how: str) -> None:
    p = d / "run.json"
    if how == "empty":
        p.write_bytes(b"")
    elif how == "truncated":
        p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
    elif how == "wrong_types":
        doc = json.loads(p.read_text())
        doc["created_at"] = "yesterday"
        doc["attempts"] = "many"
        p.write_text(json.dumps(doc))
    elif how == "invalid_utf8":
        p.write_bytes(b'{"run_id": "\xff\xfe", ' + p.read_bytes()[1:])
    elif how == "fifo":
        p.unlink()
        os.mkfifo(p)
    elif how == "directory":
        p.unlink()
        p.mkdir()
    elif how == "symlink_loop":
        p.unlink()
        p.symlink_to(p.name)
    elif how == "dev_zero":
        p.unlink()
        p.symlink_to("/dev/zero")
    elif how == "huge":
        p.write_bytes(b"{" + b" " * (5 * 1024 * 1024) + b"}")
    elif how == "chmod000":
        p.chmod(0)
    elif how == "dir_chmod000":
        d.chmod(0)
    else:
        raise AssertionError(how)


DAMAGES = ["empty", "truncated", "wrong_types", "invalid_utf8", "fifo", "directory", "symlink_loop", "dev_zero",
           "huge", "chmod000", "dir_chmod000"]


def bad_id_of(how: str) -> str:
    return f"20250101-000000-bad-{how.replace('_', '')}"


@pytest.fixture(scope="module")
def damaged_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One state dir holding a good record beside one damaged record of every kind, and what `list`, `status`,
    `stop` and `logs` of the good run said there (run once, as an unprivileged user: the CLI runs are the
    cost of these tests, and every damaged record must leave the good one alone, all of them at once too)."""
    state = tmp_path_factory.mktemp("damaged") / "state"
    write_record(state, GOOD)
    bads = [write_record(state, bad_id_of(how), created_at=time.time() - 100) for how in DAMAGES]
    for d, how in zip(bads, DAMAGES):
        damage(d, how)
    try:
        said: dict[str, Any] = {"state": state, "list": cli(state, "list", unprivileged=True),
                                "status": cli(state, "status", GOOD, "--json", unprivileged=True)}
        said["stop"] = cli(state, "stop", GOOD, unprivileged=True)
        said["stopped"] = json.loads((state / "runs" / GOOD / "run.json").read_text())["stopped"]
        said["logs"] = cli(state, "logs", GOOD, unprivileged=True)
        yield said
    finally:
        for bad in bads:
            bad.chmod(0o755)
            if (bad / "run.json").exists() and not (bad / "run.json").is_symlink():
                (bad / "run.json").chmod(0o644)


@pytest.mark.xdist_group("damaged_records")  # one worker builds the shared state (once xdist_group works again)
@pytest.mark.parametrize("how", DAMAGES)
def test_one_damaged_record_breaks_nothing_else_and_is_named(damaged_state: dict[str, Any], how: str) -> None:
    state, bad_id = damaged_state["state"], bad_id_of(how)
    res = damaged_state["list"]
    assert res.code == 0 and "Traceback" not in res.err, res.err
    assert GOOD in res.out
    line = next((ln for ln in res.out.splitlines() if bad_id in ln), "")
    assert "damaged" in line, res.out  # listed, not silently left out

    res = damaged_state["status"]
    assert res.code == 0, res.err
    assert res.json()["run_id"] == GOOD
    # a damaged record is named with what is wrong, in one line
    res = cli(state, "status", bad_id, unprivileged=True)
    assert res.code != 0 and "Traceback" not in res.err
    err = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "damaged" in err[0] and bad_id in err[0], res.err
    res = cli(state, "stop", bad_id, unprivileged=True)
    assert res.code != 0 and "Traceback" not in res.err and "damaged" in res.err, res.err

    res = damaged_state["stop"]
    assert res.code == 0 and "Traceback" not in res.err, res.err
    assert damaged_state["stopped"] is True
    assert "Traceback" not in damaged_state["logs"].err


def test_unreadable_events_and_status_do_not_break_status(tmp_path: Path) -> None:
    state = tmp_path / "state"
    d = write_record(state, GOOD)
    (d / "events.jsonl").write_bytes(b'{"event": "failure", "reason": "x\xff\xfe"}\n')
    (d / "status.json").write_bytes(b'{"step": "\xff\xfe"}')
    res = cli(state, "status", GOOD, "--json")
    assert res.code == 0 and "Traceback" not in res.err, res.err
    assert res.json()["last_error"]["reason"].startswith("x")
    (d / "events.jsonl").chmod(0)
    res = cli(state, "status", GOOD, "--json", unprivileged=True)
    assert res.code == 0 and "Traceback" not in res.err, res.err
    (d / "events.jsonl").chmod(0o644)


def test_stop_marks_the_run_stopped_before_anything_that_can_fail(tmp_path: Path) -> None:
    state = tmp_path / "state"
    d = write_record(state, GOOD)
    (d / "events.jsonl").mkdir()  # the event append fails
    res = cli(state, "stop", GOOD)
    assert "Traceback" not in res.err, res.err
    assert json.loads((d / "run.json").read_text())["stopped"] is True
    assert res.code == 0, res.err


def test_stop_with_an_unwritable_record_signals_nothing_and_says_so(tmp_path: Path) -> None:
    import subprocess

    state = tmp_path / "state"
    d = write_record(state, GOOD)
    victim = subprocess.Popen(["setsid", "sleep", "300"])
    try:
        doc = json.loads((d / "run.json").read_text())
        doc["pgid"] = victim.pid
        (d / "run.json").write_text(json.dumps(doc))
        d.chmod(0o555)
        res = cli(state, "stop", GOOD, "--grace", "1", unprivileged=True)
        assert res.code != 0 and "Traceback" not in res.err, res.err
        assert "cannot mark run" in res.err and "nothing was signalled" in res.err
        assert victim.poll() is None  # alive
    finally:
        d.chmod(0o755)
        victim.kill()
        victim.wait()


def test_run_id_in_a_record_never_leaves_the_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "a" / "b" / "state"
    write_record(state, "innocent", run_id="../../../escaped-by-runid")
    write_record(state, GOOD)
    res = cli(state, "stop", "../../../escaped-by-runid")
    assert res.code != 0 and "Traceback" not in res.err
    res = cli(state, "stop", "innocent")
    assert res.code != 0 and "damaged" in res.err and "innocent" in res.err
    assert not (tmp_path / "escaped-by-runid").exists()
    assert not any(p.name == "escaped-by-runid" for p in tmp_path.rglob("*"))
    res = cli(state, "list")
    assert res.code == 0 and "innocent" in res.out and "damaged" in res.out
    shutil.rmtree(state)


@pytest.mark.parametrize("pgid", [1, 0, -5, 2147483648, 1e20])
def test_out_of_range_process_group_ids_are_damage_not_signals(tmp_path: Path, pgid: object) -> None:
    state = tmp_path / "state"
    write_record(state, GOOD, pgid=pgid)
    # `status` only: on the old code `stop` would send kill(-1) to every process the caller may signal.
    res = cli(state, "status", GOOD, "--json")
    assert res.code != 0 and "Traceback" not in res.err, res.err
    err = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "damaged" in err[0] and "pgid" in err[0], res.err
