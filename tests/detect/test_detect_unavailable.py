"""No docker engine, no npu-smi, no nvidia-smi: every probe returns a typed "unavailable" result.

PATH points at an empty directory and DOCKER_HOST at a unix socket nobody listens on (a real socket
file, bound and closed), in this process and in a `verlctl detect` subprocess.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from detect_helpers import run_verlctl
from verlctl.detect.common import Unavailable, UnavailableCode
from verlctl.detect.docker_probe import probe_docker
from verlctl.detect.gpu import probe_gpu
from verlctl.detect.machine import DetectOptions, MachineState, detect_machine
from verlctl.detect.npu import probe_npu


@pytest.fixture
def bare_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    sock_path = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock_path))
    s.close()  # the file stays; connecting to it is refused
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock_path}")
    return {"PATH": str(empty), "DOCKER_HOST": f"unix://{sock_path}", "HOME": str(tmp_path)}


def test_no_npu_smi(bare_machine: dict[str, str]) -> None:
    r = probe_npu(timeout=5)
    assert isinstance(r, Unavailable)
    assert (r.probe, r.code, r.reason) == ("npu", UnavailableCode.NOT_FOUND, "npu-smi not found")


def test_no_nvidia_smi(bare_machine: dict[str, str]) -> None:
    r = probe_gpu(timeout=5)
    assert isinstance(r, Unavailable)
    assert (r.probe, r.code, r.reason) == ("gpu", UnavailableCode.NOT_FOUND, "nvidia-smi not found")


def test_dead_docker_socket(bare_machine: dict[str, str]) -> None:
    r = probe_docker(timeout=5)
    assert isinstance(r, Unavailable)
    assert r.code is UnavailableCode.NO_ENGINE
    # said in words (issue 24, F7), not the SDK's exception tuple
    assert r.reason.startswith("nothing answers at unix://") and "start dockerd" in r.reason, r.reason
    assert "ConnectionRefusedError" not in r.reason and "Connection aborted" not in r.reason


def test_docker_host_pointing_at_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-such.sock'}")
    r = probe_docker(timeout=5)
    assert isinstance(r, Unavailable) and r.code is UnavailableCode.NO_ENGINE


def test_detect_machine_on_a_bare_machine(bare_machine: dict[str, str], tmp_path: Path) -> None:
    state = detect_machine(
        DetectOptions(probes=["npu", "gpu", "docker", "network", "system"], scan_roots=[str(tmp_path)])
    )
    assert isinstance(state.npu, Unavailable) and state.npu.code is UnavailableCode.NOT_FOUND
    assert isinstance(state.gpu, Unavailable) and state.gpu.code is UnavailableCode.NOT_FOUND
    assert isinstance(state.docker, Unavailable) and state.docker.code is UnavailableCode.NO_ENGINE
    assert not isinstance(state.network, Unavailable) and not isinstance(state.system, Unavailable)
    assert state.accelerator is None
    assert {u.probe for u in state.unavailable()} >= {"npu", "gpu", "docker"}
    again = MachineState.model_validate_json(state.model_dump_json())
    assert again == state


def test_verlctl_detect_still_runs_and_says_what_is_missing(
    bare_machine: dict[str, str], tmp_path: Path
) -> None:
    env = {**os.environ, **bare_machine}
    run = run_verlctl("detect", "--scan-root", str(tmp_path), "--budget", "2", env=env, timeout=120)
    assert run.code == 0, run.err
    assert "Traceback" not in run.err
    assert "npu: npu-smi not found" in run.out
    assert "gpu: nvidia-smi not found" in run.out
    assert "docker: nothing answers at" in " ".join(run.out.split()) and "start dockerd" in run.out, run.out
    js = run_verlctl("detect", "--json", "--scan-root", str(tmp_path), "--budget", "2", env=env, timeout=120)
    assert js.code == 0, js.err
    state = MachineState.model_validate_json(js.out)
    assert isinstance(state.npu, Unavailable) and state.npu.reason == "npu-smi not found"
    assert isinstance(state.docker, Unavailable)


def test_verlctl_detect_npu_with_no_npu_smi_json(bare_machine: dict[str, str]) -> None:
    run = run_verlctl("detect", "npu", "--json", env={**os.environ, **bare_machine})
    assert run.code == 0
    assert Unavailable.model_validate_json(run.out).code is UnavailableCode.NOT_FOUND
