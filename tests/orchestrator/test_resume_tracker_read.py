"""The resume tracker (latest_checkpointed_iteration.txt) is read bounded: a FIFO planted in its place does not
hang `plan`/`launch`, a huge file is not read whole (orchestrator/resume.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_a_fifo_as_the_tracker_is_no_resume_point_and_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "latest_checkpointed_iteration.txt")
    (tmp_path / "global_step_3").mkdir()
    code = ("import sys; from verlctl.orchestrator.resume import resume_point; "
            "print(resume_point(sys.argv[1]))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "None", out


def test_the_tracker_names_the_step_and_a_huge_tracker_is_not_a_step(tmp_path: Path) -> None:
    from verlctl.orchestrator.resume import resume_point

    (tmp_path / "global_step_3").mkdir()
    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    tracker.write_text("3\n")
    assert resume_point(str(tmp_path)) == f"{tmp_path}/global_step_3"
    tracker.write_text("3" + " " * 100 + "\n")  # only the first 64 bytes are read: "3" then spaces
    assert resume_point(str(tmp_path)) == f"{tmp_path}/global_step_3"
    tracker.write_text("3" * 200)  # not a step verl would have written; never read past 64 bytes
    assert resume_point(str(tmp_path)) is None
