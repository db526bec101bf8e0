"""Follow a growing file in an executor's target: a streaming ``tail -F`` exec in a container (no polling,
no CPU while the file is quiet), cheap polling of ``stat`` on the host."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator

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

    def kill(self) -> None:
        """Stop our own tail: by its container PID, after checking the token in its environment, in the
        container's PID namespace (one exec)."""
        self.stopped = True
        if self.ex is None or self.pid is None:
            return
        script = ('tr "\\0" "\\n" < "/proc/$1/environ" 2>/dev/null | grep -qxF "$FOLLOW_VAR=$2" '
                  '&& kill -- "$1"; exit 0')
        self.ex.run(["sh", "-c", script, "verlctl-unfollow", str(self.pid), self.token],
                    env={"FOLLOW_VAR": FOLLOW_VAR}, timeout=20)
        self.pid = None



def follow(ex: Executor, path: str, offset: int, stop: threading.Event, tail: _Tail | None = None) -> Iterator[str]:
    """New text of ``path`` from ``offset`` on, as it is written; ends when ``stop`` is set."""
    if isinstance(ex, DockerExecutor):
        yield from _follow_docker(ex, path, offset, stop, tail or _Tail())
    else:
        yield from _follow_polling(ex, path, offset, stop)


def _follow_polling(ex: Executor, path: str, offset: int, stop: threading.Event, every: float = 0.25) -> Iterator[str]:
    pos = offset
    while not stop.is_set():
        size = ex.file_size(path)
        if size is not None and size < pos:
            pos = 0  # truncated / replaced
        if size is not None and size > pos:
            data = ex.read_file(path, offset=pos, max_bytes=size - pos) or b""
            pos += len(data)
            yield data.decode("utf-8", errors="replace")
        else:
            stop.wait(every)


def _follow_docker(ex: DockerExecutor, path: str, offset: int, stop: threading.Event, tail: _Tail) -> Iterator[str]:
    """One streaming ``tail -F`` exec: no polling, no CPU while the log is quiet. A TTY exec carries raw
    bytes (no stream framing); the TTY's CRLF is turned back into LF. The exec first prints its own PID
    (container side) on a line of its own, then becomes ``tail``: that PID is what :meth:`_Tail.kill` stops."""
    script = 'echo "@@pid $$"; exec tail -c "+$1" -F -- "$2"'
    cmd = ["sh", "-c", script, "verlctl-follow", str(offset + 1), path]
    eid = ex.api.exec_create(ex.container_id, cmd, tty=True, stdout=True, stderr=False,
                             environment={FOLLOW_VAR: tail.token})["Id"]
    tail.ex = ex
    stream = ex.api.exec_start(eid, stream=True, tty=True)
    pending_cr = False
    head = b""
    try:
        for chunk in stream:
            if tail.pid is None and not tail.stopped:
                head += chunk
                if b"\n" not in head:
                    continue
                first, _, chunk = head.partition(b"\n")
                word = first.strip().decode(errors="replace").removeprefix("@@pid ")
                if word.isdigit():
                    tail.pid = int(word)
                if tail.stopped or stop.is_set():  # stopped while the exec was starting
                    tail.kill()
                    break
                if not chunk:
                    continue
            if stop.is_set():
                break
            text = chunk.decode("utf-8", errors="replace")
            if pending_cr:
                text = "\r" + text
                pending_cr = False
            if text.endswith("\r"):
                text, pending_cr = text[:-1], True
            yield text.replace("\r\n", "\n")
    finally:
        with contextlib.suppress(Exception):  # best effort clean-up of our own tail
            tail.kill()


class Follower:
    """Runs :func:`follow` in a daemon thread; ``get(timeout)`` returns new text ('' when none came)."""

    def __init__(self, ex: Executor, path: str, offset: int = 0, owner: str = "") -> None:
        self._stop = threading.Event()
        self._tail = _Tail(owner)
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.ended = False
        self._thread = threading.Thread(target=self._pump, args=(ex, path, offset), daemon=True,
                                        name="verlctl-follow")
        self._thread.start()

    def _pump(self, ex: Executor, path: str, offset: int) -> None:
        try:
            for text in follow(ex, path, offset, self._stop, self._tail):
                self._queue.put(text)
        except Exception as exc:  # noqa: BLE001 - reported through the queue
            self._queue.put(f"\n[verlctl] log follower stopped: {exc}\n")
        finally:
            self._queue.put(None)

    def get(self, timeout: float) -> str:
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return ""
        if item is None:
            self.ended = True
            return ""
        parts = [item]
        while True:  # drain what else is ready
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self.ended = True
                break
            parts.append(more)
        return "".join(parts)

    def stop(self) -> None:
        """Stop following now: the container's ``tail`` is stopped from here (the reading thread may be
        blocked on a quiet log), so nothing outlives the follower."""
        self._stop.set()
        with contextlib.suppress(Exception):  # best effort: the thread's own clean-up tries again
            self._tail.kill()
        self._thread.join(timeout=15)
