"""``Follower.drain``: what a reader calls once the writer has gone, so that it judges the file's whole text and
not the part its follower had returned so far (issue 40: a one-step run on a busy CI machine printed its step and
ended before launch's verify had read the step, and verify called the finished run a failed start)."""

from __future__ import annotations

import time
from pathlib import Path

from verlctl.runtime.executor import HostExecutor
from verlctl.runtime.follow import Follower


def test_drain_returns_everything_written_before_its_moment_though_nothing_was_read_yet(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    text = "".join(f"line {n}\n" for n in range(2000))
    log.write_text(text, encoding="utf-8")
    f = Follower(HostExecutor(), str(log), 0)
    try:
        assert f.drain(since=time.monotonic(), bound_s=30.0) == text  # no get() before: the whole file
        assert f.synced_at >= 0 and not f.ended
        with log.open("a", encoding="utf-8") as fh:
            fh.write("step:1 - a\n")
        assert f.drain(since=time.monotonic(), bound_s=30.0) == "step:1 - a\n"  # only what is new since
    finally:
        f.stop()


def test_drain_from_an_offset_and_of_a_file_that_never_appears_is_bounded(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("old attempt\nnew attempt\n", encoding="utf-8")
    f = Follower(HostExecutor(), str(log), len("old attempt\n"))
    try:
        assert f.drain(since=time.monotonic(), bound_s=30.0) == "new attempt\n"
    finally:
        f.stop()
    missing = Follower(HostExecutor(), str(tmp_path / "never.log"), 0)
    try:
        began = time.monotonic()
        assert missing.drain(since=time.monotonic(), bound_s=1.5) == ""  # a missing file is never "synced"
        assert 1.4 <= time.monotonic() - began < 10, time.monotonic() - began
    finally:
        missing.stop()


def test_drain_of_an_ended_follower_returns_at_once(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("x\n", encoding="utf-8")
    f = Follower(HostExecutor(), str(log), 0)
    assert f.drain(since=time.monotonic(), bound_s=30.0) == "x\n"
    f.stop()
    f.get(timeout=5.0)  # the pump's end mark
    assert f.ended
    began = time.monotonic()
    assert f.drain(since=time.monotonic() + 60, bound_s=30.0) == ""
    assert time.monotonic() - began < 2
