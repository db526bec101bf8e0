"""The verbs of a run, one object per backend: ``launch`` (prepare, submit, abort), ``watch`` and its relaunch, and
``status`` / ``logs`` / ``stop`` of a recorded run. This is the orchestrator's side: it walks the stages and
composes what verl needs, and calls DOWN into the backend that knows the target (``verlctl.backends``). The
commands and the watcher call these, never a backend's module.

``run_named("slurm")`` for a launch, ``run_for(record)`` for a recorded run; KubeRay and Volcano runs are
kubectl's (:class:`ManifestRun` plans and writes the manifest, and answers every other verb with the kubectl
command that does it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from verlctl.backends.base import Change, LaunchRequest, NotOnBackend


class Run(Protocol):
    """The verbs of every backend's run. ``handle`` is the recorded run (``runtime.records.RunRecord``).

    Raises: ``VerlctlError`` (one line, nothing changed) for what the user can fix; ``RuntimeFailure`` when
    the target failed; ``backends.base.NotOnBackend`` for an operation this backend leaves to another tool."""

    name: str

    def prepare(self, resolved: Any, options: Any, confirm: Any = None) -> LaunchRequest: ...

    def submit(self, request: LaunchRequest) -> Any: ...

    def status(self, handle: Any) -> dict[str, Any]: ...

    def logs(self, handle: Any, follow: bool, lines: int) -> int: ...

    def stop(self, handle: Any, remove_container: bool, grace: float, console: Any) -> dict[str, Any]: ...

    def watch(self, handle: Any, resolved: Any, say: Any, notify_cmd: str | None) -> int: ...

    def relaunch(self, handle: Any, change: Change) -> Any: ...


def run_named(name: str, console: Any = None) -> Any:
    """The verbs of a ``launch --backend NAME`` run (``backends.NAMES``; another name is refused here, naming them)."""
    if name == "local":
        return LocalRun(console)
    if name == "slurm":
        return SlurmRun(console)
    if name in ("kuberay", "volcano"):
        return ManifestRun(name, console)
    from verlctl.backends import NAMES
    from verlctl.errors import VerlctlError

    raise VerlctlError(f"--backend {name!r}: give {', '.join(NAMES[:-1])} or {NAMES[-1]}")


def run_for(record: Any, console: Any = None) -> Any:
    """The verbs of a recorded run (its ``runtime``: docker, host or slurm)."""
    return run_named("slurm" if record.runtime == "slurm" else "local", console)


def run_status(run_id: str | None) -> dict[str, Any]:
    """``verlctl status``: the run's backend reads its state."""
    from verlctl.runtime.records import resolve_run

    record = resolve_run(run_id)
    return run_for(record).status(record)


def show_logs(run_id: str | None, follow: bool, lines: int) -> int:
    from verlctl.runtime.records import resolve_run

    record = resolve_run(run_id)
    return run_for(record).logs(record, follow, lines)


def stop_run(run_id: str | None, remove_container: bool, grace: float, console: Any = None) -> dict[str, Any]:
    from verlctl.runtime.records import resolve_run

    record = resolve_run(run_id)
    return run_for(record, console).stop(record, remove_container, grace, console)


class LocalRun:
    """The verbs of a local run (one host's Docker, Docker on SSH nodes, the host runtime): the Launcher
    (``orchestrator/launch.py``) walks the stages, the Watcher follows and relaunches; the target operations are the local
    backend's (``backends/docker.py``)."""

    name = "local"

    def __init__(self, console: Any = None) -> None:
        if console is None:
            from rich.console import Console

            console = Console()
        self.console = console
        self.launcher: Any = None

    def prepare(self, resolved: Any, options: Any, confirm: Any = None) -> LaunchRequest:
        """Plan the launch of ``resolved`` (``orchestrator.launch.LaunchOptions``); nothing is changed."""
        from verlctl.orchestrator.launch import Launcher

        self.launcher = Launcher(resolved, options, self.console, confirm=confirm)
        return self.launcher.prepare()

    def submit(self, request: LaunchRequest) -> Any:
        """Walk the request's stages (after the confirmation); the run record, or None (dry run, declined)."""
        if self.launcher is None or self.launcher.request is not request:
            raise ValueError("submit() takes the request this backend prepared")  # a programming error
        return self.launcher.run()

    def abort(self, what: str) -> str:
        """The failed-launch clean-up of this backend's launch (orchestrator/interrupts.py: launch_guard)."""
        if self.launcher is None:
            return f"interrupted ({what}) before anything was started: nothing changed"
        return str(self.launcher.abort(what))

    # ----------------------------------------------------------------------------- a recorded run

    def status(self, handle: Any) -> dict[str, Any]:
        from verlctl.orchestrator.inspect import run_status

        return run_status(handle.run_id)

    def logs(self, handle: Any, follow: bool, lines: int) -> int:
        from verlctl.orchestrator.inspect import show_logs

        return show_logs(handle.run_id, follow, lines)

    def stop(self, handle: Any, remove_container: bool, grace: float, console: Any) -> dict[str, Any]:
        from verlctl.orchestrator.inspect import stop_run

        return stop_run(handle.run_id, remove_container, grace, console)

    def watch(self, handle: Any, resolved: Any, say: Any, notify_cmd: str | None) -> int:
        """``verlctl watch`` on a local run: the Watcher (orchestrator/watcher.py) follows the attempt and relaunches
        through this object."""
        from verlctl.backends.docker import executor_for
        from verlctl.orchestrator.watcher import Watcher

        record = handle
        ex = executor_for(record)

        # SIGTERM (`verlctl stop` ends the watcher so) unwinds like Ctrl-C: the follower's `tail -F` in the
        # container is stopped on the way out (Watcher.watch_attempt's finally), never left behind.
        import contextlib
        import signal

        class _Terminated(BaseException):
            pass

        def on_term(_signum: int, _frame: object) -> None:
            raise _Terminated

        previous = signal.signal(signal.SIGTERM, on_term)
        try:
            return Watcher(record, ex, resolved, notify_cmd=notify_cmd, say=say, backend=self).run()
        except KeyboardInterrupt:
            record.event("watch_interrupted")
            say(f"verlctl watch: interrupted: the run goes on without a watcher (no OOM recovery); watch it "
                f"again with `verlctl watch {record.run_id}`")
            return 130
        except _Terminated:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up below is not cut short by a second one
            with contextlib.suppress(OSError):
                record.event("watch_terminated")
            say("verlctl watch: ended by SIGTERM (`verlctl stop` ends the watcher so)")
            return 143
        finally:
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signal.SIGTERM, previous)

    def prepare_relaunch(self, handle: Any, ex: Any, change: Change) -> Any:
        """Check and compose the next attempt with ``change`` (spec checks, preflight in the target) without
        touching the running one: (resolved spec, launcher, prepared plan) for :meth:`relaunch`."""
        from rich.console import Console

        from verlctl.orchestrator.launch import Launcher, LaunchOptions

        resolved = handle.load_spec(recovery={"features.enable": list(change.enable)} if change.enable else None)
        launcher = Launcher(resolved, LaunchOptions(yes=True), Console(stderr=True, quiet=True))
        return resolved, launcher, launcher.prepare_relaunch(ex, handle)

    def relaunch(self, handle: Any, change: Change, prepared: Any = None, ex: Any = None) -> Any:
        """Start the next attempt (the relaunch stages: no image, no container create); the resolved spec."""
        if ex is None:
            from verlctl.backends.docker import executor_for

            ex = executor_for(handle)
        resolved, launcher, the_next = prepared if prepared is not None else self.prepare_relaunch(handle, ex, change)
        launcher.relaunch(ex, handle, reason=change.reason, resumed_from=change.resumed_from, prepared=the_next)
        return resolved

    def workers(self, handle: Any) -> list[tuple[Any, Any, dict[str, Any]]]:
        """(node handle, executor or None, container info) for every worker node of a multi-node run."""
        from verlctl.backends.docker import worker_targets

        return worker_targets(handle)

    def remove_key_files(self, handle: Any, ex: Any, say: Any) -> list[str]:
        from verlctl.backends.docker import remove_key_files

        return remove_key_files(handle, ex, say)


@dataclass(frozen=True)
class SlurmLaunch:
    """``launch --backend slurm``'s options (``prepare``'s ``options``)."""

    slurm: Any  # render.slurm.SlurmOptions: partition, time, gres
    yes: bool = False
    dry_run: bool = False
    verify_timeout: float = 300.0


class SlurmRun:
    """The verbs of a Slurm run: the job is written, submitted, verified, followed and cancelled by
    ``orchestrator/slurm_run.py``, through the Slurm backend (``backends/slurm.py``)."""

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
        from verlctl.orchestrator.slurm_run import prepare_slurm

        self.resolved, self.options = resolved, options
        self.request = prepare_slurm(resolved, options.slurm, dry_run=options.dry_run,
                                     verify_timeout=options.verify_timeout)
        return self.request

    def submit(self, request: LaunchRequest) -> Any:
        """Write the job and ``sbatch`` it, verify, record; None for a dry run."""
        from verlctl.orchestrator.slurm_run import launch_slurm

        if self.options is None or request is not self.request:
            raise ValueError("submit() takes the request this backend prepared")  # a programming error
        o = self.options
        return launch_slurm(self.resolved, o.slurm, self.console, yes=o.yes, dry_run=o.dry_run,
                            verify_timeout=o.verify_timeout, request=request, started=self.started)

    def abort(self, what: str) -> str:
        """The failed-launch clean-up of this backend's launch (orchestrator/interrupts.py: launch_guard): every job the
        run submitted is cancelled, the key file removed, the run marked stopped."""
        from verlctl.orchestrator.slurm_run import abort_slurm_launch

        if not self.started:
            return f"interrupted ({what}) before anything was started: nothing changed"
        return abort_slurm_launch(self.started[-1], what)

    def status(self, handle: Any) -> dict[str, Any]:
        from verlctl.orchestrator.slurm_run import slurm_status

        return slurm_status(handle)

    def logs(self, handle: Any, follow: bool, lines: int) -> int:
        from verlctl.orchestrator.slurm_run import slurm_logs

        return slurm_logs(handle, follow, lines)

    def stop(self, handle: Any, remove_container: bool, grace: float, console: Any) -> dict[str, Any]:
        """Mark the run stopped (as for a local run: under the record's lock, the watcher first), then cancel
        the current job (its id, checked against its name)."""
        from verlctl.orchestrator.inspect import mark_stopped
        from verlctl.orchestrator.slurm_run import slurm_stop

        console = console if console is not None else self.console
        record, watching, _result = mark_stopped(handle.run_id, console)
        return slurm_stop(record, grace, console, watching)

    def watch(self, handle: Any, resolved: Any, say: Any, notify_cmd: str | None) -> int:
        from verlctl.orchestrator.slurm_run import SlurmWatcher

        try:
            return SlurmWatcher(handle, resolved, say=say).run()
        except KeyboardInterrupt:
            handle.event("watch_interrupted")
            return 130

    def relaunch(self, handle: Any, change: Change) -> Any:
        """Resubmit the run's job with ``change`` (the watcher's recovery: ``SlurmWatcher._resubmit``)."""
        from verlctl.orchestrator.slurm_run import load_options, submit_job

        resolved = handle.load_spec(recovery={"features.enable": list(change.enable)} if change.enable else None)
        return submit_job(handle, resolved, load_options(handle), change.reason, change.resumed_from)


class ManifestRun:
    """The verbs of a KubeRay RayJob or Volcano Job run (``launch --backend kuberay|volcano``, ``export rayjob``,
    ``export volcano``): the orchestrator plans the run (verl's command and the verdict, less what does not hold
    for pods: ``NOT_FOR_RAYJOB``); the backend (``backends/kuberay.py``) renders the pods' scripts and the
    manifest, and writes it. Status, logs, stop, watch and relaunch are kubectl's: ``NotOnBackend``, naming the
    kubectl command."""

    def __init__(self, fmt: str = "kuberay", console: Any = None) -> None:
        from verlctl.backends.kuberay import KubeRayBackend, VolcanoBackend

        self.backend = VolcanoBackend(console) if fmt == "volcano" else KubeRayBackend(console)
        self.name: str = self.backend.name
        self.findings: list[Any] = []  # the verdict's, less NOT_FOR_RAYJOB
        self.request: LaunchRequest | None = None
        self.options: Any = None

    @property
    def extra(self) -> dict[str, Any]:
        """What the manifest holds, for the command's lines: kinds, the kubectl apply, options, the spec."""
        return self.backend.extra

    def prepare(self, resolved: Any, options: Any, confirm: Any = None) -> LaunchRequest:
        """The manifest request for ``resolved`` (``backends.kuberay.resolve``); a spec with errors gives a
        request with no manifest, ``blocked``, and its findings in ``self.findings``."""
        from verlctl.backends.kuberay import NOT_FOR_RAYJOB
        from verlctl.plan import make_plan

        self.options = options
        the_plan = make_plan(resolved)
        self.findings = [f for f in the_plan.findings if f.code not in NOT_FOR_RAYJOB]
        self.request = self.backend.manifest_request(resolved, the_plan.command, self.findings, options)
        return self.request

    def submit(self, request: LaunchRequest) -> Any:
        """Write the manifest (atomically, never through a planted symlink); the path written."""
        if self.options is None or request is not self.request or request.manifest is None:
            raise ValueError("submit() takes the unblocked request this run prepared")  # a programming error
        return self.backend.write_manifest(request, self.options.target)

    def _kubectl(self, what: str, handle: Any) -> NoReturn:
        raise NotOnBackend(f"a {self.backend.where} run's {what} is kubectl's: verlctl only writes the manifest",
                           hint=self.backend.kubectl_hint(handle))

    def status(self, handle: Any) -> dict[str, Any]:
        return self._kubectl("status", handle)

    def logs(self, handle: Any, follow: bool, lines: int) -> int:
        return self._kubectl("log", handle)

    def stop(self, handle: Any, remove_container: bool, grace: float, console: Any) -> dict[str, Any]:
        return self._kubectl("stop", handle)

    def watch(self, handle: Any, resolved: Any, say: Any, notify_cmd: str | None) -> int:
        return self._kubectl("watch", handle)

    def relaunch(self, handle: Any, change: Change) -> Any:
        return self._kubectl("relaunch", handle)
