"""Typed events parsed from a verl training log, incrementally.

A verl log is the driver's console output: Ray-forwarded worker lines (``(TaskRunner pid=N) ...``,
``(WorkerDict pid=N, ip=A.B.C.D) ...``, ``(raylet) ...``), tqdm bars written with carriage returns,
per-step metric lines (``step:N - key:value - ...``, verl ``aggregate_logger.concat_dict_to_str``), pprinted
validation dicts, and stderr interleaved with all of it.

:class:`LogParser` turns that text into :data:`Event` objects. It is incremental: ``feed(chunk)`` accepts any
slice of the byte stream (a line may be split across chunks), so a follower can use it on a live log;
:func:`parse_text` and :func:`iter_file_events` are the whole-log forms.

Line numbers (``Event.line``) are 1-based physical lines (``\\n``-separated). Carriage returns split a physical
line into *segments* (tqdm redraws); every segment keeps the physical line's number.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from verlctl.monitor.finding import Finding

Number = int | float

# --------------------------------------------------------------------------------------------------
# Line cleaning: ANSI codes, Ray / torch prefixes, Ray's dedup suffix
# --------------------------------------------------------------------------------------------------

#: CSI sequences (colours, cursor moves such as tqdm's ``ESC[A``), OSC sequences (hyperlinks), and 2-byte escapes.
ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")

#: A Ray log prefix: ``(TaskRunner pid=1)``, ``(pid=1)``, ``(WorkerDict pid=1, ip=10.0.0.2)``, ``(raylet)``,
#: ``(raylet, ip=10.0.0.128)``, ``(pid=gcs_server)``, ``(autoscaler +1m2s)``. Shell prompts such as
#: ``(base) user@host$`` are *not* prefixes (no ``pid=``), so they are left alone.
RAY_PREFIX_RE = re.compile(
    r"^\((?:(?P<actor>[^\s()]+) )?pid=(?P<pid>[^\s(),]+)(?:, ip=(?P<ip>[^()]*))?\) ?"
    r"|^\((?P<daemon>raylet|gcs_server|monitor|dashboard|dashboard_agent|log_monitor)(?:, ip=[^()]*)?\) ?"
    r"|^\(autoscaler [^()]*\) ?"
)
#: torch.distributed's per-rank prefix on tracebacks: ``[rank1]: ``.
RANK_PREFIX_RE = re.compile(r"^\[rank\d+\]:? ?")
#: Ray's log deduplication suffix, optionally followed by its one-time explanation.
REPEATED_RE = re.compile(
    r"\s*\[repeated (?P<n>\d+)x across cluster\](?:\s*\(Ray deduplicates logs by default\..*\))?\s*$"
)


def literal_alternation(literals: Iterable[str]) -> str:
    """One regex matching any of ``literals``, factored as a trie (``E(?:rror|I0006)``) so that the regex
    engine tries few branches per position. It finds *whether* a line holds an anchor, not which ones."""
    trie: dict[str, dict] = {}
    for lit in literals:
        if not lit:
            raise ValueError("empty anchor")
        node = trie
        for ch in lit:
            node = node.setdefault(ch, {})
        node.clear()  # a shorter literal makes its extensions redundant (existence test)
        node[""] = {}

    def emit(node: dict[str, dict]) -> str:
        branches = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if "" in node or not branches:
            return ""
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return emit(trie)


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (fast path when there is no ESC)."""
    return ANSI_RE.sub("", text) if "\x1b" in text else text


@dataclass(frozen=True)
class CleanLine:
    """One segment of a log line with the wrappers removed: ``text`` is what the program printed."""

    text: str
    source: str | None = None  # the Ray actor / daemon that printed it ("TaskRunner", "raylet", "pid")
    repeats: int = 0  # Ray's "[repeated Nx across cluster]": N more identical lines were folded into this one


def clean_segment(segment: str) -> CleanLine:
    """Strip ANSI codes, a Ray prefix, a ``[rankN]:`` prefix and Ray's repeat suffix from one segment."""
    text = strip_ansi(segment)
    source: str | None = None
    if text.startswith("("):
        m = RAY_PREFIX_RE.match(text)
        if m:
            source = (
                m.group("actor") or m.group("daemon") or ("autoscaler" if m.group("pid") is None else "pid")
            )
            text = text[m.end() :]
    if text.startswith("[rank"):
        m = RANK_PREFIX_RE.match(text)
        if m:
            text = text[m.end() :]
    repeats = 0
    if "[repeated " in text:
        m = REPEATED_RE.search(text)
        if m:
            repeats = int(m.group("n"))
            text = text[: m.start()]
    return CleanLine(text, source, repeats)


# --------------------------------------------------------------------------------------------------
# Metric values
# --------------------------------------------------------------------------------------------------

_INT_RE = re.compile(r"[-+]?\d+")
_FLOAT_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|infinity)", re.IGNORECASE)
#: numpy scalar reprs (numpy >= 2): ``np.float64(0.5)``, ``np.int64(3)``; torch: ``tensor(0.5, device='npu:0')``.
_WRAPPED_RE = re.compile(
    r"(?:np|numpy)\.(?:float|int|uint|longdouble|double|single|half)\d*\(\s*(?P<np>[^(),]*?)\s*\)"
    r"|tensor\(\s*(?P<t>[^(),]*?)\s*(?:,[^()]*(?:\([^()]*\)[^()]*)*)?\)"
)
_BOOLS = {"True": 1, "False": 0, "np.True_": 1, "np.False_": 0, "numpy.True_": 1, "numpy.False_": 0}
_NUMBER_START = frozenset("0123456789-+.")


def parse_value(raw: str) -> Number | None:
    """A metric value as printed by verl: ``0.000``, ``-8.16e-06``, ``83``, ``nan``, ``np.float64(0.3)``,
    ``np.int64(7)``, ``tensor(0.5, device='npu:0')``, ``True``. Integers stay ``int``; ``None`` if not a number."""
    text = raw.strip()
    if not text:
        return None
    if text[0] not in _NUMBER_START:
        if text in _BOOLS:
            return _BOOLS[text]
        m = _WRAPPED_RE.fullmatch(text)
        if m is None:
            return float(text) if _FLOAT_RE.fullmatch(text) else None  # nan / inf
        text = m.group("np") if m.group("np") is not None else m.group("t")
    if text.isdigit():
        return int(text)
    if "." in text or "e" in text or "E" in text or "n" in text or "N" in text:
        return float(text) if _FLOAT_RE.fullmatch(text) else None
    return int(text) if _INT_RE.fullmatch(text) else None


@dataclass
class MetricsBody:
    """The ``key:value - key:value`` part of a step line, split."""

    metrics: dict[str, Number]
    #: an unfinished last item (``response_length/cl``, ``timing_s/ref:``) or ``""``; ``open`` is True when the
    #: text ends in the middle of the list (such a tail, or a dangling `` -``): a wrapped line may continue it.
    tail: str = ""
    open: bool = False


_SEP = " - "


def split_metrics(body: str) -> MetricsBody:
    """Split ``k1:v1 - k2:v2 - ...``. Values that are not numbers are dropped; a duplicated key keeps the
    last value (as a dict would)."""
    text = body.rstrip()
    dangling = False
    if text.endswith(" -"):
        text = text[:-2].rstrip()
        dangling = True
    parts = text.split(_SEP) if text else []
    metrics: dict[str, Number] = {}
    tail = ""
    last = len(parts) - 1
    for i, part in enumerate(parts):
        key, colon, raw = part.partition(":")
        if i == last and not dangling and (not colon or not raw.strip()):
            tail = part  # cut off before (or right after) the colon: may continue on a wrapped line
            break
        if not key or not colon:
            continue
        value = parse_value(raw)
        if value is not None:
            metrics[key] = value
    return MetricsBody(metrics, tail, open=bool(tail) or dangling)


#: A step line: ``step:N - `` (not ``training/global_step:N``, not ``timing_s/step:N``).
STEP_RE = re.compile(r"(?<![A-Za-z0-9_/.-])step:(?P<step>\d+) - ")
#: A line that continues a step line broken by a wrap (``ip_ratio:0.004 - prompt_length/mean:102.5 - ...``).
_CONTINUATION_RE = re.compile(r"[^\s:()\[]+:\S+(?: - |\s*-?\s*$)")

# --------------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------------


class PhaseKind(str, Enum):
    """Milestones of a verl run, in the order they normally appear."""

    RAY_STARTED = "ray_started"  # ray.init / ray start finished
    WORKERS_STARTING = "workers_starting"  # the worker group (WorkerDict & co.) is being created
    ROLLOUT_STARTED = "rollout_started"  # the first generation ran (validation or training rollout)
    CHECKPOINT_SAVING = "checkpoint_saving"  # verl began writing global_step_N
    CHECKPOINT_SAVED = "checkpoint_saved"  # global_step_N is on disk
    TRAINING_FINISHED = "training_finished"  # the last step ran ("Final validation metrics")


#: One-shot phases are reported once per parser; checkpoints once per step.
_ONE_SHOT = {
    PhaseKind.RAY_STARTED,
    PhaseKind.WORKERS_STARTING,
    PhaseKind.ROLLOUT_STARTED,
    PhaseKind.TRAINING_FINISHED,
}


@dataclass(frozen=True)
class Progress:
    """A tqdm ``Training Progress`` update: ``n``/``total`` steps, rate and times in seconds."""

    line: int
    step: int
    total: int | None
    percent: int | None = None
    elapsed_s: float | None = None
    remaining_s: float | None = None
    seconds_per_step: float | None = None  # tqdm shows s/it or it/s; this is always seconds per step


@dataclass(frozen=True)
class StepMetrics:
    """One ``step:N - key:value - ...`` line."""

    line: int
    step: int
    metrics: dict[str, Number]


@dataclass(frozen=True)
class ValidationMetrics:
    """Validation results: ``kind`` is ``initial`` / ``final`` (verl's pprinted dicts) or ``step`` (the
    ``val-core/...``, ``val-aux/...``, ``val/...`` keys of a step line)."""

    line: int
    kind: str
    metrics: dict[str, Number]
    step: int | None = None


@dataclass(frozen=True)
class TotalSteps:
    """verl's ``Total training steps: N`` (printed once the dataloader is built)."""

    line: int
    total: int


@dataclass(frozen=True)
class Phase:
    line: int
    kind: PhaseKind
    step: int | None = None  # the checkpoint's global step
    detail: str = ""


@dataclass(frozen=True)
class ErrorFound:
    """A new failure, from the :class:`LineClassifier` given to the parser (root-causing is done later)."""

    line: int
    finding: Finding


Event = Progress | StepMetrics | ValidationMetrics | TotalSteps | Phase | ErrorFound


class LineClassifier(Protocol):
    """What :class:`LogParser` needs from a classifier (``verlctl.monitor.catalogue.Classifier``)."""

    def feed_line(self, lineno: int, line: str) -> Finding | None: ...


# --------------------------------------------------------------------------------------------------
# Segment parsers
# --------------------------------------------------------------------------------------------------

#: tqdm: ``Training Progress:  10%|█         | 4/1000 [11:18<45:49:11, 165.61s/it]``; unknown total:
#: ``Training Progress: 5it [00:10, 2.00s/it]``.
PROGRESS_RE = re.compile(
    r"Training Progress:\s*(?:(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)|(?P<n2>\d+)it)"
    r"\s*\[(?P<elapsed>[^<\],]*)(?:<(?P<remaining>[^,\]]*))?(?:,\s*(?P<rate>[^\],]*))?"
)
_RATE_RE = re.compile(r"(?P<v>[\d.]+)\s*(?P<unit>s/it|it/s)")
TOTAL_STEPS_RE = re.compile(r"Total training steps: ?(?P<total>\d+)")
_VALIDATION_RE = re.compile(r"(?P<which>Initial |Final |)validation metrics: ?(?P<rest>.*)", re.IGNORECASE)
_DICT_ITEM_RE = re.compile(r"""(?P<q>['"])(?P<key>(?:(?!(?P=q)).)*)(?P=q)\s*:\s*(?P<val>[^,{}]+)""")
_GLOBAL_STEP_RE = re.compile(r"global_step_(?P<step>\d+)")
_CKPT_SAVED_RE = re.compile(
    r"Saved (?:model|optim|extra_state|hf_model|checkpoint|\w+ checkpoint)\w* to \S*global_step_(?P<step>\d+)"
)

#: (marker, phase) -- plain substrings, checked with ``in``.
_PHASE_MARKERS: tuple[tuple[str, PhaseKind], ...] = (
    ("Started a local Ray instance", PhaseKind.RAY_STARTED),
    ("Connected to Ray cluster", PhaseKind.RAY_STARTED),
    ("Ray runtime started", PhaseKind.RAY_STARTED),
    ("colocated worker base class", PhaseKind.WORKERS_STARTING),  # verl single_controller/ray/base.py
    ("test_gen_batch meta info", PhaseKind.ROLLOUT_STARTED),  # verl _validate(): validation generation
    ("validation generation end", PhaseKind.ROLLOUT_STARTED),
    ("Processed prompts:", PhaseKind.ROLLOUT_STARTED),  # vLLM generate() progress bar
    ("Decode batch.", PhaseKind.ROLLOUT_STARTED),  # SGLang scheduler
    ("Prefill batch.", PhaseKind.ROLLOUT_STARTED),
    ("Final validation metrics", PhaseKind.TRAINING_FINISHED),  # verl prints it after the last step
)
_WORKER_SOURCES = ("WorkerDict", "Worker")
#: a line without any of these has nothing for the parser (only the classifier may care)
_PARSER_MARKERS = (
    "Training Progress",
    "step:",
    "Total training steps",
    "alidation metrics",
    "global_step_",
    *(m for m, _ in _PHASE_MARKERS),
)
_PARSER_RE = re.compile(literal_alternation(_PARSER_MARKERS))


def _clock_seconds(text: str | None) -> float | None:
    """tqdm's ``MM:SS`` / ``H:MM:SS`` (hours may exceed 24) / ``1d 2:03:04``."""
    if not text:
        return None
    text = text.strip()
    days = 0
    if "d " in text:
        d, _, text = text.partition("d ")
        if not d.strip().isdigit():
            return None
        days = int(d)
    parts = text.split(":")
    if not all(p.isdigit() for p in parts) or not 2 <= len(parts) <= 3:
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return float(seconds + days * 86400)


def parse_progress(lineno: int, text: str) -> Progress | None:
    """The last ``Training Progress`` bar in ``text`` (a segment may hold more than one)."""
    last = None
    for m in PROGRESS_RE.finditer(text):
        last = m
    if last is None:
        return None
    n = last.group("n") or last.group("n2")
    total = last.group("total")
    seconds_per_step = None
    rate = _RATE_RE.search(last.group("rate") or "")
    if rate:
        v = float(rate.group("v"))
        seconds_per_step = v if rate.group("unit") == "s/it" else (1.0 / v if v else None)
    return Progress(
        line=lineno,
        step=int(n),
        total=int(total) if total is not None else None,
        percent=int(last.group("pct")) if last.group("pct") is not None else None,
        elapsed_s=_clock_seconds(last.group("elapsed")),
        remaining_s=_clock_seconds(last.group("remaining")),
        seconds_per_step=seconds_per_step,
    )


def parse_metrics_dict(text: str) -> dict[str, Number]:
    """Numeric items of a printed dict such as ``{'val-core/x/acc/mean@1': np.float64(0.5), 'n': 3}``."""
    metrics: dict[str, Number] = {}
    for m in _DICT_ITEM_RE.finditer(_unwrap_scalars(text)):
        value = parse_value(m.group("val"))
        if value is not None:
            metrics[m.group("key")] = value
    return metrics


def _unwrap_scalars(text: str) -> str:
    if "(" not in text:
        return text
    return _WRAPPED_RE.sub(lambda m: m.group("np") if m.group("np") is not None else m.group("t"), text)


_VALIDATION_PREFIXES = ("val-core/", "val-aux/", "val/")


def _pprint_string(lines: list[str]) -> str | None:
    """Join pprint's ``("part one "\\n "part two")`` / ``'single'`` string-literal form into the string."""
    import ast

    text = "\n".join(lines).strip()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, str) else None


# --------------------------------------------------------------------------------------------------
# The incremental parser
# --------------------------------------------------------------------------------------------------


@dataclass
class _PendingStep:
    line: int
    step: int
    metrics: dict[str, Number]
    tail: str


@dataclass
class _PendingValidation:
    line: int
    lines: list[str] = field(default_factory=list)


_MAX_VALIDATION_LINES = 400


class LogParser:
    """Incremental verl log parser.

    ``feed(text)`` takes the next piece of the log (any size, lines may be split) and returns the events of
    the lines it completed; ``close()`` flushes the rest at the end of the log. ``feed_line`` is the line-level
    form for callers that split lines themselves. A ``classifier`` (see ``verlctl.monitor.catalogue``) gets
    every complete line and its new findings come back as :class:`ErrorFound` events, so a watcher needs
    only this one object.

    Events appear in log order, with one exception: a step line whose text ends in the middle of a metric
    (a wrapped line, e.g. a 16 KiB docker log split) is held until the next line shows whether it continues.
    """

    def __init__(self, classifier: LineClassifier | None = None) -> None:
        self.classifier = classifier
        self.lines = 0  # complete physical lines seen
        self.total_steps: int | None = None
        self._partial = ""  # text after the last newline
        self._partial_done = 0  # how much of _partial (complete CR segments) was already parsed
        self._pending_step: _PendingStep | None = None
        self._pending_validation: _PendingValidation | None = None
        self._phases_seen: set[PhaseKind] = set()
        self._checkpoints_seen: set[tuple[PhaseKind, int]] = set()
        self._last_step: int | None = None

    # ---- public API ------------------------------------------------------------------------------

    def feed(self, text: str) -> list[Event]:
        """Parse the next piece of the log."""
        events: list[Event] = []
        if not text:
            return events
        buf = self._partial + text
        lines = buf.split("\n")
        self._partial = lines.pop()
        done = self._partial_done
        for i, line in enumerate(lines):
            self.lines += 1
            events.extend(self._line(self.lines, line, skip=done if i == 0 else 0))
            done = 0
        self._partial_done = done
        # tqdm redraws with '\r' and no newline: parse the complete CR segments of the unfinished line now.
        cut = self._partial.rfind("\r")
        # (a step held from the previous line waits: this line's first segment may be its wrapped piece)
        if cut >= self._partial_done and (self._partial_done or not self.wants_next_line):
            lineno = self.lines + 1
            events.extend(
                self._segments(lineno, self._partial[self._partial_done : cut], bool(self._partial_done))
            )
            self._partial_done = cut + 1
        return events

    def feed_line(self, lineno: int, line: str) -> list[Event]:
        """Parse one complete physical line (without its ``\\n``); ``lineno`` is its 1-based number."""
        self.lines = lineno
        return self._line(lineno, line, skip=0)

    def close(self) -> list[Event]:
        """End of the log: parse an unterminated last line and emit anything held back."""
        events: list[Event] = []
        if self._partial:
            self.lines += 1
            events.extend(self._line(self.lines, self._partial, skip=self._partial_done))
            self._partial = ""
            self._partial_done = 0
        events.extend(self._flush_step())
        events.extend(self._flush_validation())
        return events

    def needs(self, line: str) -> bool:
        """False when ``feed_line(line)`` can only pass the line to the classifier (no event of the parser's
        own can come from it now): callers may then classify it themselves."""
        return (
            self._pending_step is not None
            or self._pending_validation is not None
            or _PARSER_RE.search(line) is not None
            or (PhaseKind.WORKERS_STARTING not in self._phases_seen and "Worker" in line)
        )

    @property
    def wants_next_line(self) -> bool:
        """True while an event is held back until the next line arrives (see the class docstring)."""
        return self._pending_step is not None or self._pending_validation is not None

    # ---- lines and segments ----------------------------------------------------------------------

    def _line(self, lineno: int, line: str, skip: int) -> list[Event]:
        """A complete physical line; its first ``skip`` characters (CR segments) were parsed already."""
        events: list[Event] = []
        text = line[skip:] if skip else line
        if self._pending_step is not None:
            if skip:  # held by an earlier segment of this very line: a redraw came next, not a wrapped piece
                events.extend(self._flush_step())
            elif self._continue_step(events, text):
                return events  # a wrapped piece of the held step line: metrics, not a log message
        if self._pending_validation is not None and self._collect_validation(events, text):
            self._classify(events, lineno, line)
            return events
        if _PARSER_RE.search(text) is not None or (
            PhaseKind.WORKERS_STARTING not in self._phases_seen and "Worker" in text
        ):
            events.extend(self._segments(lineno, text))
        self._classify(events, lineno, line)
        return events

    def _classify(self, events: list[Event], lineno: int, line: str) -> None:
        if self.classifier is None:
            return
        finding = self.classifier.feed_line(lineno, line)
        if finding is not None:
            events.append(ErrorFound(lineno, finding))

    def _segments(self, lineno: int, line: str, continued: bool = False) -> list[Event]:
        """The CR segments of ``line`` (``continued``: earlier segments of the line were parsed before)."""
        events: list[Event] = []
        for i, segment in enumerate(line.split("\r") if "\r" in line else (line,)):
            if (i or continued) and self._pending_step is not None:
                events.extend(self._flush_step())  # a redraw follows the held step line: it is complete
            if segment:
                self._segment(events, lineno, segment)
        return events

    def _segment(self, events: list[Event], lineno: int, segment: str) -> None:
        clean = clean_segment(segment)
        text = clean.text
        if clean.source and any(w in clean.source for w in _WORKER_SOURCES):
            self._phase(events, lineno, PhaseKind.WORKERS_STARTING, detail=f"first line from {clean.source}")
        if "Training Progress" in text:
            progress = parse_progress(lineno, text)
            if progress is not None:
                events.append(progress)
                if progress.total is not None:
                    self.total_steps = progress.total
        if "step:" in text:
            m = STEP_RE.search(text)
            if m is not None:
                self._step(events, lineno, int(m.group("step")), text[m.end() :])
                return  # the rest of the segment is metrics
        if "Total training steps" in text:
            m2 = TOTAL_STEPS_RE.search(text)
            if m2 is not None:
                self.total_steps = int(m2.group("total"))
                events.append(TotalSteps(lineno, self.total_steps))
        if "alidation metrics" in text:
            self._validation_start(events, lineno, text)
        if "global_step_" in text:
            self._checkpoint_line(events, lineno, text)
        for marker, kind in _PHASE_MARKERS:
            if marker in text:
                self._phase(events, lineno, kind, detail=marker)

    # ---- steps -----------------------------------------------------------------------------------

    def _step(self, events: list[Event], lineno: int, step: int, body: str) -> None:
        parsed = split_metrics(body)
        if parsed.open:
            self._pending_step = _PendingStep(lineno, step, parsed.metrics, parsed.tail)
            return
        events.extend(self._step_events(lineno, step, parsed.metrics))

    def _step_events(self, lineno: int, step: int, metrics: dict[str, Number]) -> list[Event]:
        events: list[Event] = []
        if PhaseKind.ROLLOUT_STARTED not in self._phases_seen and any(
            k in metrics for k in ("timing_s/gen", "timing/gen")
        ):
            self._phase(
                events, lineno, PhaseKind.ROLLOUT_STARTED, detail=f"step {step} reports a generation time"
            )
        events.append(StepMetrics(lineno, step, metrics))
        self._last_step = step
        if any(k.startswith(_VALIDATION_PREFIXES) for k in metrics):
            validation = {k: v for k, v in metrics.items() if k.startswith(_VALIDATION_PREFIXES)}
            events.append(ValidationMetrics(lineno, "step", validation, step))
        if "timing_s/save_checkpoint" in metrics or "timing/save_checkpoint" in metrics:
            # verl logs the step's metrics after _save_checkpoint() returned: global_step_N is complete.
            self._checkpoint(events, lineno, PhaseKind.CHECKPOINT_SAVED, step)
        return events

    def _continue_step(self, events: list[Event], line: str) -> bool:
        """Join ``line`` to the held step line if it continues it; True when it did."""
        pending = self._pending_step
        assert pending is not None
        text = strip_ansi(line)
        if text and not text.startswith("(") and _CONTINUATION_RE.match(text) and not STEP_RE.match(text):
            joined = split_metrics(pending.tail + text)
            pending.metrics.update(joined.metrics)
            if joined.open:
                pending.tail = joined.tail
            else:
                events.extend(self._flush_step())
            return True
        events.extend(self._flush_step())
        return False

    def _flush_step(self) -> list[Event]:
        pending = self._pending_step
        if pending is None:
            return []
        self._pending_step = None
        return self._step_events(pending.line, pending.step, pending.metrics)

    # ---- validation dicts ------------------------------------------------------------------------

    def _validation_start(self, events: list[Event], lineno: int, text: str) -> None:
        stripped = text.strip()
        m = _VALIDATION_RE.search(stripped)
        if m is None:
            return
        if stripped[:1] in "\"'(" and m.start() <= 2:
            # pprint() of an f-string: a quoted literal, or several in parentheses over many lines.
            if stripped.startswith("(") and not stripped.endswith(")"):
                self._pending_validation = _PendingValidation(lineno, [stripped])
                return
            value = _pprint_string([stripped])
            if value is None:
                return
            m = _VALIDATION_RE.search(value)
            if m is None:
                return
        self._validation_event(events, lineno, m.group("which"), m.group("rest"))

    def _collect_validation(self, events: list[Event], line: str) -> bool:
        pending = self._pending_validation
        assert pending is not None
        text = clean_segment(line).text.strip()
        if not text.startswith(("'", '"')) or len(pending.lines) >= _MAX_VALIDATION_LINES:
            events.extend(self._flush_validation())  # not a continuation: give up on this dict
            return False
        pending.lines.append(text)
        if text.endswith(")"):
            events.extend(self._flush_validation())
        return True

    def _flush_validation(self) -> list[Event]:
        pending = self._pending_validation
        if pending is None:
            return []
        self._pending_validation = None
        events: list[Event] = []
        value = _pprint_string(pending.lines)
        if value is not None:
            m = _VALIDATION_RE.search(value)
            if m is not None:
                self._validation_event(events, pending.line, m.group("which"), m.group("rest"))
        return events

    def _validation_event(self, events: list[Event], lineno: int, which: str, rest: str) -> None:
        kind = which.strip().lower() or "step"
        metrics = parse_metrics_dict(rest)
        if metrics:
            step = self._last_step if kind == "final" else None
            events.append(ValidationMetrics(lineno, kind, metrics, step))
        if kind == "final":
            self._phase(events, lineno, PhaseKind.TRAINING_FINISHED, detail="Final validation metrics")

    # ---- phases ----------------------------------------------------------------------------------

    def _checkpoint_line(self, events: list[Event], lineno: int, text: str) -> None:
        if "local_global_step_folder" in text:
            m = _GLOBAL_STEP_RE.search(text)
            if m is not None:
                self._checkpoint(events, lineno, PhaseKind.CHECKPOINT_SAVING, int(m.group("step")))
            return
        m2 = _CKPT_SAVED_RE.search(text)
        if m2 is not None:
            self._checkpoint(events, lineno, PhaseKind.CHECKPOINT_SAVED, int(m2.group("step")))

    def _checkpoint(self, events: list[Event], lineno: int, kind: PhaseKind, step: int) -> None:
        if (kind, step) in self._checkpoints_seen:
            return
        self._checkpoints_seen.add((kind, step))
        events.append(Phase(lineno, kind, step=step, detail=f"global_step_{step}"))

    def _phase(self, events: list[Event], lineno: int, kind: PhaseKind, detail: str = "") -> None:
        if kind in _ONE_SHOT:
            if kind in self._phases_seen:
                return
            self._phases_seen.add(kind)
        events.append(Phase(lineno, kind, detail=detail))


# --------------------------------------------------------------------------------------------------
# Whole-log helpers
# --------------------------------------------------------------------------------------------------


def parse_text(text: str, classifier: LineClassifier | None = None) -> list[Event]:
    """All events of a complete log given as one string."""
    parser = LogParser(classifier)
    return parser.feed(text) + parser.close()


def iter_file_events(
    path: str | Path, classifier: LineClassifier | None = None, chunk_size: int = 1 << 20
) -> Iterator[Event]:
    """Stream the events of a log file (constant memory). Undecodable bytes become U+FFFD."""
    import codecs

    parser = LogParser(classifier)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with open(path, "rb") as f:
        while True:
            chunk = f.read(chunk_size)
            if not chunk:
                break
            yield from parser.feed(decoder.decode(chunk))
    yield from parser.feed(decoder.decode(b"", final=True))
    yield from parser.close()


def parse_file(path: str | Path, classifier: LineClassifier | None = None) -> list[Event]:
    """All events of a log file."""
    return list(iter_file_events(path, classifier))


def of_type(events: Iterable[Event], kind: type) -> list:
    """The events of one type, e.g. ``of_type(events, StepMetrics)``."""
    return [e for e in events if isinstance(e, kind)]
