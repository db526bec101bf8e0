"""The local backend: one host's Docker engine, Docker engines on SSH nodes (``runtime/nodes.py``), or the host
itself (``container.runtime: host``). The Launcher (``ops/launch.py``) drives the stages; status, logs and stop
are ``ops/inspect.py``'s; the watcher is ``ops/watcher.py``'s."""

from __future__ import annotations

from typing import Any

from verlctl.backends.base import Change, LaunchRequest


class DockerBackend:
    name = "local"

    def __init__(self, console: Any = None) -> None:
        if console is None:
            from rich.console import Console

            console = Console()
        self.console = console
        self.launcher: Any = None

    def prepare(self, resolved: Any, options: Any, confirm: Any = None) -> LaunchRequest:
        """Plan the launch of ``resolved`` (``ops.launch.LaunchOptions``); nothing is changed."""
        from verlctl.ops.launch import Launcher

        self.launcher = Launcher(resolved, options, self.console, confirm=confirm)
        return self.launcher.prepare()

    def submit(self, request: LaunchRequest) -> Any:
        """Walk the request's stages (after the confirmation); the run record, or None (dry run, declined)."""
        if self.launcher is None or self.launcher.request is not request:
            raise ValueError("submit() takes the request this backend prepared")  # a programming error
        return self.launcher.run()

    def abort(self, what: str) -> str:
        """The failed-launch clean-up of this backend's launch (ops/interrupts.py: launch_guard)."""
        if self.launcher is None:
            return f"interrupted ({what}) before anything was started: nothing changed"
        return str(self.launcher.abort(what))

    # ----------------------------------------------------------------------------- a recorded run

    def status(self, handle: Any) -> dict[str, Any]:
        from verlctl.ops.inspect import run_status

        return run_status(handle.run_id)

    def logs(self, handle: Any, follow: bool, lines: int) -> int:
        from verlctl.ops.inspect import show_logs

        return show_logs(handle.run_id, follow, lines)

    def stop(self, handle: Any, remove_container: bool, grace: float, console: Any) -> dict[str, Any]:
        from verlctl.ops.inspect import stop_run

        return stop_run(handle.run_id, remove_container, grace, console)

    def watch(self, handle: Any, resolved: Any, say: Any, notify_cmd: str | None) -> int:
        """``verlctl watch`` on a local run: the Watcher (ops/watcher.py) follows the attempt and relaunches
        through this backend."""
        from verlctl.ops.watcher import Watcher

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

        from verlctl.ops.launch import Launcher, LaunchOptions

        resolved = handle.load_spec(recovery={"features.enable": list(change.enable)} if change.enable else None)
        launcher = Launcher(resolved, LaunchOptions(yes=True), Console(stderr=True, quiet=True))
        return resolved, launcher, launcher.prepare_relaunch(ex, handle)

    def relaunch(self, handle: Any, change: Change, prepared: Any = None, ex: Any = None) -> Any:
        """Start the next attempt (the relaunch stages: no image, no container create); the resolved spec."""
        if ex is None:
            ex = executor_for(handle)
        resolved, launcher, the_next = prepared if prepared is not None else self.prepare_relaunch(handle, ex, change)
        launcher.relaunch(ex, handle, reason=change.reason, resumed_from=change.resumed_from, prepared=the_next)
        return resolved

    def workers(self, handle: Any) -> list[tuple[Any, Any, dict[str, Any]]]:
        """(node handle, executor or None, container info) for every worker node of a multi-node run."""
        from verlctl.ops.inspect import worker_targets

        return worker_targets(handle)

    def remove_key_files(self, handle: Any, ex: Any, say: Any) -> list[str]:
        from verlctl.ops.inspect import remove_key_files

        return remove_key_files(handle, ex, say)


def executor_for(record: Any) -> Any:
    from verlctl.errors import VerlctlError
    from verlctl.ops.inspect import target

    if record.runtime == "host":
        from verlctl.runtime.executor import HostExecutor

        return HostExecutor(record.python_env)
    ex, info = target(record)
    if ex is None:
        raise VerlctlError(f"the run's container is {info.get('state')}: nothing to watch")
    return ex
