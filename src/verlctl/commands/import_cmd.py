"""``verlctl import``: read an existing verl launch script (never run it) into a run spec file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from verlctl.commands.options import JsonOut, out_path


def import_script(
    script: Annotated[Path, typer.Argument(help="The verl launch script (bash) to read. It is parsed, never run.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Spec file to write.", parser=out_path)] = Path("run.yaml"),
    verl_version: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--verl-version", help="0.7.0 or 0.9.1 (default: what the script shows, else auto: the "
                     "image's verl, read by check and launch)."),
    ] = None,
    device: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--device", help="npu or gpu, where the script does not show its device (default: the "
                     "script's trainer.device, DEVICE, visible-devices variable or Ascend/CUDA settings)."),
    ] = None,
    var: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--var", help="NAME=VALUE for a variable the script reads from its environment (repeatable).",
                     show_default=False),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing spec file.")] = False,
    as_json: JsonOut = False,
) -> int:
    """Read a verl launch script into a run spec: mapped overrides become spec fields, the rest extra_overrides."""
    from verlctl.errors import VerlctlError
    from verlctl.importer import import_script as do_import
    from verlctl.importer import spec_text, write_atomic

    if verl_version is not None and verl_version not in ("0.7.0", "0.9.1"):
        raise VerlctlError(f"--verl-version: invalid value {verl_version!r}: use 0.7.0 or 0.9.1")
    if device is not None and device not in ("npu", "gpu"):
        raise VerlctlError(f"--device: invalid value {device!r}: use npu or gpu")
    environ: dict[str, str] = {}
    for item in var or []:
        name, eq, value = item.partition("=")
        if not eq or not name.isidentifier() or not name.isascii():
            raise VerlctlError(f"--var expects NAME=VALUE, got {item!r}")
        environ[name] = value
    result = do_import(script, verl_version, environ, device)
    write_atomic(out, spec_text(result, str(script)), force)
    if as_json:
        doc = {
            "written": str(out),
            "verl_version": result.mapped.version,
            "spec": {k: result.document[k] for k in ("algorithm", "mode", "strategy", "device")},
            "mapped": {o.raw: o.mapped_to for o in result.covered},
            "extra_overrides": result.extras,
            "env": sorted(result.env_kept),
            "not_imported": [o.key for o in result.unresolved],
            "verlctl_adds": result.added,
            "notes": result.notes,
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    d = result.document
    w = sys.stdout.write
    version = "auto (the image's, read by check and launch)" if result.mapped.version == "auto" \
        else result.mapped.version
    w(f"imported {script}: verl {version}, {d['algorithm']} / {d['mode']} / {d['strategy']} / "
      f"{d['device']} ({result.mapped.module})\n")
    w(f"reproduced from spec fields: {len(result.covered)} of {len(result.mapped.overrides)} overrides\n")
    if result.extras:
        keys = ", ".join(split_key(e) for e in result.extras)
        w(f"kept as extra overrides: {len(result.extras)}: {keys}\n")
    if result.env_kept:
        w(f"kept as env: {', '.join(sorted(result.env_kept))}\n")
    if result.unresolved:
        w(f"not imported (need a command's output): {', '.join(o.key for o in result.unresolved)}\n")
    if result.added:
        w(f"verlctl adds (not in the script): {', '.join(result.added)}\n")
    for n in result.notes:
        w(f"note: {n}\n")
    w(f"wrote {out}\n")
    return 0


def split_key(override: str) -> str:
    return override.split("=", 1)[0]
