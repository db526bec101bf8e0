"""The plan: spec -> training command -> checks -> rendered files (only when no check fails)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from verlctl.checks.findings import Finding, has_errors
from verlctl.spec.resolve import ResolvedSpec
from verlctl.verl.compose import TrainingCommand, build_command

if TYPE_CHECKING:
    from verlctl.checks.facts import CheckFacts
    from verlctl.checks.memory import Estimate
    from verlctl.checks.verdict import Verdict
    from verlctl.render.render import Rendered


@dataclass
class Plan:
    resolved: ResolvedSpec
    command: TrainingCommand
    findings: list[Finding]
    memory: Estimate | None = None
    verdict: Verdict | None = None  # which rules ran, which could not (and why)

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings)

    def render(self) -> Rendered:
        from verlctl.render.render import render

        return render(self.resolved, self.command)


def make_plan(resolved: ResolvedSpec, container_version: str | None = None, facts: CheckFacts | None = None) -> Plan:
    """Compose the command and decide on it (:func:`verlctl.checks.verdict.decide`) with ``facts``; default:
    what ``plan`` has, the spec and the model's config.json when it is readable here."""
    from verlctl.checks.verdict import decide, spec_facts

    resolved.require_complete()
    command = build_command(resolved, container_version)
    verdict = decide(resolved, facts if facts is not None else spec_facts(resolved), command)
    return Plan(resolved, command, verdict.findings, verdict.memory, verdict)
