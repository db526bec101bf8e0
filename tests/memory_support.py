"""A base memory layout for the tests of checks/memory.py: ``Layout`` has no defaults (``layout_for`` sets every
field), so a test names the fields it is about and takes the rest from here."""

from __future__ import annotations

from typing import Any

from verlctl.checks.memory import Layout

#: One colocated node of 8 NPUs, Megatron TP/PP 1, 32 prompts x 8 responses of 2k + 8k tokens, dynamic batching on,
#: no memory feature, vLLM at 0.6 of the HBM with verl 0.7.0's rollout defaults.
BASE: dict[str, Any] = dict(
    device="npu", strategy="megatron", version="0.7.0", colocated=True, nodes=1, devices_per_node=8,
    train_devices_per_node=8, rollout_devices_per_node=8, tp=1, pp=1, cp=1, vpp=1, rollout_tp=1, batch=32, n=8,
    prompt=2048, response=8192, micro_batch=1, memory_utilization=0.6, dynamic_batch=True, max_token_len=None,
    offload=False, optimizer_offload=False, recompute=False, recompute_uniform=False, recompute_layers=8,
    swap_optimizer=False, has_ref=False, ref_offload=False, max_num_seqs=1024, rollout_engine="vllm", ep=1,
    etp=None, ulysses=1, max_batched_tokens=8192, chunked_prefill=True,
)


def base_layout(**fields: Any) -> Layout:
    """``BASE`` with the given fields."""
    return Layout(**{**BASE, **fields})
