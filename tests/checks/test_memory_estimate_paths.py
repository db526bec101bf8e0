"""checks/memory.py: the paths a mutation sample showed unguarded (docs/development/mutation.md): the MoE layer
pattern and top-k default, the config.json size bound, single-device FSDP, the tied root unit FSDP gathers, the
logits of a one-stage Megatron run, and the KV figure of ``--json``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from memory_support import base_layout
from verlctl.checks.memory import GIB, Layout, ModelShape, estimate, layout_for
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS

#: Qwen/Qwen1.5-MoE-A2.7B's config.json (huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json).
QWEN2_MOE: dict[str, Any] = {
    "model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"], "tie_word_embeddings": False,
    "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 16,
    "num_key_value_heads": 16, "vocab_size": 151936, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
}
#: Qwen/Qwen3-8B's config.json.
QWEN3_8B: dict[str, Any] = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "tie_word_embeddings": False,
    "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "head_dim": 128,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 151936,
}


def shape(cfg: dict[str, Any]) -> ModelShape:
    s = ModelShape.from_config(cfg)
    assert s is not None
    return s


def test_moe_width_is_top_k_routed_experts_plus_the_shared_one() -> None:
    s = shape(QWEN2_MOE)
    assert s.intermediate == 4 * 1408 + 5632
    # without num_experts_per_tok a token goes through one routed expert (and the shared one)
    one = shape({k: v for k, v in QWEN2_MOE.items() if k != "num_experts_per_tok"})
    assert one.intermediate == 1408 + 5632


def test_expert_parameters_follow_the_sparse_layer_pattern() -> None:
    per_layer = 60 * 3 * 2048 * 1408
    assert shape(QWEN2_MOE).expert_params == 24 * per_layer  # decoder_sparse_step 1: every layer is sparse
    assert shape({**QWEN2_MOE, "decoder_sparse_step": 2}).expert_params == 12 * per_layer  # layers 2, 4, ... only
    assert shape({**QWEN2_MOE, "decoder_sparse_step": 3}).expert_params == 8 * per_layer
    assert shape({**QWEN2_MOE, "first_k_dense_replace": 3}).expert_params == 21 * per_layer
    assert shape({**QWEN2_MOE, "mlp_only_layers": [0, 5]}).expert_params == 22 * per_layer


def test_an_oversized_config_json_is_not_read(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    text = json.dumps(QWEN3_8B)
    (model / "config.json").write_text(text, encoding="utf-8")
    assert ModelShape.from_model_dir(str(model)) is not None
    # the same valid JSON padded past the 4 MiB bound: refused without parsing it
    (model / "config.json").write_text(text + " " * (4 << 20), encoding="utf-8")
    assert ModelShape.from_model_dir(str(model)) is None


def test_fsdp_on_one_device_holds_every_state() -> None:
    s = shape(QWEN3_8B)
    lay = base_layout(device="gpu", strategy="fsdp", nodes=1, devices_per_node=1, train_devices_per_node=1,
                 rollout_devices_per_node=1)
    parts = estimate(lay, s, 141.0, 2048.0).device["update"].parts
    assert parts["params"] == 4.0 * s.params  # fp32, not sharded with anyone
    assert parts["grads"] == 4.0 * s.params and parts["optimizer"] == 8.0 * s.params


def test_fsdp_gathers_one_embedding_of_a_tied_model_and_two_of_an_untied_one() -> None:
    untied = shape(QWEN3_8B)
    # the same decoder layers with the head tied to the embedding: one vocab x hidden matrix fewer
    tied = ModelShape(**{**untied.__dict__, "tied": True, "params": untied.params - untied.embed_params})
    assert tied.layer_params == untied.layer_params
    lay = base_layout(device="gpu", strategy="fsdp", nodes=1, devices_per_node=8, train_devices_per_node=8)
    two_layers = 2 * 2.0 * untied.layer_params / untied.layers  # bf16, prefetch of the next layer
    got = {name: estimate(lay, s, 80.0, 1024.0).device["update"].parts["gathered (FSDP)"]
           for name, s in (("tied", tied), ("untied", untied))}
    assert got["tied"] == 2.0 * untied.embed_params + two_layers
    assert got["untied"] == 2.0 * 2 * untied.embed_params + two_layers


def test_one_stage_megatron_counts_the_logits_in_the_update_and_the_reference_forward() -> None:
    s = shape(QWEN3_8B)
    lay = base_layout(device="npu", strategy="megatron", tp=2, pp=1, has_ref=True, prompt=1024, response=3072,
                 dynamic_batch=True)
    est = estimate(lay, s, 64.0, 1024.0)
    logits = 4096 * 151936 * 4.0 / 2  # tokens x vocab x bf16 logits and their gradient, over TP
    assert est.device["update"].parts["logits"] == logits
    ref = est.device["reference"].parts["forward activations+logits"]
    one_layer = (18.0 * 4096 + 6.0 * 12288) * 4096 / 2
    assert ref == one_layer + logits


def test_the_json_kv_figure_is_the_tokens_that_fit_or_null_without_device_memory() -> None:
    spec = load_spec(None, flags=dict(BASE_PATHS), environ={}).spec
    s = shape(QWEN3_8B)
    lay = layout_for(spec, {"dynamic_batch": True})
    known = estimate(lay, s, 64.0, 1024.0)
    assert known.kv_tokens_fit is not None and known.kv_tokens_fit > 0
    assert known.to_json()["kv_cache"]["tokens_fit"] == int(known.kv_tokens_fit)
    unknown = estimate(lay, s, None, 1024.0)
    assert unknown.kv_tokens_fit is None and unknown.to_json()["kv_cache"]["tokens_fit"] is None
    assert unknown.to_json()["device"]["update"]["have_gib"] is None
    assert unknown.to_json()["device"]["update"]["need_gib"] == round(unknown.device["update"].need / GIB, 1)


# ---- the advice: each step is the first one (in the documented order) that the re-estimate shows fits

#: Qwen3-8B, Megatron TP 2 (rollout TP 2) on 8 x 64 GiB NPUs, 1k + 3k tokens, colocated.
MEGATRON_8B = base_layout(device="npu", strategy="megatron", tp=2, rollout_tp=2, prompt=1024, response=3072)


def advice(lay: Layout, s: ModelShape, hbm: float, host: float) -> tuple[list[str], list[str]]:
    """(what fails: phases and "kv"; the advice) of the estimate."""
    from verlctl.checks.memory import advise

    est = estimate(lay, s, hbm, host)
    return est.failing + (["kv"] if est.kv_short else []), advise(est, hbm, host)


def fits(lay: Layout, s: ModelShape, hbm: float, host: float) -> bool:
    return estimate(lay, s, hbm, host).fits is True


def test_host_ram_short_alone_gets_the_host_line_only() -> None:
    s = shape(QWEN3_8B)
    lay = replace(MEGATRON_8B, memory_utilization=0.4)
    failing, steps = advice(lay, s, 64.0, 64.0)  # 61 GiB usable; the sleep copies alone take 61
    assert failing == []
    assert steps == ["host RAM is short (89 GiB needed per node, 61 GiB usable): add RAM or nodes; never add "
                     "offload here"]
    est = estimate(lay, s, 64.0, 64.0)
    est.advice = steps
    assert est.to_json()["advice"] == steps


def test_host_ram_short_with_offload_on_advises_turning_it_off() -> None:
    s = shape(QWEN3_8B)
    spec = load_spec(None, flags={**BASE_PATHS, "strategy": "megatron", "train.tensor_parallel": 2}, environ={}).spec
    on = layout_for(spec, {"offload": True, "dynamic_batch": True})  # DAPO's defaults, 8 x 64 GiB NPUs
    off = layout_for(spec, {"dynamic_batch": True})
    assert (on.offload, on.optimizer_offload, off.offload, off.optimizer_offload) == (True, True, False, False)
    # 180 GiB of RAM (171 usable): the offloaded states take it over; without offload the run fits
    assert fits(off, s, 64.0, 180.0) and estimate(on, s, 64.0, 180.0).host.fits is False
    _, steps = advice(on, s, 64.0, 180.0)
    assert steps[0] == "host RAM is short: turn the `offload` feature off (it moves training states to host RAM)"
    # GRPO: the reference model then stays on the device too, which no longer fits: the advice says so
    grpo_on, grpo_off = replace(on, has_ref=True), replace(off, has_ref=True)
    assert estimate(grpo_off, s, 64.0, 180.0).host.fits is True and not fits(grpo_off, s, 64.0, 180.0)
    _, steps = advice(grpo_on, s, 64.0, 180.0)
    assert steps[0] == ("host RAM is short: turn the `offload` feature off (it moves training states to host RAM)"
                        "; the device then needs the other steps below")


def test_a_rollout_over_budget_is_told_the_utilization_that_fits() -> None:
    s = shape(QWEN3_8B)
    lay = replace(MEGATRON_8B, memory_utilization=0.7)
    # 128 GiB of RAM: offload and swap_optimizer would not fit there, so neither is advised
    assert advice(lay, s, 64.0, 128.0) == (["rollout"], ["lower train.rollout_memory_utilization from 0.7 to 0.4"])
    assert fits(replace(lay, memory_utilization=0.4), s, 64.0, 128.0)
    assert not fits(replace(lay, memory_utilization=0.45), s, 64.0, 128.0)


def test_a_kv_cache_too_small_is_told_the_rollout_tp_that_fits() -> None:
    from test_memory_fit import CONFIGS

    # one-step-off: 8 rollout devices of 64 GiB at utilization 0.45 (28.8 GiB); Qwen3-14B's 27.5 GiB of weights
    # leave no KV cache at TP 1 (vllm-ascend#9372's failure), TP 2 does
    lay = base_layout(device="npu", strategy="megatron", tp=4, colocated=False, devices_per_node=16,
                 train_devices_per_node=8, rollout_devices_per_node=8, rollout_tp=1, memory_utilization=0.45,
                 prompt=1024, response=3072, recompute=True, recompute_uniform=True)
    s14 = shape(CONFIGS["Qwen3-14B"])
    assert advice(lay, s14, 64.0, 2048.0) == (["kv"], ["raise train.rollout_tensor_parallel from 1 to 2"])
    assert fits(replace(lay, rollout_tp=2), s14, 64.0, 2048.0)
    # Qwen2-72B on 4 nodes: TP 4 leaves 33.8 GiB of weights per device, over the budget; TP 8 is the first that fits
    lay72 = replace(lay, nodes=4, tp=8, pp=4)
    s72 = shape(CONFIGS["Qwen2-72B-Instruct"])
    assert advice(lay72, s72, 64.0, 4096.0) == (["kv"], ["raise train.rollout_tensor_parallel from 1 to 8"])
    assert not fits(replace(lay72, rollout_tp=4), s72, 64.0, 4096.0)
    assert fits(replace(lay72, rollout_tp=8), s72, 64.0, 4096.0)


def test_offload_on_and_the_optimizer_step_too_big_advises_swap_optimizer() -> None:
    from test_memory_fit import CONFIGS

    s14 = shape(CONFIGS["Qwen3-14B"])
    lay = base_layout(device="npu", strategy="megatron", tp=2, rollout_tp=2, prompt=1024, response=1024, offload=True,
                 optimizer_offload=True, ref_offload=True, recompute=True, recompute_uniform=True)
    assert advice(lay, s14, 64.0, 2048.0) == (
        ["update"], ["enable the `swap_optimizer` feature (MindSpeed keeps the optimizer state on the host)"])
    assert fits(replace(lay, swap_optimizer=True, optimizer_offload=False), s14, 64.0, 2048.0)


def test_the_layout_advice_is_the_smallest_model_parallel_size_that_fits() -> None:
    s = shape(QWEN3_8B)
    lay = base_layout(device="npu", strategy="megatron", tp=1, rollout_tp=1, prompt=1024, response=1024, offload=True,
                 optimizer_offload=True, ref_offload=True, recompute=True, recompute_uniform=True)
    # 32 GiB: TP x PP = 2 is not enough, 4 is (PP 4 first: 36 layers split evenly, the fewest TP collectives)
    assert advice(lay, s, 32.0, 4096.0) == (["update"], ["use train.tensor_parallel=1, train.pipeline_parallel=4"])
    assert not fits(replace(lay, tp=2), s, 32.0, 4096.0) and not fits(replace(lay, pp=2), s, 32.0, 4096.0)
    assert fits(replace(lay, pp=4), s, 32.0, 4096.0)


def test_the_advice_never_shortens_responses_below_256_tokens() -> None:
    s = shape(QWEN3_8B)
    # one GPU for training (no TP x PP layout to try), offload would overfill the 64 GiB of host RAM
    lay = base_layout(device="gpu", strategy="megatron", colocated=False, devices_per_node=2, train_devices_per_node=1,
                 rollout_devices_per_node=1, prompt=256, response=510, recompute=True, recompute_uniform=True,
                 memory_utilization=0.5, batch=8, n=4)
    at_510 = estimate(lay, s, None, 64.0).device["update"].need / GIB
    at_255 = estimate(replace(lay, response=255), s, None, 64.0).device["update"].need / GIB
    hbm = (at_510 + at_255) / 2  # a device on which only 255-token responses would fit
    assert fits(replace(lay, response=255), s, hbm, 64.0) and not fits(lay, s, hbm, 64.0)
    failing, steps = advice(lay, s, hbm, 64.0)
    assert failing == ["update"]
    assert not any("max_response_length" in step for step in steps), steps
    assert steps == ["use 2 nodes (4 devices) instead of 1"]
