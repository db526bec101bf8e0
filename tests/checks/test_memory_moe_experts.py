"""checks/memory.py: the real gaps of the turn-4 mutation sample (seed 6061, docs/development/mutation.md): which
layers of a sparse-step MoE carry experts, the expert width of a MoE config that names none, and the advice that
must not name a step that changes nothing (offload already on; uniform recompute when the recomputed layers
already cover each stage). Each case is a config.json or a layout a user meets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from memory_support import base_layout
from test_memory_estimate_paths import QWEN2_MOE, QWEN3_8B, shape
from verlctl.checks.memory import Layout, advise, estimate
from verlctl.detect.models import estimate_params_from_config

HOST = 4096.0  # plenty of host RAM: only the device decides
PER_LAYER = 60 * 3 * 2048 * 1408  # Qwen1.5-MoE-A2.7B: the routed experts of one sparse layer


@pytest.mark.parametrize(
    ("changes", "moe_layers"),
    [
        # Hugging Face Qwen2-MoE: layer i is sparse when (i + 1) % decoder_sparse_step == 0, i.e. layers 1, 3, 5, ...
        ({"decoder_sparse_step": 2, "mlp_only_layers": [1]}, 11),  # layer 1 is sparse: forcing it dense removes one
        ({"decoder_sparse_step": 2, "mlp_only_layers": [0]}, 12),  # layer 0 is dense anyway
        ({"decoder_sparse_step": 2, "num_hidden_layers": 5}, 2),  # layers 1 and 3 of 0..4, not 0, 2 and 4
        ({"decoder_sparse_step": 3, "first_k_dense_replace": 3}, 7),  # layers 5, 8, ..., 23 (2 is dense)
    ],
)
def test_a_sparse_step_puts_the_experts_on_the_layers_hugging_face_puts_them(changes: dict[str, Any],
                                                                            moe_layers: int) -> None:
    cfg = {**QWEN2_MOE, **changes}
    s = shape(cfg)
    assert s.expert_params == moe_layers * PER_LAYER
    # the parameter count (detect.models) agrees on the same layers: each sparse layer adds its experts, their
    # router, and the shared expert in place of the dense MLP
    dense_cfg = {k: v for k, v in cfg.items() if k != "num_experts"}
    dense = estimate_params_from_config(dense_cfg)
    params = estimate_params_from_config(cfg)
    assert dense is not None and params is not None
    h = cfg["hidden_size"]
    per_sparse = PER_LAYER + h * 60 + 3 * h * 5632 + h - 3 * h * 5632  # experts + router + shared + gate - dense
    assert params - dense == moe_layers * per_sparse


def test_a_moe_config_without_any_width_gives_its_experts_the_dense_default_of_four_times_hidden() -> None:
    """A config.json with num_experts but neither moe_intermediate_size nor intermediate_size: the parameter
    count takes 4 x hidden for every MLP, and the expert share Megatron splits over EP must be the same experts,
    or the expert-parallel optimizer estimate shrinks by a quarter."""
    h, layers, experts = 1024, 8, 16
    cfg = {"model_type": "mixtral", "hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": 16,
           "num_key_value_heads": 4, "vocab_size": 32000, "num_local_experts": experts, "num_experts_per_tok": 2}
    s = shape(cfg)
    assert s.expert_params == layers * experts * 3 * h * (4 * h)
    dense = estimate_params_from_config({k: v for k, v in cfg.items() if k != "num_local_experts"})
    assert dense is not None
    # params = dense + per layer (experts - 1 more MLPs of 4h, plus the router): the experts are all the MLPs
    assert s.params - dense == layers * ((experts - 1) * 3 * h * 4 * h + h * experts)
    assert s.intermediate == 2 * 4 * h  # two routed experts per token, each 4h wide


#: mistralai/Mixtral-8x7B-v0.1's config.json: the experts' width is intermediate_size (no moe_intermediate_size).
MIXTRAL_8X7B: dict[str, Any] = {
    "model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "tie_word_embeddings": False,
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
}


def test_a_mixtral_token_passes_through_two_experts_of_intermediate_size_each() -> None:
    """Mixtral routes each token through 2 of its 8 experts, each intermediate_size (14336) wide: the
    activations scale with 2 x 14336, not with one MLP (which under-estimated them by a third)."""
    s = shape(MIXTRAL_8X7B)
    assert s.intermediate == 2 * 14336
    assert s.expert_params == 32 * 8 * 3 * 4096 * 14336
    assert 46.0e9 < s.params < 47.0e9  # Mixtral-8x7B: 46.7 B parameters
    lay = base_layout(device="npu", strategy="megatron", tp=8, rollout_tp=8, prompt=1024, response=1024)
    acts = estimate(lay, s, 64.0, HOST).device["update"].parts["activations"]
    assert acts == pytest.approx(lay.seq * 32 * (18.0 * 4096 + 6.0 * 2 * 14336) / 8)


def _qwen3_8b_megatron(**changes: Any) -> Layout:
    base = base_layout(device="npu", strategy="megatron", tp=2, rollout_tp=2, prompt=1024, response=2048, offload=True,
                  optimizer_offload=True, ref_offload=True, recompute=False)
    return replace(base, **changes)


@pytest.mark.parametrize(
    ("pp", "recompute_layers", "hbm", "answer"),
    [
        # recompute_num_layers covers each stage (36 layers / PP 1; 18 / PP 2): uniform would recompute the same
        (1, 36, 32.0, "enable recompute + swap_optimizer together"),
        (2, 18, 24.0, "enable recompute + swap_optimizer together"),
        # 8 of 36 layers per stage: uniform recomputes the other 28 too, so the advice says so
        (1, 8, 32.0, "enable recompute + swap_optimizer together (recompute_method=uniform)"),
    ],
)
def test_the_combined_advice_names_only_the_features_that_change_something(pp: int, recompute_layers: int,
                                                                           hbm: float, answer: str) -> None:
    """Qwen3-8B, Megatron TP 2 on NPUs with `offload` already on and recompute off: the update is over budget and
    no single feature fits, recompute and swap_optimizer together do. The advice must not tell the user to turn
    on `offload` (it is on) nor to switch to uniform recompute where that recomputes nothing more."""
    s = shape(QWEN3_8B)
    lay = _qwen3_8b_megatron(pp=pp, recompute_layers=recompute_layers)
    est = estimate(lay, s, hbm, HOST)
    assert est.failing == ["update"]
    assert advise(est, hbm, HOST) == [answer]
    # and the advice is what fits: both features on (swap replaces the optimizer offload), uniform as said
    followed = replace(lay, recompute=True, swap_optimizer=True, optimizer_offload=False,
                       recompute_uniform="uniform" in answer)
    assert estimate(followed, s, hbm, HOST).fits


SWAP = "enable the `swap_optimizer` feature (MindSpeed keeps the optimizer state on the host)"
UNIFORM = ("enable the `recompute` feature with features.recompute_method=uniform (every layer, not only the first 8 "
           "of each stage)")


@pytest.mark.parametrize(
    ("device", "tp", "recompute", "recompute_layers", "advice", "followed"),
    [
        # NPU, recompute on over all 40 layers: swap_optimizer is the one memory feature left; with PP 8 it fits
        ("npu", 4, True, 40, [SWAP, "then use train.tensor_parallel=1, train.pipeline_parallel=8"],
         {"swap_optimizer": True, "optimizer_offload": False, "tp": 1, "pp": 8}),
        # GPU (no swap_optimizer), recompute off: recompute is the one feature (its plain and uniform steps)
        ("gpu", 4, False, 8, [UNIFORM, "then use 16 nodes (128 devices) instead of 1"],
         {"recompute": True, "recompute_uniform": True, "nodes": 16}),
    ],
)
def test_a_combination_of_one_feature_is_advised_in_that_features_own_words(
        device: str, tp: int, recompute: bool, recompute_layers: int, advice: list[str],
        followed: dict[str, Any]) -> None:
    """Qwen3-14B, Megatron on 24 GiB devices with offload on, where the memory features alone do not fit: the
    advice is the feature's own step, then the layout or the nodes; not "enable swap_optimizer together" or
    "enable recompute together" (a combination of one feature)."""
    from test_memory_fit import CONFIGS

    s = shape(CONFIGS["Qwen3-14B"])
    lay = base_layout(device=device, strategy="megatron", tp=tp, rollout_tp=tp, prompt=1024, response=2048, offload=True,
                 optimizer_offload=True, ref_offload=True, recompute=recompute, recompute_layers=recompute_layers)
    est = estimate(lay, s, 24.0, HOST)
    assert est.failing == ["update"]
    assert advise(est, 24.0, HOST) == advice
    assert estimate(replace(lay, **followed), s, 24.0, HOST).fits


def test_shared_experts_named_num_shared_experts_are_in_every_tokens_width() -> None:
    """A MoE config.json that names its always-on experts ``num_shared_experts`` (Inclusion AI's Ling /
    BailingMoE) instead of DeepSeek's ``n_shared_experts``: each token passes through them as well as its top-k
    routed experts, as the parameter count (detect.models) already reads the key."""
    cfg = {"model_type": "bailing_moe", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 28,
           "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 126464, "num_experts": 64,
           "num_experts_per_tok": 6, "moe_intermediate_size": 1408, "num_shared_experts": 2}
    assert shape(cfg).intermediate == 6 * 1408 + 2 * 1408
    deepseek_named = {k: v for k, v in cfg.items() if k != "num_shared_experts"} | {"n_shared_experts": 2}
    assert shape(deepseek_named).intermediate == 6 * 1408 + 2 * 1408
    assert shape(deepseek_named).params == shape(cfg).params


def test_the_plan_table_says_yes_no_or_unknown_per_phase_and_the_kv_tokens() -> None:
    """`plan`'s memory table: one row per device phase and one for the host, need and have in GiB, and "NO" on
    the phase that does not fit; "?" where the memory is unknown; the KV-cache line only when it is known."""
    from verlctl.checks.memory import table_lines

    s = shape(QWEN3_8B)
    lay = base_layout(device="npu", strategy="megatron", tp=2, rollout_tp=2, prompt=1024, response=1024)
    small = estimate(lay, s, 32.0, 256.0)
    assert small.device["update"].fits is False and small.host.fits is True and small.kv_tokens_fit is not None
    lines = table_lines(small)
    assert lines[0].split() == ["phase", "need", "GiB", "have", "GiB", "fits"]
    rows = {ln.split("  ")[0]: ln.split() for ln in lines[1:-1]}
    assert set(rows) == {"rollout (per device)", "update (per device)", "host RAM (per node)"}
    upd = rows["update (per device)"]
    assert upd[-1] == "NO" and upd[-2] == "32.0" and float(upd[-3]) == round(small.device["update"].need / (1 << 30), 1)
    assert rows["host RAM (per node)"][-1] == "yes" and rows["host RAM (per node)"][-2] == f"{256.0 * 0.95:.1f}"  # below Ray's threshold
    assert lines[-1] == (f"KV cache: ~{int(small.kv_tokens_fit)} tokens per rollout replica, "
                         f"{small.kv_tokens_wanted} wanted at once")
    unknown = table_lines(estimate(lay, s, None, None))
    assert len(unknown) == 4 and not any(ln.startswith("KV cache") for ln in unknown)
    for ln in unknown[1:]:
        assert ln.split()[-2:] == ["?", "?"]


@pytest.mark.parametrize(
    ("algorithm", "extra", "has_ref"),
    [
        ("dapo", [], False),
        ("dapo", ["algorithm.use_kl_in_reward=True"], True),  # the reward's KL penalty alone needs the reference
        ("grpo", [], True),
        ("grpo", ["actor_rollout_ref.actor.use_kl_loss=False"], False),
        ("grpo", ["actor_rollout_ref.actor.use_kl_loss=False", "+algorithm.use_kl_in_reward=true"], True),
    ],
)
def test_the_reference_model_is_counted_whenever_verl_builds_it(algorithm: str, extra: list[str],
                                                                has_ref: bool) -> None:
    """verl builds the reference policy when ``use_kl_in_reward or use_kl_loss`` (0.9.1 need_reference_policy):
    a DAPO run with only ``algorithm.use_kl_in_reward=True`` loads the reference weights on every device too."""
    from verlctl.checks.memory import layout_for
    from verlctl.spec.resolve import load_spec

    from conftest import BASE_PATHS

    spec = load_spec(None, flags={**BASE_PATHS, "algorithm": algorithm, "extra_overrides": extra}, environ={}).spec
    lay = layout_for(spec, {})
    assert lay.has_ref is has_ref
    est = estimate(lay, shape(QWEN3_8B), 64.0, HOST)
    assert ("reference" in est.device) is has_ref


@pytest.mark.parametrize("mlp_only", [1, "0,1", {"0": 1}, [0, "1", None]])
def test_a_malformed_mlp_only_layers_is_read_as_no_dense_layer_not_a_traceback(tmp_path: Path, mlp_only: Any) -> None:
    """A config.json whose ``mlp_only_layers`` is not a list of layer indices (fuzzed: an int) crashed
    `verlctl plan` with a TypeError from the parameter count; it now counts only the integer indices."""
    import json

    from conftest import run_cli

    cfg = {**QWEN2_MOE, "mlp_only_layers": mlp_only}
    s = shape(cfg)
    kept = [i for i in mlp_only if isinstance(i, int)] if isinstance(mlp_only, list) else []
    assert s.expert_params == (24 - len(kept)) * PER_LAYER
    assert s.params == estimate_params_from_config({**QWEN2_MOE, "mlp_only_layers": kept})
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(cfg))
    res = run_cli("plan", "--json", "--set", f"paths.model={model}", "--set", "paths.train_files=/mnt/t.parquet",
                  "--set", "paths.val_files=/mnt/v.parquet", "--set", "cluster.device_memory_gib=64")
    assert "Traceback" not in res.err and res.code in (0, 2), res.err
    assert json.loads(res.out)["memory"]["device"]


def test_the_sparse_layer_count_is_hugging_faces_rule_for_every_layer_pattern() -> None:
    """``moe_layer_count`` counts (no loop over a config's layer count, which is untrusted input) what the
    model code decides layer by layer: not in the first first_k_dense_replace, not in mlp_only_layers, and
    (i + 1) % decoder_sparse_step == 0. Checked against that rule on every small pattern."""
    import itertools

    from verlctl.detect.models import moe_layer_count

    for layers, first, step, only in itertools.product(range(0, 13), range(-1, 6), range(-1, 5),
                                                       ([], [0], [1, 3], [2, 2, 11, 40, -1], [True])):
        cfg = {"first_k_dense_replace": first, "decoder_sparse_step": step, "mlp_only_layers": only}
        eff_step = step or 1
        want = sum(1 for i in range(layers)
                   if not (i < first or i in {j for j in only if type(j) is int}
                           or (eff_step > 1 and (i + 1) % eff_step != 0)))
        assert moe_layer_count(cfg, layers) == want, cfg


def test_a_config_with_a_trillion_layers_is_estimated_at_once() -> None:
    """A malformed config.json (num_hidden_layers 10^12) used to loop over every layer in the parameter
    count and the expert count: `plan` hung. The counts are arithmetic now."""
    s = shape({**QWEN2_MOE, "num_hidden_layers": 10**12, "decoder_sparse_step": 2})
    assert s.expert_params == min(s.params, 10**12 // 2 * PER_LAYER)
    assert estimate(base_layout(), s, 64.0, HOST).fits is False


@pytest.mark.parametrize("changes", [{"hidden_size": 3, "head_dim": None}, {"num_hidden_layers": -4}, {"vocab_size": -1},
                                     {"num_attention_heads": -32}, {"head_dim": -128}, {"num_key_value_heads": -8}])
def test_a_config_json_with_sizes_no_model_has_gives_no_estimate(changes: dict[str, Any]) -> None:
    """hidden_size 3 over 32 heads (a head size of 0) divided by zero in the KV-cache estimate (fuzzed); negative
    sizes gave negative memory. Such a config.json gets no estimate (`memory_estimate_skipped`), not a traceback."""
    from verlctl.checks.memory import ModelShape

    cfg = {k: v for k, v in {**QWEN3_8B, **changes}.items() if v is not None}  # None: the key is absent
    assert ModelShape.from_config(cfg) is None


def test_the_rollout_tp_advice_may_exceed_the_kv_heads_which_vllm_then_replicates() -> None:
    """Qwen2-7B has 4 KV heads. One-step-off on 8 rollout devices of 28 GiB at utilization 0.15: only rollout
    TP 8 leaves a KV cache, and vLLM accepts a TP that the KV heads divide (it replicates each head over 2
    ranks), so the advice is TP 8 and the estimate with it fits."""
    from test_memory_estimate_paths import advice, fits
    from test_memory_fit import CONFIGS

    s = shape(CONFIGS["Qwen2-7B-Instruct"])
    assert s.kv_heads == 4
    lay = base_layout(device="npu", strategy="megatron", tp=4, colocated=False, devices_per_node=16,
                 train_devices_per_node=8, rollout_devices_per_node=8, rollout_tp=1, memory_utilization=0.15,
                 prompt=1024, response=3072, recompute=True, recompute_uniform=True)
    assert advice(lay, s, 28.0, 4096.0) == (["kv"], ["raise train.rollout_tensor_parallel from 1 to 8"])
    assert [fits(replace(lay, rollout_tp=t), s, 28.0, 4096.0) for t in (2, 4, 8)] == [False, False, True]


def test_megatron_context_parallel_splits_the_tokens_of_a_micro_batch() -> None:
    """train.context_parallel=2 on Megatron: each device holds half of a micro batch's tokens, so the update's
    activations and logits are half those of CP 1 (the spec's CP reaches the layout; FSDP has no CP)."""
    from verlctl.checks.memory import layout_for
    from verlctl.spec.resolve import load_spec

    from conftest import BASE_PATHS

    def layout(cp: int) -> Layout:
        flags = {**BASE_PATHS, "strategy": "megatron", "train.tensor_parallel": 2, "train.context_parallel": cp}
        return layout_for(load_spec(None, flags=flags, environ={}).spec, {})

    one, two = layout(1), layout(2)
    assert (one.cp, two.cp) == (1, 2)
    s = shape(QWEN3_8B)
    a1 = estimate(one, s, 64.0, HOST).device["update"].parts
    a2 = estimate(two, s, 64.0, HOST).device["update"].parts
    assert a2["activations"] == pytest.approx(a1["activations"] / 2)
    assert a2["logits"] == pytest.approx(a1["logits"] / 2)


def test_the_offload_advice_of_a_grpo_run_moves_the_reference_model_off_the_device_too() -> None:
    """GRPO (a reference model), Qwen3-8B on Megatron TP 2, 44 GiB NPUs, recompute on: rollout, update and the
    reference forward are all over budget; verl's offload feature offloads the reference's params as well, and
    only with the reference offloaded does everything fit, so that is the step the advice names."""
    s = shape(QWEN3_8B)
    lay = base_layout(device="npu", strategy="megatron", tp=2, rollout_tp=2, prompt=1024, response=1024, recompute=True,
                 recompute_uniform=True, has_ref=True)
    est = estimate(lay, s, 44.0, HOST)
    assert est.failing == ["rollout", "update", "reference"]
    assert advise(est, 44.0, HOST) == ["enable the `offload` feature (params/grads/optimizer to host RAM between "
                                       "phases)"]
    assert estimate(replace(lay, offload=True, optimizer_offload=True, ref_offload=True), s, 44.0, HOST).fits
    assert not estimate(replace(lay, offload=True, optimizer_offload=True, ref_offload=False), s, 44.0, HOST).fits
