"""Format Python values as Hydra override values, and shell words.

Hydra's override grammar (hydra-core 1.3) and OmegaConf's interpolation rules decide how a string must be
written so that verl receives it literally:

* unquoted values may only use a small character set, and words such as ``true``/``null``/``1e-6`` change
  type, so anything else is single-quoted;
* inside a quoted value a backslash is literal except in a run of backslashes that precedes a quote or the
  closing quote, where each pair stands for one backslash; a quote is written ``\\'``;
* OmegaConf resolves ``${...}`` even inside quoted values, so ``${`` is escaped as ``\\${`` (and a run of
  backslashes before it is doubled).

``tests/test_hydra_syntax.py`` checks these rules against Hydra's own parser and OmegaConf.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

# Used with fullmatch: "$" alone would also accept a trailing newline.
_SAFE_UNQUOTED = re.compile(r"[A-Za-z/_][A-Za-z0-9_./-]*")
_TYPED_WORDS = {"true", "false", "null", "none", "nan", "inf", "-inf", "+inf"}


def hydra_value(value: Any) -> str:
    """Render ``value`` as the right-hand side of a Hydra override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"cannot pass {value!r} as an override value")
        text = repr(value)
        return text
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, str):
        return hydra_string(value)
    raise TypeError(f"unsupported override value type {type(value).__name__}")


def hydra_string(text: str) -> str:
    if _SAFE_UNQUOTED.fullmatch(text) and text.lower() not in _TYPED_WORDS and not _looks_numeric(text):
        return text
    return "'" + _escape_quoted(_escape_interpolation(text)) + "'"


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _escape_interpolation(text: str) -> str:
    # k backslashes before "${" -> 2k+1 backslashes: all literal, and the interpolation escaped.
    return re.sub(r"(\\*)\$\{", lambda m: "\\" * (2 * len(m.group(1)) + 1) + "${", text)


def _escape_quoted(text: str) -> str:
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            j = i
            while j < n and text[j] == "\\":
                j += 1
            run = j - i
            # Backslashes before a quote or at the very end are escape characters in Hydra: double them.
            if j == n or text[j] == "'":
                out.append("\\" * (2 * run))
            else:
                out.append("\\" * run)
            i = j
            continue
        if ch == "'":
            out.append("\\'")
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def override(key: str, value: Any, prefix: str = "") -> str:
    return f"{prefix}{key}={hydra_value(value)}"


# --------------------------------------------------------------------------------------------------
# Shell words


_SHELL_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")  # fullmatch only


def shell_quote(word: str) -> str:
    """Quote one shell word so that bash passes it literally (readable where possible)."""
    if word and _SHELL_SAFE.fullmatch(word):
        return word
    if "'" not in word:
        return "'" + word + "'"
    if not re.search(r'[$`"\\!\n]', word):
        return '"' + word + '"'
    return "'" + word.replace("'", "'\"'\"'") + "'"


def shell_join(words: Sequence[str]) -> str:
    return " ".join(shell_quote(w) for w in words)
