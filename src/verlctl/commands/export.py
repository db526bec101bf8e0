"""``verlctl export``: the run as a scheduler's job (each format registers its command in registry.py)."""

from __future__ import annotations

import typer

from verlctl.commands.group import Commands

export_app = typer.Typer(
    cls=Commands,
    help="Write the run as a scheduler's job instead of launching it here.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
