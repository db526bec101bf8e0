"""checks/devices.py: what a mutation sample showed unguarded (docs/development/mutation.md): the hint of a missing
nvidia-smi, and how many holders a busy device's hint names."""

from __future__ import annotations

from pathlib import Path

from verlctl.checks.devices import check_devices
from verlctl.detect.gpu import GpuDevice, GpuInfo, parse_nvidia_smi, probe_gpu
from verlctl.detect.machine import MachineState
from verlctl.detect.npu import probe_npu
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS, FIXTURES, fixture_text


def test_a_missing_device_tool_names_the_driver_to_install(tmp_path: Path) -> None:
    gpu = load_spec(None, flags={**BASE_PATHS, "device": "gpu", "cluster.devices": [0]}, environ={}).spec
    (f,) = check_devices(gpu, MachineState(gpu=probe_gpu(binary=str(tmp_path / "no-nvidia-smi"))))
    assert f.code == "nvidia_smi_missing"
    assert f.hint == "install the NVIDIA driver (nvidia-smi) and put it on PATH, or set device: npu"
    npu = load_spec(None, flags={**BASE_PATHS, "device": "npu", "cluster.devices": [0]}, environ={}).spec
    (f,) = check_devices(npu, MachineState(npu=probe_npu(binary=str(tmp_path / "no-npu-smi"))))
    assert f.code == "npu_smi_missing" and f.hint is not None
    assert f.hint.startswith("install the Ascend driver (npu-smi is in /usr/local/sbin or /usr/local/bin)")


def test_a_busy_device_hint_names_the_holders_of_its_first_four_processes() -> None:
    # a real process table (8 DDP processes on GPU 3); the GPU rows of that capture are not in it
    table = parse_nvidia_smi(fixture_text(FIXTURES / "nvidia-smi" / "processes-rows-only-many-pids-dle-issue776.txt"))
    assert isinstance(table, GpuInfo)
    state = MachineState(gpu=table.model_copy(update={"devices": [GpuDevice(id=3)]}))
    pids = [p.pid for p in table.processes if p.device == 3]
    assert len(pids) == 8
    holders = {pid: f"pid {pid} is verlctl run r{pid}" for pid in pids}
    spec = load_spec(None, flags={**BASE_PATHS, "device": "gpu", "cluster.devices": [3]}, environ={}).spec
    (f,) = check_devices(spec, state, holders)
    assert f.code == "device_busy" and f.message.startswith("GPU 3 is in use by 8 process(es): ")
    assert f.hint is not None and f.hint.endswith("; ".join(holders[p] for p in pids[:4]))
    assert holders[pids[4]] not in f.hint
