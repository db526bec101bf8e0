"""`verlctl launch --canary` on a real Docker engine with the stand-in test image: no full run when a canary
phase fails (the stand-in trainer, tests/standin, a TEST DOUBLE, dies where a test wants it to). A canary that
passes, its phases, timings and the clean start of the full run are real verl's, in the life-of-a-run test
(tests/realverl_runs/test_realverl.py).
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
