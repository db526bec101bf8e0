"""Follow a growing file in an executor's target: a streaming ``tail -F`` exec in a container (no polling,
no CPU while the file is quiet), cheap polling of ``stat`` on the host.

A follower also says how fresh what it returned is (:attr:`Follower.synced_at`): a verdict drawn from the *absence* of
new text (a stall) is only sound once the file was read to its end after the verdict's moment, not while the reader
lags behind (a slow or hung file system, a watcher that was not scheduled for a while)."""

from __future__ import annotations

import contextlib
import math
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator

from verlctl.runtime.executor import DockerExecutor, Executor
from verlctl.runtime.procscan import FOLLOW_VAR


class _Tail:
    """The container-side identity of one follower exec: its PID *in the container* and a token in its
    environment (``ExecInspect.Pid`` is a host PID: meaningless inside the container). The token starts with the
    run id (``<run id>/<random>``), so that `verlctl stop` can find the run's followers that a watcher killed
    with -9 left behind (:func:`verlctl.runtime.procscan.stop_followers`)."""

    def __init__(self, owner: str = "") -> None:
        import secrets

        self.token = f"{owner}/{secrets.token_hex(8)}" if owner else secrets.token_hex(8)
        self.pid: int | None = None
        self.ex: DockerExecutor | None = None
        self.stopped = False
        self.killed = False

    def kill(self) -> None:
        """Stop our own tail: by its container PID, after checking the token in its environment, in the
        container's PID namespace (one exec). Before its PID was read (the exec's first line not yet received:
        a reader that was not scheduled, a stop during start-up), every process of the container that carries
        this follower's token is stopped: only our own exec carries it."""
        self.stopped = True
        if self.ex is None or self.killed:
            return  # no exec yet: the reader creates none once stopped, or stops it at its first line
        if self.pid is None:
            self.kill_unread()
            return  # an exec not yet started when the scan ran is stopped at its first line
        script = ('tr "\\0" "\\n" < "/proc/$1/environ" 2>/dev/null | grep -qxF "$FOLLOW_VAR=$2" '
                  '&& kill -- "$1"; exit 0')
        self.ex.run(["sh", "-c", script, "verlctl-unfollow", str(self.pid), self.token],
                    env={"FOLLOW_VAR": FOLLOW_VAR}, timeout=20)
        self.killed = True

    def kill_unread(self) -> None:
        """Stop every process of the container that carries this follower's token (its exec, whose PID was
        not read), without stopping the follower."""
        if self.ex is None:
            return
        script = ('for p in /proc/[0-9]*; do tr "\\0" "\\n" < "$p/environ" 2>/dev/null '
                  '| grep -qxF "$FOLLOW_VAR=$1" && kill -- "${p#/proc/}"; done; exit 0')
        self.ex.run(["sh", "-c", script, "verlctl-unfollow", self.token], env={"FOLLOW_VAR": FOLLOW_VAR}, timeout=20)


#: How long a follower's exec may take to deliver its first line (its PID) before it is taken for lost: the
#: engine sometimes loses the start of an exec's output (moby/moby#27289), and then the exec is started again.
FIRST_LINE_S = 20.0
#: How many execs a follower starts before it gives up on an engine that delivers none of their output.
FIRST_LINE_TRIES = 3


def follow(ex: Executor, path: str, offset: int, stop: threading.Event, tail: _Tail | None = None,
           synced: Callable[[float], None] | None = None) -> Iterator[str]:
    """New text of ``path`` from ``offset`` on, as it is written; ends when ``stop`` is set. A polling follower
    calls ``synced(t)`` after each pass that found the file and nothing more to read in it: everything written
    before the monotonic time ``t`` has been yielded."""
    if isinstance(ex, DockerExecutor):
        yield from _follow_docker(ex, path, offset, stop, tail or _Tail())
    else:
        yield from _follow_polling(ex, path, offset, stop, synced=synced)


def _follow_polling(ex: Executor, path: str, offset: int, stop: threading.Event, every: float = 0.25,
                    synced: Callable[[float], None] | None = None) -> Iterator[str]:
    pos = offset
    while not stop.is_set():
        began = time.monotonic()  # before the size is read: what was written before it is at most that size
        size = ex.file_size(path)
        if size is not None and size < pos:
            pos = 0  # truncated / replaced
        if size is not None and size > pos:
            data = ex.read_file(path, offset=pos, max_bytes=size - pos) or b""
            pos += len(data)
            yield data.decode("utf-8", errors="replace")
        else:
            if synced is not None and size is not None:  # a file that cannot be found was not read
                synced(began)
            stop.wait(every)


def _follow_docker(ex: DockerExecutor, path: str, offset: int, stop: threading.Event, tail: _Tail) -> Iterator[str]:
    """One streaming ``tail -F`` exec: no polling, no CPU while the log is quiet. A TTY exec carries raw
    bytes (no stream framing); the TTY's CRLF is turned back into LF. The exec first prints its own PID
    (container side) on a line of its own, then becomes ``tail``: that PID is what :meth:`_Tail.kill` stops.
    An exec whose first line does not arrive (within ``FIRST_LINE_S``) or arrives cut is stopped by its token
    and started again from the same offset (nothing of it was returned), at most ``FIRST_LINE_TRIES`` times."""
    try:
        for _ in range(FIRST_LINE_TRIES):
            if tail.stopped or stop.is_set():
                return
            ran = yield from _one_exec(ex, path, offset, stop, tail)
            if ran:
                return
        raise RuntimeError(f"the container engine delivered no output of `tail -F {path}` in "
                           f"{FIRST_LINE_TRIES} tries")
    finally:
        with contextlib.suppress(Exception):  # best effort clean-up of our own tail
            tail.kill()


def _one_exec(ex: DockerExecutor, path: str, offset: int, stop: threading.Event,
              tail: _Tail) -> Generator[str, None, bool]:
    """One follower exec; False when its first line was lost (the exec is stopped then, nothing was yielded)."""
    script = 'echo "@@pid $$"; exec tail -c "+$1" -F -- "$2"'
    cmd = ["sh", "-c", script, "verlctl-follow", str(offset + 1), path]
    eid = ex.api.exec_create(ex.container_id, cmd, tty=True, stdout=True, stderr=False,
                             environment={FOLLOW_VAR: tail.token})["Id"]
    tail.ex = ex
    lock = threading.Lock()
    state = {"first_read": False, "lost": False}

    def lost() -> None:  # no first line in time: stop the exec (its stream ends), unless the line came meanwhile
        with lock:
            if state["first_read"]:
                return
            state["lost"] = True
        with contextlib.suppress(Exception):
            tail.kill_unread()

    timer = threading.Timer(FIRST_LINE_S, lost)
    timer.daemon = True
    timer.start()
    pending_cr = False
    head: bytes | None = b""  # the exec's first line until it was read (None after)
    try:
        stream = ex.api.exec_start(eid, stream=True, tty=True)
        for chunk in stream:
            if head is not None:  # read it even when stopped meanwhile: it names what to stop
                head += chunk
                if b"\n" not in head:
                    continue
                first, _, chunk = head.partition(b"\n")
                head = None
                word = first.strip().decode(errors="replace")
                with lock:
                    state["first_read"] = True
                    cut = state["lost"] or not (word.startswith("@@pid ") and word[6:].isdigit())
                if cut:  # the start of its output was lost: what follows may lack lines too
                    tail.kill_unread()
                    return False
                tail.pid = int(word[6:])
                if tail.stopped or stop.is_set():  # stopped while the exec was starting
                    tail.kill()
                    return True
                if not chunk:
                    continue
            if stop.is_set():
                return True
            text = chunk.decode("utf-8", errors="replace")
            if pending_cr:
                text = "\r" + text
                pending_cr = False
            if text.endswith("\r"):
                text, pending_cr = text[:-1], True
            yield text.replace("\r\n", "\n")
        return head is None or tail.stopped or stop.is_set()  # ended without its first line: lost
    finally:
        timer.cancel()
        timer.join()  # a stop by token in flight ends before another exec with the same token starts


class _Synced:
    """A polling follower's mark in its queue, after the text it covers: the file was read to its end as of ``at``."""

    __slots__ = ("at",)

    def __init__(self, at: float) -> None:
        self.at = at


class Follower:
    """Runs :func:`follow` in a daemon thread; ``get(timeout)`` returns new text ('' when none came).

    ``synced_at`` (monotonic): everything written to the file before it has been returned by ``get``. A polling
    follower knows it exactly (its pass that found nothing more to read began then); a streaming one (``tail -F``
    in a container pushes text as it is written) counts the start of each ``get`` until its stream ends."""

    def __init__(self, ex: Executor, path: str, offset: int, owner: str = "") -> None:
        self._stop = threading.Event()
        self._tail = _Tail(owner)
        self._queue: queue.Queue[str | _Synced | None] = queue.Queue()
        self._streams = isinstance(ex, DockerExecutor)
        self.ended = False
        self.synced_at = -math.inf
        self._thread = threading.Thread(target=self._pump, args=(ex, path, offset), daemon=True,
                                        name="verlctl-follow")
        self._thread.start()

    def _pump(self, ex: Executor, path: str, offset: int) -> None:
        try:
            for text in follow(ex, path, offset, self._stop, self._tail,
                               synced=lambda at: self._queue.put(_Synced(at))):
                self._queue.put(text)
        except Exception as exc:  # noqa: BLE001 - reported through the queue
            self._queue.put(f"\n[verlctl] log follower stopped: {exc}\n")
        finally:
            self._queue.put(None)

    def get(self, timeout: float) -> str:
        began = time.monotonic()
        deadline = began + timeout
        parts: list[str] = []
        while True:  # wait for text until the deadline, then drain what else is ready
            try:
                item = (self._queue.get_nowait() if parts
                        else self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
            if item is None:
                self.ended = True
                break
            if isinstance(item, _Synced):
                self.synced_at = max(self.synced_at, item.at)
            else:
                parts.append(item)
        if self._streams and not self.ended:  # a stream that ended reads nothing more
            self.synced_at = max(self.synced_at, began)
        return "".join(parts)

    def drain(self, since: float, bound_s: float) -> str:
        """The text written to the file before ``since`` (monotonic) and not yet returned: read until the
        follower has caught up with that moment, its stream ended, or ``bound_s`` passed. What a reader calls
        once the writer has gone, so that it judges the file's whole text and not the part read so far."""
        deadline = time.monotonic() + bound_s
        parts: list[str] = []
        while self.synced_at < since and not self.ended and time.monotonic() < deadline:
            parts.append(self.get(timeout=min(0.5, max(0.0, deadline - time.monotonic()))))
        return "".join(parts)

    def stop(self) -> None:
        """Stop following now: the container's ``tail`` is stopped from here (the reading thread may be
        blocked on a quiet log), so nothing outlives the follower."""
        self._stop.set()
        with contextlib.suppress(Exception):  # best effort: the thread's own clean-up tries again
            self._tail.kill()
        self._thread.join(timeout=15)


#: How much of a file :func:`write_whole` holds at once.
WHOLE_CHUNK = 4 << 20


def write_whole(read: Callable[[int, int], bytes | None], size: int, write: Callable[[str], object],
                chunk: int = WHOLE_CHUNK) -> int:
    """Write bytes ``[0, size)`` of a file as text (``verlctl logs -n 0`` of any run): ``read(offset, n)`` at most
    ``chunk`` bytes at a time, never the whole file in memory, decoded as UTF-8 across the reads (a character
    split between two reads is written whole). The bytes written; fewer when the file shrank or could not be read."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pos = 0
    while pos < size and (data := read(pos, min(chunk, size - pos))):
        write(decoder.decode(data))
        pos += len(data)
    write(decoder.decode(b"", final=True))
    return pos
