"""Checks on the spec alone: the rules verl really enforces (``reference/verl.md`` §3.2) and the seeds'.

The rules themselves are named units in :mod:`verlctl.checks.rules` (codes, severity, versions, and the verl
assert each mirrors); this module runs them. Two rules of the first seed are not enforced by verl
(``gen_tp == train_tp`` and ``(tp*pp) % devices_per_node == 0``); they never block a run: an informational
note explains the real rule.
"""

from __future__ import annotations

# The spec rules of other modules register themselves in rules.RULES when imported: running the rules here
# imports them first (rules.py cannot import them back without an import circle).
from verlctl.checks import async_rules as async_rules  # verl 0.9.1's async trainers' asserts
from verlctl.checks import defects as defects  # the known-defect table's spec-only entries
from verlctl.checks import managed as managed  # extra overrides of keys verlctl manages
from verlctl.checks import ray_ports as ray_ports  # Ray's own port layout
from verlctl.checks.findings import Finding
from verlctl.checks.rules import RULES, RuleCtx
from verlctl.spec.resolve import ResolvedSpec
from verlctl.verl.compose import FeatureState, effective_version


def check_spec(
    resolved: ResolvedSpec, features: dict[str, FeatureState], version: str | None = None
) -> list[Finding]:
    """Every rule's findings for this spec on ``version`` (default: the spec's, as ``plan`` resolves it)."""
    if version is None:
        version, _ = effective_version(resolved)
    ctx = RuleCtx(resolved, features, version)
    out: list[Finding] = []
    for r in RULES:
        out += r.run(ctx)
    return out
