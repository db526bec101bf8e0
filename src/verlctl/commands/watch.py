"""``verlctl watch``: follow a run, stay silent while healthy, speak up on errors, recover from OOM."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from verlctl.commands.options import RunArg


def watch(
    run: RunArg = None,
    notify_cmd: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--notify-cmd", help="Command run with each alert event as JSON on stdin."),
    ] = None,
) -> int:
    """Follow a run's log; on errors print the cause and hint, on out-of-memory climb the recovery ladder."""
    import sys

    from verlctl.runtime.records import resolve_run

    record = resolve_run(run)
    resolved = record.load_spec()
    from verlctl.orchestrator.watcher import become_watcher

    _watch_lock = become_watcher(record)  # one watcher per run; held until this process ends

    def say(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    from verlctl.orchestrator.runs import run_for

    return run_for(record).watch(record, resolved, say, notify_cmd)
