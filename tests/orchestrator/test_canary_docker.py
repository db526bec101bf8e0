"""`verlctl launch --canary` on a real Docker engine with the stand-in test image (its orchestration: two
short attempts of the spec's own command, their checks, the timings, the clean start of the full run, and no
full run when a canary phase fails). The training step is the stand-in trainer (tests/standin, a TEST DOUBLE);
real verl runs it in tests/realverl_runs/test_realverl.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launch_support import LaunchEnv

pytestmark = pytest.mark.docker


def _events(lenv: LaunchEnv) -> list[dict[str, Any]]:
    (path,) = list(lenv.state.rglob("events.jsonl"))
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_canary_passes_then_the_full_run_starts_clean(launch_env: LaunchEnv) -> None:
    lenv = launch_env
    lenv.spec["train"]["steps"] = 30
    lenv.spec["train"]["save_freq"] = 5
    res = lenv.cli("launch", "-c", str(lenv.spec_file), "--yes", "--canary", "--verify-timeout", "180",
                   "--canary-timeout", "300")
    assert res.code == 0, res.out + res.err
    out = " ".join(res.out.split())
    assert "canary passed: step" in out and "checkpoint save" in out and "resume + step" in out, res.out
    assert "training is running" in out
    events = _events(lenv)
    started = [e for e in events if e["event"] == "started"]
    assert [e["reason"] for e in started] == ["canary: step + checkpoint", "canary: resume + weight sync", "launch"]
    (canary,) = [e for e in events if e["event"] == "canary"]
    assert canary["passed"] is True
    assert [p["steps"] for p in canary["phases"]] == [[1], [2]]
    assert [p["tracker"] for p in canary["phases"]] == ["1", "2"] and canary["phases"][1]["resumed_step"] == 1
    t = canary["timings"]
    assert t["step_s"] > 0 and t["step_and_checkpoint_wall_s"] > 0 and t["resume_and_step_wall_s"] > 0
    # the canary's checkpoints are gone; the full run trains from scratch in paths.checkpoints
    ckpt = Path(lenv.spec["paths"]["checkpoints"])
    assert not (ckpt / ".verlctl-canary").exists()
    assert started[-1]["resumed_from"] is None
    first_real = [a for a in lenv.argv_log][-1]["argv"]
    assert "trainer.total_training_steps=30" in first_real and f"trainer.default_local_dir={ckpt}" in first_real
    res = lenv.cli("stop")
    assert res.code == 0, res.out + res.err


def test_a_failed_resume_keeps_the_full_run_from_starting(launch_env: LaunchEnv) -> None:
    lenv = launch_env
    lenv.spec["train"]["steps"] = 30
    lenv.spec["env"]["VERLCTL_STANDIN_EXIT_AT_STEP"] = "2"  # step 1 and its checkpoint work; step 2 dies
    res = lenv.cli("launch", "-c", str(lenv.spec_file), "--yes", "--canary", "--canary-timeout", "300")
    assert res.code != 0, res.out + res.err
    text = " ".join((res.out + res.err).split())
    assert "the canary failed: resume + weight sync:" in text and "the full run was not started" in text, text
    assert "Traceback" not in res.err
    events = _events(lenv)
    assert [e["reason"] for e in events if e["event"] == "started"] == [
        "canary: step + checkpoint", "canary: resume + weight sync"]
    (canary,) = [e for e in events if e["event"] == "canary"]
    assert canary["passed"] is False and canary["phases"][0]["tracker"] == "1"
    assert events[-1]["event"] == "launch_failed"
    # kept for inspection, named in the error
    (kept,) = list((Path(lenv.spec["paths"]["checkpoints"]) / ".verlctl-canary").iterdir())
    assert (kept / "global_step_1").is_dir() and str(kept) in text
