"""MachineState: built by hand from fixture files (as the wizard's tests will), JSON round trip, and a
live `detect_machine` run on this machine with scan roots in a tmp dir."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from detect_helpers import capture
from detect_modeldirs import make_model
from verlctl.detect.common import Unavailable, UnavailableCode, unavailable
from verlctl.detect.datasets import DatasetInfo
from verlctl.detect.docker_probe import DockerInfo
from verlctl.detect.gpu import GpuInfo, parse_nvidia_smi
from verlctl.detect.machine import DetectOptions, MachineState, SystemInfo, detect_machine
from verlctl.detect.network import NetworkInfo, host_ips, parse_ip_addr
from verlctl.detect.npu import NpuInfo, parse_npu_smi_info
from verlctl.detect.scan import ScanResult, scan
from verlctl.detect.system import CannInfo, DiskSpace


def _verl_parquet(path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table(
            {
                "data_source": ["gsm8k"],
                "prompt": [[{"role": "user", "content": "1+1?"}]],
                "reward_model": [{"ground_truth": "2"}],
            }
        ),
        path,
    )


def test_state_from_fixture_files_round_trips(tmp_path: Path) -> None:
    make_model(tmp_path / "models" / "Qwen-tiny", shards=1)
    interfaces, warnings = parse_ip_addr(
        capture("network", "ip-addr-multi-nic-bond-partial-sglang-issue3514.txt")
    )
    state = MachineState(
        hostname="node1",
        npu=parse_npu_smi_info(capture("npu-smi", "info-a3-Ascend910-25.2.1-partial-ucm-issue748.txt")),
        gpu=unavailable("gpu", UnavailableCode.NOT_FOUND, "nvidia-smi not found"),
        docker=DockerInfo(server_version="20.10.24", api_version="1.41"),
        scan=scan(roots=[str(tmp_path)], budget_s=5),
        network=NetworkInfo(interfaces=interfaces, host_ips=host_ips(interfaces), warnings=warnings),
        system=SystemInfo(
            cpu_count=192,
            shm=DiskSpace(
                path="/dev/shm", checked_path="/dev/shm", total_bytes=2**40, free_bytes=2**40, used_bytes=0
            ),
            cann=CannInfo(present=True, ascend_root="/usr/local/Ascend", toolkit_version="8.3.RC1"),
            disks=[
                unavailable("disk", UnavailableCode.TIMEOUT, "statvfs(/mnt/nfs) did not return within 5 s")
            ],
        ),
    )
    text = state.model_dump_json()
    again = MachineState.model_validate_json(text)
    assert again == state
    assert isinstance(again.npu, NpuInfo) and again.npu.chip_count == 3
    assert isinstance(again.gpu, Unavailable) and again.gpu.code is UnavailableCode.NOT_FOUND
    assert isinstance(again.scan, ScanResult) and [m.name for m in again.models] == ["Qwen-tiny"]
    assert isinstance(again.system, SystemInfo) and isinstance(again.system.disks[0], Unavailable)
    assert again.accelerator == "npu"
    assert [u.probe for u in again.unavailable()] == ["gpu", "disk"]


def test_gpu_state_and_empty_state() -> None:
    gpu = parse_nvidia_smi(
        capture("nvidia-smi", "default-565-8gpu-h100-complete-noproc-thamada-nvidia-smi.txt")
    )
    state = MachineState(gpu=gpu, npu=unavailable("npu", UnavailableCode.NOT_FOUND, "npu-smi not found"))
    assert state.accelerator == "gpu"
    assert MachineState.model_validate_json(state.model_dump_json()) == state
    empty = MachineState()
    assert empty.accelerator is None and empty.models == [] and empty.unavailable() == []
    assert MachineState.model_validate_json(empty.model_dump_json()) == empty


def test_union_fields_reject_mixed_up_payloads() -> None:
    bad = '{"npu": {"status": "unavailable", "probe": "npu"}}'  # no code, no reason
    with pytest.raises(ValueError):
        MachineState.model_validate_json(bad)


def test_detect_machine_live(tmp_path: Path) -> None:
    make_model(tmp_path / "public" / "models" / "Qwen-tiny", shards=2)
    _verl_parquet(tmp_path / "project" / "data" / "train.parquet")
    (tmp_path / "project" / "data" / "bad.parquet").write_text("not parquet")
    t = time.monotonic()
    state = detect_machine(
        DetectOptions(
            scan_roots=[str(tmp_path / "public"), str(tmp_path / "project"), str(tmp_path / "absent")],
            budget_s=5,
            disk_paths=[str(tmp_path / "ckpts" / "run1")],
            ascend_root=str(tmp_path / "no-ascend"),
        )
    )
    assert time.monotonic() - t < 30
    assert set(state.durations_s) == {"npu", "gpu", "docker", "network", "system", "scan"}
    assert isinstance(state.npu, NpuInfo | Unavailable) and isinstance(state.gpu, GpuInfo | Unavailable)
    assert isinstance(state.docker, DockerInfo | Unavailable)
    assert isinstance(state.network, NetworkInfo) and state.network.interfaces
    assert isinstance(state.scan, ScanResult) and not state.scan.timed_out
    assert [m.name for m in state.models] == ["Qwen-tiny"] and state.models[0].is_model
    assert state.scan.missing_roots == [str(tmp_path / "absent")]
    checked = {Path(d.path).name: d for d in state.datasets if isinstance(d, DatasetInfo)}
    assert checked["train.parquet"].verl_ok and not checked["bad.parquet"].verl_ok
    assert isinstance(state.system, SystemInfo)
    disk = state.system.disks[0]
    assert isinstance(disk, DiskSpace) and disk.checked_path == str(tmp_path)
    assert isinstance(state.system.cann, CannInfo) and not state.system.cann.present
    assert MachineState.model_validate_json(state.model_dump_json()) == state


def test_only_asked_probes_run(tmp_path: Path) -> None:
    state = detect_machine(DetectOptions(probes=["network"], scan_roots=[str(tmp_path)]))
    assert isinstance(state.network, NetworkInfo)
    assert (state.npu, state.gpu, state.docker, state.scan, state.system) == (None, None, None, None, None)
    assert list(state.durations_s) == ["network"]
