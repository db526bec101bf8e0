"""Every way a launch ends other than its success runs the one failed-launch clean-up (orchestrator/interrupts.py,
launch_guard): SIGINT, SIGTERM, SIGHUP (the terminal or ssh session closing), SIGQUIT and any exception that is
not verlctl's own one-line error. Once the attempt started, it is stopped (its process group ends), the key
file is removed, the run is marked stopped with a `launch_interrupted` event, and one line says so.

The launch is real, on the host runtime (tests/host_launch_support.py): `ray`, `npu-smi` and the training step
are TEST DOUBLES; the trainer double waits (bounded) for the test's gate before its first step, so the launch
sits in its "verify" stage when the signal comes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from host_launch_support import host_launch

#: TEST DOUBLE for verl's training step: the first line, then (until the test's gate, 120 s at most) nothing.
TRAINER = r'''
import os, time
print("Total training steps: 4", flush=True)
gate = os.environ["VERLCTL_TEST_GATE"]
for _ in range(1200):
    if os.path.exists(gate):
        break
    time.sleep(0.1)
print("step:1 - actor/pg_loss:0.1 - training/global_step:1", flush=True)
time.sleep(120)
'''

CLEANED_WITHIN_S = 90.0


def _argv(settings: dict[str, Any], *extra: str) -> list[str]:
    return ["launch", "--yes", *extra, *[a for k, v in settings.items() for a in ("--set", f"{k}={v}")]]


def _run_dir(env: dict[str, str]) -> Path:
    runs = list((Path(env["VERLCTL_STATE_DIR"]) / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def _group_ended(pgid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def _kill_left(record: dict[str, Any]) -> None:
    for a in record.get("attempts", []):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(a["pgid"], signal.SIGKILL)  # a group the launch under test started and left behind


def _assert_cleaned(env: dict[str, str], what: str) -> dict[str, Any]:
    d = _run_dir(env)
    record = json.loads((d / "run.json").read_text())
    try:
        assert record["attempts"], "the attempt was not recorded"
        pgid = record["attempts"][-1]["pgid"]
        assert _group_ended(pgid), f"process group {pgid} of the attempt is still running"
        assert record["stopped"] is True, record
        events = [json.loads(ln) for ln in (d / "events.jsonl").read_text().splitlines()]
        interrupted = [e for e in events if e["event"] == "launch_interrupted"]
        assert interrupted and what in interrupted[-1]["signal"], events
        assert not (Path(record["scripts_dir"]) / "verlctl.env").exists(), "the key file was left"
    finally:
        _kill_left(record)
    return record


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGTERM", "SIGQUIT", "SIGINT"])
def test_a_signal_during_verify_stops_what_the_launch_started(tmp_path: Path, sig: str) -> None:
    env, settings = host_launch(tmp_path, TRAINER)
    proc = subprocess.Popen([sys.executable, "-m", "verlctl", *_argv(settings)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if "verify that" in line:
                break
        assert any("verify that" in ln for ln in seen), "".join(seen) + proc.stderr.read()  # type: ignore[union-attr]
        time.sleep(0.5)
        os.kill(proc.pid, getattr(signal, sig))  # the launch this test started
        out, err = proc.communicate(timeout=CLEANED_WITHIN_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        (tmp_path / "go").touch()
    assert proc.returncode == 130, (proc.returncode, "".join(seen), err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    what = "Ctrl-C" if sig == "SIGINT" else sig
    assert lines and f"interrupted ({what}) during launch of run" in lines[0], err
    assert "Traceback" not in err + out
    _assert_cleaned(env, what)


#: Runs verlctl's CLI with one fault injected (argv[1]): an exception that is not verlctl's own, raised where
#: the real launch would go on (after the attempt started, or when the watcher of `--watch` starts).
FAULT = r'''
import sys
from verlctl.cli import main
from verlctl.orchestrator import launch, watcher_process
where = sys.argv[1]
def boom(*args, **kwargs):
    raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")
if where == "verify":
    launch.Launcher.verify_retrying_ray = boom
else:
    watcher_process.spawn_watcher = boom
sys.exit(main(sys.argv[2:]))
'''


@pytest.mark.parametrize("where", ["verify", "watcher"])
def test_an_unexpected_exception_after_the_start_stops_the_attempt(tmp_path: Path, where: str) -> None:
    env, settings = host_launch(tmp_path, TRAINER)
    extra = ("--watch",) if where == "watcher" else ()
    if where == "watcher":
        (tmp_path / "go").touch()  # the launch verifies, then its watcher fails to start
    try:
        res = subprocess.run([sys.executable, "-c", FAULT, where, *_argv(settings, *extra)], env=env,
                             capture_output=True, text=True, timeout=240)
    finally:
        (tmp_path / "go").touch()
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("hint:")]
    assert len(lines) == 1 and "UnicodeEncodeError" in lines[0] and "during launch of run" in lines[0], res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    _assert_cleaned(env, "UnicodeEncodeError")
