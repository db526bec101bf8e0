"""Interactive launch: rounds for missing values, and the blocking confirmation checklist."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from verlctl.spec.resolve import ResolvedSpec


def confirm_launch(console: Any, resolved: ResolvedSpec) -> Callable[[Any, list[str]], bool]:
    def confirm(plan: Any, actions: list[str]) -> bool:
        import questionary

        from verlctl.report import print_checklist, print_findings

        print_checklist(console, resolved, plan.command)
        print_findings(console, plan.findings)
        console.print("[bold]These actions will be taken, in order:[/bold]")
        for i, a in enumerate(actions, 1):
            console.print(f"  {i:2}. {a}", highlight=False)
        answer = questionary.confirm("Proceed?", default=False).unsafe_ask()
        return bool(answer)

    return confirm


def run_wizard(config: Path | None, flags: dict[str, Any], names: dict[str, str], ask_all: bool,
               console: Any) -> ResolvedSpec:
    raise NotImplementedError
