"""The memory estimate at the edges a user meets: the rollout's concurrent sequences per verl version, the
virtual pipeline's warm-up, the reference forward beside the actor's gradients, and the first rung of the advice
ladder (plain recompute, rollout TP 4). Through the public functions (layout_for, estimate), never a private name."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from memory_support import base_layout
from test_memory_estimate_paths import QWEN3_8B, shape
from verlctl.checks.memory import Layout, estimate, layout_for
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS, ROOT

HOST = 4096.0  # plenty of host RAM: only the device decides


@pytest.mark.parametrize("version", ["0.7.0", "0.9.1"])
def test_the_rollout_holds_at_most_verls_max_num_seqs_of_the_version_at_once(version: str) -> None:
    """One vLLM replica (rollout TP 8 on 8 devices) gets all 8 x 512 responses of a batch; vLLM runs at most
    rollout.max_num_seqs of them at once, whose default differs by version (verl's own rollout.yaml, read from
    the installed config tree), so the KV cache the rollout wants is that many full sequences."""
    cfg = ROOT / ".cache" / "verl" / version / "verl" / "trainer" / "config" / "rollout" / "rollout.yaml"
    if not cfg.is_file():
        pytest.skip(f"verl {version}'s config tree is not installed ({cfg})")
    verls = yaml.safe_load(cfg.read_text())["max_num_seqs"]
    spec = load_spec(None, flags={**BASE_PATHS, "verl_version": version, "train.train_batch_size": 512,
                                  "train.responses_per_prompt": 8, "train.rollout_tensor_parallel": 8},
                     environ={}).spec
    lay = layout_for(spec, {"dynamic_batch": True})
    assert lay.max_num_seqs == verls
    est = estimate(lay, shape(QWEN3_8B), 64.0, HOST)
    assert verls < 8 * 512 and est.kv_tokens_wanted == verls * lay.seq


def test_the_vpp_feature_interleaves_the_pipeline_only_for_megatron_with_several_stages() -> None:
    """`features.enable: [vpp]` with vpp_size 3 on Megatron PP 4: the layout has VPP 3, and the first stage
    keeps less of the warm-up activations than without it; with the feature off, or PP 1, VPP is 1."""
    def lay(pp: int, vpp_on: bool) -> Layout:
        spec = load_spec(None, flags={**BASE_PATHS, "strategy": "megatron", "train.pipeline_parallel": pp,
                                      "features.vpp_size": 3}, environ={}).spec
        return layout_for(spec, {"vpp": vpp_on, "dynamic_batch": True})

    assert lay(4, True).vpp == 3
    assert lay(4, False).vpp == 1
    assert lay(1, True).vpp == 1
    s = shape(QWEN3_8B)
    on = estimate(lay(4, True), s, 64.0, HOST).device["update"].parts["activations"]
    off = estimate(lay(4, False), s, 64.0, HOST).device["update"].parts["activations"]
    assert on < off


@pytest.mark.parametrize("strategy", ["megatron", "fsdp"])
def test_the_reference_forward_runs_beside_the_actors_grads_on_megatron_only(strategy: str) -> None:
    """GRPO's reference log-prob pass runs while the actor's states stay on the device: Megatron keeps its
    gradient buffers there, FSDP frees its gradients after the step; both keep the optimizer state."""
    lay = base_layout(device="npu", strategy=strategy, tp=2 if strategy == "megatron" else 1, rollout_tp=2,
                 has_ref=True, prompt=1024, response=1024)
    est = estimate(lay, shape(QWEN3_8B), 64.0, HOST)
    update, ref = est.device["update"].parts, est.device["reference"].parts
    assert update["grads"] > 0
    want = update["optimizer"] + (update["grads"] if strategy == "megatron" else 0.0)
    assert ref["actor grads/optimizer"] == pytest.approx(want)


def test_the_first_advice_for_an_update_over_budget_is_plain_recompute_when_that_fits() -> None:
    """Qwen3-8B, Megatron TP 2, 1k + 6k tokens on 56 GiB NPUs: only the update phase is over; recomputing the
    first layers of each stage (the plain `recompute` feature) is the first step of the ladder, and it fits."""
    from test_memory_estimate_paths import MEGATRON_8B, advice, fits

    s = shape(QWEN3_8B)
    lay = base_layout(device="npu", strategy="megatron", tp=2, rollout_tp=2, prompt=1024, response=6144,
                 memory_utilization=0.3)
    assert replace(MEGATRON_8B, response=6144, memory_utilization=0.3) == lay
    assert advice(lay, s, 56.0, 2048.0) == (["update"], ["enable the `recompute` feature (activation recomputation)"])
    assert fits(replace(lay, recompute=True), s, 56.0, 2048.0)


def test_a_kv_cache_too_small_can_be_told_rollout_tp_4() -> None:
    """One-step-off, 8 rollout devices of 48 GiB at utilization 0.3 (14.4 GiB): Qwen2.5-Coder-14B's weights
    leave no KV cache at rollout TP 1 or 2; TP 4 is the smallest that does."""
    from test_memory_estimate_paths import advice, fits
    from test_memory_fit import CONFIGS

    lay = base_layout(device="npu", strategy="megatron", tp=4, colocated=False, devices_per_node=16,
                 train_devices_per_node=8, rollout_devices_per_node=8, rollout_tp=1, memory_utilization=0.3,
                 prompt=1024, response=3072, recompute=True, recompute_uniform=True)
    s = shape(CONFIGS["Qwen2.5-Coder-14B-Instruct"])
    assert advice(lay, s, 48.0, 4096.0) == (["kv"], ["raise train.rollout_tensor_parallel from 1 to 4"])
    assert not fits(replace(lay, rollout_tp=2), s, 48.0, 4096.0)
    assert fits(replace(lay, rollout_tp=4), s, 48.0, 4096.0)
