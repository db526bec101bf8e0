"""The wizard's state: every spec source plus the answers typed so far, and the checks an answer must pass.

Sources and provenance (``spec/sources.py``): *typed* (answers) > flag > env > file > *detected*
(pre-fills from the machine pre-check) > default.

Decision — which answers are ``typed``: an answer is recorded in the typed layer only when it differs
from the value the question was pre-filled with. A pre-fill accepted unchanged keeps its source: a
detected model path stays ``detected``, a default stays ``default``, a value from ``-c``/env/flag (asked
again with ``--ask-all``) stays where it came from. So the checklist says exactly which values the user
chose differently from what verlctl would have used.

Every answered path is also kept in ``answered`` (whatever its source), so that the saved spec holds each
answer, also one equal to a default: ``init -c FILE`` then asks nothing again, and a later change of verlctl's
defaults does not change the run the file describes.

Each answer is checked by building the whole spec with it (the spec model's own validation, e.g. the
SwanLab URL rule) and, for the hyperparameters and features, by ``make_plan``'s findings on the fields the
question sets, plus the model-shape rules of ``checks.model_checks.check_model_fit`` (heads and KV heads
by TP, layers by PP and VPP) with the model's ``config.json``.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlctl.checks.findings import Finding, Severity
from verlctl.detect.models import ModelInfo
from verlctl.errors import SpecError
from verlctl.spec.resolve import ResolvedSpec, load_spec
from verlctl.spec.sources import Source, get_path

GIVEN_SOURCES = (Source.FILE, Source.ENV, Source.FLAG)

#: Stand-ins for required paths not answered yet, so that make_plan can check the other values.
_PLACEHOLDERS = {
    "paths.model": "/verlctl-wizard/model",
    "paths.train_files": ["/verlctl-wizard/train.parquet"],
    "paths.val_files": ["/verlctl-wizard/val.parquet"],
}


def reason_of(exc: SpecError) -> str:
    """A spec error as the reason shown under a question: without the field prefix and the '(from ...)'."""
    msg = exc.message
    if exc.field and msg.startswith(f"{exc.field}: "):
        msg = msg[len(exc.field) + 2 :]
    msg = re.sub(r" \(from [a-z]+(?: \([^)]*\))?\)", "", msg)
    # pydantic's bound message, in the words of the question (U14): "type a number greater than 0"
    bound = re.fullmatch(r"Input should be (greater|less) than( or equal to)? (\S+)", msg)
    return f"type a number {bound.group(1)} than{bound.group(2) or ''} {bound.group(3)}" if bound else msg


@functools.lru_cache(maxsize=64)
def _inspect(path: str, mtime: float) -> ModelInfo:
    from verlctl.detect.models import inspect_model

    return inspect_model(path)


def model_info(path: str | None) -> ModelInfo | None:
    """The model's shape when ``path`` is a readable model directory on this machine (cached per mtime)."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    info = _inspect(path, st.st_mtime)
    return info if info.is_model else None


@dataclass
class Answers:
    config: Path | None = None
    flags: Mapping[str, Any] = field(default_factory=dict)
    names: Mapping[str, str] = field(default_factory=dict)
    environ: Mapping[str, str] | None = None  # None: os.environ
    detected: dict[str, Any] = field(default_factory=dict)
    typed: dict[str, Any] = field(default_factory=dict)
    #: Who set a typed value when not the person's own answer (a fix the wizard offered): its origin's detail.
    typed_names: dict[str, str] = field(default_factory=dict)
    ask_all: bool = False
    models: dict[str, ModelInfo] = field(default_factory=dict)  # detected models by path
    answered: set[str] = field(default_factory=set)  # every path a question set (saved even when a default)
    _current: ResolvedSpec | None = field(default=None, init=False, repr=False)

    # ------------------------------------------------------------------------------ resolving

    def resolve(self, extra: Mapping[str, Any] | None = None) -> ResolvedSpec:
        typed = {**self.typed, **(extra or {})}
        return load_spec(self.config, flags=self.flags, environ=self.environ, detected=self.detected,
                         typed=typed, flag_names=self.names, typed_names=self.typed_names)

    @property
    def current(self) -> ResolvedSpec:
        if self._current is None:
            self._current = self.resolve()
        return self._current

    def value(self, path: str, resolved: ResolvedSpec | None = None) -> Any:
        r = resolved or self.current
        return get_path(r.spec.model_dump(mode="python"), path)

    def given(self, path: str) -> bool:
        """Set by the spec file, the environment or a flag."""
        return self.current.origin(path).source in GIVEN_SOURCES

    def ask(self, *paths: str) -> bool:
        """Whether to ask for these values: always with --ask-all, else when none of them was given."""
        return self.ask_all or not any(self.given(p) for p in paths)

    def set(self, path: str, value: Any) -> None:
        """Record an answer (typed only when it differs from the current value, see the module doc)."""
        self.set_many({path: value})

    def set_many(self, values: Mapping[str, Any], label: str | None = None) -> None:
        """Record answers; ``label`` names who set them when not the person (``the wizard's memory fix``)."""
        candidate = self.resolve(values)  # raises SpecError for a value the model refuses
        self.answered.update(values)
        changed = False
        for path, value in values.items():
            if self.value(path, candidate) != self.value(path):
                self.typed[path] = value
                if label:
                    self.typed_names[path] = label
                else:
                    self.typed_names.pop(path, None)
                changed = True
        if changed:
            self._current = None

    def add_detected(self, path: str, value: Any) -> None:
        """A pre-fill found during the rounds (the verl installed in the chosen image): source ``detected``."""
        self.detected[path] = value
        try:
            self.resolve()
        except SpecError:
            del self.detected[path]
            raise
        self._current = None

    def forget(self, path: str) -> None:
        """Drop an earlier typed answer, so that the question is pre-filled from the other sources again."""
        self.typed_names.pop(path, None)
        if self.typed.pop(path, None) is not None:
            self._current = None

    # ------------------------------------------------------------------------------ checks

    def check(self, values: Mapping[str, Any], fields: Iterable[str] = (),
              relax: Mapping[str, Any] | None = None, tolerate_prefilled: bool = True) -> str | None:
        """``None`` when the spec with ``values`` is valid and has no error on ``fields``; else the reason.

        ``relax`` holds values used only for the check (e.g. PP=1 while TP is asked before PP). With
        ``tolerate_prefilled``, an error that the spec already has without this answer (a given value is at
        fault, and no answer to this question may fix it) does not refuse the answer: the whole-spec check
        after the rounds re-asks the round with every value instead."""
        try:
            resolved = self.resolve_for_checks({**(relax or {}), **values})
        except SpecError as exc:
            return reason_of(exc)
        wanted = frozenset(fields)
        if not wanted:
            return None
        errors = self._errors(resolved, wanted)
        if errors and tolerate_prefilled:
            before = {(f.code, f.field) for f in self._errors(self.resolve_for_checks(relax), wanted)}
            errors = [f for f in errors if (f.code, f.field) not in before]
        if not errors:
            return None
        first = errors[0]
        return first.message + (f" — {first.hint}" if first.hint else "")

    def _errors(self, resolved: ResolvedSpec, fields: frozenset[str]) -> list[Finding]:
        return [f for f in self.findings(resolved) if f.severity is Severity.ERROR and f.field in fields]

    def resolve_for_checks(self, extra: Mapping[str, Any] | None = None) -> ResolvedSpec:
        """Like :meth:`resolve`, with stand-ins for required paths not answered yet (never stored)."""
        extra = dict(extra or {})
        resolved = self.resolve(extra)
        missing = resolved.missing_required()
        if missing:
            resolved = self.resolve({**{p: _PLACEHOLDERS[p] for p in missing}, **extra})
        return resolved

    def findings(self, resolved: ResolvedSpec | None = None, facts: Any = None) -> list[Finding]:
        """The verdict's findings for a complete spec (default: the current one), on ``facts`` (default: the
        spec and the model's config.json, the wizard's detected one when it has it: what ``plan`` has)."""
        from verlctl.plan import make_plan

        r = resolved or self.resolve_for_checks()
        return make_plan(r, facts=facts if facts is not None else self.spec_facts(r)).findings

    def spec_facts(self, resolved: ResolvedSpec) -> Any:
        """What ``plan`` has for this spec: the spec, and the model's shape (the detected one when known)."""
        from verlctl.checks.verdict import spec_facts

        return spec_facts(resolved, model=self.model_for(resolved.spec.paths.model), look=False)

    def model_for(self, path: str | None) -> ModelInfo | None:
        if path and path in self.models and self.models[path].is_model:
            return self.models[path]
        return model_info(path)

