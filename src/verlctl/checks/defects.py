"""The known-defect gate as findings: every entry of :mod:`verlctl.verl.known_defects`' table that matches the
run, an error or a warning naming the issue, its effect and the fix.

``check`` and ``launch`` give it the versions read inside the image (:class:`ImageVersions`); ``plan`` (the
rule below) has none, so only the entries that need no version can match there.
"""

from __future__ import annotations

from collections.abc import Iterable

from verlctl.checks.findings import Finding, Severity, error, warning
from verlctl.checks.rules import RuleCtx, rule
from verlctl.detect.check_probes import ImageVersions
from verlctl.spec.model import RunSpec


def known_defect_findings(spec: RunSpec, features: set[str], versions: ImageVersions | None,
                          field: str = "container.image", versioned_only: bool = False) -> list[Finding]:  # fmt: skip
    """The table's entries that match this spec and the stack read in the image (None: no image read);
    ``versioned_only``: only the entries with a version condition (the others are ``plan``'s)."""
    from verlctl.verl.known_defects import COMPONENTS, DefectTableError, load, matching

    try:
        table = load()
    except DefectTableError as exc:
        return [error("known_defect_table", str(exc), "VERLCTL_KNOWN_DEFECTS",
                      "fix the entry (see the header of verlctl/verl/known_defects.yaml for the fields)")]
    stack: dict[str, str | None] = dict(versions.stack) if versions is not None else {}
    if versions is not None:
        stack["ray"] = versions.ray
    if versions is None:
        table = [d for d in table if not d.needs_versions]
    elif versioned_only:
        table = [d for d in table if d.needs_versions]
    out: list[Finding] = []
    for d in matching(table, versions=stack, device=spec.device, mode=spec.mode, features=features,
                      devices=list(spec.cluster.devices), env=dict(spec.env), engine=spec.train.rollout_engine,
                      overrides=list(spec.extra_overrides), strategy=spec.strategy):
        read = ", ".join([f"{c} {stack[c]}" for c in COMPONENTS if c in d.when and stack.get(c)]
                         + [f"no {c}" for c in d.when.get("missing", [])])
        where = f" ({read} in {versions.where})" if read and versions is not None else ""
        make = error if d.severity == "error" else warning
        out.append(make(
            "known_defect",
            f"known defect {d.id}{where}: {d.effect} [{d.issue}]",
            field if d.needs_versions else ("cluster.devices" if "devices_ascending" in d.when else
                                            f"env.{next(iter(d.when['env_contains']))}" if "env_contains" in d.when
                                            else "mode"),
            d.fix,
        ))
    return out


@rule("known_defects", ("known_defect", "known_defect_table"), Severity.ERROR)
def _known_defects(ctx: RuleCtx) -> Iterable[Finding]:
    """The known-defect table's entries that need no version read in the image (e.g. device order)."""
    on = {name for name in ctx.features if ctx.on(name)}
    yield from known_defect_findings(ctx.spec, on, None)
