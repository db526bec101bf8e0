"""stop's wait after SIGKILL (`KILL_WAIT_S`, `stop_run(kill_wait=...)`): a group still there that long after
SIGKILL is reported as not stopped, after exactly that wait, never sooner and not the default 10 s.

TEST DOUBLE: the executor below stands for a group the kernel never tears down (a process in uninterruptible
sleep on a hung device or mount), which cannot be made here on purpose; it records the signals it is sent."""

from __future__ import annotations

import signal
import time

import pytest

from verlctl.backends.docker import stop_groups
from verlctl.errors import RuntimeFailure
from verlctl.runtime.executor import KILL_WAIT_S, RAY_DAEMON_GRACE_S, GroupRef


class UnkillableGroupDouble:
    """TEST DOUBLE of an executor whose group survives SIGKILL."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def signal_group(self, ref: GroupRef, sig: int) -> None:
        self.sent.append(int(sig))

    def group_alive(self, ref: GroupRef) -> bool:
        return True

    def kill_ray_daemons(self, ref: GroupRef) -> list[list[object]]:
        return []


def test_a_group_that_outlives_sigkill_is_reported_after_the_kill_wait() -> None:
    ex = UnkillableGroupDouble()
    started = time.monotonic()
    with pytest.raises(RuntimeFailure, match="process group 4242 in the host did not stop"):
        stop_groups([(ex, GroupRef(4242), "the host")], grace=0.2, kill_wait=1.0)  # type: ignore[list-item]
    took = time.monotonic() - started
    assert ex.sent == [signal.SIGTERM, signal.SIGKILL]
    assert 1.2 <= took < KILL_WAIT_S, took  # the grace, then the wait given: not the default


def test_the_default_kill_wait_is_ten_seconds() -> None:
    assert KILL_WAIT_S == 10.0


class EndingGroupDouble:
    """TEST DOUBLE of an executor whose group outlives SIGTERM and ends ``ends_s`` after SIGKILL, with Ray daemons
    still there at the escalation; it checks it is asked about its own group only and counts the questions."""

    def __init__(self, ref: GroupRef, ends_s: float) -> None:
        self.ref, self.ends_s = ref, ends_s
        self.sent: list[int] = []
        self.termed_at = self.killed_at = 0.0
        self.daemons_killed_after: list[float] = []
        self.asked_after_kill = 0

    def signal_group(self, ref: GroupRef, sig: int) -> None:
        assert ref is self.ref, ref
        self.sent.append(int(sig))
        if sig == signal.SIGTERM:
            self.termed_at = time.monotonic()
        else:
            self.killed_at = time.monotonic()

    def group_alive(self, ref: GroupRef) -> bool:
        assert ref is self.ref, ref
        if not self.killed_at:
            return True
        self.asked_after_kill += 1
        return time.monotonic() - self.killed_at < self.ends_s

    def kill_ray_daemons(self, ref: GroupRef) -> list[tuple[int, str]]:
        assert ref is self.ref, ref
        self.daemons_killed_after.append(time.monotonic() - self.termed_at)
        return [(77, "raylet")]


def test_a_group_that_ends_after_sigkill_is_stopped_and_ray_s_daemons_get_sigkill_once_after_their_grace() -> None:
    ref = GroupRef(4242)
    ex = EndingGroupDouble(ref, ends_s=0.6)
    said: list[str] = []
    groups = [(ex, ref, "the host")]
    grace = RAY_DAEMON_GRACE_S + 0.6
    assert stop_groups(groups, grace=grace, say=said.append, kill_wait=5.0) == groups  # type: ignore[arg-type]
    assert ex.sent == [signal.SIGTERM, signal.SIGKILL]
    # Ray's daemons: once, RAY_DAEMON_GRACE_S after the SIGTERM (not sooner), within the training's grace
    assert len(ex.daemons_killed_after) == 1, ex.daemons_killed_after
    assert RAY_DAEMON_GRACE_S <= ex.daemons_killed_after[0] < grace, ex.daemons_killed_after
    assert said == ["SIGKILL to Ray's daemons still running "
                    f"{RAY_DAEMON_GRACE_S:g}s after SIGTERM in the host: raylet (pid 77)"], said
    # the wait after SIGKILL looks every 0.2 s, not in a busy loop, and ends when the group is gone
    assert 2 <= ex.asked_after_kill <= 10, ex.asked_after_kill
