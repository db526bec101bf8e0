"""The launch flow around the Launcher: spec sources, the interactive rounds, confirmation, the watcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verlctl.errors import SpecError, VerlctlError
from verlctl.wizard.flow import missing_message, stdin_is_terminal


def launch_flow(
    config: Path | None,
    flags: dict[str, Any],
    names: dict[str, str],
    *,
    yes: bool,
    dry_run: bool,
    out: Path | None,
    pull: bool,
    watch: bool,
    notify_cmd: str | None,
    verify_timeout: float,
    ask_all: bool,
) -> int:
    from rich.console import Console

    from verlctl.ops.launch import Launcher, LaunchOptions
    from verlctl.spec.resolve import load_spec

    console = Console()
    resolved = load_spec(config, flags=flags, flag_names=names)
    interactive = stdin_is_terminal() and not yes and not dry_run
    missing = resolved.missing_required()
    asked = False
    if missing or ask_all:
        if not interactive:
            if missing:
                raise SpecError(missing_message(missing))
        else:
            from verlctl.wizard.flow import run_wizard

            resolved = run_wizard(config, flags, names, ask_all=ask_all, console=console)
            asked = True
    if not yes and not dry_run and not interactive:
        raise VerlctlError("confirmation needed but stdin is not a terminal: pass --yes to launch without asking")

    confirm = None
    if interactive:
        from verlctl.wizard.flow import confirm_launch

        # The answers can be saved as a spec file (offered after the launch question) when rounds were asked.
        confirm = confirm_launch(console, resolved, offer_save=asked)
    options = LaunchOptions(yes=yes, dry_run=dry_run, pull=pull, verify_timeout=verify_timeout, out_dir=out)
    launcher = Launcher(resolved, options, console, confirm=confirm)
    record = launcher.run()
    if record is None:
        return 0
    if watch:
        from verlctl.ops.watcher_process import spawn_watcher

        pid = spawn_watcher(record, notify_cmd)
        console.print(f"watcher started (pid {pid}): it stays silent while training is healthy", highlight=False)
    console.print(f"[bold green]training is running[/bold green]: run [bold]{record.run_id}[/bold]", highlight=False)
    if record.swanlab_url:
        console.print(f"SwanLab: {record.swanlab_url} (experiment {record.experiment})", highlight=False)
    console.print("follow it with `verlctl status`, `verlctl logs -f`; stop it with `verlctl stop`", highlight=False)
    return 0
