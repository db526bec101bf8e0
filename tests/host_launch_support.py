"""A `verlctl launch --yes` on the host runtime whose training entry is a TEST DOUBLE: its environment and settings.

verl's training step cannot run on the host here, so ``python3 -m <entry>`` runs the given trainer script
(``tests/doubles/bin/ray`` stands in for Ray, a real npu-smi capture for the device tool); the launch, the rendered
scripts, ``start_verl.sh`` and the watcher are real. Used by the watcher's relaunch tests.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import clean_env
from launch_support import free_port, write_run_files
from scripts_harness import DOUBLES


def host_launch(tmp_path: Path, trainer: str, **extra_env: str) -> tuple[dict[str, str], dict[str, Any]]:
    """(the CLI's environment, the launch's ``--set`` settings) for a host-runtime GRPO run of 4 steps, a
    checkpoint every step, in ``tmp_path``: ``trainer`` is written to ``tmp_path/trainer.py``; the trainer reads
    ``VERLCTL_TEST_STATE`` (``tmp_path/attempts``, made here), ``VERLCTL_TEST_GATE`` (``tmp_path/go``) and
    ``extra_env``."""
    from test_check_cli import npu_smi_double

    flags = write_run_files(tmp_path)
    tools = npu_smi_double(tmp_path, "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # python3 is the real interpreter, except for verl's training entry (the trainer double).
    (bindir / "python3").write_text('#!/usr/bin/env bash\ncase "${1:-}" in -m) exec "$VERLCTL_TEST_PYTHON" '
                                    '"$VERLCTL_TEST_TRAINER" "$@";; esac\nexec "$VERLCTL_TEST_PYTHON" "$@"\n')
    (bindir / "python3").chmod(0o755)
    (tmp_path / "trainer.py").write_text(trainer, encoding="utf-8")
    (tmp_path / "attempts").mkdir()
    site = tmp_path / "site"  # the host's Ray, for readiness: its distribution's metadata
    (site / "ray-2.49.0.dist-info").mkdir(parents=True)
    (site / "ray-2.49.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: ray\nVersion: 2.49.0\n")
    verl_tree = Path(__file__).resolve().parents[1] / ".cache" / "verl" / "0.7.0"  # for the compose preflight
    if not (verl_tree / "verl").is_dir():
        pytest.skip("the verl 0.7.0 wheel is not under .cache/verl")
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), COLUMNS="300",
                    PATH=f"{bindir}:{DOUBLES}:{tools}:{os.environ['PATH']}", PYTHONPATH=f"{site}:{verl_tree}",
                    VERLCTL_TEST_PYTHON=sys.executable, VERLCTL_TEST_TRAINER=str(tmp_path / "trainer.py"),
                    VERLCTL_TEST_STATE=str(tmp_path / "attempts"), VERLCTL_TEST_GATE=str(tmp_path / "go"),
                    **extra_env)
    settings = {**flags, "container.runtime": "host", "algorithm": "grpo", "strategy": "fsdp",
                "paths.checkpoints": str(tmp_path / "ckpt"), "paths.logs": str(tmp_path / "logs"),
                "container.workdir": str(tmp_path / "verl"), "cluster.devices": "[0,1,2,3]", "train.steps": 4,
                "train.save_freq": 1, "recovery.memory_release_timeout_s": 30,
                # Free ports: the Ray double listens on cluster.ray_port while the run lives, and a launch or
                # check of another test running beside this one refuses a default port 6766 it finds bound.
                "cluster.ray_port": free_port(), "cluster.dashboard_port": free_port()}
    return env, settings


def launch_and_watch(env: dict[str, str], settings: dict[str, Any]) -> tuple[str, Any]:
    """``verlctl launch --yes`` with ``settings``, then ``verlctl watch`` of its run started in the background:
    (the run id, the watch's Popen, its output piped as text)."""
    import re
    import subprocess

    from conftest import run_cli

    res = run_cli("launch", "--yes", *[a for k, v in settings.items() for a in ("--set", f"{k}={v}")], env=env,
                  timeout=300)
    assert res.code == 0, res.out + res.err
    run_id = re.search(r"training is running: run (\S+)", res.out)
    assert run_id, res.out
    proc = subprocess.Popen([sys.executable, "-m", "verlctl", "watch", run_id.group(1)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return run_id.group(1), proc


def launch_watch_and_scan(env: dict[str, str], settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                          timeout: float = 90) -> tuple[str, Any, Any]:
    """:func:`launch_and_watch`, then wait until the watch has started and one liveness scan has seen the training
    running (its step waits on the test's gate): :func:`scanned_after` (the scan runs every 2.5 s).
    (the run id, the watch's Popen, the run's record); ``VERLCTL_STATE_DIR`` is the launch's for the test."""
    import time

    from verlctl.runtime.records import load_run

    run_id, proc = launch_and_watch(env, settings)
    monkeypatch.setenv("VERLCTL_STATE_DIR", env["VERLCTL_STATE_DIR"])
    record = load_run(run_id)

    def until(what: str, cond: Any) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if proc.poll() is not None:
                raise AssertionError(f"the watcher ended before {what}: {proc.communicate()[0]}")
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)

    until("the watch to start", lambda: any(e["event"] == "watch_started" for e in record.events()))
    running_at = time.time()
    until("a scan of the training", scanned_after(record, running_at, 2.5))
    return run_id, proc, record


def scanned_after(record: Any, t: float, every_s: float) -> Callable[[], bool]:
    """A condition for a wait: true once the watcher of ``record`` has *finished* a liveness scan that started
    after ``t`` (so a process that runs from before ``t`` is in the scan's verdict).

    The watcher writes its status (``updated_at``, at most once a second) at the top of a turn of its loop and
    scans after the write, in the same turn, unless it scanned less than ``every_s`` before. So the turn of the
    first write later than ``t + every_s`` either scans after writing, or scanned less than ``every_s`` earlier,
    after ``t``; the next write comes after that scan ended. One write later than ``t + every_s`` is not enough:
    the test could act between the write and the scan that follows it in the same turn."""
    writes: set[float] = set()

    def cond() -> bool:
        at = float((record.read_status() or {}).get("updated_at", 0))
        if at > t + every_s:
            writes.add(at)
        return len(writes) >= 2

    return cond


def holds_record_lock(pid: int) -> bool:
    """Process ``pid`` has the run record's lock file open: it holds the lock or waits on it (record_lock)."""
    import contextlib

    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}").endswith("/record.lock"):
                    return True
    return False
