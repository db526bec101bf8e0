"""The exit status of a command run in a container is read only once the engine says the command ended.

The two-node launch failed on a loaded CI machine with ``could not start [...]: `` and no reason: the
start exec's output stream had ended, but the engine had not yet recorded the exec as ended
(``Running: true, ExitCode: null``), so the exit status was read as -1 and the start was called failed
(the pid file's read, an exec too, could be called "no such file" the same way). Asking a slow exec for
its status while it still runs reproduces that window deterministically.
"""

from __future__ import annotations

import time

import pytest

from verlctl.errors import RuntimeFailure
from verlctl.runtime.executor import DockerExecutor

pytestmark = pytest.mark.docker


def test_the_exit_status_is_read_when_the_engine_says_the_command_ended(container_factory) -> None:  # type: ignore[no-untyped-def]
    c = container_factory()
    api = container_factory.client.api
    ex = DockerExecutor(container_factory.client, c.id, c.name)
    # A slow exec, asked for its status while it still runs: what a loaded engine shows for a moment after
    # the output stream of a finished command has ended (Running: true, ExitCode: null).
    eid = api.exec_create(c.id, ["bash", "-c", "sleep 2; exit 3"])["Id"]
    api.exec_start(eid, detach=True)
    assert api.exec_inspect(eid)["ExitCode"] is None  # the window the old code read as "failed (-1)"
    started = time.monotonic()
    assert ex._exit_code(eid) == 3
    assert time.monotonic() - started >= 1.0
    # Through run(): output first, then the exit status of the finished command.
    res = ex.run(["bash", "-c", "echo before; sleep 1; exit 4"], timeout=60)
    assert (res.code, res.out) == (4, "before\n"), res


def test_a_command_killed_by_its_time_limit_reports_the_limit_status(container_factory) -> None:  # type: ignore[no-untyped-def]
    c = container_factory()
    ex = DockerExecutor(container_factory.client, c.id, c.name)
    res = ex.run(["bash", "-c", "exec >&- 2>&-; sleep 30"], timeout=1)  # killed by `timeout` after 1 s
    assert res.code == 124, res  # timeout(1)'s status: the real end, not a guess


def test_a_failed_detached_start_says_the_exit_status_and_what_it_saw(container_factory) -> None:  # type: ignore[no-untyped-def]
    c = container_factory()
    ex = DockerExecutor(container_factory.client, c.id, c.name)
    container_factory.exec(c, ["bash", "-c", "mkdir -p /ro && touch /ro/file"])
    with pytest.raises(RuntimeFailure) as info:
        ex.start_detached(["sleep", "5"], "/ro/file/sub/run.log")  # the log's directory cannot be created
    msg = info.value.message
    assert "exited with status 1" in msg, msg
    assert "no pid file" in msg, msg
    assert "mkdir" in msg and "Not a directory" in msg, msg


def test_a_detached_start_returns_the_group_of_the_started_process(container_factory) -> None:  # type: ignore[no-untyped-def]
    c = container_factory()
    ex = DockerExecutor(container_factory.client, c.id, c.name)
    ref = ex.start_group(["sleep", "30"], "/tmp/x/run.log", marker="test/1/abcd")
    ps = container_factory.exec(c, ["ps", "-eo", "pid=,pgid=,args="]).stdout
    rows = [line.split(None, 2) for line in ps.splitlines() if line.strip()]
    assert [(r[0], r[1]) for r in rows if r[2] == "sleep 30"] == [(str(ref.pgid), str(ref.pgid))]  # its own group
    assert ex.group_alive(ref)
    assert not ex.group_alive(ref.pgid)  # a bare number is never trusted: no identity, no verdict
    assert ex.stop_group(ref, grace_s=5)
    assert not ex.group_alive(ref)


def test_read_file_tells_empty_from_missing_and_reads_slices(container_factory) -> None:  # type: ignore[no-untyped-def]
    c = container_factory()
    ex = DockerExecutor(container_factory.client, c.id, c.name)
    container_factory.exec(c, ["bash", "-c", "printf '0123456789' > /tmp/ten; : > /tmp/empty"])
    assert ex.read_file("/tmp/ten") == b"0123456789"
    assert ex.read_file("/tmp/ten", offset=3, max_bytes=4) == b"3456"
    assert ex.read_file("/tmp/ten", offset=8) == b"89"
    assert ex.read_file("/tmp/empty") == b""
    assert ex.read_file("/tmp/missing") is None
    assert ex.file_size("/tmp/ten") == 10 and ex.file_size("/tmp/missing") is None


def test_a_read_that_fails_is_not_an_empty_file(container_factory) -> None:  # type: ignore[no-untyped-def]
    """A readable path whose read fails (here a directory: tail says "Is a directory"; on a loaded machine a
    tail that could not be forked) is unreadable, never an empty file: an empty start pid file once stopped an
    OOM relaunch. A long file sliced by head (its tail ended by SIGPIPE) is still a whole read."""
    c = container_factory()
    ex = DockerExecutor(container_factory.client, c.id, c.name)
    container_factory.exec(c, ["bash", "-c", "mkdir -p /tmp/adir; seq 1 200000 > /tmp/long"])
    assert ex.read_file("/tmp/adir") is None
    assert ex.read_file("/tmp/adir", offset=0, max_bytes=4) is None
    assert ex.read_file("/tmp/long", offset=0, max_bytes=6) == b"1\n2\n3\n"
    container_factory.exec(c, ["mkfifo", "/tmp/afifo"])
    t0 = time.monotonic()
    assert ex.read_file("/tmp/afifo", max_bytes=64) is None  # a planted FIFO neither blocks nor reads as a file
    assert time.monotonic() - t0 < 30
