"""The live NPU/GPU probes' subprocess plumbing (PATH lookup, arguments, exit codes, timeouts, the
query-then-table fallback), exercised with stand-in `npu-smi` / `nvidia-smi` executables.

The CI machine has neither tool, so the stand-ins are small shell scripts that print REAL captures
from tests/fixtures (the parsers themselves are tested on those captures in test_npu_parser.py and
test_gpu_parser.py; the nvidia-smi query captures come from running the real probe on an H200 host).
Every call goes through a real fork/exec with a real timeout.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest

from detect_helpers import FIXTURES, capture
from verlctl.detect.common import Unavailable, UnavailableCode
from verlctl.detect.gpu import GpuInfo, probe_gpu
from verlctl.detect.npu import NpuInfo, probe_npu


def install(bindir: Path, name: str, script: str) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    p = bindir / name
    p.write_text("#!/bin/sh\n" + script)
    p.chmod(0o755)


@pytest.fixture
def bindir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}:/usr/bin:/bin")
    return d


def _cat_capture(tmp_path: Path, category: str, name: str) -> str:
    out = tmp_path / f"{name}.out"
    out.write_text(capture(category, name))
    return shlex.quote(str(out))


def test_npu_probe_runs_npu_smi_info_and_board(tmp_path: Path, bindir: Path) -> None:
    table = _cat_capture(tmp_path, "npu-smi", "info-910-proB-8card-24.1.0.txt")
    board = _cat_capture(tmp_path, "npu-smi", "info-t-board-i0-910A-23.0.5-TAB-indented-mindcluster.txt")
    log = tmp_path / "calls.log"
    install(
        bindir,
        "npu-smi",
        f'echo "$*" >> {shlex.quote(str(log))}\n'
        f'if [ "$*" = "info" ]; then cat {table}; exit 0; fi\n'
        f'if [ "$1 $2 $3 $4" = "info -t board -i" ]; then sed "s/NPU ID                         : 0/NPU ID                         : $5/" {board}; exit 0; fi\n'
        "echo 'unknown option' >&2; exit 2\n",
    )
    info = probe_npu(timeout=10, board=True)
    assert isinstance(info, NpuInfo)
    assert info.npu_ids == list(range(8)) and info.driver_version == "24.1.0"
    assert sorted(b.npu_id for b in info.boards) == list(range(8))  # type: ignore[type-var]
    assert {b.firmware_version for b in info.boards} == {"7.1.0.7.220"}
    calls = sorted(log.read_text().splitlines())
    assert calls == sorted(["info"] + [f"info -t board -i {i}" for i in range(8)])


def test_npu_probe_failure_and_timeout(bindir: Path) -> None:
    install(bindir, "npu-smi", "echo 'dcmi module initialize failed. ret is -8005' >&2; exit 251\n")
    r = probe_npu(timeout=5)
    assert isinstance(r, Unavailable) and r.code is UnavailableCode.FAILED
    assert "exited with 251" in r.reason and "-8005" in r.reason
    install(bindir, "npu-smi", "sleep 30\n")
    t = time.monotonic()
    r = probe_npu(timeout=0.5)
    assert time.monotonic() - t < 5
    assert isinstance(r, Unavailable) and r.code is UnavailableCode.TIMEOUT


def test_gpu_probe_uses_the_csv_queries(tmp_path: Path, bindir: Path) -> None:
    # the stand-in prints the real H200 captures of exactly these two queries
    gpus = _cat_capture(
        tmp_path, "nvidia-smi", "query-gpu-noheader-nounits-h200-580-verlctl-device-check.txt"
    )
    apps = _cat_capture(
        tmp_path, "nvidia-smi", "query-compute-apps-noheader-nounits-h200-580-verlctl-device-check.txt"
    )
    log = tmp_path / "calls.log"
    install(
        bindir,
        "nvidia-smi",
        f'echo "$*" >> {shlex.quote(str(log))}\n'
        'case "$1" in\n'
        f"  --query-gpu=*) cat {gpus} ;;\n"
        f"  --query-compute-apps=*) cat {apps} ;;\n"
        "  *) exit 3 ;;\n"
        "esac\n",
    )
    info = probe_gpu(timeout=10)
    assert isinstance(info, GpuInfo) and info.source == "csv"
    assert [
        (d.id, d.name, d.memory_used_mb, d.memory_total_mb, d.util, d.temp_c, d.power_w) for d in info.devices
    ] == [(0, "NVIDIA H200", 0, 143771, 0, 32, 80.58)]
    assert [(p.device, p.pid, p.name, p.memory_mb) for p in info.processes] == [(0, 431, "python3", 2566)]
    assert info.driver_version == "580.159.04" and info.warnings == []
    calls = log.read_text().splitlines()
    assert calls == [
        "--query-gpu=index,name,uuid,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw,"
        "driver_version --format=csv,noheader,nounits",
        "--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits",
    ]


def test_gpu_probe_falls_back_to_the_table(tmp_path: Path, bindir: Path) -> None:
    table = _cat_capture(
        tmp_path, "nvidia-smi", "default-555-4gpu-a100-complete-noproc-thamada-nvidia-smi.txt"
    )
    install(
        bindir,
        "nvidia-smi",
        f'if [ $# -eq 0 ]; then cat {table}; exit 0; fi\necho "Invalid combination" >&2; exit 2\n',
    )
    info = probe_gpu(timeout=10)
    assert isinstance(info, GpuInfo) and info.source == "table"
    assert info.gpu_ids == [0, 1, 2, 3]
    assert info.warnings[0] == "nvidia-smi --query-gpu failed; the default table was parsed instead"


def test_gpu_probe_reports_a_driver_that_does_not_load(bindir: Path) -> None:
    install(
        bindir,
        "nvidia-smi",
        "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9\n",
    )
    r = probe_gpu(timeout=5)
    assert isinstance(r, Unavailable) and r.code is UnavailableCode.FAILED
    assert "could not communicate with the NVIDIA driver" in r.reason


def test_fixture_dirs_exist_in_the_repo() -> None:
    for d in ("npu-smi", "nvidia-smi", "network", "ray-status"):
        assert (FIXTURES / d).is_dir() and os.listdir(FIXTURES / d)
