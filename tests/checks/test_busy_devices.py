"""Busy devices (U21, O5): a device another process holds is an error unless the spec opts in
(``cluster.allow_busy_devices``), the memory fit counts its FREE memory, not its total, and the devices of this
user's own live verlctl runs (read through the record gate) count as busy too, named by run.

`npu-smi` is a TEST DOUBLE printing a real capture (tests/fixtures/npu-smi) through the real parser; the live run
is a real process carrying its attempt marker, recorded in a real state dir."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from test_check_cli import bare_env, npu_smi_double, run_check_cli, verl_checkout, write_spec
from verlctl.checks.memory import hbm_free_from_machine, hbm_from_machine
from verlctl.detect.machine import MachineState
from verlctl.detect.npu import parse_npu_smi_info
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS, FIXTURES, fixture_text

BUSY = "info-910B1-8card-23.0.rc2.b090-training-busy-elided.txt"  # NPU 0 and 7 at 64293 / 65536 MB
IDLE = "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt"
RUN = "20260101-000000-other-abcd"


def npu(capture: str) -> MachineState:
    return MachineState(npu=parse_npu_smi_info(fixture_text(FIXTURES / "npu-smi" / capture)))


def spec_of(**flags: Any) -> Any:
    return load_spec(None, flags={**BASE_PATHS, **flags}, environ={}).spec


def check(tmp_path: Path, capture: str, state: Path | None = None, **cluster: Any) -> tuple[int, list[dict], dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    bindir = npu_smi_double(tmp_path, capture)
    spec = write_spec(tmp_path, container={"runtime": "host", "workdir": verl_checkout(tmp_path)},
                      cluster=cluster, train={"tensor_parallel": 2, "pipeline_parallel": 1})
    extra = {"VERLCTL_STATE_DIR": str(state)} if state is not None else {}
    res = run_check_cli("-c", str(spec), "--json", env=bare_env(tmp_path, PATH=str(bindir), **extra))
    doc = res.json()
    return res.code, doc["findings"], doc


# ------------------------------------------------------------------------------------------------ U21


def test_the_memory_fit_counts_the_free_memory_of_a_busy_device_only() -> None:
    spec = spec_of(**{"cluster.devices": [0, 7]})
    assert hbm_from_machine(spec, npu(BUSY)) == 64.0  # the total, as before
    free, note = hbm_free_from_machine(spec, npu(BUSY))
    assert free == pytest.approx((65536 - 64293) / 1024)
    assert note is not None and "busy NPU 0, 7" in note and "1.2 of 64.0 GiB free" in note
    # idle devices (or busy ones not chosen): the total counts, as verl's gpu_memory_utilization does
    assert hbm_free_from_machine(spec_of(**{"cluster.devices": [1, 2]}), npu(BUSY)) == (None, None)
    assert hbm_free_from_machine(spec, npu(IDLE)) == (None, None)


def test_busy_npus_fail_check_and_the_fit_uses_their_free_memory(tmp_path: Path) -> None:
    code, found, doc = check(tmp_path, BUSY, devices=[0, 7])
    assert code == 2
    busy = [f for f in found if f["code"] == "device_busy"]
    assert [(f["severity"], f["field"]) for f in busy] == [("error", "cluster.devices")] * 2
    assert "cluster.allow_busy_devices: true" in busy[0]["hint"]
    fit = [f for f in found if f["code"] == "memory_device_fit"]
    assert fit and all("free memory of the busy NPU 0, 7" in f["message"] for f in fit)
    assert doc["memory"]["device"]["rollout"]["have_gib"] <= 1.2


def test_allow_busy_devices_makes_them_a_warning_but_keeps_the_free_memory_fit(tmp_path: Path) -> None:
    code, found, _doc = check(tmp_path, BUSY, devices=[0, 7], allow_busy_devices=True)
    busy = [f for f in found if f["code"] == "device_busy"]
    assert [f["severity"] for f in busy] == ["warning"] * 2
    assert code == 2 and [f for f in found if f["code"] == "memory_device_fit"]  # 1.2 GiB free fits nothing


def test_idle_devices_pass(tmp_path: Path) -> None:
    code, found, _doc = check(tmp_path, IDLE, devices=[0, 7])
    assert not [f for f in found if f["code"] in ("device_busy", "memory_device_fit")], found
    assert code == 0


# ------------------------------------------------------------------------------------------------ O5


@pytest.fixture
def live_run(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A recorded run of this user's on NPU 0 and 1 whose process group is alive (its attempt marker in the
    environment, as start_verl.sh's processes carry it)."""
    state = tmp_path / "state"
    # an attempt's own marker, as verlctl draws one: the tests of this file run at once on xdist's workers, and a
    # shared marker made one test's live process the other's "live run" after it had killed its own
    marker = f"{RUN}/1/{secrets.token_hex(8)}"
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True, env={**os.environ, "VERLCTL_ATTEMPT": marker})
    try:
        d = state / "runs" / RUN
        d.mkdir(parents=True, mode=0o700)
        (d / "run.json").write_text(json.dumps({
            "run_id": RUN, "created_at": time.time(), "runtime": "host", "workdir": str(tmp_path),
            "scripts_dir": str(tmp_path / "s"), "run_log": str(tmp_path / "run.log"), "train_log": "",
            "checkpoints": str(tmp_path / "other-ckpt"), "experiment": "other", "verl_version": "0.7.0",
            "pgid": proc.pid, "attempts": [{"number": 1, "pgid": proc.pid, "started_at": time.time(),
                                            "marker": marker}],
        }))
        other = {"paths": {"model": "/mnt/models/x", "train_files": ["/mnt/d/t.parquet"],
                           "val_files": ["/mnt/d/v.parquet"]},
                 "container": {"runtime": "host"}, "cluster": {"devices": [0, 1]}}
        (d / "spec.resolved.yaml").write_text(yaml.safe_dump(other))
        for f in d.iterdir():
            f.chmod(0o600)
        yield state, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_devices_of_an_own_live_run_are_busy_even_when_npu_smi_shows_nothing(
        tmp_path: Path, live_run: tuple[Path, subprocess.Popen[bytes]]) -> None:
    state, _proc = live_run
    code, found, _doc = check(tmp_path, IDLE, state, devices=[1, 2])
    busy = [f for f in found if f["code"] == "device_busy"]
    assert code == 2 and len(busy) == 1, found
    assert busy[0]["severity"] == "error" and busy[0]["message"].startswith("NPU 1 is used by your live verlctl run "
                                                                             f"{RUN}")
    assert f"`verlctl stop {RUN}`" in busy[0]["hint"]
    # devices it does not use are free; opting in makes it a warning
    assert not [f for f in check(tmp_path / "b", IDLE, state, devices=[2, 3])[1] if f["code"] == "device_busy"]
    shared = [f for f in check(tmp_path / "c", IDLE, state, devices=[1, 2], allow_busy_devices=True)[1]
              if f["code"] == "device_busy"]
    assert [f["severity"] for f in shared] == ["warning"]


def test_an_ended_run_or_an_untrusted_record_holds_no_device(
        tmp_path: Path, live_run: tuple[Path, subprocess.Popen[bytes]]) -> None:
    state, proc = live_run
    run_dir = state / "runs" / RUN
    run_dir.chmod(0o777)  # a record where every user can write: the gate refuses it, nothing is read from it
    try:
        found = check(tmp_path / "a", IDLE, state, devices=[1])[1]
        assert not [f for f in found if f["code"] in ("device_busy", "device_run_unknown")], found
    finally:
        run_dir.chmod(0o700)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    found = check(tmp_path / "b", IDLE, state, devices=[1])[1]
    assert not [f for f in found if f["code"] in ("device_busy", "device_run_unknown")], found


def test_plan_names_the_live_run_rule_as_not_checked() -> None:
    from verlctl.checks.verdict import decide, spec_facts

    resolved = load_spec(None, flags={**BASE_PATHS}, environ={})
    verdict = decide(resolved, spec_facts(resolved, look=False))
    assert any(n.rule == "run_devices" for n in verdict.not_checked)
    assert any(n.rule == "devices" for n in verdict.not_checked)


def test_only_the_device_a_process_holds_is_busy() -> None:
    """The real busy capture with NPU 7's process row taken out: NPU 0 stays busy, NPU 7 is free (the rule maps
    each process to its own device, not to its neighbours)."""
    from verlctl.checks.devices import busy_devices, check_devices

    text = "\n".join(line for line in fixture_text(FIXTURES / "npu-smi" / BUSY).splitlines() if "2441454" not in line)
    machine = MachineState(npu=parse_npu_smi_info(text))
    assert set(busy_devices(spec_of(**{"cluster.devices": [0, 7]}), machine)) == {0}
    assert [f.code for f in check_devices(spec_of(**{"cluster.devices": [7]}), machine)] == []
    assert [f.code for f in check_devices(spec_of(**{"cluster.devices": [0]}), machine)] == ["device_busy"]
    free, note = hbm_free_from_machine(spec_of(**{"cluster.devices": [7]}), machine)
    assert (free, note) == (None, None)
