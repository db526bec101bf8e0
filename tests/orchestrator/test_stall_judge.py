"""The stall is called on a log that was read (orchestrator/watcher.py ``StallJudge``; runtime/follow.py ``synced_at``).

A lack of progress is a verdict only once it still holds ``STALL_CONFIRM_S`` after it was first seen *and* the log
was read to its end after that moment: a watcher that was not scheduled, or a read that lagged (a slow shared file
system), saw no progress that the training had written. The judge is pure; the follower is the real one, on a real
file. The whole watcher frozen under SIGSTOP is in tests/orchestrator/test_watcher_live_status_and_stalls.py."""

from __future__ import annotations

import math
import time
from pathlib import Path

from verlctl.orchestrator.watcher import STALL_CONFIRM_S, StallJudge
from verlctl.runtime.executor import HostExecutor
from verlctl.runtime.follow import Follower

REASON = "no progress for 30s during start-up (limit 30s)"


def test_a_stall_is_called_once_it_held_the_confirmation_time_and_the_log_was_read_after_it_was_seen() -> None:
    judge = StallJudge()
    assert STALL_CONFIRM_S == judge.confirm_s == 2.0
    assert judge.verdict(REASON, 30, now=100.0, synced_at=99.9) is None  # first seen: suspected only
    assert judge.suspect_at == 100.0
    assert judge.verdict(REASON, 30, now=101.9, synced_at=101.5) is None  # read after, but not held 2 s
    assert judge.verdict(REASON, 30, now=102.0, synced_at=99.9) is None  # held, but the log was not read since
    assert judge.verdict(REASON, 30, now=102.0, synced_at=100.0) == REASON  # read from the moment it was seen on
    assert judge.suspect_at == 100.0


def test_progress_read_after_the_suspicion_clears_it_and_a_new_one_starts_from_its_own_moment() -> None:
    judge = StallJudge()
    assert judge.verdict(REASON, 30, now=100.0, synced_at=-math.inf) is None
    assert judge.verdict(None, 30, now=101.0, synced_at=100.5) is None  # the read found a step: no stall
    assert judge.suspect_at is None
    assert judge.verdict(REASON, 30, now=140.0, synced_at=139.0) is None  # a new suspicion, not the old one's
    assert judge.suspect_at == 140.0
    assert judge.verdict(REASON, 30, now=141.0, synced_at=140.5) is None
    assert judge.verdict(REASON, 30, now=142.0, synced_at=140.5) == REASON


def test_a_log_read_that_stays_behind_for_a_whole_limit_still_gets_its_stall_called_and_says_so() -> None:
    judge = StallJudge()
    assert judge.verdict(REASON, 30, now=100.0, synced_at=50.0) is None
    assert judge.verdict(REASON, 30, now=129.9, synced_at=50.0) is None
    said = judge.verdict(REASON, 30, now=130.0, synced_at=50.0)
    assert said == f"{REASON}; the run log was not read to its end for the last 30s", said


def test_a_limit_shorter_than_the_confirmation_still_waits_for_the_confirmation() -> None:
    judge = StallJudge()
    assert judge.verdict(REASON, 1, now=10.0, synced_at=-math.inf) is None
    assert judge.verdict(REASON, 1, now=11.5, synced_at=-math.inf) is None
    assert judge.verdict(REASON, 1, now=12.0, synced_at=-math.inf) is not None


def _read_until(f: Follower, cond: object, timeout: float = 30) -> str:
    got = ""
    deadline = time.monotonic() + timeout
    while not cond(got):  # type: ignore[operator]
        assert time.monotonic() < deadline, (got, f.synced_at)
        got += f.get(0.2)
    return got


def test_the_polling_follower_is_synced_only_past_what_it_returned(tmp_path: Path) -> None:
    """``synced_at`` ≥ t means everything written before t was returned by ``get``: text appended at t is in
    what ``get`` returned by the time the follower says it is synced past t."""
    log = tmp_path / "run.log"
    log.write_text("first\n", encoding="utf-8")
    f = Follower(HostExecutor(), str(log), 0)
    try:
        assert f.synced_at == -math.inf  # nothing read yet
        assert _read_until(f, lambda got: "first" in got) == "first\n"
        for n in range(20):
            t = time.monotonic()
            with log.open("a", encoding="utf-8") as fh:
                fh.write(f"line {n}\n")
            got = _read_until(f, lambda _got, t=t: f.synced_at >= t)  # type: ignore[misc]
            assert got == f"line {n}\n", (n, got)
        assert f.synced_at <= time.monotonic()
    finally:
        f.stop()


def test_a_quiet_log_keeps_the_follower_synced_and_get_waits_its_timeout(tmp_path: Path) -> None:
    """Nothing new: the follower's passes keep ``synced_at`` moving; ``get`` waits for text until its timeout
    (the passes' marks do not end the wait early) and returns ''."""
    log = tmp_path / "run.log"
    log.write_text("", encoding="utf-8")
    f = Follower(HostExecutor(), str(log), 0)
    try:
        t = time.monotonic()
        began = time.monotonic()
        assert f.get(1.0) == ""
        assert time.monotonic() - began >= 0.95
        _read_until(f, lambda _got: f.synced_at >= t)
        assert not f.ended
    finally:
        f.stop()


def test_a_log_that_cannot_be_found_is_not_read_to_its_end(tmp_path: Path) -> None:
    """A missing log (moved away, not yet there) gives no sync: a stall waits for a read, or for its fallback."""
    log = tmp_path / "run.log"
    f = Follower(HostExecutor(), str(log), 0)
    try:
        began = time.monotonic()
        while time.monotonic() - began < 1.0:  # four passes of the follower
            assert f.get(0.25) == ""
        assert f.synced_at == -math.inf
        t = time.monotonic()
        log.write_text("here\n", encoding="utf-8")
        assert _read_until(f, lambda got: f.synced_at >= t and got) == "here\n"
    finally:
        f.stop()


def test_a_truncated_log_is_read_again_from_its_start(tmp_path: Path) -> None:
    """A log cut to nothing and written again (``: > log``, logrotate's copytruncate) is read from its first byte:
    the new text whole, not its tail past the old length (seed 9562's survivors: ``pos = 0`` → 1 / -1)."""
    log = tmp_path / "run.log"
    log.write_text("the old text\n", encoding="utf-8")
    f = Follower(HostExecutor(), str(log), 0)
    try:
        assert _read_until(f, lambda got: got.endswith("\n")) == "the old text\n"
        log.write_text("new\n", encoding="utf-8")  # shorter than what was read
        t = time.monotonic()
        assert _read_until(f, lambda got: f.synced_at >= t and got) == "new\n"
        assert not f.ended
    finally:
        f.stop()


class _CountingHost(HostExecutor):
    """The real host executor, counting how often the follower asks for the log's size (no double: every call
    goes through)."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes = 0

    def file_size(self, path: str) -> int | None:
        self.sizes += 1
        return super().file_size(path)


def test_a_quiet_log_is_polled_a_few_times_a_second_not_in_a_busy_loop(tmp_path: Path) -> None:
    """Between passes that find nothing the polling follower waits (0.25 s): about 4 passes a second, not
    thousands (seed 9562's survivor: the wait deleted, the follower spun a CPU while the log was quiet)."""
    log = tmp_path / "run.log"
    log.write_text("", encoding="utf-8")
    ex = _CountingHost()
    f = Follower(ex, str(log), 0)
    try:
        time.sleep(0.2)
        before = ex.sizes
        time.sleep(1.0)
        assert ex.sizes - before <= 12, ex.sizes - before  # no lower bound: a loaded machine may starve it
    finally:
        f.stop()


def test_a_log_that_cannot_be_read_ends_the_follower_with_the_reason(tmp_path: Path) -> None:
    """A log path that is no regular file (here a directory): the follower says why it stopped, in the text, and
    is ended (the watcher reads ``ended``), rather than going quiet for ever."""
    f = Follower(HostExecutor(), str(tmp_path), 0)
    try:
        got = _read_until(f, lambda got: "\n" in got.strip("\n") or f.ended)
        got += f.get(0.5)
        assert got.startswith("\n[verlctl] log follower stopped: ") and "Is a directory" in got, got
        assert f.ended
        assert f.get(0.1) == "" and f.ended
    finally:
        f.stop()


def test_a_process_that_never_stops_its_follower_still_exits(tmp_path: Path) -> None:
    """The reading thread is a daemon: a watcher that ends on an error without ``stop()`` does not hang its
    process on a quiet log."""
    import subprocess
    import sys

    log = tmp_path / "run.log"
    log.write_text("", encoding="utf-8")
    code = ("import sys; from verlctl.runtime.executor import HostExecutor; from verlctl.runtime.follow import "
            "Follower; f = Follower(HostExecutor(), sys.argv[1], 0); f.get(0.5); print('leaving')")
    res = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout == "leaving\n", res
