"""Registers every command on the typer app (one place, in help order)."""

from __future__ import annotations

from typing import Any

import typer


def register(app: typer.Typer) -> None:
    from verlctl.commands import check as check_cmd
    from verlctl.commands import demo as demo_cmd
    from verlctl.commands import detect as detect_cmd
    from verlctl.commands import diagnose as diagnose_cmd
    from verlctl.commands import export_slurm, import_cmd
    from verlctl.commands import init as init_cmd
    from verlctl.commands import plan as plan_cmd
    from verlctl.commands import report as report_cmd
    from verlctl.commands import run as run_cmd
    from verlctl.commands import watch as watch_cmd
    from verlctl.commands.examples import epilog
    from verlctl.commands.export import export_app
    from verlctl.commands.export_rayjob import rayjob as export_rayjob
    from verlctl.commands.export_rayjob import volcano as export_volcano

    def add(group: typer.Typer, name: str, fn: Any, path: str | None = None) -> None:
        group.command(name, epilog=epilog(path or name))(fn)

    app.command("demo", help=demo_cmd.DEMO_HELP)(demo_cmd.demo)
    add(app, "detect", detect_cmd.detect)
    add(app, "init", init_cmd.init)
    add(app, "plan", plan_cmd.plan)
    add(app, "check", check_cmd.check)
    add(app, "launch", run_cmd.launch)
    add(app, "quickstart", run_cmd.quickstart)
    add(app, "status", run_cmd.status)
    add(app, "logs", run_cmd.logs)
    add(app, "stop", run_cmd.stop)
    add(app, "list", run_cmd.list_runs)
    add(app, "watch", watch_cmd.watch)
    add(app, "diagnose", diagnose_cmd.diagnose)
    add(app, "report", report_cmd.report)
    add(app, "bundle", report_cmd.bundle)
    add(app, "export-hf", run_cmd.export_hf)
    add(app, "features", plan_cmd.features)
    add(app, "schema", plan_cmd.schema)
    add(app, "import", import_cmd.import_script)
    add(export_app, "rayjob", export_rayjob, "export rayjob")
    add(export_app, "slurm", export_slurm.export_slurm, "export slurm")
    add(export_app, "volcano", export_volcano, "export volcano")
    app.add_typer(export_app, name="export")
