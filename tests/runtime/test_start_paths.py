"""Every start of a run's processes goes through ``Executor.start_group`` (which waits until the new leader
shows the run's marker): no module outside the executor starts a detached process by itself, and every
reader that decides on an ended group's log drains its follower first."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "verlctl"


def test_only_the_executor_calls_start_detached_and_start_group_waits_for_the_identity() -> None:
    callers = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                     if re.search(r"\.start_detached\(", p.read_text(encoding="utf-8")))
    assert callers == ["runtime/executor.py"], callers
    text = (SRC / "runtime" / "executor.py").read_text(encoding="utf-8")
    body = text[text.index("    def start_group(self"):text.index("    def _await_identity(")]
    assert "self.start_detached(" in body and "self._await_identity(ref)" in body
    starters = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                      if ".start_group(" in p.read_text(encoding="utf-8"))
    assert starters == ["backends/docker.py", "orchestrator/export_hf.py", "orchestrator/launch.py",
                        "runtime/executor.py"], starters


def test_the_readers_that_judge_an_ended_attempt_read_its_log_to_the_end_first() -> None:
    launch = (SRC / "orchestrator" / "launch.py").read_text(encoding="utf-8")
    canary = (SRC / "orchestrator" / "canary.py").read_text(encoding="utf-8")
    watcher = (SRC / "orchestrator" / "watcher.py").read_text(encoding="utf-8")
    assert "follower.drain(since=" in launch and "follower.drain(since=" in canary
    assert "follower.synced_at >= dead_seen_at" in watcher
