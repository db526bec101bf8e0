"""The command group class of ``verlctl`` and ``verlctl export`` (typer and the standard library only: this
module is loaded for ``verlctl --help``)."""

from __future__ import annotations

import inspect
from typing import Any

from typer.core import TyperGroup


class Commands(TyperGroup):
    """A command group whose command list shows each command's first paragraph as one line: a docstring's line
    breaks are the source's, not the reader's (typer's rich help keeps them in the list)."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None and cmd.short_help is None and cmd.help:
            cmd.short_help = " ".join(inspect.cleandoc(cmd.help).split("\n\n")[0].split())
        return cmd
