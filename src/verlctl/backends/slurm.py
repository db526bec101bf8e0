"""The Slurm backend: the target is a Slurm cluster reached through sbatch / squeue / scancel
(``runtime/slurm.py``)."""

from __future__ import annotations

from typing import Any


class SlurmBackend:
    name = "slurm"

    def __init__(self, console: Any = None) -> None:
        if console is None:
            from rich.console import Console

            console = Console()
        self.console = console
