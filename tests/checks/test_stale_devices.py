"""The stale-process check (Ascend EJ0001: devices still held by an earlier run) says what holds a device and
whose it is; verlctl offers `verlctl stop` only for runs it recorded. `npu-smi` is a test double printing a
real capture whose pids are replaced by processes this test starts (and kills)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

from test_check_cli import bare_env, run_check_cli, verl_checkout, write_spec

from conftest import FIXTURES, fixture_text

CAPTURE = "info-910B1-8card-23.0.rc2.b090-training-busy-elided.txt"
RUN = "20260101-000000-stale-abcd"


def test_busy_devices_name_their_holder_and_offer_stop_only_for_recorded_runs(tmp_path: Path) -> None:
    state = tmp_path / "state"
    marker = f"{RUN}/1/0123456789abcdef"
    ours = subprocess.Popen(["sleep", "600"], start_new_session=True, env={**os.environ, "VERLCTL_ATTEMPT": marker})
    foreign = subprocess.Popen(["sleep", "601"], start_new_session=True)
    try:
        d = state / "runs" / RUN
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps({
            "run_id": RUN, "created_at": time.time(), "runtime": "host", "workdir": str(tmp_path),
            "scripts_dir": str(tmp_path / "s"), "run_log": str(tmp_path / "run.log"), "train_log": "",
            "checkpoints": "", "experiment": "exp", "verl_version": "0.7.0", "pgid": ours.pid,
            "attempts": [{"number": 1, "pgid": ours.pid, "started_at": time.time(), "marker": marker}],
        }))
        bindir = tmp_path / "npu-bin"
        bindir.mkdir()
        text = fixture_text(FIXTURES / "npu-smi" / CAPTURE)
        text = text.replace("2441447", f"{ours.pid:<7}").replace("2441454", f"{foreign.pid:<7}")
        (bindir / "capture.txt").write_text(text)
        tool = bindir / "npu-smi"
        tool.write_text(f"#!/bin/sh\nexec {shutil.which('cat')} '{bindir / 'capture.txt'}'\n")
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
        spec = write_spec(tmp_path, container={"runtime": "host", "workdir": verl_checkout(tmp_path)},
                          cluster={"devices": [0, 7]})
        res = run_check_cli("-c", str(spec), "--json",
                            env=bare_env(tmp_path, PATH=str(bindir), VERLCTL_STATE_DIR=str(state)))
        assert res.code == 2, res.out + res.err  # busy devices are an error unless cluster.allow_busy_devices
        busy = {f["message"].split(" is in use")[0]: f["hint"] for f in res.json()["findings"]
                if f["code"] == "device_busy" and f["severity"] == "error"}
        assert f"pid {ours.pid} (sleep 600) is verlctl run {RUN}: `verlctl stop {RUN}` frees the device" in busy["NPU 0"]
        hint7 = busy["NPU 7"]
        assert f"pid {foreign.pid} (sleep 601) is not a verlctl run: owner uid {os.getuid()}" in hint7
        assert "verlctl stop" not in hint7 and "verlctl does not stop it" in hint7
        # nothing was signalled by the check
        assert ours.poll() is None and foreign.poll() is None
    finally:
        for p in (ours, foreign):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
