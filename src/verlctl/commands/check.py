"""``verlctl check``: the spec checks (as ``plan``) plus the checks that need this machine.

Only typer and the standard library are imported at module level (``verlctl --help`` start-up is
benchmarked); the spec, the probes, pydantic and rich are imported inside the command.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from verlctl.commands.options import JsonOut, SpecFile, SpecFlags, with_spec_flags

if TYPE_CHECKING:
    from verlctl.checks.findings import Finding
    from verlctl.checks.memory import Estimate
    from verlctl.spec.resolve import ResolvedSpec

Budget = Annotated[
    float,
    typer.Option("--budget", help="Seconds each machine probe may take (they run at the same time)."),
]


@with_spec_flags
def check(
    flags: SpecFlags,
    config: SpecFile = None,
    as_json: JsonOut = False,
    budget: Budget = 20.0,
    fabric: Annotated[
        bool, typer.Option("--fabric", help="Also run the collective fabric test (all-reduce and point-to-point "
                                            "across every node and device) in the run's running containers.")
    ] = False,
) -> int:
    """Check a spec against this machine: paths, devices, model shape vs TP/PP, network, image, container."""
    from verlctl.checks.findings import has_errors
    from verlctl.checks.machine_checks import describe_machine, summarize
    from verlctl.checks.verdict import decide
    from verlctl.errors import VerlctlError
    from verlctl.orchestrator.machine_facts import collect_facts
    from verlctl.spec.resolve import load_spec

    if not budget > 0:
        raise VerlctlError(f"--budget must be a positive number of seconds, not {budget:g}")
    resolved = load_spec(config, flags=flags[0], flag_names=flags[1])
    facts = collect_facts(resolved, budget)
    verdict = decide(resolved, facts)
    findings, memory = verdict.findings, verdict.memory
    if fabric:
        from verlctl.orchestrator.fabric_check import check_fabric

        findings = [*findings, *check_fabric(resolved)]
    if as_json:
        doc: dict[str, Any] = {
            "findings": [f.model_dump(mode="json") for f in findings],
            "not_checked": verdict.to_json(),
            "machine": summarize(resolved, facts),
            "memory": memory.to_json() if memory else None,
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        _print(describe_machine(resolved, facts), findings, memory, verdict.not_checked_lines())
    if has_errors(findings):
        if not as_json:
            sys.stderr.write("error: the check found errors (listed above)\n")
        return 2
    return 0


def spec_findings(resolved: ResolvedSpec) -> tuple[list[Finding], bool]:
    """The verdict's spec rules (no facts: not even the model's config.json), and whether vpp is on.

    A missing required path is a finding, not the end (as in ``check``)."""
    from verlctl.checks.verdict import Need, decide, spec_facts
    from verlctl.verl.compose import build_command

    command = build_command(resolved)
    facts = spec_facts(resolved, look=False, reasons={n: "not collected" for n in Need if n is not Need.SPEC})
    vpp = command.features.get("vpp")
    return decide(resolved, facts, command).findings, bool(vpp and vpp.on and vpp.applicable)


def _print(lines: list[str], findings: list[Finding], memory: Estimate | None = None,
           not_checked: list[str] | None = None) -> None:
    from rich.console import Console
    from rich.text import Text

    from verlctl.report import print_findings, print_memory, print_not_checked, print_wrapped

    console = Console()
    for line in lines:
        print_wrapped(console, Text(line, style="dim"), 0, 2)
    if memory is not None:
        print_memory(console, memory)
    print_findings(console, findings)
    print_not_checked(console, not_checked or [])
