"""Shared pieces of the machine probes: the typed "unavailable" result, bounded calls, tool runs.

Every probe returns either its own result model (``status == "ok"``) or :class:`Unavailable`
(``status == "unavailable"``), so that a missing engine or binary is a value, never an exception.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import IO, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T")


class UnavailableCode(str, Enum):
    NOT_FOUND = "not_found"  # the binary is not on PATH
    TIMEOUT = "timeout"  # the probe ran past its own timeout
    FAILED = "failed"  # the tool ran and failed (non-zero exit, unreadable output)
    NO_ENGINE = "no_engine"  # the docker engine cannot be reached
    MISSING_DEPENDENCY = "missing_dependency"  # an optional Python package is not installed
    NOT_PRESENT = "not_present"  # the thing looked for is not on this machine (e.g. no CANN)
    ERROR = "error"  # the probe itself raised (a bug or an unexpected OS error)


class Unavailable(BaseModel):
    """A probe that could not produce its result, and why (one line for people, a code for programs)."""

    model_config = ConfigDict(frozen=True)

    status: Literal["unavailable"] = "unavailable"
    probe: str
    code: UnavailableCode
    reason: str

    def line(self) -> str:
        return f"{self.probe}: unavailable: {self.reason}"


class ProbeModel(BaseModel):
    """Base of every successful probe result: ``status`` is the union discriminator."""

    status: Literal["ok"] = "ok"


def unavailable(probe: str, code: UnavailableCode, reason: str) -> Unavailable:
    return Unavailable(probe=probe, code=code, reason=reason)


# --------------------------------------------------------------------------------------------------
# Bounded calls: daemon threads, so that a call stuck in the kernel (a stalled NFS/FUSE mount) never
# blocks the caller past its deadline nor the interpreter's exit. ThreadPoolExecutor workers are
# joined at interpreter exit, which would turn one stuck ``statvfs`` into a hung ``verlctl detect``.
# --------------------------------------------------------------------------------------------------


@dataclass
class _Box:
    value: object = None
    error: BaseException | None = None
    done: bool = False


class CallTimeout(Exception):
    """Raised by :func:`call_with_timeout` when the call did not finish in time."""


def start_bounded(fn: Callable[[], T], name: str = "verlctl-probe") -> tuple[threading.Thread, _Box]:
    box = _Box()

    def runner() -> None:
        try:
            box.value = fn()
        except BaseException as exc:  # handed to the caller
            box.error = exc
        finally:
            box.done = True

    thread = threading.Thread(target=runner, name=name, daemon=True)
    thread.start()
    return thread, box


def call_with_timeout(fn: Callable[[], T], timeout: float, name: str = "verlctl-probe") -> T:
    """Run ``fn`` in a daemon thread; return its value, re-raise its error, or raise CallTimeout.

    On timeout the thread is abandoned (it keeps running in the background until the call returns,
    or until the process exits).
    """
    thread, box = start_bounded(fn, name)
    thread.join(max(0.0, timeout))
    if not box.done:
        raise CallTimeout(f"did not finish within {timeout:g} s")
    if box.error is not None:
        raise box.error
    return box.value  # type: ignore[return-value]


def run_probes_concurrently(
    calls: dict[str, tuple[Callable[[], object], float]],
) -> dict[str, object | CallTimeout | BaseException]:
    """Start every call at once (each in its own daemon thread) and wait for each up to its own timeout.

    Returns, per name, the value, the exception it raised, or a :class:`CallTimeout`.
    """
    started = time.monotonic()
    running = {name: (start_bounded(fn, f"verlctl-{name}"), timeout) for name, (fn, timeout) in calls.items()}
    out: dict[str, object | CallTimeout | BaseException] = {}
    for name, ((thread, box), timeout) in running.items():
        left = timeout - (time.monotonic() - started)
        thread.join(max(0.0, left))
        if not box.done:
            out[name] = CallTimeout(f"did not finish within {timeout:g} s")
        elif box.error is not None:
            out[name] = box.error
        else:
            out[name] = box.value
    return out


# --------------------------------------------------------------------------------------------------
# Running a command-line tool with a timeout
# --------------------------------------------------------------------------------------------------


@dataclass
class ToolOutput:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


#: The most output kept from one stream of a tool (``npu-smi info`` for 16 NPUs is about 10 kB). A tool
#: that prints more (one stuck in a loop printed 17 GB into memory) is stopped.
MAX_TOOL_OUTPUT = 8 * 1024 * 1024


def run_tool(
    probe: str, argv: Sequence[str], timeout: float, max_bytes: int = MAX_TOOL_OUTPUT
) -> ToolOutput | Unavailable:
    """Run ``argv`` (first element looked up on ``PATH``) with a timeout; never raises.

    The tool runs in its own process group (a new session). At most ``max_bytes`` of each of stdout and
    stderr are read; past that, or past the timeout, the whole group is killed (children included, so a
    hung tool's helpers never outlive it) and the result says why.
    """
    binary = argv[0]
    path = shutil.which(binary) if os.sep not in binary else (binary if os.access(binary, os.X_OK) else None)
    if path is None:
        return unavailable(probe, UnavailableCode.NOT_FOUND, f"{binary} not found")
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            [path, *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return unavailable(probe, UnavailableCode.FAILED, f"{binary} could not be run: {exc.strerror or exc}")
    over = threading.Event()
    buffers = (bytearray(), bytearray())

    def reader(stream: IO[bytes], buf: bytearray) -> None:
        with stream:
            while True:
                chunk = stream.read1(65536)  # type: ignore[attr-defined]
                if not chunk:
                    return
                room = max_bytes - len(buf)
                buf += chunk[:room]
                if len(chunk) > room:
                    over.set()
                    _kill_group(proc)
                    return

    threads = [
        threading.Thread(target=reader, args=(stream, buf), name=f"verlctl-{probe}-read", daemon=True)
        for stream, buf in zip((proc.stdout, proc.stderr), buffers)
        if stream is not None
    ]
    for t in threads:
        t.start()
    deadline = started + timeout
    timed_out = False
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            timed_out = True
            break
    if not timed_out:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    command = " ".join(argv)
    if timed_out or over.is_set():
        _kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL: it is gone within moments
            proc.wait(5)
        if over.is_set():
            return unavailable(
                probe,
                UnavailableCode.FAILED,
                f"{command} printed more than {max_bytes // (1024 * 1024)} MiB: stopped it (and its child "
                "processes) and ignored its output",
            )
        return unavailable(
            probe,
            UnavailableCode.TIMEOUT,
            f"{command} did not finish within {timeout:g} s: stopped it (and its child processes)",
        )
    # The tool exited; helpers it left in its group are not part of its answer.
    _kill_group(proc)
    stdout, stderr = (bytes(b).decode("utf-8", errors="replace") for b in buffers)
    return ToolOutput(list(argv), proc.returncode, stdout, stderr, time.monotonic() - started)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group of a tool started by :func:`run_tool` (its own session: pgid == pid).

    The group id is the pid of a child this process started; while any member lives the kernel does not
    reuse that number, so this never reaches another group.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def tool_failure(probe: str, out: ToolOutput) -> Unavailable:
    detail = (out.stderr.strip() or out.stdout.strip()).splitlines()
    last = detail[-1] if detail else "no output"
    return unavailable(
        probe, UnavailableCode.FAILED, f"{' '.join(out.argv)} exited with {out.returncode}: {last[:200]}"
    )


# --------------------------------------------------------------------------------------------------
# Captured text: provenance headers, quote prefixes, shell prompts
# --------------------------------------------------------------------------------------------------

_QUOTE_PREFIX = re.compile(r"^\s*(?:>\s?)+")


def strip_provenance(text: str) -> str:
    """Return the text after the first line that is exactly ``# ---`` (the fixture header), else all."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.rstrip("\r\n") == "# ---":
            return "".join(lines[i + 1 :])
    return text


def unquote_line(line: str) -> str:
    """Drop a trailing CR and markdown quote markers (``> ``) at the start of a pasted line."""
    line = line.rstrip("\r\n")
    if line.lstrip().startswith(">"):
        line = _QUOTE_PREFIX.sub("", line)
    return line


def split_cells(line: str) -> tuple[list[str], bool]:
    """Split a table row on ``|``: the cells (stripped) and whether the row has its closing ``|``.

    ``"| a | b |"`` gives ``(["a", "b"], True)``; a row cut mid-way, ``"| a | b"``, gives
    ``(["a", "b"], False)``.
    """
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    closed = body.rstrip().endswith("|")
    if closed:
        body = body.rstrip()[:-1]
    return [c.strip() for c in body.split("|")], closed


def to_int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    return None


def to_float(text: str | None) -> float | None:
    if text is None:
        return None
    text = text.strip()
    if re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", text):
        return float(text)
    return None
