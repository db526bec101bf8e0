"""The weight-sync bucket in the one verdict: ``plan`` (no npu-smi, no image) warns and names the facts it lacks;
``check`` (npu-smi's driver and chip on this host, the CANN toolkit read inside the image) decides as verl's
``is_ipc_supported`` does. The seeds' example spec plans on verl 0.9.1 with the model's real shape."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from verlctl.checks.facts import CheckFacts
from verlctl.checks.verdict import decide
from verlctl.detect.check_probes import ImageVersions
from verlctl.detect.machine import MachineState
from verlctl.detect.npu import NpuDevice, NpuInfo
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS, ROOT, clean_env, run_cli

# Qwen/Qwen3-8B's config.json sizes (as in tests/checks/test_field_checks.py)
QWEN3_8B = {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
            "max_position_embeddings": 40960}
BUCKET_CODES = {"weight_bucket_too_small", "weight_bucket_ipc_unknown"}


def _model(tmp: Path) -> Path:
    d = tmp / "Qwen3-8B"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(QWEN3_8B), encoding="utf-8")
    return d


@pytest.mark.parametrize(("strategy", "warned"), [("megatron", False), ("fsdp", True)])
def test_plan_of_the_example_spec_on_091_succeeds_with_the_image_unknown(tmp_path: Path, strategy: str,
                                                                         warned: bool) -> None:
    spec = tmp_path / "run.yaml"
    shutil.copy(ROOT / "examples" / "run.yaml", spec)
    res = run_cli("plan", "-c", str(spec), "--verl-version", "0.9.1", "--set", f"paths.model={_model(tmp_path)}",
                  "--set", f"strategy={strategy}", "--json", env=clean_env(), timeout=180)
    assert res.code == 0, res.out + res.err
    doc = json.loads(res.out)
    found = {f["code"]: f for f in doc["findings"]}
    assert not [f for f in doc["findings"] if f["severity"] == "error"], doc["findings"]
    assert "weight_bucket_too_small" not in found
    assert ("weight_bucket_ipc_unknown" in found) is warned  # Megatron syncs bf16: its 1187 MB embedding fits
    if warned:
        assert found["weight_bucket_ipc_unknown"]["severity"] == "warning"


def _npu(driver: str, name: str = "910B4") -> NpuInfo:
    """npu-smi's answer as parsed (a test double of the device tool's output: no NPU here)."""
    return NpuInfo(driver_version=driver, tool_version=driver, devices=[NpuDevice(id=i, name=name) for i in range(8)])


@pytest.mark.parametrize(("driver", "cann", "name", "code"), [
    ("25.0.rc1.1", "8.3.RC1", "910B4", "weight_bucket_too_small"),  # the driver is below 25.3.rc1: no IPC
    ("25.3.rc1.2", "8.2.RC1", "910B4", "weight_bucket_too_small"),  # the CANN in the image is below 8.3.rc1
    ("25.3.rc1.2", "8.3.RC1", "910B4", None),  # IPC: verl sends the embedding directly
    ("25.0.rc1.1", "8.2.RC1", "Ascend950PR", None),  # an A5 chip always has IPC
    ("25.3.rc1.2", None, "910B4", "weight_bucket_ipc_unknown"),  # no CANN read in the image
])
def test_check_decides_the_bucket_from_npu_smi_and_the_image(tmp_path: Path, driver: str, cann: str | None,
                                                             name: str, code: str | None) -> None:
    from verlctl.detect.models import inspect_model

    resolved = load_spec(None, flags={**BASE_PATHS, "verl_version": "0.9.1", "strategy": "fsdp",
                                      "paths.model": str(_model(tmp_path))}, environ={})
    image = ImageVersions(where="container c", stack={"cann": cann})
    facts = CheckFacts(machine=MachineState(npu=_npu(driver, name)), model=inspect_model(resolved.spec.paths.model),
                       image_versions=image)
    got = {f.code for f in decide(resolved, facts).findings} & BUCKET_CODES
    assert got == ({code} if code else set())
