"""``verlctl diagnose``'s engine: one streaming pass over a (possibly huge) log.

The result is exactly what :class:`~verlctl.monitor.events.LogParser` with a
:class:`~verlctl.monitor.catalogue.Classifier` gives on every line (the tests compare the two on fixtures and
on fuzzed logs), but most bytes never reach Python code:

* the log is read in large binary chunks, and only complete lines are scanned;
* a verl step line (``step:N - k:v - ...``, most of a verl log's bytes) is found by a literal search and
  handed to the :class:`StepSink` as raw bytes (pieces of a wrapped line joined); the JSON writer checks a
  whole batch of them with C-level operations (allowed characters, one exact regex: keys without colons,
  JSON-grammar numbers) and converts the batch with one join and two ``bytes.replace`` passes; a body that
  fails the check is parsed by :func:`~verlctl.monitor.events.split_metrics` instead. Lines that need
  cleaning (``\r`` redraws, ANSI colours, Ray's repeat suffix, non-ASCII) go to the parser;
* the text between step lines is scanned by one compiled alternation of the catalogue's literal anchors (a
  trie); only the lines it hits are decoded and given to the parser or, when the parser has nothing to do
  with them, straight to the classifier (with a cache: logs repeat lines);
* for big files the JSON writer runs in a forked process (:class:`PipelinedJsonWriter`), on another core.

Memory is constant: steps are written as they are found; findings are deduplicated (and capped).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from verlctl.monitor.catalogue import Classifier, Finding, Match, all_anchors, literal_alternation
from verlctl.monitor.events import Event, LogParser, Number, Progress, StepMetrics, TotalSteps, split_metrics

CHUNK_SIZE = 8 << 20

#: Lines holding these go to the parser even without an error anchor.
EVENT_ANCHORS: tuple[str, ...] = ("Training Progress", "Total training steps")

_STEP_B = re.compile(rb"step:(\d+) - ")
#: a byte before ``step:`` that makes it part of a longer key (``global_step:``, ``timing_s/step:``)
_NOT_STEP_BEFORE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_/.-")
_DIGITS = frozenset(b"0123456789")
#: printable ASCII except the two characters JSON would have to escape
_JSON_SAFE = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')
#: ``key:value - key:value``: keys without colons, values JSON numbers (the exact JSON grammar)
_JSON_NUMBER = rb"-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][-+]?+[0-9]++)?+"
_SIMPLE_BODY = re.compile(rb"(?:[^:]++:" + _JSON_NUMBER + rb" - )*+[^:]++:" + _JSON_NUMBER)
#: numpy >= 2 scalar reprs around a plain number (``np.float64(0.5)``): unwrapped before the checks
_NP_NUMBER = re.compile(rb"np\.(?:float|int|uint)[0-9]*\((-?[0-9][0-9.eE+-]*)\)")
#: bytes twins of ``events._CONTINUATION_RE`` / ``events.STEP_RE`` (anchored at the line start)
_CONTINUATION_B = re.compile(rb"(?!step:[0-9]+ - )[^\s:()\[]+:\S+(?: - |\s*-?\s*$)")


def fast_step_body(body: bytes) -> bool:
    """True when ``body`` (``k:v - k:v``) can be turned into JSON by plain substitution and means the same
    as :func:`~verlctl.monitor.events.split_metrics` gives: printable ASCII without ``"`` and ``\\``, non-empty
    keys without colons, every value a JSON number (``nan``, ``np.float64(...)``, ``1.`` take the slow path)."""
    return not body.translate(None, _JSON_SAFE) and _SIMPLE_BODY.fullmatch(body) is not None


def steps_json(steps: list[int], bodies: list[bytes]) -> bytes:
    """The JSON elements ``{"step": N, "metrics": {...}}`` (joined by ``,\\n``) for bodies accepted by
    :func:`fast_step_body`, built with one join and two ``replace`` passes over the whole batch: each step's
    prefix is written as ``{"step:N, "metrics:{"`` so that the ``:`` -> ``": `` pass completes it too."""
    parts: list[bytes] = []
    for step, body in zip(steps, bodies):
        parts += (b'{"step:%d, "metrics:{"' % step, body, b"}},\n")
    return b"".join(parts)[:-2].replace(b":", b'": ').replace(b" - ", b', "')


def open_tail(body: bytes) -> tuple[bytes, bool] | None:
    """None when the last item of ``body`` is complete; else (``body`` without a dangling `` -``, True) for a
    dangling separator or (``body``, False) for a cut-off last item -- as :func:`events.split_metrics` sees it."""
    if body and body[-1] in _DIGITS and body.find(b":", body.rfind(b" - ") + 1) >= 0:
        return None  # the common case: the last item has a colon and ends with a digit
    text = body.rstrip() if body[-1:].isspace() else body
    if text.endswith(b" -"):
        return text[:-2].rstrip(), True
    colon = text.find(b":", text.rfind(b" - ") + 1)
    if colon < 0 or colon == len(text) - 1:  # no colon in the last item, or nothing after it
        return body, False
    return None


def drop_open_tail(body: bytes) -> bytes:
    """``body`` without its unfinished end (see :func:`open_tail`)."""
    state = open_tail(body)
    if state is None:
        return body
    head, dangling = state
    if dangling:
        return head
    cut = head.rstrip().rfind(b" - ")
    return head[:cut] if cut >= 0 else b""


def metrics_json(step: int, metrics: dict[str, Number]) -> bytes:
    """The JSON of one step from a parsed dict (``NaN``/``Infinity`` as Python's json module writes them)."""
    import json

    return json.dumps({"step": step, "metrics": metrics}).encode()


# --------------------------------------------------------------------------------------------------
# Where steps go
# --------------------------------------------------------------------------------------------------


class StepSink(Protocol):
    def fast(self, step: int, body: bytes) -> None:
        """A step line whose body passed :func:`fast_step_body`."""

    def event(self, event: StepMetrics) -> None:
        """A step line parsed by :class:`LogParser`."""

    def flush(self) -> None: ...


class JsonStepWriter:
    """Streams the steps as the elements of a JSON array (the caller writes the brackets).

    Fast bodies are queued and converted in batches (one ``replace`` pass per batch); a body that fails
    :func:`fast_step_body` is parsed by :func:`split_metrics` and written by ``json``, in its place."""

    def __init__(self, out: BinaryIO, batch: int = 4096) -> None:
        self.out = out
        self.count = 0
        self._steps: list[int] = []
        self._bodies: list[bytes] = []
        self._pieces: list[bytes] = []
        self._written = False
        self._batch = batch

    def fast(self, step: int, body: bytes) -> None:
        self._steps.append(step)
        self._bodies.append(body)
        if len(self._bodies) >= self._batch:
            self.flush()

    def event(self, event: StepMetrics) -> None:
        self.raw(metrics_json(event.step, event.metrics))

    def raw(self, element: bytes) -> None:
        """One JSON element, already rendered, in its place after the queued bodies."""
        self._convert()
        self._pieces.append(element)
        self.count += 1

    def _convert(self) -> None:
        steps, bodies = self._steps, self._bodies
        if not bodies:
            return
        start = 0
        for i, body in enumerate(bodies):
            if not fast_step_body(body):
                if i > start:
                    self._pieces.append(steps_json(steps[start:i], bodies[start:i]))
                metrics = split_metrics(body.decode("utf-8", "replace")).metrics
                self._pieces.append(metrics_json(steps[i], metrics))
                start = i + 1
        if start < len(bodies):
            self._pieces.append(
                steps_json(steps[start:] if start else steps, bodies[start:] if start else bodies)
            )
        self.count += len(bodies)
        self._steps, self._bodies = [], []

    def flush(self) -> None:
        self._convert()
        if self._pieces:
            self.out.write((b",\n" if self._written else b"\n") + b",\n".join(self._pieces))
            self._written = True
            self._pieces.clear()


class PipelinedJsonWriter:
    """:class:`JsonStepWriter` in a forked child process: this process (the scanner) only queues bodies;
    checking, converting and writing them run on another core. Same output, same order.

    Frames on a pipe: a header (kind, count, payload size) and the payload: ``F`` the steps (int64) then the
    bodies joined by ``\\n`` (a body is one log line: it holds no newline); ``E`` one rendered element;
    ``X`` the end. The child writes to ``out_fd``."""

    def __init__(self, out_fd: int, batch: int = 4096) -> None:
        import multiprocessing
        import os

        ctx = multiprocessing.get_context("fork")
        read_fd, write_fd = os.pipe()
        self._proc = ctx.Process(
            target=_writer_child, args=(read_fd, write_fd, out_fd, batch), name="verlctl-json-writer"
        )
        self._proc.start()
        os.close(read_fd)
        self._pipe = os.fdopen(write_fd, "wb", buffering=1 << 16)
        self.count = 0
        self._steps: list[int] = []
        self._bodies: list[bytes] = []
        self._batch = batch

    def fast(self, step: int, body: bytes) -> None:
        self._steps.append(step)
        self._bodies.append(body)
        if len(self._bodies) >= self._batch:
            self._send_fast()

    def event(self, event: StepMetrics) -> None:
        self._send_fast()
        self._send(b"E", 1, metrics_json(event.step, event.metrics))
        self.count += 1

    def _send_fast(self) -> None:
        if self._bodies:
            from array import array

            n = len(self._bodies)
            self._send(b"F", n, array("q", self._steps).tobytes(), b"\n".join(self._bodies))
            self.count += n
            self._steps, self._bodies = [], []

    def _send(self, kind: bytes, count: int, *payload: bytes) -> None:
        try:
            self._pipe.write(_FRAME.pack(kind, count, sum(map(len, payload))))
            for part in payload:
                self._pipe.write(part)
        except OSError:  # the child is gone: its exit status says why
            self._finish()
            raise RuntimeError("the JSON writer process stopped") from None

    def flush(self) -> None:
        self._send_fast()
        self._send(b"X", 0)
        self._finish()

    def _finish(self) -> None:
        import contextlib

        with contextlib.suppress(OSError):
            self._pipe.close()
        self._proc.join()
        if self._proc.exitcode == _EXIT_BROKEN_PIPE:
            raise BrokenPipeError("stdout was closed")
        if self._proc.exitcode != 0:
            raise RuntimeError(f"the JSON writer process failed (exit {self._proc.exitcode})")


_FRAME = struct.Struct("<cIQ")
_EXIT_BROKEN_PIPE = 32


def _writer_child(read_fd: int, write_fd: int, out_fd: int, batch: int) -> None:
    import contextlib
    import os
    import sys
    from array import array

    os.close(write_fd)
    pipe = os.fdopen(read_fd, "rb", buffering=1 << 16)
    out = os.fdopen(os.dup(out_fd), "wb", buffering=1 << 20)
    writer = JsonStepWriter(out, batch=batch)
    try:
        while True:
            header = pipe.read(_FRAME.size)
            if len(header) < _FRAME.size:
                sys.exit(3)  # the scanner died: write nothing more
            kind, count, size = _FRAME.unpack(header)
            if kind == b"F":
                steps = array("q")
                steps.frombytes(pipe.read(8 * count))
                writer._steps.extend(steps)
                writer._bodies.extend(pipe.read(size - 8 * count).split(b"\n"))
                if len(writer._bodies) >= batch:
                    writer.flush()
            elif kind == b"E":
                writer.raw(pipe.read(size))
            else:
                break
        writer.flush()
        out.flush()
    except BrokenPipeError:
        sys.exit(_EXIT_BROKEN_PIPE)
    finally:
        with contextlib.suppress(OSError):
            out.close()


class TeeSink:
    """Hands every step to each of ``sinks`` (the report's charts and its health rules, in one pass)."""

    def __init__(self, *sinks: StepSink) -> None:
        self.sinks = sinks

    def fast(self, step: int, body: bytes) -> None:
        for s in self.sinks:
            s.fast(step, body)

    def event(self, event: StepMetrics) -> None:
        for s in self.sinks:
            s.event(event)

    def flush(self) -> None:
        for s in self.sinks:
            s.flush()


class LastStep:
    """Keeps only the last step (for the text summary)."""

    def __init__(self) -> None:
        self.count = 0
        self._fast: tuple[int, bytes] | None = None
        self._event: StepMetrics | None = None

    def fast(self, step: int, body: bytes) -> None:
        self.count += 1
        self._fast, self._event = (step, body), None

    def event(self, event: StepMetrics) -> None:
        self.count += 1
        self._fast, self._event = None, event

    def flush(self) -> None:
        pass

    def last(self) -> tuple[int, dict[str, Number]] | None:
        if self._event is not None:
            return self._event.step, self._event.metrics
        if self._fast is not None:
            return self._fast[0], split_metrics(self._fast[1].decode()).metrics
        return None


# --------------------------------------------------------------------------------------------------
# The scanner
# --------------------------------------------------------------------------------------------------


@dataclass
class Diagnosis:
    findings: list[Finding]
    step: int | None  # the last step seen (a step line or the progress bar), None if none
    total: int | None  # the last known total of steps (progress bar or "Total training steps")
    lines: int
    steps: int  # step lines seen
    dropped_findings: int = 0  # distinct findings beyond Classifier.max_findings (counted, not kept)
    cut_lines: int = 0  # lines longer than MAX_CARRIED_LINE whose excess was dropped unread

    @property
    def progress(self) -> dict[str, int | None] | None:
        return None if self.step is None else {"step": self.step, "total": self.total}


#: The most bytes kept of a line that spans reads (input without newlines, such as /dev/zero or a binary
#: file, would otherwise be held whole, growing without bound and re-copied on every read).
MAX_CARRIED_LINE = 1 << 20


class DiagnoseScanner:
    """Feed binary chunks of a log (any sizes), then :meth:`close` for the :class:`Diagnosis`.

    A line that spans chunks is kept up to :data:`MAX_CARRIED_LINE` bytes; the rest of it is dropped
    (counted in ``Diagnosis.cut_lines``), so memory stays bounded on input without newlines.
    """

    def __init__(self, sink: StepSink, classifier: Classifier | None = None) -> None:
        self.sink = sink
        self.classifier = classifier or Classifier()
        self.parser = LogParser(self.classifier)
        anchors = set(all_anchors(self.classifier.matcher.catalogue)) | set(EVENT_ANCHORS)
        self._prefilter = re.compile(literal_alternation(sorted(anchors)).encode())
        self._carry = b""
        self._cut = False  # the carried line was cut at MAX_CARRIED_LINE
        self._cut_lines = 0
        self._plain_lines: dict[bytes, tuple[Match | None, int]] = {}  # lines only the classifier looks at
        self._lines = 0  # complete lines before the current buffer
        self._step: int | None = None
        self._total: int | None = None
        self._steps = 0
        # within the buffer being scanned
        self._buf = b""
        self._counted_pos = 0
        self._counted_lines = 0

    # ---- public ----------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if not data:
            return
        cut = data.rfind(b"\n")
        if cut < 0:
            self._hold(data)
            return
        if self._carry:
            first = data.find(b"\n")
            self._hold(data[:first])  # the end of the carried line (kept up to the cap)
            buf = self._carry + data[first : cut + 1]
        else:
            buf = data[: cut + 1]
        self._carry = b""
        self._cut = False
        self._hold(data[cut + 1 :])
        self._scan(buf)

    def _hold(self, piece: bytes) -> None:
        """Append to the carried (unterminated) line, keeping at most MAX_CARRIED_LINE bytes of it."""
        room = MAX_CARRIED_LINE - len(self._carry)
        if len(piece) <= room:
            self._carry += piece
            return
        if room > 0:
            self._carry += piece[:room]
        if not self._cut:
            self._cut = True
            self._cut_lines += 1

    def close(self) -> Diagnosis:
        if self._carry:
            buf, self._carry = self._carry, b""
            self._scan(buf)
            self._lines += 1  # the unterminated last line
        self._events(self.parser.close())
        self.sink.flush()
        return Diagnosis(
            findings=self.classifier.findings(),
            step=self._step,
            total=self._total,
            lines=self._lines,
            steps=self._steps,
            dropped_findings=self.classifier.dropped,
            cut_lines=self._cut_lines,
        )

    # ---- scanning --------------------------------------------------------------------------------

    def _lineno(self, pos: int) -> int:
        """1-based number of the line starting at ``pos`` (positions must not decrease)."""
        self._counted_lines += self._buf.count(b"\n", self._counted_pos, pos)
        self._counted_pos = pos
        return self._lines + self._counted_lines + 1

    def _scan(self, buf: bytes) -> None:
        self._buf = buf
        self._counted_pos = 0
        self._counted_lines = 0
        n = len(buf)
        pos = 0
        step_search = _STEP_B.search
        anchor_search = self._prefilter.search
        find = buf.find
        rfind = buf.rfind
        parser = self.parser
        fast = self.sink.fast
        if parser.wants_next_line and n:
            pos = self._slow(0, _line_end(buf, 0))
        while pos < n:
            m = step_search(buf, pos)
            seg_end = m.start() if m is not None else n
            # the text before the next step marker: only lines with an anchor need a closer look
            while pos < seg_end:
                hit = anchor_search(buf, pos, seg_end)
                if hit is None:
                    break
                start = hit.start()
                end = find(b"\n", start)
                pos = self._slow(rfind(b"\n", 0, start) + 1, n if end < 0 else end)
            if m is None:
                break
            s = m.start()
            if s < pos:
                continue  # the step line was parsed whole (it held an anchor, or continued a held line)
            body_start = m.end()
            if s and buf[s - 1] in _NOT_STEP_BEFORE:
                pos = body_start  # ``global_step:N - ``: part of a longer key, keep scanning the line
                continue
            end = find(b"\n", body_start)
            if end < 0:
                end = n
            if parser.wants_next_line:
                pos = self._slow(rfind(b"\n", 0, s) + 1, end)
                continue
            body = buf[body_start:end]
            if (
                body
                and body[-1] in _DIGITS  # (so no Ray repeat suffix; a numpy repr is left to the sink)
                and body.find(b":", body.rfind(b" - ") + 1) >= 0
                and body.isascii()
                and b"\r" not in body
                and b"\x1b" not in body
            ):  # the common case: a complete line that needs no cleaning
                step = int(m.group(1))
                fast(step, body)
                self._step = step
                self._steps += 1
                pos = end + 1
                continue
            after = self._fast_step(int(m.group(1)), body_start, end)
            pos = after if after >= 0 else self._slow(rfind(b"\n", 0, s) + 1, end)
        self._lines += buf.count(b"\n")

    def _fast_step(self, step: int, body_start: int, end: int) -> int:
        """The uncommon step lines: numpy reprs, or a line that ends inside the metrics (a wrapped line whose
        pieces follow). Emits the step without the parser when it can; returns where the next line starts,
        or -1 when the line needs the parser."""
        buf = self._buf
        body = buf[body_start:end]
        if not body.isascii() or b"\r" in body or b"\x1b" in body:
            return -1  # the parser cleans these (tqdm segments, colours; Unicode spaces)
        closing = body.rstrip()[-1:]
        if closing in (b")", b"]"):  # Ray's "[repeated Nx ...]" suffix (the parser strips it); numpy reprs
            if b"[repeated" in body:
                return -1
            if b"np." in body:  # numpy >= 2 prints every value so: unwrap (other bodies: the sink copes)
                body = _NP_NUMBER.sub(rb"\1", body)
        state = open_tail(body)
        if state is not None:  # the line ends inside the metrics: wrapped pieces may follow
            n = len(buf)
            parts = [body]
            while state is not None:
                head, dangling = state
                nxt = end + 1
                if nxt >= n:
                    return -1  # the next line is not in this buffer: the parser holds the step across chunks
                piece_end = buf.find(b"\n", nxt)
                if piece_end < 0:
                    piece_end = n
                piece = buf[nxt:piece_end]
                # (numpy reprs in a piece are left to the sink: it parses what it cannot convert)
                if not piece.isascii() or b"\x1b" in piece:
                    return -1
                if _CONTINUATION_B.match(piece) is None:  # a Ray prefix, a step line, any other text
                    break  # not a piece of this step: the unfinished end is dropped
                if dangling:
                    parts[-1] = head
                    parts.append(b" - ")
                parts.append(piece)
                end = piece_end
                # a piece starts inside an item and holds a colon: the text's end decides, as in the piece
                if piece[-1] in _DIGITS and piece.find(b":", piece.rfind(b" - ") + 1) >= 0:
                    state = None
                    break
                state = open_tail(piece)
            body = b"".join(parts) if len(parts) > 1 else parts[0]
            if state is not None:
                body = drop_open_tail(body)
        self.sink.fast(step, body)
        self._step = step
        self._steps += 1
        return end + 1

    def _slow(self, start: int, end: int) -> int:
        """Parse and classify the line ``buf[start:end]``, and the next ones while the parser holds an event
        that they may complete; returns where the next unparsed line starts."""
        buf = self._buf
        n = len(buf)
        parser = self.parser
        known = self._plain_lines
        while True:
            lineno = self._lineno(start)
            raw = buf[start:end]
            hit = known.get(raw) if parser.wants_next_line is False else None
            if hit is None:
                line = raw.decode("utf-8", "replace")
                if parser.needs(line):
                    self._events(parser.feed_line(lineno, line))
                else:  # only the classifier cares: skip the parser (and remember the verdict for this text)
                    hit = self.classifier.match_line(line)
                    if len(known) >= 4096:
                        known.clear()
                    known[raw] = hit
            if hit is not None:
                parser.lines = lineno
                if hit[0] is not None:
                    self.classifier.add(lineno, hit[0], hit[1])
            start = end + 1
            if start >= n or not parser.wants_next_line:
                return start
            end = _line_end(buf, start)

    def _events(self, events: Iterable[Event]) -> None:
        for event in events:
            if isinstance(event, StepMetrics):
                self.sink.event(event)
                self._step = event.step
                self._steps += 1
            elif isinstance(event, Progress):
                self._step = event.step
                if event.total is not None:
                    self._total = event.total
            elif isinstance(event, TotalSteps):
                self._total = event.total


def _line_end(buf: bytes, pos: int) -> int:
    end = buf.find(b"\n", pos)
    return len(buf) if end < 0 else end


# --------------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------------


def diagnose_stream(stream: BinaryIO, sink: StepSink, chunk_size: int = CHUNK_SIZE) -> Diagnosis:
    scanner = DiagnoseScanner(sink)
    read = stream.read
    while True:
        data = read(chunk_size)
        if not data:
            break
        scanner.feed(data)
    return scanner.close()


def diagnose_bytes(data: bytes, sink: StepSink | None = None) -> Diagnosis:
    """Diagnose a whole log held in memory (tests, small logs)."""
    scanner = DiagnoseScanner(sink or LastStep())
    scanner.feed(data)
    return scanner.close()
