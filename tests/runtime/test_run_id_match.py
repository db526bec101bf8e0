"""A recorded run is named by its whole id, its start (the time stamp) or its end (the random suffix): one
resolver (``runtime.records.resolve_run``) for every command's ``[RUN]`` argument, which is named and described
the same on every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from verlctl.errors import VerlctlError
from verlctl.runtime.records import RunRecord, resolve_run

from conftest import clean_env, run_cli

IDS = ["20261206-104337-exp-1a9f", "20261206-110001-exp-77c0", "20261207-090000-other-1a90"]


def record(tmp_path: Path, run_id: str, created: float) -> RunRecord:
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    (logs / f"{run_id}.log").write_text("step:1 - critic/score/mean:0.5\n")
    rec = RunRecord(run_id=run_id, created_at=created, runtime="host", workdir=str(tmp_path), scripts_dir="/s",
                    run_log=str(logs / f"{run_id}.log"), train_log="", checkpoints=str(tmp_path / "ckpt"),
                    experiment="exp", verl_version="0.7.0")
    rec.save()
    return rec


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    for i, rid in enumerate(IDS):
        record(tmp_path, rid, float(i))
    return tmp_path


@pytest.mark.parametrize(("given", "expected"), [
    ("1a9f", IDS[0]), ("-1a9f", IDS[0]), ("77c0", IDS[1]), ("20261206-1100", IDS[1]), ("1a90", IDS[2]),
    (IDS[0], IDS[0]), (None, IDS[2]),
])
def test_a_run_is_found_by_its_suffix_or_its_prefix(runs: Path, given: str | None, expected: str) -> None:
    assert resolve_run(given).run_id == expected


@pytest.mark.parametrize(("given", "message"), [
    ("1a9", "no run '1a9'"),                     # neither the start nor the end of any id
    ("20261206", "ambiguous"),                   # the start of two ids
    ("0", "ambiguous"),                          # the end of two ids (…-77c0, …-1a90)
])
def test_a_part_that_names_no_run_or_several_is_refused(runs: Path, given: str, message: str) -> None:
    with pytest.raises(VerlctlError, match=message):
        resolve_run(given)


def test_report_takes_the_suffix_and_writes_a_default_file(runs: Path) -> None:
    env = {**clean_env(), "VERLCTL_STATE_DIR": str(runs / "state")}
    work = runs / "cwd"
    work.mkdir()
    res = run_cli("report", "77c0", env=env, cwd=work)
    assert res.code == 0, res.err
    assert (work / f"verlctl-report-{IDS[1]}.html").is_file()
    assert f"wrote verlctl-report-{IDS[1]}.html" in res.out
    again = run_cli("report", "77c0", env=env, cwd=work)  # the default file is not replaced without --force
    assert again.code == 2 and "--force" in again.err


def test_every_run_command_names_its_argument_run_the_same_way() -> None:
    import typer

    from verlctl.cli import app

    group = typer.main.get_command(app)
    ctx = group.make_context("verlctl", [], resilient_parsing=True)
    seen = {}
    for name in group.list_commands(ctx):  # type: ignore[attr-defined]
        cmd = group.get_command(ctx, name)  # type: ignore[attr-defined]
        for p in cmd.params:
            if getattr(p, "param_type_name", "") == "argument" and "run" in (p.name or ""):
                seen[name] = (p.name, p.metavar, p.required, p.help)
    assert set(seen) >= {"status", "logs", "stop", "watch", "report", "bundle", "export-hf"}
    assert len(set(seen.values())) == 1, seen
    assert next(iter(seen.values()))[:3] == ("run", "[RUN]", False)
