"""The memory estimate's gaps from the turn-3 mutation sample (reference/mutation-turn3.md, checks/memory.py):
each test is a case a user meets, whose answer a one-token change of the estimate or of the advice ladder
would change."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memory_support import base_layout
from test_memory_estimate_paths import QWEN3_8B, shape
from test_memory_fit import CONFIGS
from verlctl.checks.memory import GIB, advise, estimate, memory_findings

HOST = 4096.0  # plenty of host RAM: only the device decides


def test_moe_with_expert_parallel_over_every_device_keeps_the_whole_expert_optimizer_state() -> None:
    """Qwen3-30B-A3B, Megatron, 8 NPUs, TP 1, EP 8, ETP 1: EP x PP uses every device, so the experts' expert
    data-parallel group is one device and each holds its experts' whole Adam state (42.7 GiB), not half."""
    s = shape(CONFIGS["Qwen3-30B-A3B"])
    lay = base_layout(device="npu", strategy="megatron", tp=1, ep=8, etp=1)
    assert lay.train_devices == 8
    dense = s.params - s.expert_params
    want = 12.0 * dense / 8 + 12.0 * s.expert_params / 8 / 1  # dense over DP 8; experts over EP 8, EDP 1
    update = estimate(lay, s, 64.0, HOST).to_json()["device"]["update"]["parts_gib"]
    assert update["optimizer"] == pytest.approx(want / GIB, abs=0.05)
    assert update["optimizer"] > 42.0
    # and the same model on 16 devices (EDP 2) halves the experts' share: the floor is the only difference
    lay16 = replace(lay, nodes=2)
    update16 = estimate(lay16, s, 64.0, HOST).to_json()["device"]["update"]["parts_gib"]
    assert update16["optimizer"] == pytest.approx((12.0 * dense / 16 + 12.0 * s.expert_params / 8 / 2) / GIB,
                                                  abs=0.05)


def test_offload_is_advised_when_it_is_the_first_step_that_fits() -> None:
    """Qwen3-8B, Megatron TP 2 with recompute already on, 44 GiB NPUs: the rollout phase is over budget with the
    training states on the device; moving params, grads and optimizer to host RAM (offload) fixes it."""
    s = shape(QWEN3_8B)
    lay = base_layout(device="npu", strategy="megatron", tp=2, rollout_tp=2, prompt=1024, response=1024,
                 recompute=True, recompute_uniform=True)
    est = estimate(lay, s, 44.0, HOST)
    assert est.failing == ["rollout"]
    assert advise(est, 44.0, HOST) == ["enable the `offload` feature (params/grads/optimizer to host RAM between "
                                       "phases)"]
    assert estimate(replace(lay, offload=True, optimizer_offload=True, ref_offload=True), s, 44.0, HOST).fits
    # the optimizer and reference offload alone do not: it is the params/grads offload that makes room
    assert not estimate(replace(lay, optimizer_offload=True, ref_offload=True), s, 44.0, HOST).fits


@pytest.mark.parametrize(
    ("layers", "hbm", "answer"),
    [
        # 37 layers (a prime) allow no pipeline split: TP 2 is not enough at 34 GiB, TP 4 is
        (37, 34.0, "use train.tensor_parallel=4, train.pipeline_parallel=1"),
        # 36 layers, 44 GiB: two pipeline stages are enough (PP before TP at the same size: fewer collectives)
        (36, 44.0, "use train.tensor_parallel=1, train.pipeline_parallel=2"),
        (36, 32.0, "use train.tensor_parallel=1, train.pipeline_parallel=4"),
    ],
)
def test_the_layout_advice_reaches_every_model_parallel_size(layers: int, hbm: float, answer: str) -> None:
    s = shape({**QWEN3_8B, "num_hidden_layers": layers})
    lay = base_layout(device="npu", strategy="megatron", tp=1, rollout_tp=1, prompt=1024, response=1024, offload=True,
                 optimizer_offload=True, ref_offload=True, recompute=True, recompute_uniform=True)
    est = estimate(lay, s, hbm, HOST)
    assert est.failing == ["update"]
    assert advise(est, hbm, HOST) == [answer]
    tp, pp = (int(part.split("=")[1]) for part in answer.removeprefix("use ").split(", "))
    assert estimate(replace(lay, tp=tp, pp=pp), s, hbm, HOST).fits


def test_the_kv_cache_error_says_how_many_tokens_fit() -> None:
    """The one-step-off rollout of Qwen3-14B at TP 1 leaves a KV cache smaller than one sequence: the error gives
    the tokens that do fit, so the user sees how far off the budget is."""
    lay = base_layout(device="npu", strategy="megatron", tp=4, colocated=False, devices_per_node=16,
                 train_devices_per_node=8, rollout_devices_per_node=8, rollout_tp=1, memory_utilization=0.46,
                 prompt=1024, response=3072, recompute=True, recompute_uniform=True)
    est = estimate(lay, shape(CONFIGS["Qwen3-14B"]), 64.0, HOST)
    assert est.kv_short and est.kv_tokens_fit is not None and 0 < est.kv_tokens_fit < lay.seq
    [kv] = [f for f in memory_findings(est) if f.code == "memory_kv_cache"]
    assert f"holds about {int(est.kv_tokens_fit)} tokens, less than one sequence of {lay.seq}" in kv.message


# ---- the fresh sample (seed 4242, after the gaps above) ---------------------------------------------------


def test_the_layout_advice_reaches_eight_pipeline_stages() -> None:
    """Qwen3-14B (40 layers) at TP 1 x PP 4 on 44 GiB GPUs: no size-4 layout is larger, TP 2 x PP 2 is not
    tried (the same size), and the smallest larger one that fits is eight stages of five layers."""
    s = shape(CONFIGS["Qwen3-14B"])
    lay = base_layout(device="gpu", strategy="megatron", tp=1, pp=4, rollout_tp=4, prompt=1024, response=1024,
                 offload=True, optimizer_offload=True, ref_offload=True, recompute=True, recompute_uniform=True)
    est = estimate(lay, s, 44.0, HOST)
    assert est.failing == ["update"]
    assert advise(est, 44.0, HOST) == ["use train.tensor_parallel=1, train.pipeline_parallel=8"]
    assert estimate(replace(lay, pp=8), s, 44.0, HOST).fits


def test_a_kl_penalty_in_the_reward_keeps_the_reference_model() -> None:
    """``use_kl_loss=False`` with ``algorithm.use_kl_in_reward=True``: verl still builds the reference policy
    (the reward's KL needs its log-probs), so its weights count in the estimate."""
    from verlctl.checks.memory import layout_for
    from verlctl.spec.resolve import load_spec

    from conftest import BASE_PATHS

    def has_ref(*extra: str) -> bool:
        spec = load_spec(None, flags={**BASE_PATHS, "algorithm": "dapo", "extra_overrides": list(extra)},
                         environ={}).spec
        return layout_for(spec, {}).has_ref

    assert not has_ref("actor_rollout_ref.actor.use_kl_loss=False")
    assert has_ref("actor_rollout_ref.actor.use_kl_loss=False", "algorithm.use_kl_in_reward=True")
    assert has_ref("actor_rollout_ref.actor.use_kl_loss=True")


def test_the_first_pipeline_stage_holds_the_in_flight_micro_batches() -> None:
    """Megatron's 1F1B schedule: the first of PP stages holds PP micro-batches' activations of its layers, plus
    the warm-up share (PP - 1) / (PP x VPP) of one more; interleaving (VPP) shrinks that share. Without
    recompute, the first stage of PP 4 therefore keeps 7/4 of PP 1's activations, and 5/4 with VPP 3."""
    s = shape(QWEN3_8B)  # 36 layers: PP 4 x VPP 3 divides them
    lay = base_layout(device="npu", strategy="megatron", tp=1, prompt=1024, response=1024)

    def activations(**changes: int) -> float:
        return estimate(replace(lay, **changes), s, 64.0, HOST).device["update"].parts["activations"]

    one = activations(pp=1)
    assert activations(pp=4) == pytest.approx(one * 7 / 4, rel=1e-6)
    assert activations(pp=4, vpp=3) == pytest.approx(one * 5 / 4, rel=1e-6)


def test_one_step_off_rollout_replicas_are_counted_on_the_rollout_devices_only() -> None:
    """One-step-off on 16-device nodes split 8 + 8, rollout TP 2: four vLLM replicas share the batch's 32
    sequences, so each holds 8 at once (the KV cache a full batch wants), not the 4 of eight replicas."""
    lay = base_layout(device="npu", strategy="megatron", tp=4, colocated=False, devices_per_node=16,
                 train_devices_per_node=8, rollout_devices_per_node=8, rollout_tp=2, prompt=1024, response=3072,
                 batch=8, n=4)
    assert lay.rollout_devices == 8 and replace(lay, colocated=True).rollout_devices == 16
    est = estimate(lay, shape(CONFIGS["Qwen3-14B"]), 64.0, HOST)
    assert est.kv_tokens_wanted == 8 * lay.seq
