"""Memory fit: the calibration table (documented working configurations must fit, reported OOMs must not),
the advice, the OOM ladder's use of the estimate, and plan/check output.

Model shapes are the models' Hugging Face ``config.json`` values (huggingface.co/Qwen/<name>/blob/main/
config.json); Qwen2.5-7B and Qwen3-8B are also in verl's own tests (verl-project/verl@7de1304f
tests/utils/test_flops_counter.py). Each is written as a real config.json in a temp model directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from verlctl.checks.findings import Severity
from verlctl.checks.memory import GIB, ModelShape, estimate, layout_for, rung_can_help
from verlctl.monitor.recovery import History, decide
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS, run_cli

QWEN = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "tie_word_embeddings": False}
CONFIGS: dict[str, dict[str, Any]] = {
    # Qwen/Qwen2-7B-Instruct (same shape as Qwen2.5-7B-Instruct in verl's test_flops_counter.py)
    "Qwen2-7B-Instruct": {**QWEN, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                          "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064},
    # Qwen/Qwen2.5-Coder-14B-Instruct
    "Qwen2.5-Coder-14B-Instruct": {**QWEN, "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 48,
                                   "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064},
    # Qwen/Qwen2.5-32B
    "Qwen2.5-32B": {**QWEN, "hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 64,
                    "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064},
    # Qwen/Qwen2-72B-Instruct
    "Qwen2-72B-Instruct": {**QWEN, "hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
                           "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 152064},
    # Qwen/Qwen3-8B (verl's test_flops_counter.py)
    "Qwen3-8B": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "tie_word_embeddings": False,
                 "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "head_dim": 128,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 151936},
    # Qwen/Qwen3-14B
    "Qwen3-14B": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "tie_word_embeddings": False,
                  "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 40, "head_dim": 128,
                  "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 151936},
}
#: nvidia-smi's memory.total: H800/H100 81559 MiB, H20 97871 MiB.
H800_GIB = 81559 / 1024
H20_GIB = 97871 / 1024

_TUNING = "verl-project/verl@2239fd0 examples/tuning/"  # linked from docs/perf/device_tuning.rst (MIN rows)
_FSDP_GRPO = {
    "algorithm": "grpo", "strategy": "fsdp", "device": "gpu", "train.lr": 1e-6,
    "features.enable": ["offload"], "features.disable": ["dynamic_batch"],
}


@dataclass
class Row:
    name: str
    source: str
    model: str
    flags: dict[str, Any]
    fits: bool
    failing: set[str] = field(default_factory=set)  # for rows that must not fit: the phases (or "kv") that fail


CALIBRATION: list[Row] = [
    Row("Qwen2-7B GRPO, 2 x H800, FSDP (device_tuning MIN)", _TUNING + "7b/qwen2-7b_grpo_2_h800_fsdp_vllm.sh",
        "Qwen2-7B-Instruct",
        {**_FSDP_GRPO, "cluster.devices": [0, 1], "cluster.device_memory_gib": H800_GIB,
         "train.train_batch_size": 1024, "train.mini_batch_size": 256, "train.micro_batch_size_per_device": 16,
         "train.max_prompt_length": 1024, "train.max_response_length": 1024, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 2, "train.rollout_memory_utilization": 0.6}, True),
    Row("Qwen2.5-14B GRPO, 4 x H800, FSDP (device_tuning MIN)", _TUNING + "14b/qwen2_14b_grpo_4_h800_fsdp_vllm.sh",
        "Qwen2.5-Coder-14B-Instruct",
        {**_FSDP_GRPO, "cluster.devices": [0, 1, 2, 3], "cluster.device_memory_gib": H800_GIB,
         "train.train_batch_size": 1024, "train.mini_batch_size": 256, "train.micro_batch_size_per_device": 16,
         "train.max_prompt_length": 1024, "train.max_response_length": 1024, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 4, "train.rollout_memory_utilization": 0.5}, True),
    Row("Qwen2.5-32B GRPO, 8 x H20, Megatron TP8 (device_tuning MIN)",
        _TUNING + "32b/qwen2_32B_grpo_8_h20_megatron_vllm.sh", "Qwen2.5-32B",
        {"algorithm": "grpo", "strategy": "megatron", "device": "gpu", "features.enable": ["offload"],
         "features.disable": ["dynamic_batch"], "cluster.devices": list(range(8)),
         "cluster.device_memory_gib": H20_GIB, "train.tensor_parallel": 8, "train.pipeline_parallel": 1,
         "train.train_batch_size": 512, "train.mini_batch_size": 256, "train.micro_batch_size_per_device": 1,
         "train.max_prompt_length": 2048, "train.max_response_length": 6144, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 8, "train.rollout_memory_utilization": 0.6}, True),
    Row("Qwen2-72B GRPO, 32 x H20, FSDP (device_tuning MIN)", _TUNING + "70b/qwen2-70b_grpo_32_h20_fsdp_vllm.sh",
        "Qwen2-72B-Instruct",
        {**_FSDP_GRPO, "features.disable": [], "cluster.nodes": ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"],
         "cluster.devices": list(range(8)), "cluster.device_memory_gib": H20_GIB,
         "train.train_batch_size": 1024, "train.mini_batch_size": 256,
         "train.max_prompt_length": 512, "train.max_response_length": 512, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 16, "train.rollout_memory_utilization": 0.6,
         "extra_overrides": ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24000"]}, True),
    Row("Qwen3-14B rollout on a 32 GB vNPU at utilization 0.9: 'Available KV cache memory: -0.87 GiB'",
        "vllm-project/vllm-ascend#9372 (weights 27.54 GB, max-model-len 4096, TP 1)", "Qwen3-14B",
        {"algorithm": "dapo", "mode": "one_step_off_policy", "strategy": "fsdp", "device": "npu",
         "cluster.devices": [0, 1], "train.trainer_devices": 1, "train.rollout_devices": 1,
         "cluster.device_memory_gib": 32.0, "train.rollout_tensor_parallel": 1,
         "train.rollout_memory_utilization": 0.9, "train.max_prompt_length": 1024,
         "train.max_response_length": 3072}, False, {"kv"}),
    Row("counterfactual: the 7B MIN row without offload (rollout beside resident fp32 params + Adam state)",
        "verl-project/verl#284: colocated rollout fits only with actor param/optimizer offload at these budgets",
        "Qwen2-7B-Instruct",
        {**_FSDP_GRPO, "features.enable": [], "cluster.devices": [0, 1], "cluster.device_memory_gib": H800_GIB,
         "train.train_batch_size": 1024, "train.mini_batch_size": 256, "train.micro_batch_size_per_device": 16,
         "train.max_prompt_length": 1024, "train.max_response_length": 1024, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 2, "train.rollout_memory_utilization": 0.6}, False, {"rollout"}),
]


def model_dir(tmp_path: Path, name: str) -> str:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(CONFIGS[name]))
    return str(d)


def plan_for(tmp_path: Path, model: str, flags: dict[str, Any]):
    resolved = load_spec(None, flags={**BASE_PATHS, "paths.model": model_dir(tmp_path, model), **flags}, environ={})
    return make_plan(resolved)


@pytest.mark.parametrize("row", CALIBRATION, ids=[r.name for r in CALIBRATION])
def test_calibration(tmp_path: Path, row: Row) -> None:
    p = plan_for(tmp_path, row.model, row.flags)
    est = p.memory
    assert est is not None, row.source
    assert est.fits is row.fits, (row.source, est.to_json())
    memory_errors = {f.code for f in p.findings if f.code.startswith("memory_") and f.severity is Severity.ERROR}
    if row.fits:
        assert not memory_errors
        # The margin the README states: working configurations land at 70-95 % of device memory.
        worst = max(ph.need / ph.have for ph in est.device.values() if ph.have)
        assert 0.6 < worst <= 0.95, (row.name, worst)
    else:
        failing = set(est.failing) | ({"kv"} if est.kv_short else set())
        assert row.failing <= failing, failing
        assert memory_errors
        assert est.advice  # something concrete to do


def test_shape_from_config_counts_qwen3_8b() -> None:
    s = ModelShape.from_config(CONFIGS["Qwen3-8B"])
    assert s is not None
    assert 8.1e9 < s.params < 8.3e9  # Qwen3-8B: 8.19 B parameters
    assert s.largest_tensor_numel == 151936 * 4096
    assert s.head_dim == 128 and s.kv_heads == 8


def test_memory_features_lower_the_phase_they_target(tmp_path: Path) -> None:
    base = {"algorithm": "dapo", "strategy": "megatron", "device": "npu", "cluster.device_memory_gib": 64.0,
            "train.tensor_parallel": 2, "train.pipeline_parallel": 1}
    plain = plan_for(tmp_path, "Qwen3-8B", base).memory
    offload = plan_for(tmp_path, "Qwen3-8B", {**base, "features.enable": ["offload"]}).memory
    recompute = plan_for(tmp_path, "Qwen3-8B", {**base, "features.enable": ["recompute"]}).memory
    swap = plan_for(tmp_path, "Qwen3-8B", {**base, "features.enable": ["swap_optimizer"]}).memory
    assert plain and offload and recompute and swap
    need = {k: {ph: e.device[ph].need for ph in e.device} for k, e in
            (("plain", plain), ("offload", offload), ("recompute", recompute), ("swap", swap))}
    assert need["offload"]["rollout"] < need["plain"]["rollout"]  # training states leave the device
    assert need["recompute"]["update"] < need["plain"]["update"]  # activations recomputed
    assert need["recompute"]["rollout"] == need["plain"]["rollout"]  # recompute does nothing for the rollout
    assert need["swap"]["update"] < need["plain"]["update"]  # optimizer state on the host
    assert offload.host.need > plain.host.need  # ... which costs host RAM


def test_advice_is_ordered_and_verified(tmp_path: Path) -> None:
    # Qwen3-8B, Megatron TP4 PP1 on 8 x 64 GB NPUs, 32k responses: the update does not fit.
    flags = {"algorithm": "dapo", "strategy": "megatron", "device": "npu", "cluster.device_memory_gib": 64.0,
             "train.tensor_parallel": 4, "train.pipeline_parallel": 1, "train.max_response_length": 32768}
    p = plan_for(tmp_path, "Qwen3-8B", flags)
    assert p.memory is not None and p.memory.fits is False and p.memory.failing == ["update"]
    first = p.memory.advice[0]
    assert first.startswith("enable the `recompute` feature with features.recompute_method=uniform"), first
    # Following the advice makes it fit; recompute of only the first 8 layers (the default) does not.
    fixed = plan_for(tmp_path, "Qwen3-8B", {**flags, "features.enable": ["recompute"],
                                            "features.recompute_method": "uniform"})
    assert fixed.memory is not None and fixed.memory.fits is True, fixed.memory.to_json()
    block = plan_for(tmp_path, "Qwen3-8B", {**flags, "features.enable": ["recompute"]})
    assert block.memory is not None and block.memory.fits is False
    err = next(f for f in p.findings if f.code == "memory_device_fit")
    assert err.severity is Severity.ERROR and err.hint and "recompute" in err.hint
    # Longer still: features alone do not do it, a bigger layout is proposed after them.
    worse = plan_for(tmp_path, "Qwen3-14B", {**flags, "train.tensor_parallel": 2, "train.max_response_length": 16384})
    assert worse.memory is not None and worse.memory.fits is False
    assert any("tensor_parallel" in a or "nodes" in a or "together" in a for a in worse.memory.advice)


def test_host_ram_short_never_advises_offload(tmp_path: Path) -> None:
    flags = {"algorithm": "dapo", "strategy": "megatron", "device": "npu", "cluster.device_memory_gib": 64.0,
             "cluster.host_memory_gib": 64.0, "train.tensor_parallel": 1, "train.pipeline_parallel": 1}
    p = plan_for(tmp_path, "Qwen3-14B", flags)
    est = p.memory
    assert est is not None and est.fits is False
    assert not any("`offload`" in a and a.startswith("enable") for a in est.advice), est.advice


def test_rung_can_help_and_the_ladder_skips_useless_rungs(tmp_path: Path) -> None:
    flags = {"algorithm": "dapo", "strategy": "megatron", "device": "npu", "cluster.device_memory_gib": 64.0,
             "cluster.host_memory_gib": 32.0, "paths.model": model_dir(tmp_path, "Qwen3-14B"),
             "train.tensor_parallel": 2, "train.pipeline_parallel": 1}
    spec = load_spec(None, flags={**BASE_PATHS, **flags}, environ={}).spec
    on = {"remove_padding": True, "dynamic_batch": True}
    assert rung_can_help(spec, on, "offload") is False  # 32 GiB of host RAM cannot take the offloaded states
    assert rung_can_help(spec, on, "recompute") is True
    d = decide("device_oom", spec, on, History())
    assert d.restart and d.add_feature == "recompute"
    assert any("offload" in n and "host RAM" in n for n in d.notices), d.notices
    # FSDP already checkpoints activations (gradient_checkpointing is on by default): recompute cannot help.
    fsdp = load_spec(None, flags={**BASE_PATHS, **flags, "strategy": "fsdp", "cluster.host_memory_gib": 2048.0},
                     environ={}).spec
    fsdp_on = {**on, "gradient_checkpointing": True}
    assert rung_can_help(fsdp, fsdp_on, "recompute") is False
    assert rung_can_help(fsdp, fsdp_on, "offload") is True


def test_ladder_unchanged_without_a_model_config() -> None:
    spec = load_spec(None, flags=dict(BASE_PATHS), environ={}).spec  # /mnt/models/Qwen3-8B does not exist here
    assert rung_can_help(spec, {}, "offload") is True
    assert decide("device_oom", spec, {}, History()).add_feature == "offload"


def test_layout_reads_the_users_extra_overrides(tmp_path: Path) -> None:
    spec = load_spec(None, flags={**BASE_PATHS, "extra_overrides": [
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40000"]}, environ={}).spec
    lay = layout_for(spec, {"dynamic_batch": True})
    assert lay.memory_utilization == 0.3 and lay.tokens_per_micro_batch == 40000


def test_plan_json_carries_the_memory_table(tmp_path: Path) -> None:
    args = ["--set", f"paths.model={model_dir(tmp_path, 'Qwen3-8B')}", "--set", "paths.train_files=/mnt/data/t.parquet",
            "--set", "paths.val_files=/mnt/data/v.parquet", "--set", "cluster.device_memory_gib=64"]
    res = run_cli("plan", "--json", *args)
    assert res.code == 0, res.err
    mem = json.loads(res.out)["memory"]
    assert set(mem) >= {"device", "host", "fits", "advice"}
    assert set(mem["device"]) == {"rollout", "update"}  # DAPO: no reference model
    for phase in mem["device"].values():
        assert phase["have_gib"] == 64.0 and phase["need_gib"] > 0
    assert mem["host"]["need_gib"] > 0 and mem["fits"] is True and mem["advice"] == []
    text = run_cli("plan", *args).out
    assert "memory fit" in text and "update (per device)" in text and "host RAM (per node)" in text
    # Too small a device: plan refuses (exit 2) and says what to change.
    small = run_cli("plan", "--json", *args[:-1], "cluster.device_memory_gib=32")
    assert small.code == 2
    doc = json.loads(small.out)
    assert doc["memory"]["fits"] is False and doc["memory"]["advice"]
    assert any(f["code"] == "memory_device_fit" for f in doc["findings"])


def test_estimate_is_bounded_for_hostile_sizes() -> None:
    s = ModelShape.from_config({**CONFIGS["Qwen3-8B"], "num_hidden_layers": 10**6})
    assert s is not None
    est = estimate(layout_for(load_spec(None, flags=dict(BASE_PATHS), environ={}).spec, {}), s, 64.0, 512.0)
    assert est.fits is False and est.device["update"].need > 1000 * GIB


def test_device_memory_from_real_captures() -> None:
    from verlctl.checks.memory import hbm_from_machine
    from verlctl.detect.gpu import parse_nvidia_smi
    from verlctl.detect.machine import MachineState
    from verlctl.detect.npu import parse_npu_smi_info

    from conftest import FIXTURES, fixture_text

    npu = parse_npu_smi_info(fixture_text(FIXTURES / "npu-smi" / "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt"))
    spec = load_spec(None, flags={**BASE_PATHS, "device": "npu", "cluster.devices": [0, 7]}, environ={}).spec
    assert hbm_from_machine(spec, MachineState(npu=npu)) == 32.0  # 910B4: 32768 MB of HBM
    absent = load_spec(None, flags={**BASE_PATHS, "device": "npu", "cluster.devices": [12]}, environ={}).spec
    assert hbm_from_machine(absent, MachineState(npu=npu)) is None  # only the chosen devices count
    gpu = parse_nvidia_smi(fixture_text(FIXTURES / "nvidia-smi" / "default-580-1gpu-h200-idle-verlctl-device-check.txt"))
    gspec = load_spec(None, flags={**BASE_PATHS, "device": "gpu", "cluster.devices": [0]}, environ={}).spec
    assert hbm_from_machine(gspec, MachineState(gpu=gpu)) == pytest.approx(143771 / 1024)


def test_moe_activations_use_the_routed_width() -> None:
    # Qwen/Qwen3-30B-A3B-Base (verl-project/verl@7de1304f tests/utils/test_flops_counter.py)
    moe = ModelShape.from_config({
        "model_type": "qwen3_moe", "hidden_size": 2048, "vocab_size": 151936, "num_hidden_layers": 48,
        "num_key_value_heads": 4, "num_attention_heads": 32, "head_dim": 128, "moe_intermediate_size": 768,
        "num_experts_per_tok": 8, "num_experts": 128, "intermediate_size": 6144})
    assert moe is not None and moe.intermediate == 8 * 768 and moe.experts == 128
    assert 29e9 < moe.params < 32e9  # 30.5 B total parameters: every expert is stored
