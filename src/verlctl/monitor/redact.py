"""The one redaction of what ``bundle`` and ``report`` write: a maintained secret scanner's detectors plus the
run's own known secrets.

The detectors are Yelp's detect-secrets (imported lazily: only a bundle or a report pays for it): private
keys (PEM / OpenSSH / PGP blocks, removed whole), AWS access key ids and secret keys, URL user-info
(``scheme://user:password@host``), JSON web tokens, ``password=`` / ``secret:`` / ``*_api_key=`` keyword
assignments in any position (detect-secrets' config-file rules, which take unquoted values, as logs print
them), and high-entropy strings. Two detectors are verlctl's own, written as detect-secrets plugins: HTTP
``Authorization:`` / ``Bearer`` credentials and ``*token=`` assignments, which detect-secrets has no rule for.

High-entropy strings are tuned for logs: a candidate is a run of 24+ base64 characters between separators
(``-``, ``_``, ``/``, ``.``) above detect-secrets' own entropy limit (4.5 bits) that mixes upper case, lower
case and digits,
so a checkpoint's sha256, a run id, a Hugging Face snapshot hash or a metric line stay as they are
(tests/monitor/test_redaction.py measures it on the verl logs under tests/fixtures).

Each removed value becomes ``<redacted:KIND>``; :attr:`Redactor.found` counts them by kind (never the
values), for the bundle's manifest and the report's page.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Environment variables whose values are this run's own secrets, removed wherever they appear.
SECRET_ENV = ("SWANLAB_API_KEY", "VERLCTL_LOGGING__SWANLAB__API_KEY", "WANDB_API_KEY", "HF_TOKEN",
              "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")

#: What each kind is, for the manifest (kind -> words).
KINDS = {
    "known-secret": "this run's own secrets (the SwanLab key and the other keys in the environment)",
    "private-key": "private keys (PEM, OpenSSH, PGP blocks)",
    "aws-key": "AWS access keys",
    "basic-auth": "passwords in URLs (scheme://user:password@host)",
    "authorization": "HTTP Authorization and Bearer credentials",
    "jwt": "JSON web tokens",
    "keyword": "values of password, secret, *_key and *token assignments",
    "high-entropy": "random-looking strings (24+ characters, mixed case and digits)",
}

#: The smallest high-entropy candidate, and the entropy limit (detect-secrets' default for base64).
ENTROPY_MIN_LEN = 24
ENTROPY_LIMIT = 4.5

_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----.*?(?:-----END \1-----|\Z)", re.S)
_PUTTY = re.compile(r"PuTTY-User-Key-File-\d.*?(?:Private-MAC:[^\n]*|\Z)", re.S)


Finder = Callable[[str], list[str]]


def _finders() -> list[tuple[str, Finder]]:
    """(kind, values found in a text) for each detector, built once per redactor (see the module docstring)."""
    from detect_secrets.plugins import keyword as kw
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.basic_auth import BasicAuthDetector
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
    from detect_secrets.plugins.jwt import JwtTokenDetector

    class AuthorizationDetector(RegexBasedDetector):
        """``Authorization: Bearer …`` / ``Basic …`` headers and a bare ``Bearer …`` (curl lines, dumps)."""

        secret_type = "Authorization Credentials"
        denylist = (
            re.compile(r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z-]+\s+)?([^\s\"',}]+)"),
            re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{8,})"),
        )

    class TokenKeywordDetector(RegexBasedDetector):
        """``token=…``, ``hf_token: …``, ``"access_token": "…"``: a key whose last word is token."""

        secret_type = "Token Keyword"
        denylist = (re.compile(r"(?i)\b[\w.-]*token[\"']?\s*[:=]\s*[\"']?([^\s\"',}]+)"),)

    def plugin(p: Any, tail: str = "", needs: tuple[str, ...] = ()) -> Finder:
        def find(text: str) -> list[str]:
            if needs:  # the regexes' words, found cheaply first
                low = text.lower()
                if not any(n in low for n in needs):
                    return []
            out = [v for v in p.analyze_string(text) if v and "<redacted" not in v and not _plain(v)]
            if tail:  # detect-secrets' JWT match stops before the signature: take the whole token
                out = [m.group(0) for v in out for m in re.finditer(re.escape(v) + tail, text)]
            return out
        return find

    keyword = kw.KeywordDetector()
    quick = re.compile(kw.DENYLIST_REGEX, re.I)
    #: the literal stems of detect-secrets' keyword list (found with str.find first: a regex of alternatives
    #: without a literal prefix is slow over megabytes of log)
    stems = ("key", "pass", "pwd", "secret", "contrase")

    def keywords(text: str) -> list[str]:
        """detect-secrets' keyword rules for config files (unquoted values, as logs print them); each rule
        finds a line's first assignment, so the line is scanned again after it. A value ends at a space."""
        out: list[str] = []
        low = text.lower()
        starts: set[int] = set()
        for stem in stems:
            i = low.find(stem)
            while i >= 0:
                starts.add(low.rfind("\n", 0, i) + 1)
                end = low.find("\n", i)
                i = -1 if end < 0 else low.find(stem, end)
        for start in sorted(starts):  # only the lines that hold a keyword
            end = text.find("\n", start)
            line = text[start:] if end < 0 else text[start:end]
            for _ in range(8):
                if not quick.search(line):
                    break
                got = [v.split()[0].rstrip(",;") for v in keyword.analyze_string(line, kw.CONFIG_DENYLIST_REGEX_TO_GROUP)
                       if v and v.split() and "<redacted" not in v.split()[0]]
                got = [v for v in got if v and not _plain(v)]
                if not got:
                    break
                out.extend(got)
                for v in got:
                    line = line.replace(v, "<redacted>")
        return out

    entropy = Base64HighEntropyString(limit=ENTROPY_LIMIT)

    def high_entropy(text: str) -> list[str]:
        out = []
        for m in _CANDIDATE.finditer(text):
            tok = m.group(0).rstrip("=")
            if (len(tok) >= ENTROPY_MIN_LEN and _mixed(tok)
                    and entropy.calculate_shannon_entropy(tok) > entropy.entropy_limit):
                out.append(tok)
        return out

    return [("aws-key", plugin(AWSKeyDetector(), needs=("a3t", "abia", "acca", "akia", "asia", "aws"))),
            ("basic-auth", plugin(BasicAuthDetector(), needs=("://",))),
            ("jwt", plugin(JwtTokenDetector(), r"[A-Za-z0-9_.+/=-]*", needs=("eyj",))),
            ("authorization", plugin(AuthorizationDetector(), needs=("authorization", "bearer"))),
            ("keyword", plugin(TokenKeywordDetector(), needs=("token",))),
            ("keyword", keywords), ("high-entropy", high_entropy)]


_PLAIN = re.compile(r"(?i)(?:true|false|none|null|yes|no|on|off|-?[0-9][0-9._e+-]*|\$\{?\w+\}?)")


def _plain(value: str) -> bool:
    """A value no secret is: a bool, a null, a number, a ``$VAR`` reference (``password=$PASS``)."""
    return bool(_PLAIN.fullmatch(value.strip("\"'")))


def _mixed(tok: str) -> bool:
    return bool(re.search(r"[a-z]", tok) and re.search(r"[A-Z]", tok) and re.search(r"[0-9]", tok))


@dataclass
class Redactor:
    """Removes secrets from text; counts what it removed, by kind."""

    known: list[str] = field(default_factory=list)
    found: Counter[str] = field(default_factory=Counter)
    _plugins: list[tuple[str, Finder]] | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> Redactor:
        """The run's own secrets: the keys in the environment (:data:`SECRET_ENV`) and ``extra`` (a key the
        resolved spec holds)."""
        env = os.environ if environ is None else environ
        values = [env[k] for k in SECRET_ENV if env.get(k)] + [v for v in extra if v]
        return cls(known=sorted({v for v in values if len(v) >= 4}, key=len, reverse=True))

    def kinds(self) -> dict[str, int]:
        """Kinds removed, with counts (never the values), in a stable order."""
        return {k: self.found[k] for k in KINDS if self.found[k]}

    def manifest(self) -> dict[str, dict[str, Any]]:
        """What the manifest says was removed: kind -> what it is and how many (never a value)."""
        return {k: {"what": KINDS[k], "removed": n} for k, n in self.kinds().items()}

    def tree(self, obj: Any) -> Any:
        """Every string in a JSON-like tree (events, findings, facts) redacted; keys kept."""
        if isinstance(obj, str):
            return self(obj)
        if isinstance(obj, Mapping):
            return {k: self.tree(v) for k, v in obj.items()}
        if isinstance(obj, tuple):
            return tuple(self.tree(v) for v in obj)
        if isinstance(obj, list):
            return [self.tree(v) for v in obj]
        return obj

    def __call__(self, text: str) -> str:
        for s in self.known:
            n = text.count(s)
            if n:
                text = text.replace(s, "<redacted:known-secret>")
                self.found["known-secret"] += n
        text = self._private_keys(text)
        if self._plugins is None:
            self._plugins = _finders()
        lines: list[str] | None = None
        again: dict[str, str] = {}  # long values: also removed where they stand alone (a key printed twice)
        for kind, find in self._plugins:
            if not find(text):  # one pass over the whole text; the lines only when it found something
                continue
            lines = text.split("\n") if lines is None else lines
            for i, line in enumerate(lines):
                for v in sorted(set(find(line)), key=len, reverse=True):
                    # in place, as a whole token: a short value ("t0k") is not removed from "t0kens" nor
                    # from another line
                    line, n = re.subn(rf"(?<!\w){re.escape(v)}(?!\w)", f"<redacted:{kind}>", line)
                    if n:
                        self.found[kind] += n
                        if len(v) >= 8:
                            again.setdefault(v, kind)
                lines[i] = line
            text = "\n".join(lines)
        for v in sorted(again, key=len, reverse=True):
            n = text.count(v)
            if n:
                text = text.replace(v, f"<redacted:{again[v]}>")
                self.found[again[v]] += n
        return text

    def _private_keys(self, text: str) -> str:
        from detect_secrets.plugins.private_key import PrivateKeyDetector

        if "PRIVATE KEY" not in text and "PuTTY-User-Key-File" not in text:  # the detector's words, first
            return text
        if not any(True for _ in PrivateKeyDetector().analyze_string(text)):
            return text
        for rx in (_BLOCK, _PUTTY):
            text, n = rx.subn("<redacted:private-key>", text)
            self.found["private-key"] += n
        lines = text.split("\n")  # a key header without its block (cut by a tail): the line goes
        for i, line in enumerate(lines):
            if any(True for _ in PrivateKeyDetector().analyze_string(line)):
                lines[i] = "<redacted:private-key>"
                self.found["private-key"] += 1
        return "\n".join(lines)


#: A candidate: a run of base64 / url-safe characters between word and path separators (``-``, ``_``, ``/``,
#: ``.``), so a repository or model name (``owner/Model-Name``) or a path is judged by its parts.
_CANDIDATE = re.compile(rf"[A-Za-z0-9+=]{{{ENTROPY_MIN_LEN},}}")
