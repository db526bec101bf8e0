"""Registers every command on the typer app (one place, in help order)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from verlctl.commands import plan as plan_cmd

    app.command("plan")(plan_cmd.plan)
    app.command("features")(plan_cmd.features)
    app.command("schema")(plan_cmd.schema)
