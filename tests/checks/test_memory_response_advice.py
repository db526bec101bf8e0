"""checks/memory.py, turn 6 of the mutation benchmark (docs/development/mutation.md): the gaps its samples left."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from test_memory_estimate_paths import QWEN3_8B, shape
from verlctl.checks.memory import estimate, estimate_run
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS

#: Qwen3-8B under FSDP on one node of 8 x 24 GiB GPUs, micro batches of 16 sequences (no dynamic batching),
#: gradient checkpointing and offload already on: only the sequence length is left to give.
FSDP_24G: dict[str, Any] = {
    **BASE_PATHS, "device": "gpu", "strategy": "fsdp", "train.max_prompt_length": 256,
    "train.micro_batch_size_per_device": 16, "train.rollout_tensor_parallel": 8,
    "cluster.device_memory_gib": 24, "cluster.host_memory_gib": 4096,
}
FEATURES = {"gradient_checkpointing": True, "offload": True, "dynamic_batch": False}


def _run(response: int) -> Any:
    spec = load_spec(None, flags={**FSDP_24G, "train.max_response_length": response}, environ={}).spec
    return estimate_run(spec, FEATURES, shape(QWEN3_8B))


def test_the_advice_shortens_the_response_to_256_tokens_when_that_is_what_fits() -> None:
    """A 512-token response that does not fit, where 256 tokens does: the advice says 256 (the shortest response
    it proposes), not "more nodes". No sample had a response that halves to exactly 256."""
    est = _run(512)
    assert est.failing == ["update"]
    shorter = estimate(replace(est.layout, response=256), est.shape, 24, 4096)
    assert shorter.fits is True  # what the advice promises, re-estimated here
    assert est.advice == ["shorten train.max_response_length from 512 to 256"]


def test_a_response_is_never_shortened_below_256_tokens() -> None:
    """1020 tokens: a quarter (255) would fit, half (510) does not; 255 is below the floor, so the advice turns to
    no single change (more nodes do not shrink a micro batch) rather than a response shorter than 256 tokens."""
    est = _run(1020)
    assert est.failing == ["update"]
    assert estimate(replace(est.layout, response=510), est.shape, 24, 4096).fits is False
    assert estimate(replace(est.layout, response=255), est.shape, 24, 4096).fits is True
    assert est.advice == ["no single change found that fits: a larger device, a smaller model or shorter sequences"]


def test_a_two_node_rollout_is_advised_the_top_rung_of_the_rollout_tp_ladder() -> None:
    """Qwen2-72B on 2 x 8 NPUs of 48 GiB, every memory feature on and the rollout budget already at 0.3 (nothing
    lower to offer): at rollout TP 8 the KV cache cannot hold one sequence; at TP 16, over both nodes' 16 devices,
    it can. Seed 8267 showed the ladder's last rung (16) untested: 15 passed every test."""
    from memory_support import base_layout
    from test_memory_fit import CONFIGS
    from verlctl.checks.memory import advise

    s = shape(CONFIGS["Qwen2-72B-Instruct"])
    lay = base_layout(device="npu", strategy="megatron", nodes=2, tp=8, pp=2, rollout_tp=8, prompt=1024,
                      response=1024, memory_utilization=0.3, recompute=True, recompute_uniform=True, offload=True,
                      optimizer_offload=False, swap_optimizer=True, ref_offload=True)
    est = estimate(lay, s, 48.0, 4096.0)
    assert est.kv_short and est.failing == []
    assert estimate(replace(lay, rollout_tp=16), s, 48.0, 4096.0).fits is True
    assert advise(est, 48.0, 4096.0) == ["raise train.rollout_tensor_parallel from 8 to 16"]
