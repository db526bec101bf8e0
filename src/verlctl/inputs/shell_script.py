"""Read a verl launch script without running it: variables, exports and the ``python3 -m <entry>`` command.

A small, bounded subset of bash is understood statically:

* words with ``'single'``, ``"double"`` and ``$'ansi'`` quotes, backslash escapes, line continuations and
  comments; ``NAME=value``, ``NAME+=value``, arrays ``NAME=( ... )``, ``export A=B C=D``, ``unset``;
* expansions from the script itself: ``$VAR``, ``${VAR}``, ``${VAR:-default}`` (and ``-``, ``:=``, ``=``,
  ``:+``, ``+``), ``${VAR,,}``/``${VAR^^}``, ``${#VAR}``, ``${ARR[@]}``, ``"$@"`` (empty: the script is read
  with no arguments) and integer arithmetic ``$((a + b * 2))``;
* ``$(basename …)`` and ``$(dirname …)`` are computed as string functions; every other command substitution
  is *not run*: its value is marked unresolved and reported.

Nothing is ever executed. ``if``/``case``/loops and function bodies are skipped (reported), ``source`` is
not followed, and ``exit`` at the top level ends the script. Input size, value sizes, nesting and the
number of tokens are capped, so a hostile file costs bounded time and memory.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from verlctl.errors import VerlctlError

MAX_SCRIPT_BYTES = 256 * 1024  # a launch script is a few KiB (verl's largest: 12 KiB); 256 KiB is plenty
MAX_VALUE_CHARS = 1 << 16  # one expanded value
MAX_TOKENS = 100_000
MAX_DEPTH = 16  # nesting of ${...} / $(...) inside each other, and arithmetic recursion
MAX_ARITH_PARENS = 32  # parentheses open at once in $((...)) (bash's own limit is 1024 levels of recursion)
MAX_WORK = 20_000  # expansion steps (parameters, arithmetic terms) per script; verl's scripts need < 200

#: Marks text that could not be resolved without running a command (kept out of the spec).
UNRESOLVED = "\ue000"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DECLARERS = ("export", "declare", "typeset", "local", "readonly")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=")
_PYTHON = re.compile(r"python(?:[0-9]+(?:\.[0-9]+)*)?")
_OPERATOR_CHARS = set(";&|()<>")
_OPENERS = {"if": "fi", "case": "esac", "for": "done", "while": "done", "until": "done", "select": "done", "{": "}"}
_CLOSERS = {"fi", "esac", "done", "}"}
_OP_RE = re.compile(r"[0-9]*(?:>>|>&|<<<|<<|<&|&>>|&>|>\||<>|>|<)|&&|\|\||;;&?|;&|\|&|[;&|()]")
_PY_SOURCE = re.compile(r"^(?:import [A-Za-z_][\w.]*|from [\w.]+ import |def \w+\(.*\):|class \w+[(:])", re.M)


class ScriptError(VerlctlError):
    """The file is not a launch script this reader can understand; ``str()`` is one line."""


# --------------------------------------------------------------------------------------------------
# Reading the file


def read_script(path: str | Path) -> str:
    """Read a script as text: a regular file, at most MAX_SCRIPT_BYTES, UTF-8, no NUL bytes."""
    p = str(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)  # POSIX, as O_NONBLOCK is
    except FileNotFoundError:
        raise ScriptError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise ScriptError(f"{p}: is a directory, not a launch script") from None
    except OSError as exc:
        raise ScriptError(f"{p}: cannot open: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ScriptError(f"{p}: is a directory, not a launch script")
        if not stat.S_ISREG(st.st_mode):
            raise ScriptError(f"{p}: not a regular file (a FIFO, socket or device): give the script file itself")
        if st.st_size > MAX_SCRIPT_BYTES:
            raise ScriptError(
                f"{p}: {st.st_size} bytes is too large for a launch script (at most {MAX_SCRIPT_BYTES} bytes)"
            )
        chunks: list[bytes] = []
        total = 0
        while total <= MAX_SCRIPT_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > MAX_SCRIPT_BYTES:
            raise ScriptError(f"{p}: too large for a launch script (more than {MAX_SCRIPT_BYTES} bytes)")
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if b"\x00" in data:
        raise ScriptError(f"{p}: binary data (NUL bytes), not a shell script")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScriptError(f"{p}: not UTF-8 text (byte {exc.start}), not a shell script") from None
    check_shell_text(text, p)
    return text


def check_shell_text(text: str, name: str) -> None:
    first = text.lstrip("\ufeff").split("\n", 1)[0].strip()
    if first.startswith("#!"):
        interp = first[2:].strip().split()
        prog = posixpath.basename(interp[0]) if interp else ""
        if prog == "env" and len(interp) > 1:
            prog = posixpath.basename(interp[1])
        if prog and prog not in ("bash", "sh", "dash", "zsh", "ksh"):
            raise ScriptError(f"{name}: a {prog} script (#!{first[2:].strip()}), not a bash launch script")
    bad = sum(1 for ch in text[:65536] if ord(ch) < 32 and ch not in "\t\n\r\f\v")
    if bad > 8:
        raise ScriptError(f"{name}: contains control characters, not a shell script")



# --------------------------------------------------------------------------------------------------
# Tokens


@dataclass
class Part:
    kind: str  # lit | param | arith | cmd | special
    text: str  # literal text, parameter body, arithmetic expression, command text
    quoted: bool = False


@dataclass
class Word:
    parts: list[Part]
    line: int

    def literal(self) -> str | None:
        """The word's text when it has no expansions and no quotes (keywords, operators-as-words)."""
        if all(p.kind == "lit" and not p.quoted for p in self.parts):
            return "".join(p.text for p in self.parts)
        return None


@dataclass
class ArrayAssign:
    name: str
    append: bool
    elements: list[Word]
    line: int


@dataclass
class Op:
    text: str
    line: int


Token = Word | ArrayAssign | Op


_ANSI_NUMBER = re.compile(r"x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}")


def _split_unescaped(text: str, sep: str) -> tuple[str, str, str]:
    """``text.partition(sep)`` at the first ``sep`` not escaped by a backslash."""
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == sep:
            return text[:i], sep, text[i + 1:]
        i += 1
    return text, "", ""


#: A pattern expansion's bounds: the value and the glob (launch scripts use paths and names, well below).
MAX_PATTERN_VALUE = 512
MAX_PATTERN = 128


def _glob_tokens(pattern: str) -> list[tuple[str, str]]:
    """A bash glob as tokens: ("*", ""), ("?", ""), ("[", class body, "^..." negated) or ("=", one character)."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            out.append(("=", pattern[i + 1]))
            i += 2
            continue
        if c in "*?":
            if not (c == "*" and out and out[-1][0] == "*"):  # ** is *
                out.append((c, ""))
            i += 1
            continue
        if c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j < n:
                body = pattern[i + 1:j]
                out.append(("[", "^" + body[1:] if body[:1] in ("!", "^") else body))
                i = j + 1
                continue
        out.append(("=", c))
        i += 1
    return out


def _in_class(body: str, c: str) -> bool:
    neg = body.startswith("^")
    chars = body[1:] if neg else body
    hit, k = False, 0
    while k < len(chars):
        if k + 2 < len(chars) and chars[k + 1] == "-":
            hit = hit or chars[k] <= c <= chars[k + 2]
            k += 3
            continue
        hit = hit or chars[k] == c
        k += 1
    return hit != neg


def _glob_ends(toks: list[tuple[str, str]], text: str) -> list[bool]:
    """For each k in 0..len(text): whether the glob matches ``text[:k]`` (an NFA over the tokens: linear in
    the text for any pattern, no backtracking)."""
    m = len(toks)

    def closure(states: set[int]) -> set[int]:
        todo = list(states)
        while todo:
            k = todo.pop()
            if k < m and toks[k][0] == "*" and k + 1 not in states:
                states.add(k + 1)
                todo.append(k + 1)
        return states

    cur = closure({0})
    ends = [m in cur]
    for c in text:
        nxt: set[int] = set()
        for k in cur:
            if k == m:
                continue
            kind, arg = toks[k]
            if kind == "*":
                nxt.add(k)
            elif kind == "?" or (kind == "=" and arg == c) or (kind == "[" and _in_class(arg, c)):
                nxt.add(k + 1)
        cur = closure(nxt)
        ends.append(m in cur)
        if not cur:
            ends += [False] * (len(text) + 1 - len(ends))
            break
    return ends


class _Quoted(str):
    """An expansion's operand quoted in full (``${X:+"a b"}``): one word, never split into fields."""


class _Lexer:
    def __init__(self, text: str, name: str, line: int = 1, depth: int = 0) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.line = line
        self.name = name
        self.depth = depth
        self.tokens = 0

    def err(self, msg: str, line: int | None = None) -> ScriptError:
        return ScriptError(f"{self.name}: line {line or self.line}: {msg}")

    # -- whole script

    def tokenize(self) -> list[Token]:
        out: list[Token] = []
        while True:
            tok = self.next_token()
            if tok is None:
                return out
            out.append(tok)
            self.tokens += 1
            if self.tokens > MAX_TOKENS:
                raise self.err("too many words for a launch script")

    def next_token(self, in_array: bool = False) -> Token | None:
        s = self.s
        while self.i < self.n:
            c = s[self.i]
            if c in " \t\r\f\v":
                self.i += 1
            elif c == "\\" and self.i + 1 < self.n and s[self.i + 1] == "\n":
                self.i += 2
                self.line += 1
            elif c == "#":
                while self.i < self.n and s[self.i] != "\n":
                    self.i += 1
            else:
                break
        if self.i >= self.n:
            return None
        c = s[self.i]
        line = self.line
        if c == "\n":
            self.i += 1
            self.line += 1
            return Op("\n", line)
        m = _OP_RE.match(s, self.i)
        if m:
            op = m.group(0)
            self.i = m.end()
            if op.lstrip("0123456789") in ("<<",) and not in_array:
                self._heredoc(line)
            return Op(op, line)
        return self.word(line)

    def _heredoc(self, line: int) -> None:
        # Skip "<<[-]WORD" and the body up to the delimiter line: the body is data, never run here.
        # The body's lines are replaced by empty lines, so later line numbers stay right.
        s = self.s
        strip = s.startswith("-", self.i)
        if strip:
            self.i += 1
        while self.i < self.n and s[self.i] in " \t":
            self.i += 1
        w = self.word(line)
        delim = "".join(p.text for p in w.parts) if isinstance(w, Word) else ""
        if not delim:
            raise self.err("here-document without a delimiter word", line)
        nl = s.find("\n", self.i)
        if nl < 0:
            raise self.err(f"here-document without a body (delimiter {delim!r})", line)
        pos = nl + 1
        body_lines = 0
        while True:
            end = s.find("\n", pos)
            cur = s[pos:] if end < 0 else s[pos:end]
            body_lines += 1
            if (cur.lstrip("\t") if strip else cur) == delim:
                break
            if end < 0:
                raise self.err(f"here-document not terminated (delimiter {delim!r})", line)
            pos = end + 1
        after = s[end:] if end >= 0 else ""
        self.s = s[: nl + 1] + "\n" * (body_lines - 1) + after
        self.n = len(self.s)

    # -- words

    def word(self, line: int, operand: bool = False) -> Word:
        """Lex one word from the current position (``operand``: inside ${x:-...}, spaces are literal)."""
        s = self.s
        parts: list[Part] = []
        lit: list[str] = []

        def flush(quoted: bool = False) -> None:
            if lit:
                parts.append(Part("lit", "".join(lit), quoted))
                lit.clear()

        while self.i < self.n:
            c = s[self.i]
            if not operand and (c in " \t\r\f\v\n" or c in _OPERATOR_CHARS):
                break  # (NAME=( is read as an array below)
            if c == "\\":
                if self.i + 1 < self.n:
                    nxt = s[self.i + 1]
                    if nxt == "\n":
                        self.i += 2
                        self.line += 1
                        continue
                    flush()
                    parts.append(Part("lit", nxt, True))
                    self.i += 2
                    continue
                lit.append("\\")
                self.i += 1
                continue
            if c == "'":
                flush()
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise self.err("unbalanced single quote (no closing ')", line)
                body = s[self.i + 1 : end]
                self.line += body.count("\n")
                parts.append(Part("lit", body, True))
                self.i = end + 1
                continue
            if c == "$" and s.startswith("$'", self.i):
                flush()
                parts.append(Part("lit", self._ansi(line), True))
                continue
            if c == '"':
                flush()
                self.i += 1
                self._double(parts, line)
                continue
            if c == "$":
                flush()
                parts.append(self._dollar(False, line))
                continue
            if c == "`":
                flush()
                parts.append(self._backtick(False, line))
                continue
            if c == "\n":
                self.line += 1
            lit.append(c)
            self.i += 1
        flush()
        if not parts:
            parts.append(Part("lit", "", False))
        word = Word(parts, line)
        raw = word.literal()
        if (
            not operand
            and raw is not None
            and self.i < self.n
            and s[self.i] == "("
            and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\+?=", raw)
        ):
            return self._array(raw, line)  # type: ignore[return-value]
        return word

    def _array(self, head: str, line: int) -> ArrayAssign:
        self.i += 1  # "("
        elements: list[Word] = []
        while True:
            tok = self.next_token(in_array=True)
            if tok is None:
                raise self.err("unbalanced parenthesis: array assignment without a closing ')'", line)
            if isinstance(tok, Op):
                if tok.text == ")":
                    break
                if tok.text == "\n":
                    continue
                raise self.err(f"unexpected {tok.text!r} inside an array assignment", tok.line)
            if isinstance(tok, ArrayAssign):
                raise self.err("nested array assignment", tok.line)
            elements.append(tok)
            self.tokens += 1
            if self.tokens > MAX_TOKENS:
                raise self.err("too many words for a launch script")
        return ArrayAssign(head.rstrip("=").rstrip("+"), head.endswith("+="), elements, line)

    def _ansi(self, line: int) -> str:
        s = self.s
        i = self.i + 2
        out: list[str] = []
        escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b",
                   "e": "\x1b", "E": "\x1b", "f": "\f", "v": "\v", "?": "?"}
        while i < self.n:
            c = s[i]
            if c == "'":
                self.i = i + 1
                return "".join(out)
            if c == "\\" and i + 1 < self.n:
                nxt = s[i + 1]
                if nxt in escapes:
                    out.append(escapes[nxt])
                    i += 2
                    continue
                # bash's numeric escapes: \xHH, \nnn (octal), \uHHHH, \UHHHHHHHH; a byte above ASCII (not one
                # character), a NUL or a surrogate stays as written
                num = _ANSI_NUMBER.match(s, i + 1)
                if num:
                    digits = num.group(0)
                    code = int(digits[1:], 16) if digits[0] in "xuU" else int(digits, 8)
                    if 0 < code < 0x80 or (digits[0] in "uU" and code < 0x110000 and not 0xD800 <= code < 0xE000):
                        out.append(chr(code))
                        i = num.end()
                        continue
                out.append("\\" + nxt)
                i += 2
                continue
            if c == "\n":
                self.line += 1
            out.append(c)
            i += 1
        raise self.err("unbalanced $'...' quote", line)

    def _double(self, parts: list[Part], line: int) -> None:
        s = self.s
        lit: list[str] = []
        before = len(parts)

        def flush() -> None:
            if lit:
                parts.append(Part("lit", "".join(lit), True))
                lit.clear()

        while self.i < self.n:
            c = s[self.i]
            if c == '"':
                self.i += 1
                flush()
                if len(parts) == before:
                    parts.append(Part("lit", "", True))  # "" is an empty word, not nothing
                return
            if c == "\\" and self.i + 1 < self.n:
                nxt = s[self.i + 1]
                if nxt == "\n":
                    self.i += 2
                    self.line += 1
                    continue
                if nxt in '$`"\\':
                    lit.append(nxt)
                    self.i += 2
                    continue
                lit.append("\\")
                self.i += 1
                continue
            if c == "$":
                flush()
                parts.append(self._dollar(True, line))
                continue
            if c == "`":
                flush()
                parts.append(self._backtick(True, line))
                continue
            if c == "\n":
                self.line += 1
            lit.append(c)
            self.i += 1
        raise self.err('unbalanced double quote (no closing ")', line)

    def _backtick(self, quoted: bool, line: int) -> Part:
        s = self.s
        i = self.i + 1
        while i < self.n:
            if s[i] == "\\":
                i += 2
                continue
            if s[i] == "`":
                body = s[self.i + 1 : i]
                self.line += body.count("\n")
                self.i = i + 1
                return Part("cmd", body, quoted)
            i += 1
        raise self.err("unbalanced backquote (no closing `)", line)

    def _matching(self, start: int, open_: str, close: str, line: int, what: str) -> int:
        """Index of the ``close`` that balances the ``open_`` before ``start``, skipping quoted text."""
        s = self.s
        depth = 1
        i = start
        while i < self.n:
            c = s[i]
            if c == "\\":
                i += 2
                continue
            if c == "'" and open_ == "(":
                end = s.find("'", i + 1)
                if end < 0:
                    raise self.err("unbalanced single quote (no closing ')", line)
                i = end + 1
                continue
            if c == '"':
                j = i + 1
                while j < self.n and s[j] != '"':
                    j += 2 if s[j] == "\\" else 1
                if j >= self.n:
                    raise self.err('unbalanced double quote (no closing ")', line)
                i = j + 1
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return i
            i += 1
        raise self.err(f"unbalanced {what}", line)

    def _dollar(self, quoted: bool, line: int) -> Part:
        s = self.s
        i = self.i
        if self.depth >= MAX_DEPTH:
            raise self.err("expansions nested too deeply", line)
        if s.startswith("$((", i):
            end = self._matching(i + 3, "(", ")", line, "$(( ... )) (no closing '))')")
            if end + 1 >= self.n or s[end + 1] != ")":
                # "$( (a) )" is a command substitution of a subshell, not arithmetic.
                close = self._matching(i + 2, "(", ")", line, "$( ... ) (no closing ')')")
                body = s[i + 2 : close]
                self.line += body.count("\n")
                self.i = close + 1
                return Part("cmd", body, quoted)
            body = s[i + 3 : end]
            self.line += body.count("\n")
            self.i = end + 2
            return Part("arith", body, quoted)
        if s.startswith("$(", i):
            end = self._matching(i + 2, "(", ")", line, "$( ... ) (no closing ')')")
            body = s[i + 2 : end]
            self.line += body.count("\n")
            self.i = end + 1
            return Part("cmd", body, quoted)
        if s.startswith("${", i):
            end = self._matching(i + 2, "{", "}", line, "${ ... } (no closing '}')")
            body = s[i + 2 : end]
            self.line += body.count("\n")
            self.i = end + 1
            return Part("param", body, quoted)
        if i + 1 < self.n:
            nxt = s[i + 1]
            m = _NAME.match(s, i + 1)
            if m:
                self.i = m.end()
                return Part("param", m.group(0), quoted)
            if nxt.isdigit() or nxt in "@*#?$!-":
                self.i = i + 2
                return Part("param", nxt, quoted)
        self.i = i + 1
        return Part("lit", "$", quoted)


def tokenize(text: str, name: str = "script") -> list[Token]:
    return _Lexer(text.replace(UNRESOLVED, "\ufffd"), name).tokenize()


# --------------------------------------------------------------------------------------------------
# Expansion


Value = str | list[str]


@dataclass
class PythonCommand:
    """The training command: ``python3 -m <module> [--config-path P] [--config-name N] <overrides>``."""

    module: str
    config_path: str | None
    config_name: str | None
    overrides: list[str]
    line: int
    env: dict[str, str] = field(default_factory=dict)  # NAME=value prefixes of the command itself
    other_args: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)  # the expanded words from "python" on
    # Variables the command reads whose value a block import did not evaluate decides: name -> that block.
    unknown: dict[str, str] = field(default_factory=dict)


@dataclass
class ParsedScript:
    name: str
    variables: dict[str, Value]
    exports: dict[str, str]  # variables the script exports, as of the training command
    command: PythonCommand
    notes: list[str]
    unset: list[str]  # variables read but never set (expanded empty, as bash does)
    sourced: list[str] = field(default_factory=list)  # files `source`d (never followed), e.g. CANN's set_env.sh


MAX_FOLLOW = 2  # `bash other.sh` / `exec bash other.sh` followed this many scripts deep


class _Interp:
    def __init__(self, name: str, environ: dict[str, str] | None, args: list[str] | None = None,
                 depth: int = 0) -> None:
        self.name = name
        self.args = list(args or [])  # the positional parameters ("$@"): a followed script's arguments
        self.depth = depth
        self.vars: dict[str, Value] = dict(environ or {})
        self.inherited = set(environ or {})  # the environment's variables: a followed script gets them too
        self.if_depth = 0  # evaluated `if` blocks inside each other (deeper ones are skipped, as before)
        self.arith_parens = 0  # open parentheses of the arithmetic being evaluated (in every nested $((...)))
        self.exported: set[str] = set()
        self.notes: list[str] = []
        self.unset: list[str] = []
        self.assoc: set[str] = set()  # names declared associative (declare -A): not read, reported
        self.commands: list[PythonCommand] = []
        self.work = 0
        self.line = 0  # of the word being expanded
        # Variables a block that was not evaluated (if/case/loop, a called function) may set: name -> why their
        # value is unknown. Read by the training command, they make the import refuse (a value it cannot know).
        self.unknown: dict[str, str] = {}
        self.reads: set[str] = set()  # unknown variables read since the current command began
        self.assigned_line: dict[str, int] = {}
        self.functions: dict[str, tuple[set[str], str]] = {}  # function -> (names its body sets, its lines)
        self.sourced: list[str] = []
        self.skip_why = ""  # why the block being skipped is not evaluated ("function": a definition)
        self.block_exports: dict[str, str] = {}  # exported in a block not evaluated: name -> that block

    def step(self, line: int = 0) -> None:
        self.work += 1
        if self.work > MAX_WORK:
            raise ScriptError(f"{self.name}: line {line or self.line}: too many expansions for a launch script")

    def note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < 200:
            self.notes.append(text)

    # -- values

    def get(self, name: str) -> Value | None:
        if name in ("@", "*"):
            if "@" in self.unknown:
                self.reads.add("@")
            return list(self.args)  # none for the script itself; a followed script's are its caller's words
        if name == "#":
            return str(len(self.args))
        if name.isdigit():
            n = int(name)
            return self.name if n == 0 else (self.args[n - 1] if n <= len(self.args) else None)
        if name in ("?", "$", "!", "-"):
            return UNRESOLVED + "$" + name + UNRESOLVED
        if name in self.unknown:
            self.reads.add(name)
        return self.vars.get(name)

    def scalar(self, v: Value | None) -> str:
        if v is None:
            return ""
        if isinstance(v, list):
            return v[0] if v else ""
        return v

    def param(self, body: str, line: int, depth: int, join_star: bool = True, quoted: bool = False) -> Value:
        """Expand the body of ``${...}`` (or a plain ``$NAME``). ``${A[*]}`` and ``$*`` are the elements joined
        by a space (the first character of bash's default IFS): one word when quoted; ``join_star=False`` keeps
        the elements (for ``${#A[*]}``, their count)."""
        if depth > MAX_DEPTH:
            raise ScriptError(f"{self.name}: line {line}: expansions nested too deeply")
        self.step(line)
        if body.startswith("#") and len(body) > 1:
            inner = self.param(body[1:], line, depth + 1, join_star=False)
            if isinstance(inner, list):
                return str(len(inner))
            return str(len(inner))
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(\[([^\]]*)\])?", body)
        if not m:
            return self._unresolved("${" + body + "}", line, "unsupported expansion")
        name, index = m.group(1), m.group(3)
        rest = body[m.end() :]
        value = self.get(name)
        if name == "BASH_SOURCE" and value is None:
            value = [self.name]
        if value is None and name not in self.unset and not rest and name not in ("@", "*"):
            self.unset.append(name)
        if index is not None and isinstance(value, str) and UNRESOLVED in value:
            pass  # an array verlctl could not read (reported where it was assigned): every element is unresolved
        elif index is not None:
            if index in ("@", "*"):
                value = [] if value is None else (value if isinstance(value, list) else [value])
            else:
                items = [] if value is None else (value if isinstance(value, list) else [value])
                try:
                    k = int(self.arith(index, line, depth + 1)) if not index.isdigit() else int(index)
                except (ScriptError, ValueError):  # an index that does not evaluate (reported there)
                    return self._unresolved("${" + body + "}", line, "unsupported array index")
                value = items[k] if -len(items) <= k < len(items) else None
        elif isinstance(value, list) and name not in ("@", "*"):
            value = value[0] if value else ""
        if join_star and isinstance(value, list) and (index == "*" or (index is None and name == "*")):
            value = " ".join(value)
        if not rest:
            return "" if value is None else value
        op_m = re.match(r":-|:=|:\+|:\?|-|=|\+|\?|,,|\^\^|,|\^|##|#|%%|%|//|/#|/%|/|:", rest)
        if not op_m:
            return self._unresolved("${" + body + "}", line, "unsupported expansion")
        op, arg = op_m.group(0), rest[op_m.end() :]
        if op in ("##", "#", "%%", "%", "//", "/#", "/%", "/", ":"):
            if value is None:
                return ""
            try:
                if op == ":":
                    return self._substring(value, arg, line, depth)
                return self._pattern_op(op, value, arg, line, depth)
            except _ArithError as exc:
                return self._unresolved("${" + body + "}", line, str(exc))
        if op in (",,", "^^", ",", "^"):
            if arg:
                return self._unresolved("${" + body + "}", line, "case change with a pattern")
            def conv(t: str) -> str:
                if op == ",,":
                    return t.lower()
                if op == "^^":
                    return t.upper()
                if op == ",":
                    return t[:1].lower() + t[1:]
                return t[:1].upper() + t[1:]
            if value is None:
                return ""
            return [conv(x) for x in value] if isinstance(value, list) else conv(value)
        is_set = value is not None
        empty = value is None or value == "" or value == []
        use_alt = (not empty) if op.startswith(":") else is_set
        if op in (":-", "-", ":=", "="):
            if use_alt:
                return value  # type: ignore[return-value]
            word = self.operand(arg, line, depth + 1, tilde=not quoted)
            if op in (":=", "="):  # the result is the variable's new value: split where unquoted, as bash does
                self.vars[name] = str(word)
                return str(word)
            return word
        if op in (":+", "+"):
            return self.operand(arg, line, depth + 1, tilde=not quoted) if use_alt else ""
        # :? / ?: an error in bash when unset; the message word is not evaluated here
        if use_alt:
            return value  # type: ignore[return-value]
        return self._unresolved("${" + body + "}", line, f"{name} is required by the script (${{{name}:?}})")

    def _substring(self, value: Value, arg: str, line: int, depth: int) -> Value:
        """``${X:offset}`` / ``${X:offset:length}`` (arithmetic; a negative offset counts from the end, a
        negative length is an end counted from the end); of an array (``${A[@]:1:2}``): its elements."""
        off_text, colon, len_text = arg.partition(":")
        n = len(value)
        off = self._arith_int(off_text, line, depth)
        if off < 0:
            off += n
        if off < 0 or off > n:
            return [] if isinstance(value, list) else ""
        end = n
        if colon:
            length = self._arith_int(len_text, line, depth)
            end = off + length if length >= 0 else n + length
            if end < off:
                raise _ArithError("substring expression < 0")
        return value[off:end]

    def _arith_int(self, text: str, line: int, depth: int) -> int:
        result = self.arith(text, line, depth + 1) if text.strip() else "0"
        try:
            return int(result)
        except ValueError:
            raise _ArithError(f"offset {text.strip()!r} is not evaluated") from None

    def _pattern_op(self, op: str, value: Value, arg: str, line: int, depth: int) -> Value:
        """``${X#p}`` ``${X##p}`` ``${X%p}`` ``${X%%p}`` (shortest / longest prefix or suffix matching the glob
        ``p``) and ``${X/p/r}`` ``${X//p/r}`` ``${X/#p/r}`` ``${X/%p/r}``; of an array, element by element."""
        if op.startswith("/"):
            pat_text, _, rep_text = _split_unescaped(arg, "/")
            rep = self.operand(rep_text, line, depth + 1) if rep_text else ""
        else:
            pat_text, rep = arg, ""
        pat = self._pattern(pat_text, line, depth + 1) if pat_text else ""
        if UNRESOLVED in pat or UNRESOLVED in rep:
            raise _ArithError("a pattern verlctl cannot read")
        if len(pat) > MAX_PATTERN:
            raise _ArithError(f"a pattern of more than {MAX_PATTERN} characters")
        toks = _glob_tokens(pat)
        rev = toks[::-1]  # the glob read backwards, for suffixes (a class matches one character either way)

        def one(v: str) -> str:
            n = len(v)
            if n > MAX_PATTERN_VALUE:
                raise _ArithError(f"a value of more than {MAX_PATTERN_VALUE} characters for a pattern")
            if op in ("#", "##", "/#"):
                ends = _glob_ends(toks, v)  # prefixes v[:k]
                cut = [k for k in range(n + 1) if ends[k]]
                if not cut or (op == "/#" and not pat):
                    return v
                k = cut[0] if op == "#" else cut[-1]
                return v[k:] if op != "/#" else rep + v[k:]
            if op in ("%", "%%", "/%"):
                ends = _glob_ends(rev, v[::-1])  # suffixes: v[n - k:]
                cut = [k for k in range(n + 1) if ends[k]]
                if not cut or (op == "/%" and not pat):
                    return v
                k = cut[0] if op == "%" else cut[-1]
                return v[:n - k] if op != "/%" else v[:n - k] + rep
            if not pat:
                return v
            out, i = [], 0
            while i <= n:
                self.step()
                ends = _glob_ends(toks, v[i:])
                longest = max((k for k in range(len(ends)) if ends[k]), default=0)
                if longest == 0 and toks[0][0] == "*":  # *rest matching nowhere from here matches nowhere later
                    out.append(v[i:])
                    break
                if longest == 0:  # no match here, or only an empty one: keep the character
                    if i < n:
                        out.append(v[i])
                    i += 1
                    continue
                out.append(rep)
                i += longest
                if op == "/":
                    out.append(v[i:])
                    break
            return "".join(out)

        return [one(v) for v in value] if isinstance(value, list) else one(value)

    def _pattern(self, text: str, line: int, depth: int) -> str:
        """The glob of ``${X#pattern}``: what is quoted or escaped in it matches literally."""
        lx = _Lexer(text, self.name, line, depth)
        w = lx.word(line, operand=True)
        if lx.i < lx.n:
            return UNRESOLVED
        out = []
        for part in w.parts:
            piece = part.text if part.kind == "lit" else self.join(Word([part], w.line), depth)
            out.append(re.sub(r"([][*?\\!^])", r"\\\1", piece) if part.quoted else piece)
        return "".join(out)

    def operand(self, text: str, line: int, depth: int, tilde: bool = False) -> str:
        """The word of ``${X:-word}`` (``tilde``: the expansion is unquoted, so a leading ``~`` is HOME)."""
        lx = _Lexer(text, self.name, line, depth)
        w = lx.word(line, operand=True)
        if lx.i < lx.n:
            return self._unresolved(text, line, "unsupported expansion operand")
        value = self.join(w, depth, "word" if tilde else None)
        if w.parts and all(p.quoted for p in w.parts):
            return _Quoted(value)  # ${X:+"a b"}: one word even where the expansion is unquoted
        return value

    def _unresolved(self, raw: str, line: int, why: str) -> str:
        self.note(f"line {line}: {raw[:80]} is not evaluated ({why})")
        return UNRESOLVED + raw[:200] + UNRESOLVED

    def cmd(self, body: str, line: int, depth: int) -> str:
        """``$(...)``: only basename/dirname are computed (string functions); nothing is run."""
        if depth > MAX_DEPTH:  # `$(basename $(basename ...))` thousands deep: one line, not a RecursionError
            raise ScriptError(f"{self.name}: line {line}: command substitutions nested too deeply")
        if all(not ln.strip() or ln.strip().startswith("#") for ln in body.splitlines()):
            return ""  # `# an inline comment` (a common idiom in long commands): a comment prints nothing
        try:
            words = tokenize(body, self.name)
        except ScriptError:
            words = []
        if (len(words) == 4 and isinstance(words[0], Word) and words[0].literal() == "cd" and isinstance(words[1], Word)
                and isinstance(words[2], Op) and words[2].text == "&&" and isinstance(words[3], Word)
                and words[3].literal() == "pwd"):
            # `$(cd DIR && pwd)` (a script's own directory): DIR as an absolute path, computed, not run
            d = self.join(words[1], depth + 1)
            if d and UNRESOLVED not in d:
                return posixpath.normpath(posixpath.join(os.getcwd(), d))
        if words and all(isinstance(w, Word) for w in words):
            fields: list[str] = []
            for w in words:
                assert isinstance(w, Word)
                fields += self.fields(w, depth + 1)
            prog = fields[0] if fields else ""
            args = fields[1:]
            if args and args[0] == "--":
                args = args[1:]
            if prog == "basename" and 1 <= len(args) <= 2 and not any(a.startswith("-") for a in args):
                base = posixpath.basename(args[0].rstrip("/")) or ("/" if args[0].startswith("/") else "")
                if len(args) == 2 and base.endswith(args[1]) and base != args[1]:
                    base = base[: -len(args[1])]
                return base
            if prog == "dirname" and len(args) == 1 and not args[0].startswith("-"):
                return posixpath.dirname(args[0].rstrip("/")) or "."
        return self._unresolved("$(" + " ".join(body.split())[:120] + ")", line, "a command substitution: not run")

    def arith(self, expr: str, line: int, depth: int) -> str:
        if depth > MAX_DEPTH:
            raise ScriptError(f"{self.name}: line {line}: arithmetic nested too deeply")
        if len(expr) > 2000:
            raise ScriptError(f"{self.name}: line {line}: arithmetic expression too long")
        # $VAR and ${VAR} inside arithmetic are expanded first (as bash does).
        text = expr
        if "$" in text:
            lx = _Lexer(text, self.name, line, depth + 1)
            text = self.join(lx.word(line, operand=True), depth + 1)
            if UNRESOLVED in text:
                return UNRESOLVED + "$((" + expr + "))" + UNRESOLVED
        try:
            return str(_Arith(text, self, depth + 1).run())
        except _ArithError as exc:
            return self._unresolved("$((" + " ".join(expr.split()) + "))", line, f"arithmetic: {exc}")

    # -- words

    def _home(self) -> str:
        home = self.get("HOME")
        if home is None and "HOME" not in self.unset:
            self.unset.append("HOME")  # read but never set, as for $HOME
        return self.scalar(home)

    def _tilde(self, text: str, at_start: bool, assign: bool, more: bool) -> str:
        """Bash's tilde expansion of one unquoted literal: ``~`` or ``~/...`` at the start of a word and, in an
        assignment's value, after each ``:`` becomes HOME (``more``: other parts follow this one, so a lone
        ``~`` at its end is not a whole prefix). ``~user`` is left as written."""
        pieces = text.split(":") if assign else [text]
        for k, piece in enumerate(pieces):
            if (k > 0 or at_start) and piece.startswith("~") and (
                    piece[1:2] == "/" or (piece == "~" and (k < len(pieces) - 1 or not more))):
                pieces[k] = self._home() + piece[1:]
        return ":".join(pieces)

    def _segments(self, w: Word, depth: int, tilde: str | None = None) -> list[tuple[Value, bool]]:
        """``tilde``: "word" (a command word, an array element or an operand) or "assign" (an assignment's
        value) expands ``~`` as bash does there; None leaves it."""
        out: list[tuple[Value, bool]] = []
        self.line = w.line
        assign = tilde == "assign"
        for k, p in enumerate(w.parts):
            if p.kind == "lit" and tilde and not p.quoted:
                text, start = p.text, k == 0
                if k == 0 and tilde == "word" and (m := re.match(r"[A-Za-z_][A-Za-z0-9_]*\+?=", text)):
                    assign = True  # NAME=~/x as an argument: bash expands it as in an assignment
                    out.append((text[:m.end()] + self._tilde(text[m.end():], True, True, k + 1 < len(w.parts)), True))
                    continue
                out.append((self._tilde(text, start, assign, k + 1 < len(w.parts)), True))
                continue
            if p.kind == "lit":
                out.append((p.text, True))  # literal text never splits
            elif p.kind == "param":
                out.append((self.param(p.text, w.line, depth + 1, quoted=p.quoted), p.quoted))
            elif p.kind == "arith":
                out.append((self.arith(p.text, w.line, depth + 1), p.quoted))
            else:
                out.append((self.cmd(p.text, w.line, depth + 1), p.quoted))
        # An unresolved value stays one piece (it is reported, never split into stray words).
        return [(v, q or (isinstance(v, str) and UNRESOLVED in v)) for v, q in out]

    def join(self, w: Word, depth: int = 0, tilde: str | None = None) -> str:
        """A word as one string (assignments, operands): no field splitting; arrays joined by spaces."""
        text = "".join(" ".join(v) if isinstance(v, list) else v for v, _ in self._segments(w, depth, tilde))
        if len(text) > MAX_VALUE_CHARS:
            raise ScriptError(f"{self.name}: line {w.line}: a value expands to more than {MAX_VALUE_CHARS} characters")
        return text

    def fields(self, w: Word, depth: int = 0) -> list[str]:
        """A command word as bash would pass it: unquoted expansions split on blanks, "${a[@]}" per element."""
        fields: list[str] = []
        cur: list[str] = []
        started = False
        for value, protected in self._segments(w, depth, "word"):
            if isinstance(value, list):
                pieces = value if protected else [x for v in value for x in v.split()]
                for k, piece in enumerate(pieces):
                    if k > 0:
                        fields.append("".join(cur))
                        cur = []
                    cur.append(piece)
                    started = True
                continue
            if protected or isinstance(value, _Quoted):
                cur.append(value)
                started = True
                continue
            if not value:
                continue
            pieces = value.split()
            if value[:1].isspace() and started:
                fields.append("".join(cur))
                cur, started = [], False
            for k, piece in enumerate(pieces):
                if k > 0:
                    fields.append("".join(cur))
                    cur = []
                cur.append(piece)
                started = True
            if value[-1:].isspace() and started:
                fields.append("".join(cur))
                cur, started = [], False
        if started:
            fields.append("".join(cur))
        if sum(len(f) for f in fields) > MAX_VALUE_CHARS:
            raise ScriptError(f"{self.name}: line {w.line}: a word expands to more than {MAX_VALUE_CHARS} characters")
        return fields

    # -- commands

    def assign(self, w: Word, depth: int = 0) -> tuple[str, Value, bool] | None:
        """``NAME=value`` / ``NAME+=value`` / ``NAME[i]=value`` at the start of a word, else None."""
        first = w.parts[0]
        if first.kind != "lit" or first.quoted:
            return None
        m = _ASSIGN.match(first.text)
        if not m:
            return None
        name, append = m.group(1), m.group(3) == "+"
        rest = Word([Part("lit", first.text[m.end() :], False), *w.parts[1:]], w.line)
        value = self.join(rest, depth, "assign")
        if m.group(2):  # NAME[i]=value: the whole array with that element set
            return name, self._element(name, m.group(2)[1:-1], value, append, w.line, depth), False
        return name, value, append

    def _element(self, name: str, index: str, value: str, append: bool, line: int, depth: int) -> Value:
        """The array ``name`` after ``name[index]=value`` (``+=``: appended to the element). Arrays are kept
        dense: an index past the end but one makes the array unresolved (reported), as does an index that
        does not evaluate."""
        raw = f"{name}[{index}]={value}"
        if name in self.assoc:
            return self._unresolved(raw, line, "an associative array")
        old = self.vars.get(name)
        items = list(old) if isinstance(old, list) else ([] if old is None else [old])
        k_text = self.arith(index, line, depth + 1)
        try:
            k = int(k_text)
        except ValueError:
            return self._unresolved(raw, line, "unsupported array index")
        if k < 0:
            k += len(items)
        if 0 <= k < len(items):
            items[k] = items[k] + value if append else value
        elif k == len(items):
            items.append(value)
        else:
            return self._unresolved(raw, line, "a sparse array (an element past the end)")
        return items

    def _array_value(self, tok: ArrayAssign) -> Value:
        """The elements of ``NAME=(...)``: each word's fields, or ``[k]=value`` at index k (later words follow
        it); a sparse result (a gap) or ``+=([k]=...)`` is unresolved (reported)."""
        if tok.name in self.assoc:
            return self._unresolved(f"{tok.name}=(...)", tok.line, "an associative array")
        items: dict[int, str] = {}
        k = 0
        for e in tok.elements:
            first = e.parts[0] if e.parts else None
            m = re.match(r"\[([^\]]*)\]=", first.text) if first and first.kind == "lit" and not first.quoted else None
            if m is None:
                for f in self.fields(e):
                    items[k] = f
                    k += 1
                continue
            try:
                k = int(self.arith(m.group(1), tok.line, 1))
            except ValueError:
                k = -1
            if k < 0 or tok.append:
                return self._unresolved(f"{tok.name}=([{m.group(1)}]=...)", tok.line, "an indexed array assignment")
            items[k] = self.join(Word([Part("lit", first.text[m.end():], False), *e.parts[1:]], e.line))  # type: ignore[union-attr]
            k += 1
        if sorted(items) != list(range(len(items))):
            return self._unresolved(f"{tok.name}=(...)", tok.line, "a sparse array (indices with gaps)")
        return [items[i] for i in range(len(items))]

    def set_var(self, name: str, value: Value, append: bool) -> None:
        old = self.vars.get(name)
        if append and old is not None:
            if isinstance(old, list):
                value = old + (value if isinstance(value, list) else [value])
            elif isinstance(value, str):
                value = old + value
        self.vars[name] = value

    def run(self, tokens: list[Token]) -> bool:
        """Process ``tokens``; False when an ``exit`` ended the script."""
        cmd: list[Token] = []
        prev_op = "\n"
        i = 0
        n = len(tokens)
        while i < n:
            tok = tokens[i]
            if isinstance(tok, Op) and tok.text in ("\n", ";", "&", "&&", "||", "|", "|&", ";;", ";&", ";;&"):
                if cmd:
                    nxt = tok.text
                    if not self.simple(cmd, chained=prev_op in ("&&", "||") or nxt in ("&&", "||")):
                        return False
                    cmd = []
                prev_op = tok.text
                i += 1
                continue
            if not cmd and isinstance(tok, Word):
                kw = tok.literal()
                if kw in _OPENERS or (
                    kw is not None
                    and i + 2 < n
                    and isinstance(tokens[i + 1], Op)
                    and tokens[i + 1].text == "("  # type: ignore[union-attr]
                    and isinstance(tokens[i + 2], Op)
                    and tokens[i + 2].text == ")"  # type: ignore[union-attr]
                ) or kw == "function":
                    if kw in ("if", "case") and prev_op not in ("&&", "||", "|"):
                        self.skip_why = ""
                        evaluated = self.if_block(tokens, i) if kw == "if" else self.case_block(tokens, i)
                        if evaluated is not None:
                            i, went_on = evaluated
                            if not went_on:
                                return False
                            prev_op = "\n"
                            continue
                    elif kw not in _OPENERS:
                        self.skip_why = "function"
                    else:
                        self.skip_why = ""
                    i = self.skip_compound(tokens, i)
                    prev_op = "\n"
                    continue
            if not cmd and isinstance(tok, Op) and tok.text == "(":
                i = self.skip_subshell(tokens, i)
                continue
            cmd.append(tok)
            i += 1
        if cmd:
            return self.simple(cmd, chained=prev_op in ("&&", "||"))
        return True

    def if_block(self, tokens: list[Token], i: int) -> tuple[int, bool] | None:
        """An ``if`` whose every test is a string comparison ``[[ A == B ]]`` / ``[[ A != B ]]`` of values the
        script gives: run the branch bash would take. (index after ``fi``, False when that branch exits), or
        None to skip the block as before (a test that needs a command, arithmetic, a file, ...)."""
        clauses: list[tuple[list[Token], list[Token]]] = []
        other: list[Token] | None = None
        cur: list[Token] = []
        cond: list[Token] | None = None
        depth = 0
        at_cmd = True
        j = i + 1
        n = len(tokens)
        while j < n:
            tok = tokens[j]
            word = tok.literal() if isinstance(tok, Word) else None
            if isinstance(tok, Op):
                at_cmd = tok.text in ("\n", ";", "&", "&&", "||", "|", ";;", "(", ")", "{")
                cur.append(tok)
                j += 1
                continue
            if depth == 0 and at_cmd and word in ("then", "elif", "else", "fi"):
                if word == "then" and cond is None:
                    cond, cur = cur, []
                elif word in ("elif", "else", "fi") and cond is not None:
                    clauses.append((cond, cur))
                    cond, cur = None, []
                    if word == "fi":
                        break
                elif word == "fi" and cond is None and clauses and other is None:
                    break
                else:
                    return None
                if word == "else":
                    cond = None
                    k = j + 1
                    # the else body runs to the matching fi
                    body: list[Token] = []
                    d2 = 0
                    at2 = True
                    while k < n:
                        t2 = tokens[k]
                        w2 = t2.literal() if isinstance(t2, Word) else None
                        if isinstance(t2, Op):
                            at2 = t2.text in ("\n", ";", "&", "&&", "||", "|", ";;", "(", ")", "{")
                            body.append(t2)
                            k += 1
                            continue
                        if at2 and w2 in _OPENERS:
                            d2 += 1
                        elif at2 and w2 in _CLOSERS:
                            if d2 == 0 and w2 == "fi":
                                break
                            d2 -= 1
                        elif at2 and d2 == 0 and w2 in ("then", "elif", "else"):
                            return None
                        body.append(t2)
                        at2 = w2 in ("then", "do", "else", "elif", "if", "while", "until", "!", "time", "{")
                        k += 1
                    else:
                        return None
                    other = body
                    j = k
                    break
                at_cmd = True
                j += 1
                continue
            if at_cmd and word in _OPENERS:
                depth += 1
            elif at_cmd and word in _CLOSERS:
                depth -= 1
                if depth < 0:
                    return None
            cur.append(tok)
            at_cmd = word in ("then", "do", "else", "elif", "if", "while", "until", "!", "time", "{")
            j += 1
        else:
            return None
        chosen: list[Token] | None = other
        for cond_tokens, body in clauses:
            verdict = self.condition(cond_tokens)
            if verdict is None:
                self.skip_why = self._tested(cond_tokens)
                return None
            if verdict:
                chosen = body
                break
        if self.if_depth >= MAX_DEPTH:
            return None
        self.note(f"line {tokens[i].line}: `if` evaluated (its tests compare the script's own values)")
        self.if_depth += 1
        try:
            went_on = self.run(chosen) if chosen else True
        finally:
            self.if_depth -= 1
        return j + 1, went_on

    def condition(self, cond: list[Token]) -> bool | None:
        """An ``if`` condition: tests joined by ``&&`` / ``||`` (bash: left to right, equal precedence), each
        one :meth:`test` can decide on values no unevaluated block sets; None otherwise."""
        parts: list[list[Token]] = [[]]
        ops: list[str] = []
        for t in cond:
            if isinstance(t, Op) and t.text in ("&&", "||"):
                ops.append(t.text)
                parts.append([])
            else:
                parts[-1].append(t)
        self.reads = set()
        verdicts = [self.test(p) for p in parts]
        if any(v is None for v in verdicts) or self.reads:
            return None
        value = bool(verdicts[0])
        for op, v in zip(ops, verdicts[1:]):
            value = (value and bool(v)) if op == "&&" else (value or bool(v))
        return value

    def _tested(self, words: list[Token]) -> str:
        """Why a block's test or subject cannot be decided here: the variables it reads, and what each lacks."""
        shown: list[str] = []
        for w in words:
            if not isinstance(w, Word):
                continue
            for part in w.parts:
                if part.kind in ("cmd", "special"):
                    shown.append(f"a command's output (line {w.line})")
                    continue
                m = re.match(r"#?([A-Za-z_][A-Za-z0-9_]*)", part.text) if part.kind == "param" else None
                if m is None:
                    continue
                name = m.group(1)
                value = self.vars.get(name)
                if name in self.unknown:
                    shown.append(f"{name} ({self.unknown[name]})")
                elif value is None:
                    shown.append(f"{name} (not set by the script: give it with --var {name}=VALUE)")
                elif UNRESOLVED in self.scalar(value):
                    at = self.assigned_line.get(name)
                    where = f"line {at}: " if at else ""
                    shown.append(f"{name} ({where}its value needs a command's output: give it with --var {name}=VALUE)")
                else:
                    shown.append(name)
        shown = list(dict.fromkeys(shown))
        return f"it tests {', '.join(shown[:4])}" if shown else "its test is not a plain comparison of values"

    def case_block(self, tokens: list[Token], i: int) -> tuple[int, bool] | None:
        """``case WORD in PATTERN[|PATTERN]) ... ;; esac`` whose word and patterns are the script's own values:
        run the clause bash would take. (index after ``esac``, False when it exits), or None to skip the block."""
        n = len(tokens)
        j = i + 1
        subject = tokens[j] if j < n else None
        if not isinstance(subject, Word) or j + 1 >= n or not (isinstance(tokens[j + 1], Word)
                                                                 and tokens[j + 1].literal() == "in"):  # type: ignore[union-attr]
            return None
        j += 2
        clauses: list[tuple[list[Word], list[Token]]] = []
        while True:
            while j < n and isinstance(tokens[j], Op) and tokens[j].text in ("\n", ";"):  # type: ignore[union-attr]
                j += 1
            if j >= n:
                return None
            t = tokens[j]
            if isinstance(t, Word) and t.literal() == "esac":
                end = j + 1
                break
            if isinstance(t, Op) and t.text == "(":
                j += 1
            pats: list[Word] = []
            while j < n:
                t = tokens[j]
                j += 1
                if isinstance(t, Word):
                    pats.append(t)
                elif isinstance(t, Op) and t.text == ")":
                    break
                elif not (isinstance(t, Op) and t.text == "|"):
                    return None
            if not pats:
                return None
            body: list[Token] = []
            depth = 0
            at_cmd = True
            while j < n:
                t = tokens[j]
                if isinstance(t, Op):
                    if depth == 0 and t.text in (";;", ";&", ";;&"):
                        if t.text != ";;":
                            return None  # fall-through clauses are not read
                        j += 1
                        break
                    at_cmd = t.text in ("\n", ";", "&", "&&", "||", "|", ";;", "(", ")", "{")
                    body.append(t)
                    j += 1
                    continue
                w = t.literal() if isinstance(t, Word) else None
                if at_cmd and depth == 0 and w == "esac":
                    break  # the last clause may end without ;;
                if at_cmd and w in _OPENERS:
                    depth += 1
                elif at_cmd and w in _CLOSERS:
                    depth -= 1
                body.append(t)
                at_cmd = w in ("then", "do", "else", "elif", "if", "while", "until", "!", "time", "{")
                j += 1
            else:
                return None
            clauses.append((pats, body))
        self.reads = set()
        value = self._case_word(subject)
        if value is None or self.reads:
            self.skip_why = self._tested([subject])
            return None
        chosen: list[Token] | None = None
        for pats, body in clauses:
            globs = [self._case_pattern(p) for p in pats]
            if any(g is None for g in globs) or self.reads:
                self.skip_why = self._tested(list(pats))
                return None
            if any(fnmatch.fnmatchcase(value, g) for g in globs if g is not None):
                chosen = body
                break
        if self.if_depth >= MAX_DEPTH:
            return None
        self.note(f"line {tokens[i].line}: `case` evaluated (its word and patterns are the script's own values)")
        self.if_depth += 1
        try:
            went_on = self.run(chosen) if chosen else True
        finally:
            self.if_depth -= 1
        return end, went_on

    def _case_word(self, w: Word) -> str | None:
        for part in w.parts:
            m = re.match(r"#?([A-Za-z_][A-Za-z0-9_]*)", part.text) if part.kind == "param" else None
            if part.kind in ("cmd", "arith", "special") or (m is not None and m.group(1) not in self.vars
                                                             and not re.match(r"#?\w+:?[-=]", part.text)):
                return None
        v = self.join(w)
        return None if UNRESOLVED in v else v

    def _case_pattern(self, w: Word) -> str | None:
        """A case pattern as an fnmatch glob: quoted text matches itself, unquoted ``* ? [...]`` are globs."""
        out: list[str] = []
        for part in w.parts:
            if part.kind == "lit":
                text = part.text
            elif part.kind == "param":
                v = self.param(part.text, w.line, 1, quoted=part.quoted)
                text = " ".join(v) if isinstance(v, list) else v
            else:
                return None
            if UNRESOLVED in text:
                return None
            out.append("".join(f"[{c}]" if c in "*?[" else c for c in text) if part.quoted else text)
        return "".join(out)

    def _assigned_in(self, toks: list[Token]) -> tuple[set[str], set[str]]:
        """(names a block's commands may set, the ones among them it exports): assignments, array assignments,
        ``export``/``declare``/``local``/``readonly`` operands, ``read`` / ``unset`` / ``for`` names."""
        names: set[str] = set()
        exported: set[str] = set()
        at_cmd = True
        takes: str | None = None  # the builtin whose operands are names ("export", "declare", "read", ...)
        for t in toks:
            if isinstance(t, Op):
                at_cmd = t.text in ("\n", ";", "&", "&&", "||", "|", ";;", "(", ")", "{")
                takes = None
                continue
            if isinstance(t, ArrayAssign):
                names.add(t.name)
                if takes == "export":
                    exported.add(t.name)
                continue
            if not isinstance(t, Word):
                continue
            first = t.parts[0] if t.parts else None
            m = _ASSIGN.match(first.text) if first is not None and first.kind == "lit" and not first.quoted else None
            lit = t.literal()
            if takes is not None:
                name = m.group(1) if m else (lit if lit and _NAME.fullmatch(lit) else None)
                if name:
                    names.add(name)
                    if takes == "export":
                        exported.add(name)
                if takes == "for":
                    takes = None
                continue
            if at_cmd and m:
                names.add(m.group(1))
                continue  # NAME=value, and a command may follow
            if at_cmd and lit in (*_DECLARERS, "read", "unset", "for", "select", "mapfile", "readarray"):
                takes = "for" if lit == "select" else lit
            at_cmd = lit in ("then", "do", "else", "elif", "if", "while", "until", "!", "time", "{")
        return names, exported

    def test(self, cond: list[Token]) -> bool | None:
        """The value of an ``if`` test on the script's own values, None when it needs more (a command, a file,
        a value the run's environment gives): ``[[ A == B ]]`` / ``!=`` (B without glob characters),
        ``[ A = B ]`` / ``==`` / ``!=``, ``-z A`` / ``-n A`` / ``A`` alone, and ``-eq -ne -lt -le -gt -ge`` on
        integers, in ``[ ]`` or ``[[ ]]``."""
        words = [t for t in cond if not (isinstance(t, Op) and t.text in ("\n", ";"))]
        if len(words) < 3 or not all(isinstance(w, Word) for w in words):
            return None
        lits = [w.literal() if isinstance(w, Word) else None for w in words]
        double = lits[0] == "[[" and lits[-1] == "]]"
        if not double and not (lits[0] == "[" and lits[-1] == "]"):
            return None
        inner: list[Word] = words[1:-1]  # type: ignore[assignment]
        ops = {"==", "=", "!=", "-eq", "-ne", "-lt", "-le", "-gt", "-ge"}
        operands = [w for k, w in enumerate(inner)
                    if not ((len(inner) == 3 and k == 1 and lits[2] in ops)
                            or (len(inner) == 2 and k == 0 and lits[1] in ("-z", "-n")))]
        for w in operands:
            for part in w.parts:
                m = re.match(r"#?([A-Za-z_][A-Za-z0-9_]*)", part.text) if part.kind == "param" else None
                if part.kind in ("cmd", "arith", "special") or (m is not None and m.group(1) not in self.vars
                                                                 and not re.match(r"#?\w+:?[-=]", part.text)):
                    return None  # a value the run's environment gives (unset here) or a command's output

        def value(w: Word) -> str | None:
            if double:
                v = self.join(w)
            else:
                f = self.fields(w)  # [ ] splits unquoted values: only one word is read here
                if len(f) != 1 or (any(not part.quoted for part in w.parts) and any(ch in f[0] for ch in "*?[")):
                    return None  # several words, or an unquoted glob: bash expands it against the files here
                v = f[0]
            return None if UNRESOLVED in v else v

        vals = [value(w) for w in operands]
        if any(v is None for v in vals):
            return None
        if len(inner) == 1:
            return vals[0] != ""
        if len(inner) == 2:
            if lits[1] not in ("-z", "-n"):
                return None
            return (vals[0] == "") if lits[1] == "-z" else (vals[0] != "")
        if len(inner) != 3 or lits[2] not in ops:
            return None
        a, b = vals[0], vals[1]
        assert a is not None and b is not None
        op = lits[2]
        if op in ("==", "=", "!="):
            if double and any(ch in b for ch in "*?["):
                return None  # [[ ]] matches a glob on the right
            return (a == b) if op != "!=" else (a != b)
        if not (re.fullmatch(r"[-+]?[0-9]+", a.strip()) and re.fullmatch(r"[-+]?[0-9]+", b.strip())):
            return None  # [[ ]] would evaluate arithmetic, [ ] refuses: neither is read here
        x, y = int(a), int(b)
        return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]

    def skip_compound(self, tokens: list[Token], i: int) -> int:
        start = tokens[i]
        kw = start.literal() if isinstance(start, Word) else None
        line = start.line
        depth = 0
        at_cmd = True
        j = i
        n = len(tokens)
        while j < n:
            tok = tokens[j]
            if isinstance(tok, Op):
                at_cmd = tok.text in ("\n", ";", "&", "&&", "||", "|", ";;", "(", ")", "{")
                j += 1
                continue
            word = tok.literal() if isinstance(tok, Word) else None
            if (at_cmd and word in _OPENERS) or word == "{":
                depth += 1
            elif (at_cmd and word in _CLOSERS) or word == "}":
                depth -= 1
                if depth == 0:
                    j += 1
                    break
            at_cmd = word in ("then", "do", "else", "elif", "if", "while", "until", "!", "time", "{")
            j += 1
        else:
            raise ScriptError(f"{self.name}: line {line}: {kw!r} block is never closed")
        end_line = tokens[j - 1].line if j - 1 < n else line
        what = "function" if kw not in _OPENERS else f"{kw!r} block"
        self.note(f"lines {line}-{end_line}: {what} not evaluated (verlctl import runs nothing)")
        names, exported = self._assigned_in(tokens[i:j])
        if kw not in _OPENERS:  # a definition: its body runs (unevaluated) where the script calls it
            nxt = tokens[i + 1] if i + 1 < n else None
            fname = (nxt.literal() if isinstance(nxt, Word) else None) if kw == "function" else kw
            if fname:
                self.functions[fname] = (names | exported, f"lines {line}-{end_line}")
            return j
        why = f"the `{kw}` block at lines {line}-{end_line} may set and import did not evaluate"
        if self.skip_why:
            why += f": {self.skip_why}"
        self._mark_unknown(names, exported, why)
        return j

    def _mark_unknown(self, names: set[str], exported: set[str], why: str) -> None:
        for name in names:
            self.unknown[name] = why
        for name in exported:
            self.block_exports[name] = why

    def skip_subshell(self, tokens: list[Token], i: int) -> int:
        depth = 0
        line = tokens[i].line
        for j in range(i, len(tokens)):
            tok = tokens[j]
            if isinstance(tok, Op) and tok.text == "(":
                depth += 1
            elif isinstance(tok, Op) and tok.text == ")":
                depth -= 1
                if depth == 0:
                    self.note(f"line {line}: ( subshell ) not evaluated")
                    return j + 1
        raise ScriptError(f"{self.name}: line {line}: unbalanced parenthesis (no closing ')')")

    def simple(self, cmd: list[Token], chained: bool) -> bool:
        """Process one simple command; False ends the script (a top-level ``exit``)."""
        words: list[Word] = []
        assigns: list[tuple[str, Value, bool]] = []
        skip_next = False
        self.reads = set()
        for tok in cmd:
            if skip_next:
                skip_next = False
                continue
            if isinstance(tok, Op):
                if tok.text in ("(", ")"):
                    raise ScriptError(f"{self.name}: line {tok.line}: unexpected {tok.text!r}")
                skip_next = True  # a redirection: the next word is its target
                continue
            if isinstance(tok, ArrayAssign):
                if words and words[0].literal() in _DECLARERS:
                    words.append(tok)  # type: ignore[arg-type]  # `declare -a A=(...)`: handled by _declare
                    continue
                if words:
                    raise ScriptError(f"{self.name}: line {tok.line}: unexpected '(' in a command")
                assigns.append((tok.name, self._array_value(tok), tok.append))
                continue
            if not words:
                a = self.assign(tok)
                if a is not None:
                    assigns.append(a)
                    continue
            words.append(tok)
        if not words:
            if chained:
                if assigns:
                    shown = " && ".join(a[0] for a in assigns)
                    self.note(f"line {cmd[0].line}: conditional assignment ({shown}) not evaluated")
                    self._mark_unknown({a[0] for a in assigns}, set(),
                                       f"the conditional assignment at line {cmd[0].line} may set (not evaluated)")
                return True
            for name, value, append in assigns:
                self.set_var(name, value, append)
                self._assigned(name, cmd[0].line)
            return True
        first = words[0].literal()
        if first in _DECLARERS and not chained:
            self._declare(first, words[1:])
            return True
        if first in self.functions:
            names, lines = self.functions[first]
            self._mark_unknown(names, set(), f"the function {first} ({lines}), called at line {words[0].line}, may "
                                             "set (not evaluated)")
        if any(isinstance(w, ArrayAssign) for w in words):
            return True  # a chained `declare -a A=(...)`: not evaluated, as other chained assignments
        if first == "unset" and not chained:
            for w in words[1:]:
                name = self.join(w)
                if not name.startswith("-"):
                    self.vars.pop(name, None)
                    self.exported.discard(name)
                    self.unknown.pop(name, None)
                    self.block_exports.pop(name, None)
            return True
        if first == "exit" and not chained:
            return False
        if first in ("source", "."):
            if len(words) > 1:
                self.sourced.append(self.join(words[1]))
            self.note(f"line {words[0].line}: `{first} {self.join(words[1]) if len(words) > 1 else ''}` not followed")
            return True
        if first in ("cd", "pushd", "popd"):
            self.note(f"line {words[0].line}: `{first}` ignored (verlctl runs training from container.workdir)")
            return True
        argv = [f for w in words for f in self.fields(w)]
        if argv[:1] == ["set"] and not chained:  # `set -- a b` / `set a b`: the positional parameters; options ignored
            rest, k = argv[1:], 0
            while k < len(rest) and rest[k] != "--" and rest[k][:1] in ("-", "+"):
                k += 2 if "o" in rest[k][1:] else 1  # -o (also -euo) takes the option's name
            if k < len(rest):
                self.args = rest[k + 1:] if rest[k] == "--" else rest[k:]
            return True
        exec_ = bool(argv) and argv[0] == "exec" and not chained
        if exec_:
            argv = argv[1:]
        if (len(argv) >= 2 and posixpath.basename(argv[0]) in ("bash", "sh") and argv[1].endswith(".sh")
                and not chained and not self.commands):
            self._follow(argv[1], argv[2:], words[0].line)
            return not exec_  # `exec` replaces the script: nothing after it runs
        self._maybe_python(argv, {a[0]: self.scalar(a[1]) for a in assigns}, words[0].line)
        return True

    def _follow(self, path: str, args: list[str], line: int) -> None:
        """``bash other.sh ARGS`` (verl's ascend CI scripts hand their overrides to a common script this way):
        read ``other.sh`` as well, with ARGS as its ``"$@"`` and the exported variables as its environment. Only
        a regular file (not a link) in the same directory as this script, at most MAX_FOLLOW deep."""
        if UNRESOLVED in path:
            self.note(f"line {line}: `bash {path[:80]}` not followed (its path needs a command's output)")
            return
        here = posixpath.dirname(posixpath.normpath(posixpath.join(os.getcwd(), self.name)))
        target = posixpath.normpath(posixpath.join(os.getcwd(), path))
        if self.depth >= MAX_FOLLOW or posixpath.dirname(target) != here or os.path.islink(target):
            self.note(f"line {line}: `bash {path[:80]}` not followed (only a script beside this one is read, "
                      f"at most {MAX_FOLLOW} deep)")
            return
        text = read_script(target)
        env = {k: self.scalar(v) for k, v in self.vars.items() if k in self.exported or k in self.inherited}
        child = _Interp(target, env, args, self.depth + 1)
        child.unknown = {k: v for k, v in self.unknown.items() if k in env}
        passed = sorted(r for r in self.reads if r in self.unknown)
        if passed:
            child.unknown["@"] = self.unknown[passed[0]]  # its arguments carry a value no one evaluated
        child.work = self.work
        child.run(tokenize(text, target))
        self.work = child.work
        self.note(f"line {line}: followed `bash {posixpath.basename(target)}` ({len(args)} arguments)")
        for text_ in child.notes:
            self.note(text_)
        self.commands += child.commands
        self.sourced += child.sourced

    def _declare(self, builtin: str, args: Sequence[Word | ArrayAssign]) -> None:
        export = builtin == "export"
        assoc = False
        for w in args:
            if isinstance(w, ArrayAssign):
                if assoc:
                    self.assoc.add(w.name)
                self.set_var(w.name, self._array_value(w), w.append)
                if export:
                    self.exported.add(w.name)
                self._assigned(w.name, w.line)
                continue
            lit = w.literal()
            if lit is not None and lit.startswith("-"):
                if "x" in lit:
                    export = True
                if "A" in lit:
                    assoc = True
                continue
            if assoc:
                declared = _ASSIGN.match(lit or "") or _NAME.fullmatch(lit or "")
                if declared:
                    self.assoc.add(declared.group(1) if declared.re is _ASSIGN else declared.group(0))
            a = self.assign(w)
            if a is not None:
                name, value, append = a
                self.set_var(name, value, append)
                if export:
                    self.exported.add(name)
                self._assigned(name, w.line)
                continue
            name = self.join(w)
            if _NAME.fullmatch(name):
                if export:
                    self.exported.add(name)
                elif name not in self.vars:
                    self.vars[name] = ""

    def _assigned(self, name: str, line: int) -> None:
        """``name`` was just set at top level: its value is unknown only if it was computed from one that is."""
        self.assigned_line[name] = line
        read = sorted(r for r in self.reads if r in self.unknown and r != name)
        if read:
            self.unknown[name] = self.unknown[read[0]]
        elif name not in self.reads:
            self.unknown.pop(name, None)  # `A+=x` / `A=${A:-x}` of an unknown A stays unknown
            self.block_exports.pop(name, None)

    def _maybe_python(self, argv: list[str], prefix_env: dict[str, str], line: int) -> None:
        for k, word in enumerate(argv):
            if not _PYTHON.fullmatch(posixpath.basename(word)):
                continue
            j = k + 1
            while j < len(argv) and argv[j].startswith("-") and argv[j] != "-m":
                j += 2 if argv[j] in ("-X", "-W") else 1
            if j + 1 < len(argv) and argv[j] == "-m":
                command = _python_command(argv[k:], j - k, prefix_env, line)
                command.unknown = {r: self.unknown[r] for r in sorted(self.reads) if r in self.unknown}
                self.commands.append(command)
            return

    def exports(self) -> dict[str, str]:
        return {n: self.scalar(self.vars.get(n)) for n in sorted(self.exported) if n in self.vars}


def _python_command(argv: list[str], m_index: int, env: dict[str, str], line: int) -> PythonCommand:
    module = argv[m_index + 1]
    rest = argv[m_index + 2 :]
    config_path = config_name = None
    overrides: list[str] = []
    other: list[str] = []
    i = 0
    while i < len(rest):
        a = rest[i]
        opt, eq, val = a.partition("=")
        if opt in ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd") and a.startswith("-"):
            if not eq:
                val = rest[i + 1] if i + 1 < len(rest) else ""
                i += 1
            if opt in ("--config-path", "-cp"):
                config_path = val
            elif opt in ("--config-name", "-cn"):
                config_name = val
            else:
                other.append(f"{opt}={val}")
        elif a.startswith("-") and not eq:
            other.append(a)
        elif "=" in a:
            overrides.append(a)
        else:
            other.append(a)
        i += 1
    return PythonCommand(module, config_path, config_name, overrides, line, env, other, argv)


# --------------------------------------------------------------------------------------------------
# Arithmetic: integers, + - * / % ** ( ), unary +/-, variables (64-bit wrap-around, as bash)


class _ArithError(Exception):
    pass


_ARITH_TOKEN = re.compile(
    r"\s*(?:([0-9]+#[0-9A-Za-z@_]+|0[xX][0-9a-fA-F]+|[0-9]+)|([A-Za-z_][A-Za-z0-9_]*)"
    r"|(\*\*|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%()<>&|^!~?:]))")
#: Bash's binary operators, loosest first (``man bash``, ARITHMETIC EVALUATION); ``**`` and the unary ones bind
#: tighter, ``?:`` looser.
_ARITH_LEVELS = (("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", "<=", ">", ">="), ("<<", ">>"),
                 ("+", "-"), ("*", "/", "%"))
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@_"


def _wrap(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def _number(text: str) -> int:
    """An integer constant as bash reads it: ``0x1f``, ``017`` (octal), ``BASE#DIGITS`` (2 to 64)."""
    if "#" in text:
        base_text, digits = text.split("#", 1)
        base = int(base_text)
        if not 2 <= base <= 64:
            raise _ArithError(f"invalid arithmetic base ({text})")
        v = 0
        for ch in digits:
            d = _DIGITS.index(ch.lower() if base <= 36 else ch)
            if d >= base:
                raise _ArithError(f"value too great for base ({text})")
            v = v * base + d
        return _wrap(v)
    try:
        base = 16 if text[:2].lower() == "0x" else 8 if len(text) > 1 and text[0] == "0" else 10
        return _wrap(int(text, base))
    except ValueError:
        raise _ArithError(f"value too great for base ({text})") from None


class _Arith:
    def __init__(self, text: str, interp: _Interp, depth: int) -> None:
        self.toks: list[tuple[str, str]] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = _ARITH_TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise _ArithError(f"unsupported syntax near {text[pos:pos + 10]!r}")
            pos = m.end()
            if m.group(1):
                self.toks.append(("num", m.group(1)))
            elif m.group(2):
                self.toks.append(("name", m.group(2)))
            elif m.group(3):
                self.toks.append(("op", m.group(3)))
            if pos < len(text) and text[pos:].strip() == "":
                break
        self.k = 0
        self.interp = interp
        self.depth = depth
        self.skip = 0  # inside the side of && / || / ?: that bash does not evaluate: no division error there

    def run(self) -> int:
        if not self.toks:
            return 0
        v = self.expr()
        if self.k != len(self.toks):
            raise _ArithError("unexpected " + self.toks[self.k][1])
        return v

    def peek(self) -> str | None:
        return self.toks[self.k][1] if self.k < len(self.toks) and self.toks[self.k][0] == "op" else None

    def _unevaluated(self, level: int) -> int:
        self.skip += 1
        try:
            return self.binary(level) if level >= 0 else self.expr()
        finally:
            self.skip -= 1

    def expr(self) -> int:
        """``c ? a : b`` (right-associative), the loosest operator handled (no assignment, no comma)."""
        cond = self.binary(0)
        if self.peek() != "?":
            return cond
        self.k += 1
        yes = self.expr() if cond else self._unevaluated(-1)
        if self.peek() != ":":
            raise _ArithError("`:' expected for conditional expression")
        self.k += 1
        no = self._unevaluated(-1) if cond else self.expr()
        return yes if cond else no

    def binary(self, level: int) -> int:
        if level == len(_ARITH_LEVELS):
            return self.power()
        v = self.binary(level + 1)
        while self.peek() in _ARITH_LEVELS[level]:
            op = self.toks[self.k][1]
            self.k += 1
            if op in ("&&", "||"):
                decided = (not v) if op == "&&" else bool(v)
                r = self._unevaluated(level + 1) if decided else self.binary(level + 1)
                v = int(bool(v) and bool(r)) if op == "&&" else int(bool(v) or bool(r))
                continue
            r = self.binary(level + 1)
            v = self._apply(op, v, r)
        return v

    def _apply(self, op: str, v: int, r: int) -> int:
        if op in ("/", "%"):
            if r == 0:
                if self.skip:
                    return 0
                raise _ArithError("division by 0")
            q = abs(v) // abs(r) * (1 if (v >= 0) == (r >= 0) else -1)
            return _wrap(q if op == "/" else v - q * r)
        if op in ("<<", ">>"):
            return _wrap(v << (r & 63)) if op == "<<" else v >> (r & 63)
        table = {"+": v + r, "-": v - r, "*": v * r, "&": v & r, "|": v | r, "^": v ^ r,
                 "==": int(v == r), "!=": int(v != r), "<": int(v < r), "<=": int(v <= r), ">": int(v > r),
                 ">=": int(v >= r)}
        return _wrap(table[op])

    def power(self) -> int:
        """``a ** b ** c`` (right-associative), read in a loop: a long chain is no deep recursion."""
        operands = [self.unary()]
        while self.peek() == "**":
            self.k += 1
            operands.append(self.unary())
        v = operands.pop()
        while operands:
            if v < 0:
                raise _ArithError("exponent less than 0")
            v = _wrap(pow(operands.pop(), v, 1 << 64))
        return v

    def unary(self) -> int:
        """``- ! ~ +`` before an operand, read in a loop and applied innermost first."""
        ops: list[str] = []
        while (op := self.peek()) in ("+", "-", "!", "~"):
            assert op is not None
            ops.append(op)
            self.k += 1
        v = self.atom()
        for op in reversed(ops):
            v = _wrap(-v) if op == "-" else int(not v) if op == "!" else _wrap(~v) if op == "~" else v
        return v

    def atom(self) -> int:
        if self.k >= len(self.toks):
            raise _ArithError("expression ends early")
        kind, text = self.toks[self.k]
        self.k += 1
        if kind == "num":
            return _number(text)
        if kind == "name":
            self.interp.step()
            raw = self.interp.scalar(self.interp.get(text))
            if not raw.strip():
                return 0
            if UNRESOLVED in raw:
                raise _ArithError(f"{text} is not known")
            if self.depth > MAX_DEPTH:
                raise _ArithError("recursion too deep")
            return _Arith(raw, self.interp, self.depth + 1).run()
        if text == "(":
            if self.interp.arith_parens >= MAX_ARITH_PARENS:  # each level is a dozen Python frames
                raise _ArithError("parentheses nested too deeply")
            self.interp.arith_parens += 1
            try:
                v = self.expr()
            finally:
                self.interp.arith_parens -= 1
            if self.peek() != ")":
                raise _ArithError("missing )")
            self.k += 1
            return v
        raise _ArithError(f"unexpected {text}")


# --------------------------------------------------------------------------------------------------


def parse_script(text: str, name: str = "script", environ: dict[str, str] | None = None) -> ParsedScript:
    """Parse a launch script; ``environ``: values for variables the script reads from its environment."""
    check_shell_text(text, name)
    interp = _Interp(name, environ)
    try:
        interp.run(tokenize(text, name))
    except ScriptError:
        _not_python(text, name)
        raise
    if not interp.commands:
        _not_python(text, name)
        raise ScriptError(
            f"{name}: no `python3 -m <entry>` command at the top level of the script (nothing to import)"
        )
    command = interp.commands[0]
    refuse_unknown(name, command)
    if interp.block_exports:  # the training's environment: exported by a block nobody evaluated
        var, why = next(iter(sorted(interp.block_exports.items())))
        raise ScriptError(
            f"{name}: line {command.line}: the training runs with the variables the script exports, and {var} "
            f"is exported in {why.replace(' may set and import', ', which import')}; verlctl import does not guess it: give the variables "
            "that block tests with --var NAME=VALUE, or export it outside the block"
        )
    if len(interp.commands) > 1:
        others = ", ".join(c.module for c in interp.commands[1:])
        interp.note(f"further python -m commands ignored: {others}")
    unset = [u for u in interp.unset if u not in (environ or {})]
    return ParsedScript(name, interp.vars, interp.exports(), command, interp.notes, unset, interp.sourced)


def refuse_unknown(name: str, command: PythonCommand) -> None:
    """The training command reads a variable that a block import did not evaluate may set (an ``if``/``case``
    whose test needs a command's output or an unset variable, a loop, a called function): its value, and so
    the run, is not known. One line naming the variables and the block; nothing is guessed."""
    if not command.unknown:
        return
    by_why: dict[str, list[str]] = {}
    for var, why in command.unknown.items():
        by_why.setdefault(why, []).append("$@" if var == "@" else var)
    why, names = next(iter(by_why.items()))
    more = f" (and {len(by_why) - 1} more block(s))" if len(by_why) > 1 else ""
    raise ScriptError(
        f"{name}: line {command.line}: the training command uses {', '.join(names[:6])}, which {why}{more}; "
        "verlctl import does not guess such a value: give the variables that block tests with --var NAME=VALUE, "
        "or set the values in the script"
    )


def _not_python(text: str, name: str) -> None:
    if _PY_SOURCE.search(text[:65536]):
        raise ScriptError(f"{name}: looks like Python source (import/def/class lines), not a bash launch script")


def parse_file(path: str | Path, environ: dict[str, str] | None = None) -> ParsedScript:
    return parse_script(read_script(path), str(path), environ)
