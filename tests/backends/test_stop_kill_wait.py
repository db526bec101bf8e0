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
from verlctl.runtime.executor import KILL_WAIT_S, GroupRef


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
