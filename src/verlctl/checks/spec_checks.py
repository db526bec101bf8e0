"""Checks on the spec alone: the rules verl really enforces (``reference/verl.md`` §3.2) and the seeds'.

The rules themselves are named units in :mod:`verlctl.checks.rules` (codes, severity, versions, and the verl
assert each mirrors); this module runs them. Two rules of the first seed are not enforced by verl
(``gen_tp == train_tp`` and ``(tp*pp) % devices_per_node == 0``); they never block a run: an informational
note explains the real rule.
"""

from __future__ import annotations

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
