"""The launch guard itself (orchestrator/interrupts.py), with real signals sent to this test's own process: each signal
of LAUNCH_SIGNALS and any exception run the clean-up once, a second signal never cuts the clean-up short,
guards nest (the innermost cleans up, the outer lets its one-line error pass), and the handlers the launch
found are back once the outermost guard ends."""

from __future__ import annotations

import os
import signal
import time

import pytest

from verlctl.errors import ExitCode, VerlctlError
from verlctl.orchestrator.interrupts import LAUNCH_SIGNALS, launch_guard


def _wait_signal() -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.01)
    raise AssertionError("the signal was not delivered as an interrupt")


@pytest.mark.parametrize("sig", [s.name for s in LAUNCH_SIGNALS])
def test_each_signal_runs_the_clean_up_once_and_a_second_one_does_not_cut_it_short(sig: str) -> None:
    calls: list[str] = []

    def abort(what: str) -> str:
        calls.append(what)
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal during the clean-up (Ctrl-C twice, kill twice)
        time.sleep(0.2)
        calls.append("finished")
        return f"interrupted ({what}): cleaned"

    before = {s: signal.getsignal(s) for s in LAUNCH_SIGNALS}
    with pytest.raises(VerlctlError) as err, launch_guard(abort):
        os.kill(os.getpid(), getattr(signal, sig))
        _wait_signal()
    assert err.value.code == ExitCode.INTERRUPTED
    assert calls == ["Ctrl-C" if sig == "SIGINT" else sig, "finished"], calls
    assert {s: signal.getsignal(s) for s in LAUNCH_SIGNALS} == before  # the handlers the launch found


def test_guards_nest_and_the_outermost_restores_the_handlers() -> None:
    outer: list[str] = []
    inner: list[str] = []
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(VerlctlError) as err, launch_guard(lambda w: outer.append(w) or "outer"):
        assert signal.getsignal(signal.SIGTERM) is not before  # the outermost installed it
        with launch_guard(lambda w: inner.append(w) or "inner"):
            os.kill(os.getpid(), signal.SIGTERM)
            _wait_signal()
    assert err.value.message == "inner" and inner == ["SIGTERM"] and outer == []
    assert signal.getsignal(signal.SIGTERM) is before


def test_any_other_exception_runs_the_clean_up_and_is_one_line() -> None:
    calls: list[str] = []
    with pytest.raises(VerlctlError) as err, launch_guard(lambda w: calls.append(w) or f"failed ({w})"):
        "x\udcff".encode()
    assert err.value.code != ExitCode.INTERRUPTED and "UnicodeEncodeError" in err.value.message
    assert len(calls) == 1 and calls[0].startswith("an unexpected error, UnicodeEncodeError")


def test_a_verlctl_error_passes_untouched() -> None:
    calls: list[str] = []
    with pytest.raises(VerlctlError, match="its own line") as err, launch_guard(lambda w: calls.append(w) or ""):
        raise VerlctlError("its own line")
    assert calls == [] and err.value.code != ExitCode.INTERRUPTED


#: A launch whose terminal is gone: its clean-up prints (as the Launcher's does) and then marks it done.
HUNG_UP = r'''
import os, sys, time
from verlctl.orchestrator.interrupts import launch_guard
from verlctl.errors import VerlctlError
def abort(what):
    for i in range(200):
        print(f"cleaning up {i}", flush=True)
    open(sys.argv[1], "w").write(what)
    return "done"
try:
    with launch_guard(abort):
        open(sys.argv[2], "w").write("ready")
        time.sleep(30)
except VerlctlError as exc:
    sys.exit(exc.code)
'''


def test_after_a_hang_up_the_clean_up_is_not_cut_short_by_the_dead_terminal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    done, ready = tmp_path / "done", tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", HUNG_UP, str(done), str(ready)], stdin=slave, stdout=slave,
                            stderr=slave, start_new_session=True)
    os.close(slave)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the child did not start"
            time.sleep(0.05)
        os.close(master)  # the terminal goes away (its writes now fail with EIO) ...
        proc.send_signal(signal.SIGHUP)  # ... and the session is hung up (this test's own child)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert done.read_text() == "SIGHUP"  # every line of the clean-up ran
    assert code == ExitCode.INTERRUPTED, code
