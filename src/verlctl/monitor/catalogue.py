"""The error catalogue's matcher: the line classifier that applies :mod:`verlctl.monitor.categories`.

:class:`Matcher` finds the category and signature a line matches (anchors first, then the regexes);
:class:`Classifier` applies it line by line (``feed_line``), deduplicates repeated findings (first line kept,
repeats counted, Ray's ``[repeated Nx across cluster]`` included) and folds the further lines of one incident
(same category within a few lines: a traceback's tail, Hydra's three-line message). :func:`to_ere` gives the
signatures in grep's POSIX ERE form.

The categories themselves (``CATALOGUE``, ``Category``, ``Signature``, ``oom_hint``, ``recovery_for`` ...) are
data in :mod:`verlctl.monitor.categories` (which imports nothing of this module); they are importable from here
too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from verlctl.monitor.categories import (  # the data, importable from the matcher too
    CATALOGUE as CATALOGUE,
)
from verlctl.monitor.categories import (
    CATEGORY_NAMES as CATEGORY_NAMES,
)
from verlctl.monitor.categories import (
    RANK as RANK,
)
from verlctl.monitor.categories import (
    RAY_DAEMONS_EXITED as RAY_DAEMONS_EXITED,
)
from verlctl.monitor.categories import (
    RECOVERY as RECOVERY,
)
from verlctl.monitor.categories import (
    Category as Category,
)
from verlctl.monitor.categories import (
    Signature as Signature,
)
from verlctl.monitor.categories import (
    Silence as Silence,
)
from verlctl.monitor.categories import (
    all_anchors as all_anchors,
)
from verlctl.monitor.categories import (
    oom_hint as oom_hint,
)
from verlctl.monitor.categories import (
    recovery_for as recovery_for,
)
from verlctl.monitor.events import REPEATED_RE, STEP_RE, literal_alternation, strip_ansi
from verlctl.monitor.finding import Finding

_WHO_RE = re.compile(r"(?P<who>\([^()]*\)|\[rank\d+\]:) ?")
_TRACEBACK_HEAD = "Traceback (most recent call last):"
#: A line that is an exception's message (``[pkg.]NameError[(Inner)]: text``), after a process prefix: what an
#: excerpt should quote (not a traceback's header, nor a source line such as ``raise torch.OutOfMemoryError(``).
_MESSAGE_RE = re.compile(r"(?:^|\) |\]: ?)[ \t]*(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))"
                         r"(?:\([\w.]*\))?: \S")


def is_message_line(text: str) -> bool:
    """True when ``text`` (a line, or a finding's excerpt) states an exception: its type and its message."""
    return _MESSAGE_RE.search(text) is not None


# --------------------------------------------------------------------------------------------------
# grep's ERE
# --------------------------------------------------------------------------------------------------


_ERE_CLASS = {"d": "0-9", "w": "[:alnum:]_", "s": "[:space:]"}
_ERE_ESCAPE_OUT = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": "[[:alnum:]_]",
    "W": "[^[:alnum:]_]",
    "s": "[[:space:]]",
    "S": "[^[:space:]]",
    "t": "\t",
    "r": "\r",
    "n": "\n",
}


def to_ere(pattern: str) -> str:
    """Translate a Python regex of the simple kind used here into POSIX ERE for ``grep -E``.

    Handles groups (``(?:``, ``(?P<name>``), ``\\d \\w \\s`` in and out of brackets and escaped literals.
    Raises ``ValueError`` for constructs ERE lacks (look-arounds, lazy quantifiers, backreferences,
    ``\\b``); such signatures carry an explicit ``ere``."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1]
            if nxt in _ERE_ESCAPE_OUT:
                out.append(_ERE_ESCAPE_OUT[nxt])
            elif nxt.isalnum():
                raise ValueError(f"\\{nxt} has no ERE form in {pattern!r}")
            else:
                out.append("\\" + nxt)
            i += 2
        elif c == "(" and pattern.startswith("(?", i):
            if pattern.startswith("(?:", i):
                out.append("(")
                i += 3
            elif pattern.startswith("(?P<", i):
                i = pattern.index(">", i) + 1
                out.append("(")
            else:
                raise ValueError(f"{pattern[i : i + 4]!r} has no ERE form in {pattern!r}")
        elif c in "*+?}" and i + 1 < n and pattern[i + 1] == "?":
            raise ValueError(f"lazy quantifier has no ERE form in {pattern!r}")
        elif c == "[":
            i = _bracket_to_ere(pattern, i, out)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _bracket_to_ere(pattern: str, i: int, out: list[str]) -> int:
    """Copy the bracket expression starting at ``pattern[i]`` as a POSIX one (no escapes inside)."""
    i += 1
    negate = pattern.startswith("^", i)
    if negate:
        i += 1
    items: list[str] = []
    close_bracket = dash = False
    first = True
    while True:
        c = pattern[i]
        if c == "]" and not first:
            i += 1
            break
        first = False
        if c == "\\":
            nxt = pattern[i + 1]
            i += 2
            if nxt in _ERE_CLASS:
                items.append(_ERE_CLASS[nxt])
            elif nxt == "]":
                close_bracket = True
            elif nxt == "-":
                dash = True
            elif nxt == "t":
                items.append("\t")
            elif nxt.isalnum():
                raise ValueError(f"\\{nxt} inside brackets has no ERE form in {pattern!r}")
            else:
                items.append(nxt)
        elif c == "]":
            close_bracket = True
            i += 1
        else:
            items.append(c)
            i += 1
    body = ("]" if close_bracket else "") + "".join(items) + ("-" if dash else "")
    out.append("[" + ("^" if negate else "") + body + "]")
    return i


def signature_ere(sig: Signature) -> str:
    return sig.ere if sig.ere is not None else to_ere(sig.pattern)


def ere_patterns(catalogue: Iterable[Category] = CATALOGUE) -> list[str]:
    """The catalogue as ``grep -E`` patterns (one per signature), e.g. for ``grep -E -f``."""
    return [signature_ere(s) for c in catalogue for s in c.signatures]


# --------------------------------------------------------------------------------------------------
# Findings and the classifier
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    """What one line matched: the category, the signature, and the values for the message templates."""

    category: Category
    signature: Signature
    text: str  # the cleaned line
    start: int
    end: int
    groups: dict[str, str] = field(default_factory=dict)

    @cached_property
    def key(self) -> tuple[str, str]:
        """Findings with the same key are repeats of one another (numbers do not distinguish them)."""
        return self.category.name, _DIGITS.sub("#", self.text[self.start : self.end])

    def message(self) -> str:
        return _render(self.signature.message, self.groups, self.category.message)

    def hint(self) -> str:
        return _render(self.signature.hint, self.groups, self.category.hint)

    def excerpt(self, limit: int = 300) -> str:
        """The line around the match: its own tqdm segment, at most ``limit`` characters."""
        text, at = self.text, self.start
        if "\r" in text:
            first = text[:at].rfind("\r") + 1
            text, at = text[first : self.end] + text[self.end :].partition("\r")[0], at - first
        stripped = text.strip()
        if len(stripped) <= limit:
            return stripped
        at -= len(text) - len(text.lstrip())
        start = max(0, at - limit // 3)
        piece = stripped[start : start + limit]
        return ("…" if start else "") + piece + ("…" if start + limit < len(stripped) else "")


_DIGITS = re.compile(r"\d+")


def _render(template: str | None, groups: dict[str, str], default: str) -> str:
    if template is None:
        return default
    try:
        return template.format_map(groups)
    except (KeyError, IndexError, ValueError):
        return default


class Matcher:
    """Stateless line -> :class:`Match` using the catalogue (anchors first, then the regexes in rank order)."""

    def __init__(self, catalogue: tuple[Category, ...] = CATALOGUE) -> None:
        self.catalogue = catalogue
        self.prefilter = re.compile(literal_alternation(all_anchors(catalogue)))
        # anchor -> the (rank, signature index) pairs it admits
        self._by_anchor: dict[str, list[tuple[int, int]]] = {}
        self._signatures: list[tuple[Category, Signature]] = []
        for rank, category in enumerate(catalogue):
            for sig in category.signatures:
                idx = len(self._signatures)
                self._signatures.append((category, sig))
                for anchor in sig.anchors:
                    self._by_anchor.setdefault(anchor, []).append((rank, idx))
        self._anchor_list = tuple(self._by_anchor.items())

    def match(self, text: str) -> Match | None:
        """The best (most root-cause) match in an already cleaned line, or None."""
        if self.prefilter.search(text) is None:
            return None
        candidates = sorted({c for anchor, cs in self._anchor_list if anchor in text for c in cs})
        for _, idx in candidates:
            category, sig = self._signatures[idx]
            m = sig.regex.search(text)
            if m is not None:
                groups = {k: v for k, v in m.groupdict().items() if v is not None}
                return Match(category, sig, text, m.start(), m.end(), groups)
        return None


def classifiable_text(line: str) -> tuple[str, int]:
    """The part of a raw line that may hold an error message, and Ray's repeat count for it.

    ANSI codes are removed; a step line's metrics (``step:N - key:value ...``) are not messages, so the text
    stops where they start; ``[repeated Nx across cluster]`` is cut off and returned as N."""
    text = strip_ansi(line)
    if "step:" in text:
        m = STEP_RE.search(text)
        if m is not None:
            text = text[: m.start()]
    repeats = 0
    if "[repeated " in text:
        rm = REPEATED_RE.search(text)
        if rm is not None:
            repeats = int(rm.group("n"))
            text = text[: rm.start()]
    return text, repeats


class Classifier:
    """Line-by-line classification with deduplication; see the module docstring.

    ``feed_line`` returns a :class:`Finding` only for a *new* finding (so a watcher reacts once per incident);
    repeats update ``count`` of the finding returned earlier. ``findings()`` gives the report order.
    """

    #: lines within which a different signature of the same category is the same incident
    fold_window = 10
    #: distinct findings kept (a pathological log cannot grow the report without bound)
    max_findings = 500
    _cache_size = 4096

    def __init__(self, matcher: Matcher | None = None) -> None:
        self.matcher = matcher or _default_matcher()
        self._fallback = {c.name: c.fallback for c in self.matcher.catalogue}
        self._wrapper = {c.name: c.wrapper for c in self.matcher.catalogue}
        self._by_key: dict[tuple[str, str], Finding] = {}
        self._last_line: dict[str, tuple[int, Finding]] = {}
        self._order: list[Finding] = []
        self._match_cached = lru_cache(maxsize=self._cache_size)(self._match_uncached)
        self._silenced_until: dict[str, int] = {}
        self.dropped = 0
        self.finished_at: int | None = None  # the line that said the last step ran (run_finished)
        self.teardown_lines: list[int] = []  # known teardown messages after it (not findings)
        # After that line: each process's open traceback (its head's finding), until the next matched line
        # of that process; a known teardown message as that line takes the traceback back, however deep,
        # when no other process's line went into that finding (repeats and folds are by text, not process).
        self._tb_open: dict[str, Finding] = {}
        self._tb_from: dict[int, set[str]] = {}  # id(finding) -> the processes whose lines it holds
        # Each process's traceback whose exception line has not come yet (its head's finding, from the first
        # line on): that line, however deep, completes it (the excerpt becomes the exception, not the header).
        self._tb_head: dict[str, Finding] = {}
        # A wrapper's line (RayTaskError, ActorDiedError) per process: the next exception line of that process
        # is what it carries; those findings (ids) and the exception types the wrappers name rank above them.
        self._carrying: dict[str, int] = {}
        self._carried: set[int] = set()
        self._inner_types: set[str] = set()
        self._exc_type: dict[int, str] = {}  # id(fallback finding) -> its exception's type (last name)
        self._detailed: set[int] = set()  # findings whose message a detail line (an actor's class) gave

    def feed_line(self, lineno: int, line: str) -> Finding | None:
        match, repeats = self.match_line(line)
        if match is None:
            return None
        return self.add(lineno, match, repeats)

    def match_line(self, line: str) -> tuple[Match | None, int]:
        """The best match of a raw line and Ray's repeat count for it (cached: logs repeat lines a lot)."""
        return self._match_cached(line)

    def _match_uncached(self, line: str) -> tuple[Match | None, int]:
        text, repeats = classifiable_text(line)
        return (self.matcher.match(text) if text else None, repeats)

    def add(self, lineno: int, match: Match, repeats: int = 0) -> Finding | None:
        """Record ``match`` seen on ``lineno``; the new :class:`Finding`, or None for a repeat / a fold."""
        if match.category.marks_finished:
            self.finished_at = lineno if self.finished_at is None else self.finished_at
            return None
        m = _WHO_RE.match(match.text)
        who = m.group("who") if m else ""
        if self.finished_at is None:
            return self._add(lineno, match, repeats, who)
        # After the last step: follow each process's traceback (Ray's ``(Name pid=N)`` / torch's ``[rankN]:``
        # prefix). Its head opens it; the next matched line of that process ends it: a known teardown message
        # takes it back (the traceback of the teardown: seen live with 12 lines of frames between the two).
        opened = self._tb_open.pop(who, None)
        if match.category.teardown_after_finish and lineno > self.finished_at:
            if opened is not None and opened.line > self.finished_at and self._tb_from[id(opened)] == {who}:
                self._take_back(opened)
            self._tb_head.pop(who, None)
            self.teardown_lines.append(lineno)
            return None
        finding = self._add(lineno, match, repeats, who)
        last = self._last_line.get(match.category.name)
        if last is not None and last[0] == lineno:  # the finding this line made, repeats or folds into
            self._tb_from.setdefault(id(last[1]), set()).add(who)
            if match.category.fallback and _TRACEBACK_HEAD in match.text:
                self._tb_open[who] = last[1]
        return finding

    def _add(self, lineno: int, match: Match, repeats: int, who: str = "") -> Finding | None:
        name = match.category.name
        silence = match.category.silence
        if silence is not None:
            for silenced in silence.categories:
                self._silenced_until[silenced] = lineno + silence.lines
            return None
        if lineno <= self._silenced_until.get(name, 0):
            return None
        category = match.category
        exception = category.fallback and "exc" in match.groups  # an unclassified exception's own line
        carried = False
        if category.wrapper:
            self._carrying[who] = lineno  # what this process says next (an exception line) is what it carries
            if match.groups.get("inner"):
                self._inner_types.add(match.groups["inner"])
        elif exception:
            carried = self._carrying.pop(who, None) is not None
            head = self._tb_head.pop(who, None)
            if head is not None and not is_message_line(head.excerpt):
                # the exception that ends this process's traceback: the incident's excerpt and message
                self._refine(head, match, lineno)
                self._exc_type[id(head)] = match.groups["exc"].rpartition(".")[2]
                if carried:
                    self._carried.add(id(head))
                self._last_line[name] = (lineno, head)
                return None
        elif not category.fallback:  # a specific error ends the process's traceback: it is what it raised
            self._tb_head.pop(who, None)
            self._carrying.pop(who, None)
        finding = self._record(lineno, match, repeats)
        into = self._last_line[name][1] if name in self._last_line else None
        if into is not None and self._last_line[name][0] == lineno:
            if exception:
                self._exc_type.setdefault(id(into), match.groups["exc"].rpartition(".")[2])
                if carried:
                    self._carried.add(id(into))
            elif category.fallback and _TRACEBACK_HEAD in match.text:
                if is_message_line(into.excerpt):
                    self._tb_head.pop(who, None)  # a chained traceback of an incident already stated
                else:
                    self._tb_head[who] = into
        return finding

    def _record(self, lineno: int, match: Match, repeats: int) -> Finding | None:
        """Deduplicate and fold ``match`` into the findings; the new :class:`Finding`, or None."""
        name = match.category.name
        key = match.key
        known = self._by_key.get(key)
        if known is not None:
            known.count += 1 + repeats
            self._last_line[name] = (lineno, known)
            return None
        last = self._last_line.get(name)
        if last is not None and 0 <= lineno - last[0] <= self.fold_window:
            self._last_line[name] = (lineno, last[1])  # another line of the same incident
            if match.signature.detail or (not is_message_line(last[1].excerpt) and is_message_line(match.text)):
                self._refine(last[1], match, lineno)  # the incident's message line (or detail) states it best
            return None
        if len(self._order) >= self.max_findings:
            self.dropped += 1
            return None
        finding = Finding(name, lineno, match.excerpt(), match.message(), match.hint(), 1 + repeats)
        self._by_key[key] = finding
        self._last_line[name] = (lineno, finding)
        self._order.append(finding)
        if match.signature.detail:
            self._refine(finding, match, lineno)  # a detail names what the earlier findings of its category left open
        return finding

    def _refine(self, finding: Finding, match: Match, lineno: int) -> None:
        """``finding`` is stated by ``match``'s line: its line, excerpt and message (a detail: the message only, of
        this finding and of every other one of its category that names no detail yet)."""
        if not match.signature.detail:
            finding.line, finding.excerpt, finding.message = lineno, match.excerpt(), match.message()
            return
        for f in [finding, *self._order]:
            if f.category == finding.category and (f is finding or id(f) not in self._detailed):
                f.message = match.message()
                self._detailed.add(id(f))

    def _take_back(self, finding: Finding) -> None:
        """Drop a fallback traceback finding: the teardown's (it began after the finished mark)."""
        self._order.remove(finding)
        self._by_key = {k: f for k, f in self._by_key.items() if f is not finding}
        self._last_line = {k: v for k, v in self._last_line.items() if v[1] is not finding}
        self._tb_head = {k: f for k, f in self._tb_head.items() if f is not finding}

    def in_teardown(self, finding: Finding) -> bool:
        """A fallback finding (an unclassified traceback) printed after the last step's line: the run's
        teardown; whether it matters is known only when the attempt ends (a finished run says it did not)."""
        return self._fallback[finding.category] and self.finished_at is not None \
            and finding.line > self.finished_at

    def carried(self, finding: Finding) -> bool:
        """An unclassified exception that a wrapper carries: the next exception line of the process that
        printed the wrapper (Ray's remote traceback ends in it), or of the type the wrapper names
        (``RayTaskError(ValueError)``)."""
        return self._fallback.get(finding.category, False) and (
            id(finding) in self._carried or self._exc_type.get(id(finding)) in self._inner_types)

    def rank(self, finding: Finding) -> tuple[int, int, int]:
        """The root-cause order (smaller first): a specific error (catalogue order); the exception a wrapper
        carries; the wrappers; an unclassified exception (its type and message); a bare traceback header."""
        if self.carried(finding):
            tier = 1
        elif self._fallback.get(finding.category, False):
            tier = 3 if is_message_line(finding.excerpt) else 4
        elif self._wrapper.get(finding.category, False):
            tier = 2
        else:
            tier = 0
        return tier, RANK.get(finding.category, len(RANK)), finding.line

    def findings(self) -> list[Finding]:
        """Root cause first (:meth:`rank`); unclassified exceptions only when nothing more specific was found,
        or when a wrapper carries them (then they are the error, the wrapper its consequence)."""
        specific = [f for f in self._order if not self._fallback[f.category] or self.carried(f)]
        chosen = specific or self._order
        return sorted(chosen, key=self.rank)


_MATCHER: Matcher | None = None


def _default_matcher() -> Matcher:
    global _MATCHER
    if _MATCHER is None:
        _MATCHER = Matcher()
    return _MATCHER


def classify_lines(lines: Iterable[str]) -> list[Finding]:
    """Findings of a sequence of lines (line numbers start at 1), root cause first."""
    classifier = Classifier()
    for lineno, line in enumerate(lines, 1):
        classifier.feed_line(lineno, line)
    return classifier.findings()
