"""O2: a SIGKILL (exit 137) is host OOM only when the cgroup, the kernel log or the engine says so
(monitor/killed.py); the probe runs for real on this host."""

from __future__ import annotations

import os

from verlctl.monitor.finding import Finding
from verlctl.monitor.killed import (
    KILLED,
    OomCounters,
    killed_finding,
    oom_evidence,
    parse_counters,
    read_after,
    read_counters,
)
from verlctl.runtime.executor import HostExecutor

HINT = "host hint"


def test_new_cgroup_oom_kills_make_it_host_oom() -> None:
    f = killed_finding(None, OomCounters(cgroup=2, kernel=None), OomCounters(cgroup=3, kernel=None), False, HINT)
    assert f.category == "host_oom" and f.hint == HINT
    assert "killed by signal 9 (SIGKILL, exit 137)" in f.message
    assert "oom_kill counter went from 2 to 3" in f.message, f.message


def test_new_kernel_oom_lines_make_it_host_oom() -> None:
    f = killed_finding(None, OomCounters(cgroup=0, kernel=4), OomCounters(cgroup=0, kernel=5), False, HINT)
    assert f.category == "host_oom" and "the kernel log has 1 new OOM-kill line(s)" in f.message, f.message


def test_the_engine_s_oomkilled_makes_it_host_oom() -> None:
    f = killed_finding(None, OomCounters(), OomCounters(), True, HINT)
    assert f.category == "host_oom" and "OOMKilled" in f.message


def test_no_new_oom_kill_is_killed_with_oom_as_a_possibility() -> None:
    root = Finding("python_exception", 7, "x", "y", "z")
    f = killed_finding(root, OomCounters(cgroup=1, kernel=3), OomCounters(cgroup=1, kernel=3), False, HINT)
    assert f.category == KILLED and f.line == 7
    assert "OOM is one possibility only" in f.message and "shows no new OOM kill" in f.message, f.message
    assert "(the log also shows python_exception at line 7)" in f.message
    assert f.hint != HINT and "dmesg" in f.hint


def test_unreadable_evidence_is_said_and_never_called_oom() -> None:
    said, checked = oom_evidence(OomCounters(), OomCounters())
    assert said == [] and checked == ["the memory cgroup's oom_kill counter could not be read",
                                      "the kernel log could not be read"]
    f = killed_finding(None, OomCounters(), OomCounters(), False, HINT)
    assert f.category == KILLED and "could not be read" in f.message


def test_without_a_baseline_a_cgroup_count_above_zero_is_oom_but_the_kernel_log_is_not_compared() -> None:
    said, checked = oom_evidence(OomCounters(), OomCounters(cgroup=1, kernel=9))
    assert said == ["the memory cgroup's oom_kill counter is 1"], said
    assert checked == ["the kernel log could not be compared (it was unreadable when the watch started)"]
    said, checked = oom_evidence(OomCounters(), OomCounters(cgroup=0, kernel=0))
    assert said == [] and len(checked) == 2, checked
    said, _ = oom_evidence(OomCounters(cgroup=5, kernel=5), OomCounters(cgroup=4, kernel=4))  # fewer: no OOM
    assert said == []


def test_parse_counters() -> None:
    c = parse_counters("cgroup 3 /sys/fs/cgroup/memory.events\nkernel -\n")
    assert c == OomCounters(cgroup=3, kernel=None, cgroup_file="/sys/fs/cgroup/memory.events")
    assert parse_counters("cgroup -\nkernel 12\n") == OomCounters(cgroup=None, kernel=12)
    assert parse_counters("garbage") == OomCounters()


def test_the_probe_reads_this_process_s_cgroup_and_reads_it_again() -> None:
    ex = HostExecutor()
    first = read_counters(ex, os.getpid())
    if first.cgroup is None:  # a host without a memory cgroup controller: the probe says so
        assert first.cgroup_file == ""
        return
    assert first.cgroup >= 0 and first.cgroup_file.endswith(("memory.events", "memory.oom_control")), first
    again = read_counters(ex, None, first)
    assert again.cgroup_file == first.cgroup_file and again.cgroup == first.cgroup


def test_a_reading_after_the_death_that_fails_is_taken_again_and_the_oom_kill_still_seen() -> None:
    """Right after an OOM kill the probe can fail (the cgroup still at its limit): read again, so that the new
    OOM kill is seen and the finding is host OOM, not "killed"."""
    before = OomCounters(cgroup=2, kernel=None, cgroup_file="/f")
    readings = iter([OomCounters(), OomCounters(cgroup=3, kernel=None, cgroup_file="/f")])
    after = read_after(lambda: next(readings), before, wait_s=0.01)
    assert after.cgroup == 3
    assert killed_finding(None, before, after, False, HINT).category == "host_oom"


def test_a_reading_that_stays_unreadable_is_taken_a_bounded_number_of_times() -> None:
    calls: list[int] = []

    def read() -> OomCounters:
        calls.append(1)
        return OomCounters()

    after = read_after(read, OomCounters(cgroup=2, kernel=0, cgroup_file="/f"), tries=3, wait_s=0.01)
    assert len(calls) == 3 and after == OomCounters()
    finding = killed_finding(None, OomCounters(cgroup=2, kernel=0), after, False, HINT)
    assert finding.category == KILLED and "could not be read" in finding.message
    calls.clear()  # nothing was readable at the watch's start either: one reading, no wait
    read_after(read, OomCounters(), tries=3, wait_s=30)
    assert len(calls) == 1
    calls.clear()  # readable now: one reading
    assert read_after(lambda: calls.append(1) or OomCounters(cgroup=2, kernel=0), OomCounters(cgroup=2, kernel=0),
                      tries=3, wait_s=30).cgroup == 2 and len(calls) == 1
