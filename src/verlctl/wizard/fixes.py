"""Fixes the wizard offers for a refused spec, before it offers to save or launch (issue 21, item 3).

Each fix is found by trying candidate values with the same verdict (``checks/verdict.py``) on the same facts:
a fix is offered only when the verdict then has none of the errors it addresses and no new error.

* ``memory_device_fit`` / ``memory_kv_cache``: the feature mask that fits the device memory detected, adding
  the OOM ladder's features (offload, recompute) in its order, and that keeps host RAM enough (offload moves
  weights, gradients and optimizer states to host memory: ``memory_host_fit``); saved as the mask;
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
#: A warning a fix must not bring in: the host RAM that offload fills.
HOST_CODE = "memory_host_fit"
ROWS_CODE = "dataset_smaller_than_batch"
#: At most this many candidate batch sizes are tried (largest first).
MAX_BATCH_TRIES = 64


@dataclass
class Fix:
    values: dict[str, Any]  # spec path -> value (answers.set_many)
    text: str  # the question's words: what changes and why it fits
    codes: frozenset[str]  # the error codes it removes
    label: str = "the wizard's fix"  # the origin of the values it sets (shown in the checklist and the file)


def _errors(answers: Any, values: Mapping[str, Any], facts: Any,
            warnings: frozenset[str] = frozenset()) -> set[str] | None:
    """The error codes of the spec with ``values`` (and those of ``warnings`` it has); None when the spec model
    refuses them."""
    try:
        resolved = answers.resolve_for_checks(dict(values))
    except SpecError:
        return None
    return {f.code for f in answers.findings(resolved, facts)
            if f.severity is Severity.ERROR or (f.severity is Severity.WARNING and f.code in warnings)}


def _fits(answers: Any, values: Mapping[str, Any], facts: Any, before: set[str], fixed: frozenset[str],
          warnings: frozenset[str] = frozenset()) -> bool:
    after = _errors(answers, values, facts, warnings)
    return after is not None and not (after & fixed) and after <= before


def memory_fix(answers: Any, errors: list[Finding], facts: Any) -> Fix | None:
    from verlctl.verl.compose import build_command
    from verlctl.verl.features import BY_NAME, OOM_LADDER, canonical_name, mask_for

    codes = {f.code for f in errors} & MEMORY_CODES
    if not codes:
        return None
    resolved = answers.resolve_for_checks()
    states = build_command(resolved).features
    on = {n: bool(s.on and s.applicable) for n, s in states.items()}
    off = [r for r in OOM_LADDER if not on.get(r)]
    from verlctl.checks.memory import host_from_machine, rung_can_help

    # Offload moves weights, gradients and optimizer states to host memory: a fix never adds it where host RAM
    # would then be short (the watcher's ladder asks the same question), nor makes RAM short that was enough.
    machine = getattr(facts, "machine", None)
    host_gib = host_from_machine(machine) if machine is not None else None
    # RAM unknown (no host facts, no cluster.host_memory_gib): as check, the estimate cannot tell
    offload_ok = (host_gib is None and resolved.spec.cluster.host_memory_gib is None) or rung_can_help(
        resolved.spec, on, "offload", host_gib=host_gib)
    host = frozenset({HOST_CODE}) - {f.code for f in answers.findings(resolved, facts) if f.code == HOST_CODE}
    before = {f.code for f in errors}

    def unsaid(names: list[str], off: bool) -> list[str]:
        """The names the mask does not say: features without a bit; for ``off``, also the default-off ones (a
        0 bit leaves verl's default, ``disable`` writes the key off)."""
        keep = []
        for n in names:
            f = BY_NAME.get(canonical_name(n) or "")
            if f is None or f.bit is None or (off and not f.default_on):
                keep.append(n)
        return keep

    enable, disable = list(resolved.spec.features.enable), list(resolved.spec.features.disable)
    for size in range(1, len(off) + 1):
        for extra in combinations(off, size):
            if "offload" in extra and not offload_ok:
                continue
            mask = mask_for({**on, **dict.fromkeys(extra, True)})
            # saved as the mask (the seeds' form): the lists keep only what the mask cannot say
            values = {"features.mask": mask, "features.enable": unsaid(enable, False),
                      "features.disable": [d for d in unsaid(disable, True) if d not in extra]}
            if _fits(answers, values, facts, before, frozenset(codes), warnings=host):
                known = host_gib is not None or resolved.spec.cluster.host_memory_gib is not None
                ram = " and this host's RAM" if "offload" in extra and known else ""
                return Fix(values, f"use feature mask {mask} (adds {' and '.join(extra)}): the memory estimate then "
                           f"fits the device memory detected{ram}", frozenset(codes),
                           label=f"the wizard's memory fix: adds {' and '.join(extra)}")
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
                       frozenset({ROWS_CODE}), label=f"the wizard's fix: {total} training rows")
    return None


def fixes_for(answers: Any, errors: list[Finding], facts: Any) -> list[Fix]:
    """The fixes for these errors (each checked with the verdict on ``facts``)."""
    found = [memory_fix(answers, errors, facts), batch_fix(answers, errors, facts)]
    return [f for f in found if f is not None]
