"""bench/cpu_by_process.py (a benchmark tool, run by hand): it reads the kernel's acct v3 records as the kernel
writes them, classifies a process by its own command line or its ancestors', and, on a kernel with process
accounting, reports the CPU time of a process that ended while its command ran."""

from __future__ import annotations

import importlib.util
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from docker_support import REPO_ROOT

TOOL = REPO_ROOT / "bench" / "cpu_by_process.py"
_spec = importlib.util.spec_from_file_location("cpu_by_process", TOOL)
assert _spec and _spec.loader
cbp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cbp)


def record(pid: int, ppid: int, utime: int, stime: int, comm: bytes, version: bytes = b"\x03") -> bytes:
    """One struct acct_v3 (linux/acct.h), times as comp_t."""
    return struct.pack("<ccHIIIIIIf8H16s", b"\x00", version, 0, 0, 0, 0, pid, ppid, 0, 1.0, utime, stime,
                       0, 0, 0, 0, 0, 0, comm)


def test_comp_t_is_a_13_bit_mantissa_with_a_base_8_exponent() -> None:
    assert cbp.comp_t(100) == 100
    assert cbp.comp_t(0x1FFF) == 8191
    assert cbp.comp_t((1 << 13) | 5) == 40  # exponent 1: x8
    assert cbp.comp_t((2 << 13) | 3) == 192  # exponent 2: x64


def test_records_are_read_with_their_cpu_seconds_and_other_versions_skipped(tmp_path: Path) -> None:
    f = tmp_path / "pacct"
    f.write_bytes(record(10, 1, 150, 50, b"python3") + record(11, 10, 0, 0, b"x", version=b"\x02")
                  + record(12, 10, (1 << 13) | 25, 0, b"ray::WorkerDict"))
    assert cbp.read_acct(f) == [(10, 1, 2.0, "python3"), (12, 10, 2.0, "ray::WorkerDict")]


def test_a_process_is_classified_by_its_command_line_then_by_its_ancestors() -> None:
    s = cbp.Sampler()
    s.cmd = {1: "/usr/bin/containerd-shim-runc-v2 -id abc", 2: "/opt/verl-venv/bin/python -m ray start",
             3: "/usr/bin/python3 -m verlctl status --json", 4: "bash -c 'python -m verlctl status'",
             5: "python -u -c import sys;exec(eval(sys.stdin.readline()))", 6: "sshd: root", 7: "sleep 1"}
    s.parent = {2: 1, 6: 1, 8: 2, 7: 0}
    assert cbp.kind(2, "python", s) == "real verl"
    assert cbp.kind(8, "python", s) == "real verl"  # no command line seen: its parent's
    assert cbp.kind(9, "ray::TaskRunner", s) == "real verl"  # by its name
    assert cbp.kind(3, "python3", s) == "verlctl CLI"
    assert cbp.kind(4, "bash", s) == "other"  # a shell that mentions verlctl is not a CLI process
    assert cbp.kind(5, "python", s) == "pytest workers"
    assert cbp.kind(6, "sshd", s) == "containers"
    assert cbp.kind(7, "sleep", s) == "other"


def _accounting_works() -> bool:
    import ctypes

    if os.geteuid() != 0:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.acct(None) == 0  # turning accounting off: allowed where the kernel has it and we are root


@pytest.mark.skipif(not _accounting_works(), reason="needs root and a kernel with BSD process accounting")
def test_a_busy_process_that_ended_is_reported_with_its_cpu_time(tmp_path: Path) -> None:
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
    proc = subprocess.run([sys.executable, str(TOOL), "--top", "50", "--keep", str(tmp_path / "kept"), "--",
                           sys.executable, "-c", busy], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the report's line of that process: its CPU-seconds, then its command line on one line
    line = next(ln for ln in proc.stdout.splitlines() if "while time.process_time()" in ln and ln.startswith(" "))
    assert float(line.split()[0]) >= 0.5, proc.stdout
    assert (tmp_path / "kept" / "pacct").stat().st_size % 64 == 0
