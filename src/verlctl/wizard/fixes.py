"""Fixes the wizard offers for a refused spec, before it offers to save or launch (issue 21, item 3).

Each fix is found by trying candidate values with the same verdict (``checks/verdict.py``) on the same facts:
a fix is offered only when the verdict then has none of the errors it addresses and no new error.

* ``memory_device_fit`` / ``memory_kv_cache``: the feature mask that fits the device memory detected, adding
  the OOM ladder's features (offload, recompute) in its order;
* ``dataset_smaller_than_batch``: the largest batch the training files can fill.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from verlctl.checks.findings import Finding, Severity
from verlctl.errors import SpecError

MEMORY_CODES = frozenset({"memory_device_fit", "memory_kv_cache"})
ROWS_CODE = "dataset_smaller_than_batch"
#: At most this many candidate batch sizes are tried (largest first).
MAX_BATCH_TRIES = 64


@dataclass
class Fix:
    values: dict[str, Any]  # spec path -> value (answers.set_many)
    text: str  # the question's words: what changes and why it fits
    codes: frozenset[str]  # the error codes it removes


def _errors(answers: Any, values: Mapping[str, Any], facts: Any) -> set[str] | None:
    """The error codes of the spec with ``values``; None when the spec model refuses them."""
    try:
        resolved = answers.resolve_for_checks(dict(values))
    except SpecError:
        return None
    return {f.code for f in answers.findings(resolved, facts) if f.severity is Severity.ERROR}


def _fits(answers: Any, values: Mapping[str, Any], facts: Any, before: set[str], fixed: frozenset[str]) -> bool:
    after = _errors(answers, values, facts)
    return after is not None and not (after & fixed) and after <= before


def memory_fix(answers: Any, errors: list[Finding], facts: Any) -> Fix | None:
    from verlctl.verl.compose import build_command
    from verlctl.verl.features import OOM_LADDER, mask_for

    codes = {f.code for f in errors} & MEMORY_CODES
    if not codes:
        return None
    resolved = answers.resolve_for_checks()
    states = build_command(resolved).features
    on = {n: bool(s.on and s.applicable) for n, s in states.items()}
    off = [r for r in OOM_LADDER if not on.get(r)]
    before = {f.code for f in errors}
    enable, disable = list(resolved.spec.features.enable), list(resolved.spec.features.disable)
    for size in range(1, len(off) + 1):
        for extra in combinations(off, size):
            mask = mask_for({**on, **dict.fromkeys(extra, True)})
            values = {"features.enable": enable + [e for e in extra if e not in enable],
                      "features.disable": [d for d in disable if d not in extra]}
            if _fits(answers, values, facts, before, frozenset(codes)):
                return Fix(values, f"use feature mask {mask} (adds {' and '.join(extra)}): the memory estimate then "
                           "fits the device memory detected", frozenset(codes))
    return None


def batch_fix(answers: Any, errors: list[Finding], facts: Any) -> Fix | None:
    from verlctl.detect.datasets import DatasetInfo

    rows_error = next((f for f in errors if f.code == ROWS_CODE), None)
    if rows_error is None or facts is None:
        return None
    rows = [c.verl_schema.num_rows for c in facts.datasets
            if c.field == "paths.train_files" and isinstance(c.verl_schema, DatasetInfo)]
    if not rows or any(r is None for r in rows):
        return None
    total = sum(r for r in rows if r is not None)
    field = rows_error.field or "train.train_batch_size"
    before = {f.code for f in errors}
    spec = answers.resolve_for_checks().spec
    for batch in range(total, max(0, total - MAX_BATCH_TRIES), -1):
        values: dict[str, Any] = {field: batch}
        mini = spec.train.mini_batch_size
        if field == "train.train_batch_size" and mini is not None and mini > batch:
            values["train.mini_batch_size"] = batch
        if batch >= 1 and _fits(answers, values, facts, before, frozenset({ROWS_CODE})):
            shown = ", ".join(f"{k.split('.')[-1]} {v}" for k, v in values.items())
            return Fix(values, f"use {shown}: the training files have {total} rows, so one batch can be filled",
                       frozenset({ROWS_CODE}))
    return None


def fixes_for(answers: Any, errors: list[Finding], facts: Any) -> list[Fix]:
    """The fixes for these errors (each checked with the verdict on ``facts``)."""
    found = [memory_fix(answers, errors, facts), batch_fix(answers, errors, facts)]
    return [f for f in found if f is not None]
