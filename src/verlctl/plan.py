"""The plan: spec -> training command -> checks -> rendered files (only when no check fails)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from verlctl.checks.findings import Finding, has_errors, sorted_findings
from verlctl.spec.resolve import ResolvedSpec
from verlctl.verl.compose import TrainingCommand, build_command

if TYPE_CHECKING:
    from verlctl.checks.memory import Estimate
    from verlctl.render.render import Rendered


@dataclass
class Plan:
    resolved: ResolvedSpec
    command: TrainingCommand
    findings: list[Finding]
    memory: Estimate | None = None

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings)

    def render(self) -> Rendered:
        from verlctl.render.render import render

        return render(self.resolved, self.command)


def make_plan(resolved: ResolvedSpec, container_version: str | None = None) -> Plan:
    from verlctl.checks.spec_checks import check_spec

    resolved.require_complete()
    command = build_command(resolved, container_version)
    findings = list(command.findings)
    findings += check_spec(resolved, command.features, command.version)
    from verlctl.checks.memory import estimate_for_command, memory_findings

    memory, why = estimate_for_command(resolved, command)
    findings += memory_findings(memory, why)
    return Plan(resolved, command, sorted_findings(findings), memory)
