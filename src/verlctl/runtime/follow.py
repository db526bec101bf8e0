"""Follow a growing file in an executor's target: a streaming ``tail -F`` exec in a container (no polling,
no CPU while the file is quiet), cheap polling of ``stat`` on the host."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from verlctl.runtime.executor import DockerExecutor, Executor


def follow(ex: Executor, path: str, offset: int, stop: threading.Event) -> Iterator[str]:
    """New text of ``path`` from ``offset`` on, as it is written; ends when ``stop`` is set."""
    if isinstance(ex, DockerExecutor):
        yield from _follow_docker(ex, path, offset, stop)
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


def _follow_docker(ex: DockerExecutor, path: str, offset: int, stop: threading.Event) -> Iterator[str]:
    """One streaming ``tail -F`` exec: no polling, no CPU while the log is quiet. A TTY exec carries raw
    bytes (no stream framing); the TTY's CRLF is turned back into LF."""
    cmd = ["tail", "-c", f"+{offset + 1}", "-F", "--", path]
    eid = ex.api.exec_create(ex.container_id, cmd, tty=True, stdout=True, stderr=False)["Id"]
    stream = ex.api.exec_start(eid, stream=True, tty=True)
    pending_cr = False
    try:
        for chunk in stream:
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
        try:
            info = ex.api.exec_inspect(eid)
            if info.get("Running") and info.get("Pid"):
                ex.run(["kill", str(info["Pid"])], timeout=10)
        except Exception:  # noqa: BLE001 - best effort clean-up of our own tail
            pass


class Follower:
    """Runs :func:`follow` in a daemon thread; ``get(timeout)`` returns new text ('' when none came)."""

    def __init__(self, ex: Executor, path: str, offset: int = 0) -> None:
        self._stop = threading.Event()
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.ended = False
        self._thread = threading.Thread(target=self._pump, args=(ex, path, offset), daemon=True,
                                        name="verlctl-follow")
        self._thread.start()

    def _pump(self, ex: Executor, path: str, offset: int) -> None:
        try:
            for text in follow(ex, path, offset, self._stop):
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
        self._stop.set()
