"""The Slurm backend: the request is the sbatch job of ``verlctl export slurm`` (``ops/slurm_run.py`` writes,
submits, verifies, follows and cancels it; ``runtime/slurm.py`` talks to sbatch / squeue / scancel)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verlctl.backends.base import Change, LaunchRequest


@dataclass(frozen=True)
class SlurmLaunch:
    """``launch --backend slurm``'s options (``prepare``'s ``options``)."""

    slurm: Any  # render.slurm.SlurmOptions: partition, time, gres
    yes: bool = False
    dry_run: bool = False
    verify_timeout: float = 300.0


class SlurmBackend:
    name = "slurm"

    def __init__(self, console: Any = None) -> None:
        if console is None:
            from rich.console import Console

            console = Console()
        self.console = console
        self.resolved: Any = None
        self.options: SlurmLaunch | None = None
        self.request: LaunchRequest | None = None
        self.started: list[Any] = []  # the run record once launch_slurm made it (abort's handle)

    def prepare(self, resolved: Any, options: Any, confirm: Any = None) -> LaunchRequest:
        from verlctl.ops.slurm_run import prepare_slurm

        self.resolved, self.options = resolved, options
        self.request = prepare_slurm(resolved, options.slurm, dry_run=options.dry_run,
                                     verify_timeout=options.verify_timeout)
        return self.request

    def submit(self, request: LaunchRequest) -> Any:
        """Write the job and ``sbatch`` it, verify, record; None for a dry run."""
        from verlctl.ops.slurm_run import launch_slurm

        if self.options is None or request is not self.request:
            raise ValueError("submit() takes the request this backend prepared")  # a programming error
        o = self.options
        return launch_slurm(self.resolved, o.slurm, self.console, yes=o.yes, dry_run=o.dry_run,
                            verify_timeout=o.verify_timeout, request=request, started=self.started)

    def abort(self, what: str) -> str:
        """The failed-launch clean-up of this backend's launch (ops/interrupts.py: launch_guard): every job the
        run submitted is cancelled, the key file removed, the run marked stopped."""
        from verlctl.ops.slurm_run import abort_slurm_launch

        if not self.started:
            return f"interrupted ({what}) before anything was started: nothing changed"
        return abort_slurm_launch(self.started[-1], what)

    def status(self, handle: Any) -> dict[str, Any]:
        from verlctl.ops.slurm_run import slurm_status

        return slurm_status(handle)

    def logs(self, handle: Any, follow: bool, lines: int) -> int:
        from verlctl.ops.slurm_run import slurm_logs

        return slurm_logs(handle, follow, lines)

    def stop(self, handle: Any, remove_container: bool, grace: float, console: Any) -> dict[str, Any]:
        """Mark the run stopped (as for a local run: under the record's lock, the watcher first), then cancel
        the current job (its id, checked against its name)."""
        from verlctl.ops.inspect import mark_stopped
        from verlctl.ops.slurm_run import slurm_stop

        console = console if console is not None else self.console
        record, watching, _result = mark_stopped(handle.run_id, console)
        return slurm_stop(record, grace, console, watching)

    def watch(self, handle: Any, resolved: Any, say: Any, notify_cmd: str | None) -> int:
        from verlctl.ops.slurm_run import SlurmWatcher

        try:
            return SlurmWatcher(handle, resolved, say=say).run()
        except KeyboardInterrupt:
            handle.event("watch_interrupted")
            return 130

    def relaunch(self, handle: Any, change: Change) -> Any:
        """Resubmit the run's job with ``change`` (the watcher's recovery: ``SlurmWatcher._resubmit``)."""
        from verlctl.ops.slurm_run import load_options, submit_job

        resolved = handle.load_spec(recovery={"features.enable": list(change.enable)} if change.enable else None)
        return submit_job(handle, resolved, load_options(handle), change.reason, change.resumed_from)
