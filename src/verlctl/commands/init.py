"""``verlctl init``: the interactive rounds and the confirmation checklist; writes a run spec and nothing else.

Only typer and the standard library are imported here (``verlctl --help`` start-up is benchmarked).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from verlctl.commands.options import SpecFile, SpecFlags, Verbose, out_path, with_spec_flags


@with_spec_flags
def init(
    flags: SpecFlags,
    config: SpecFile = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Spec file to write.", parser=out_path)] = Path("run.yaml"),
    ask_all: Annotated[bool, typer.Option("--ask-all", help="Ask every round, even for values already given.")] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Ask nothing: write the spec from -c/env/flags (must be complete).")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing spec file without asking.")] = False,
    no_detect: Annotated[bool, typer.Option("--no-detect", help="Skip the machine pre-check (no pre-fills).")] = False,
    machine: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--machine", help="Use a saved `verlctl detect --json` result instead of detecting.",
                     show_default=False),
    ] = None,
    scan_root: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--scan-root", help="Directory to search for models/datasets (repeatable).", show_default=False),
    ] = None,
    budget: Annotated[float, typer.Option("--budget", help="Time budget of the model/dataset scan, seconds.")] = 3.0,
    verbose: Verbose = False,
) -> int:
    """Ask for the run in rounds (pre-filled from this machine), confirm, and write the spec file."""
    from verlctl.orchestrator.machine_facts import wizard_facts
    from verlctl.wizard.flow import init_flow

    return init_flow(
        config, flags[0], flags[1], out=out, ask_all=ask_all, yes=yes, force=force, detect=not no_detect,
        machine_file=machine, scan_roots=scan_root or None, budget_s=budget, facts_for=wizard_facts, verbose=verbose,
    )
