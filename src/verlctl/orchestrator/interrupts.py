"""The one way a launch ends other than by its success or its own error: ``launch_guard``.

Ctrl-C (SIGINT), ``kill`` (SIGTERM), the terminal or ssh session closing (SIGHUP), Ctrl-\\ (SIGQUIT) and any
exception that is not the launch's own one-line error (a bug, a UnicodeEncodeError, a MemoryError …) all run
the backend's failed-launch clean-up (``abort``): what was started is stopped (the gate closed, the attempt's
process group, the Slurm jobs, the key file, the container this launch created) and the run is marked stopped.
Then one line says so (exit 130 for a signal, 1 for an exception). A launch past its gate therefore either
returns (its attempt recorded, and the watcher started when asked) or is stopped.

Guards nest (the Launcher's own around its stages, the flow's around the launch and the watcher's start): the
outermost installs the signal handlers and restores them; the innermost that sees the interrupt cleans up, and
the one-line error it raises passes the outer ones untouched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

from verlctl.errors import EXIT_FAILURE, ExitCode, VerlctlError

#: The signals that end a launch the user did not see through.
LAUNCH_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

_installed = 0  # guards active on the main thread (the outermost installs the handlers)


class LaunchInterrupted(BaseException):
    """A signal of LAUNCH_SIGNALS during a launch."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def what(self) -> str:
        return "Ctrl-C" if self.signum == signal.SIGINT else signal.Signals(self.signum).name


def _on_signal(signum: int, _frame: object) -> None:
    if signum == signal.SIGHUP:
        _detach_terminal()
    raise LaunchInterrupted(signum)


def _detach_terminal() -> None:
    """The terminal is gone (SIGHUP): writes to it would fail (EIO) and cut the clean-up short; they go to
    /dev/null instead (the run's events say what was done). A pipe or a file keeps its output."""
    import stat

    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (0, 1, 2):
            with contextlib.suppress(OSError):
                # a terminal: a character device (isatty() is False on one already hung up)
                if stat.S_ISCHR(os.fstat(fd).st_mode):
                    os.dup2(null, fd)
        os.close(null)


def _ignore_signals() -> None:
    """The clean-up is not cut short by a second signal (the outermost guard restores the handlers)."""
    if threading.current_thread() is threading.main_thread():
        for sig in LAUNCH_SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, signal.SIG_IGN)


def unexpected(exc: BaseException) -> str:
    """An exception that is not the launch's own, in a few words (never the repr of a large value)."""
    text = str(exc).replace("\n", " ")
    return f"{type(exc).__name__}: {text[:160]}{'…' if len(text) > 160 else ''}"


@contextlib.contextmanager
def launch_guard(abort: Callable[[str], str]) -> Iterator[None]:
    """Run a launch's body; on a signal of LAUNCH_SIGNALS or an exception other than a VerlctlError, call
    ``abort(what)`` (the failed-launch clean-up: what it did, one line) and raise the one-line VerlctlError.
    A VerlctlError passes untouched: the launch's own failures are cleaned up where they are raised."""
    global _installed
    main = threading.current_thread() is threading.main_thread()
    previous: dict[signal.Signals, object] = {}
    if main and _installed == 0:
        for sig in LAUNCH_SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                # SIGINT keeps Python's own handler (KeyboardInterrupt, which prompts and followers expect)
                previous[sig] = signal.getsignal(sig) if sig == signal.SIGINT else signal.signal(sig, _on_signal)
    if main:
        _installed += 1
    try:
        yield
    except (KeyboardInterrupt, LaunchInterrupted) as exc:
        what = exc.what if isinstance(exc, LaunchInterrupted) else "Ctrl-C"
        _ignore_signals()
        raise VerlctlError(abort(what), code=ExitCode.INTERRUPTED) from None
    except VerlctlError:
        raise
    except Exception as exc:  # noqa: BLE001 - any other way the launch ends: the same clean-up, one line
        _ignore_signals()
        message = abort(f"an unexpected error, {unexpected(exc)}")
        raise VerlctlError(message, code=EXIT_FAILURE,
                           hint="this is a bug in verlctl: please report it with `verlctl bundle`") from None
    finally:
        if main:
            _installed -= 1
            if _installed == 0:
                for sig, handler in previous.items():
                    with contextlib.suppress(ValueError, OSError, TypeError):
                        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)  # type: ignore[arg-type]
