"""A resumed attempt whose step lines say nothing past its checkpoint, but whose checkpoint tracker names a later
step, trained: the run finished (not "trained 0 steps"). Real verl 0.7.0's DAPO recipe showed it: resumed from
global_step_1 of 2, it trained and saved global_step_2 and exited 0 within a second of printing ``step:2``, and
Ray dropped that line (what an actor prints in the moment before the driver exits does not reach the driver).
The watcher, ``status`` without a watcher, and the Slurm watcher share the one judgement
(:func:`verlctl.monitor.health.resume_trained_nothing`)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from test_recovery_host import HostRuns, _progress, host_runs_in
from verlctl.monitor.health import resume_trained_nothing


@pytest.fixture
def host_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostRuns]:
    yield from host_runs_in(tmp_path, monkeypatch)


def _resumed_lines(ckpt: str) -> list[str]:
    """verl's lines of an attempt resumed from global_step_3 of 5 that printed no step line after it."""
    return ["Total training steps: 5", f"Load from checkpoint folder: {ckpt}", "Setting global step to 3",
            _progress(3, 5)]


def _saves(root: Path, step: int) -> str:
    """The trainer double's end: verl saves global_step_<step> and writes its tracker, then the run finishes."""
    folder = root / f"global_step_{step}"
    return (f"mkdir -p {shlex.quote(str(folder / 'actor'))}; "
            f"printf '%s' {step} > {shlex.quote(str(root / 'latest_checkpointed_iteration.txt'))}; "
            'echo "[verlctl 10:00:09] training finished"')


def test_the_watcher_takes_verls_tracker_past_the_checkpoint_as_trained(host_runs: HostRuns) -> None:
    ckpt = str(host_runs.ckpt / "global_step_3")
    record = host_runs.start(_resumed_lines(ckpt), tail=_saves(host_runs.ckpt, 5), resumed_from=ckpt)
    res = host_runs.watch(record)
    assert res.code == 0, res.out + res.err
    kinds = [e["event"] for e in host_runs.events(record)]
    assert "resume_failed" not in kinds and kinds[-1] == "finished", kinds
    assert host_runs.status(record)["state"] == "finished"


def test_a_tracker_still_at_the_checkpoint_is_still_a_resume_that_trained_nothing(host_runs: HostRuns) -> None:
    ckpt = str(host_runs.ckpt / "global_step_3")
    record = host_runs.start(_resumed_lines(ckpt), tail=_saves(host_runs.ckpt, 3), resumed_from=ckpt)
    res = host_runs.watch(record)
    assert res.code == 1, res.out + res.err
    failed = next(e for e in host_runs.events(record) if e["event"] == "resume_failed")
    assert "trained 0 steps" in failed["reason"], failed


def test_status_without_a_watcher_reads_the_tracker_too(host_runs: HostRuns) -> None:
    import time

    from verlctl.runtime.executor import HostExecutor

    ckpt = str(host_runs.ckpt / "global_step_3")
    record = host_runs.start(_resumed_lines(ckpt), tail=_saves(host_runs.ckpt, 4), pause=0.05, resumed_from=ckpt)
    ex = HostExecutor()
    deadline = time.monotonic() + 60
    while ex.group_alive(record.attempts[-1].ref) and time.monotonic() < deadline:
        time.sleep(0.2)
    st = host_runs.status(record)
    assert st["state"] == "finished", st


@pytest.mark.parametrize(("saved_at", "fails"), [
    ("/c/global_step_4", False), ("/c/global_step_3", True), (None, True), ("/c/elsewhere", True),
])
def test_resume_trained_nothing_reads_the_saved_step(saved_at: str | None, fails: bool) -> None:
    assert (resume_trained_nothing("/c/global_step_3", 3, 5, 2, saved_at=saved_at) is not None) is fails


def test_verls_tracker_is_read_only_when_the_step_lines_say_nothing_was_trained() -> None:
    """Every caller (watcher, Slurm watcher, run state) hands the tracker read as a callable: it is asked once,
    and only for an attempt whose log shows no step past its checkpoint."""
    asked: list[int] = []

    def tracker() -> str:
        asked.append(1)
        return "/c/global_step_4"

    assert resume_trained_nothing("/c/global_step_3", 4, 5, 2, saved_at=tracker) is None and asked == []
    assert resume_trained_nothing("/c/global_step_3", 3, 5, 2, saved_at=tracker) is None and asked == [1]
    assert resume_trained_nothing("/c/global_step_3", 3, 5, 2, saved_at=lambda: None) is not None


def test_every_caller_hands_the_tracker_read_lazily() -> None:
    import ast

    from conftest import ROOT

    callers = []
    for path in sorted((ROOT / "src" / "verlctl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "resume_trained_nothing":
                saved = next((k.value for k in node.keywords if k.arg == "saved_at"), None)
                callers.append((path.name, type(saved).__name__))
    assert sorted(callers) == [("runstate.py", "Lambda"), ("slurm_run.py", "Lambda"), ("watcher.py", "Attribute")]
