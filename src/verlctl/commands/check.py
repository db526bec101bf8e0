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
) -> int:
    """Check a spec against this machine: paths, devices, model shape vs TP/PP, network, image, container."""
    from verlctl.checks.findings import has_errors, sorted_findings
    from verlctl.checks.machine_checks import collect_facts, describe_machine, machine_findings, summarize
    from verlctl.errors import VerlctlError
    from verlctl.spec.resolve import load_spec

    if not budget > 0:
        raise VerlctlError(f"--budget must be a positive number of seconds, not {budget:g}")
    resolved = load_spec(config, flags=flags[0], flag_names=flags[1])
    findings, vpp_on = spec_findings(resolved)
    facts = collect_facts(resolved, budget)
    memory, field = memory_and_field_findings(resolved, facts, budget)
    findings = [f for f in findings if not f.code.startswith("memory_")] + field
    findings = sorted_findings(findings + machine_findings(resolved, facts, vpp_on))
    if as_json:
        doc: dict[str, Any] = {
            "findings": [f.model_dump(mode="json") for f in findings],
            "machine": summarize(resolved, facts),
            "memory": memory.to_json() if memory else None,
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        _print(describe_machine(resolved, facts), findings, memory)
    if has_errors(findings):
        if not as_json:
            sys.stderr.write("error: the check found errors (listed above)\n")
        return 2
    return 0


def spec_findings(resolved: ResolvedSpec) -> tuple[list[Finding], bool]:
    """The spec checks of ``plan`` (``make_plan``), and whether the vpp feature is on.

    Unlike ``plan``, a missing required path is a finding, not the end: the machine checks still run.
    """
    from verlctl.checks.findings import error
    from verlctl.checks.spec_checks import check_spec
    from verlctl.plan import make_plan
    from verlctl.spec.resolve import REQUIRED_PATHS
    from verlctl.verl.compose import build_command

    missing = resolved.missing_required()
    if not missing:
        the_plan = make_plan(resolved)
        vpp = the_plan.command.features.get("vpp")
        return list(the_plan.findings), bool(vpp and vpp.on and vpp.applicable)
    command = build_command(resolved)
    found = [
        error("required_path", f"{path} is not set", path, f"set {path} in the spec file, or pass {REQUIRED_PATHS[path]}")
        for path in missing
    ]
    vpp = command.features.get("vpp")
    found += list(command.findings) + check_spec(resolved, command.features)
    return found, bool(vpp and vpp.on and vpp.applicable)


def _prompt_lengths(resolved: ResolvedSpec, facts: Any, budget: float) -> Any:
    """The first train file's prompts counted with the model's tokenizer, within ``budget`` seconds."""
    from verlctl.checks import field_checks as fc
    from verlctl.checks.machine_checks import FileProbe
    from verlctl.detect.common import CallTimeout, call_with_timeout

    spec = resolved.spec
    first = next((c for c in facts.datasets if c.field == "paths.train_files"), None)
    if not spec.paths.model or first is None or not isinstance(first.file, FileProbe) or first.file.problem != "ok":
        return None
    model, path, limit = spec.paths.model, first.path, spec.train.max_prompt_length
    try:
        return call_with_timeout(lambda: fc.measure_prompts(model, path, limit), budget, "verlctl-prompts")
    except CallTimeout:
        return f"counting did not finish within {budget:g} s"


def memory_and_field_findings(
    resolved: ResolvedSpec, facts: Any, budget: float = 20.0
) -> tuple[Estimate | None, list[Finding]]:
    """The memory fit with this machine's device memory and RAM, and the field-failure checks."""
    from verlctl.checks import field_checks as fc
    from verlctl.checks.memory import (
        ModelShape,
        estimate_for_command,
        hbm_from_machine,
        host_from_machine,
        memory_findings,
    )
    from verlctl.detect.datasets import DatasetInfo
    from verlctl.detect.machine import SystemInfo
    from verlctl.detect.system import DiskSpace
    from verlctl.verl.compose import build_command

    spec = resolved.spec
    command = build_command(resolved)
    hbm, host = hbm_from_machine(spec, facts.machine), host_from_machine(facts.machine)
    memory, why = estimate_for_command(resolved, command, hbm, host)
    out = memory_findings(memory, why)
    shape = memory.shape if memory else (ModelShape.from_model_dir(spec.paths.model) if spec.paths.model else None)
    out += fc.check_weight_bucket(spec, command.version, shape)
    host_bytes = int((spec.cluster.host_memory_gib or host or 0) * 2**30) or None
    new_container = spec.container.runtime == "docker" and facts.docker is not None and not facts.docker.exists
    if (new_container or spec.container.runtime == "host") and isinstance(facts.machine.system, SystemInfo):
        shm = facts.machine.system.shm  # a container verlctl creates shares it (ipc=host)
        if isinstance(shm, DiskSpace):
            where = "this host (the new container shares it)" if new_container else "this host"
            out += fc.check_shm(spec, shm.total_bytes, host_bytes, where)
    rows = [c.verl_schema.num_rows if isinstance(c.verl_schema, DatasetInfo) else None
            for c in facts.datasets if c.field == "paths.train_files"]
    out += fc.check_dataset_rows(spec, rows)
    out += fc.check_prompt_lengths(spec, _prompt_lengths(resolved, facts, budget))
    if spec.device == "npu":
        ranges = fc.hccl_port_ranges(spec, command.env)
        busy = {name: fc.ports_in_use(ports) for name, ports in ranges.items()}
        out += fc.check_hccl_ports(busy, ranges)
    return memory, out


def _print(lines: list[str], findings: list[Finding], memory: Estimate | None = None) -> None:
    from rich.console import Console

    from verlctl.report import print_findings, print_memory

    console = Console()
    for line in lines:
        console.print(f"[dim]{line}[/dim]", highlight=False)
    if memory is not None:
        print_memory(console, memory)
    print_findings(console, findings)
