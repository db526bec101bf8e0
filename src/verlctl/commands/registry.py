"""Registers every command on the typer app (one place, in help order)."""

from __future__ import annotations

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
    from verlctl.commands.export import export_app
    from verlctl.commands.export_rayjob import rayjob as export_rayjob

    app.command("demo", help=demo_cmd.DEMO_HELP)(demo_cmd.demo)
    app.command("detect")(detect_cmd.detect)
    app.command("init")(init_cmd.init)
    app.command("plan")(plan_cmd.plan)
    app.command("check")(check_cmd.check)
    app.command("launch")(run_cmd.launch)
    app.command("quickstart")(run_cmd.quickstart)
    app.command("status")(run_cmd.status)
    app.command("logs")(run_cmd.logs)
    app.command("stop")(run_cmd.stop)
    app.command("list")(run_cmd.list_runs)
    app.command("watch")(watch_cmd.watch)
    app.command("diagnose")(diagnose_cmd.diagnose)
    app.command("report")(report_cmd.report)
    app.command("bundle")(report_cmd.bundle)
    app.command("export-hf")(run_cmd.export_hf)
    app.command("features")(plan_cmd.features)
    app.command("schema")(plan_cmd.schema)
    app.command("import")(import_cmd.import_script)
    export_app.command("rayjob")(export_rayjob)
    export_app.command("slurm")(export_slurm.export_slurm)
    app.add_typer(export_app, name="export")
