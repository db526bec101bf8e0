"""``verlctl plan``, ``verlctl features``, ``verlctl schema``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from verlctl.commands.options import Force, JsonOut, SpecFile, SpecFlags, Verbose, out_path, with_spec_flags


@with_spec_flags
def plan(
    flags: SpecFlags,
    config: SpecFile = None,
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", "-o", help="Write start_verl.sh, run_training.sh and spec.resolved.yaml into this "
                     "directory (files of the set already there: only with --force).", parser=out_path),
    ] = None,
    force: Force = False,
    as_json: JsonOut = False,
    verbose: Verbose = False,
) -> int:
    """Resolve a spec, check it, and render the two launch scripts (changes nothing else)."""
    from verlctl.checks.findings import has_errors
    from verlctl.plan import make_plan
    from verlctl.report import plan_json, print_findings
    from verlctl.spec.resolve import load_spec

    resolved = load_spec(config, flags=flags[0], flag_names=flags[1])
    the_plan = make_plan(resolved)
    written: list[str] = []
    if the_plan.ok and out is not None:
        rendered = the_plan.render()
        written = [str(p) for p in rendered.write(out, force=force)]
    if as_json:
        doc = plan_json(resolved, the_plan.command, the_plan.findings)
        doc["memory"] = the_plan.memory.to_json() if the_plan.memory else None
        doc["not_checked"] = the_plan.verdict.to_json() if the_plan.verdict else []
        doc["written"] = written
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        from rich.console import Console

        console = Console()
        from verlctl.wizard.checklist import glance, print_summary

        glance(console, resolved, the_plan.command, verbose)
        print_summary(console, resolved, the_plan.command)
        if the_plan.memory is not None:
            from verlctl.report import print_memory

            print_memory(console, the_plan.memory)
        print_findings(console, the_plan.findings)
        if the_plan.verdict is not None:
            from verlctl.report import print_not_checked

            print_not_checked(console, the_plan.verdict.not_checked_lines())
        for p in written:
            console.print(f"wrote {p}", highlight=False)
        if the_plan.ok and out is None:
            from verlctl.report import print_words

            print_words(console, "files: nothing written; with -o DIR: start_verl.sh, run_training.sh, "
                        "spec.resolved.yaml (every value with its source)", 0, 4)
    if has_errors(the_plan.findings):
        if not as_json:
            sys.stderr.write("error: the spec has errors (listed above); nothing was written\n")
        return 2
    return 0


def features(
    mask: Annotated[Optional[str], typer.Option(help="Explain a 7-bit mask.")] = None,  # noqa: UP045
    as_json: JsonOut = False,
) -> int:
    """List the acceleration features (mask bits, categories, defaults); explain a mask."""
    from verlctl.errors import SpecError
    from verlctl.verl.features import FEATURES, exclusion_notes, mask_legend

    bits: dict[str, bool] = {}
    if mask is not None:
        from pydantic import ValidationError

        from verlctl.spec.model import FeaturesSpec

        try:
            FeaturesSpec(mask=mask)
        except ValidationError as exc:
            raise SpecError(exc.errors()[0]["msg"].removeprefix("Value error, "), field="--mask") from None
        bits = {f.name: mask[f.bit] == "1" for f in FEATURES if f.bit is not None}
    notes = exclusion_notes(n for n, on in bits.items() if on)
    rows = [
        {
            "name": f.name,
            "title": f.title,
            "bit": f.bit,
            "category": f.category.value,
            "default": "on" if f.default_on else "off",
            "description": f.description,
            **({"in_mask": bits[f.name]} if f.name in bits else {}),
        }
        for f in sorted(FEATURES, key=lambda f: (f.bit is None, f.bit or 0, f.name))
    ]
    if as_json:
        doc: dict[str, object] = {"features": rows, "mask_legend": mask_legend()}
        if mask is not None:
            doc["mask"] = mask
            doc["notes"] = notes
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="verlctl features", title_justify="left", header_style="bold")
    for col in ("bit", "name", "category", "default", "description"):
        table.add_column(col)
    if mask is not None:
        table.add_column(f"mask {mask}")
    for r in rows:
        cells = [str(r["bit"]) if r["bit"] is not None else "-", str(r["name"]), str(r["category"]), str(r["default"])]
        cells.append(str(r["description"]))
        if mask is not None:
            cells.append(("on" if r["in_mask"] else "off") if "in_mask" in r else "-")
        table.add_row(*cells)
    console = Console()
    console.print(table)
    console.print(f"mask legend (leftmost = bit 0): {mask_legend()}", highlight=False)
    if mask is not None:
        from rich.markup import escape

        console.print(f"mask {mask}: " + ("what its features exclude or need:" if notes else
                                          "no feature of it excludes or needs another"), highlight=False)
        for note in notes:
            console.print(f"  - {escape(note)}", highlight=False)
    return 0


def schema() -> int:
    """Print the run spec's JSON schema."""
    from verlctl.spec.model import spec_json_schema

    sys.stdout.write(json.dumps(spec_json_schema(), indent=2) + "\n")
    return 0
