"""Fidelity: every override list that the checks accept composes against the real verl config.

128 masks x {megatron, fsdp} x {dapo, grpo} x {sync, one_step_off_policy} x {0.7.0, 0.9.1} on NPU (and a
GPU sample), with Hydra's compose API against the verl wheels installed by ``.ci/run`` under
``.cache/verl/<version>`` (recipe configs that the 0.7.0 wheel lacks: ``tests/verl_overlay``).
Combinations the checks reject must carry an error finding and are never rendered.
"""

from __future__ import annotations

import os

import pytest

from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec

import verlcompose
from conftest import BASE_PATHS

VERSIONS = ("0.7.0", "0.9.1")


def _need(version: str) -> None:
    if not verlcompose.available(version):
        if os.environ.get("CI"):
            pytest.fail(f"verl {version} config tree missing under {verlcompose.CACHE} (.ci/run installs it)")
        pytest.skip(f"verl {version} not installed under {verlcompose.CACHE}")


def mask_of(i: int) -> str:
    return "".join("1" if i >> b & 1 else "0" for b in range(7))


def plan_for(version: str, strategy: str, algorithm: str, mode: str, mask: str, device: str = "npu", **extra):
    flags = {
        **BASE_PATHS,
        "verl_version": version,
        "strategy": strategy,
        "algorithm": algorithm,
        "mode": mode,
        "device": device,
        "features.mask": mask,
        **extra,
    }
    if mode == "one_step_off_policy":
        flags.setdefault("train.tensor_parallel", 2)  # 4 trainer devices: TP2 x PP2
    return make_plan(load_spec(None, flags=flags, environ={}))


def _grouped(*values: str) -> object:
    """One verl version's composition tests run in one worker process (``--dist loadgroup``), so that they
    share tests/verlcompose.py's memoised compositions."""
    return pytest.param(*values, marks=pytest.mark.xdist_group(f"verl-{values[0]}"))


MATRIX = [
    _grouped(v, s, a, m)
    for v in VERSIONS
    for s in ("megatron", "fsdp")
    for a in ("dapo", "grpo")
    for m in ("sync", "one_step_off_policy")
]
GROUPED_VERSIONS = [_grouped(v) for v in VERSIONS]


@pytest.mark.parametrize(("version", "strategy", "algorithm", "mode"), MATRIX)
def test_every_accepted_mask_composes(version: str, strategy: str, algorithm: str, mode: str) -> None:
    _need(version)
    accepted: list[list[str]] = []
    accepted_masks: list[str] = []
    rejected: list[str] = []
    entry = None
    for i in range(128):
        mask = mask_of(i)
        plan = plan_for(version, strategy, algorithm, mode, mask)
        if plan.ok:
            accepted.append(plan.command.override_texts())
            accepted_masks.append(mask)
            entry = plan.command.entry
        else:
            assert any(f.severity.value == "error" for f in plan.findings)
            rejected.append(mask)
    # FSDP has no swap optimizer (bit 5) and no VPP (bit 6): exactly those masks are rejected.
    if strategy == "fsdp":
        assert rejected == [m for m in map(mask_of, range(128)) if m[5] == "1" or m[6] == "1"]
    else:
        assert rejected == []
    assert entry is not None
    results = verlcompose.compose_many(version, entry.config_dir, entry.config_name, accepted)
    failures = [(m, r) for m, r in zip(accepted_masks, results, strict=True) if r is not None]
    assert not failures, failures[:3]


@pytest.mark.parametrize("version", GROUPED_VERSIONS)
@pytest.mark.parametrize("strategy", ["megatron", "fsdp", "fsdp2"])
def test_gpu_and_fsdp2_samples_compose(version: str, strategy: str) -> None:
    _need(version)
    for algorithm in ("dapo", "grpo"):
        masks = ["0000000", "1111100", "0010100", "1100000"] + (["1111111", "0000011"] if strategy == "megatron" else [])
        batches = []
        entry = None
        for mask in masks:
            for device in ("gpu", "npu"):
                plan = plan_for(version, strategy, algorithm, "sync", mask, device=device)
                if device == "gpu" and mask[5] == "1":
                    assert not plan.ok  # swap optimizer is NPU-only
                    continue
                assert plan.ok, [f.line() for f in plan.findings]
                batches.append(plan.command.override_texts())
                entry = plan.command.entry
        assert entry is not None
        results = verlcompose.compose_many(version, entry.config_dir, entry.config_name, batches)
        assert [r for r in results if r] == []


def _composed(version: str, plan) -> dict:
    e = plan.command.entry
    return verlcompose.compose(version, e.config_dir, e.config_name, plan.command.override_texts())


@pytest.mark.parametrize("version", VERSIONS)
def test_composed_values_are_what_the_features_mean(version: str) -> None:
    _need(version)
    cfg = _composed(version, plan_for(version, "megatron", "dapo", "sync", "1111111"))
    mt = cfg["actor_rollout_ref"]["actor"]["megatron"]
    assert mt["param_offload"] is True
    assert mt["optimizer_offload"] is False  # swap optimizer forces optimizer offload off
    assert mt["override_transformer_config"]["swap_optimizer"] is True
    assert mt["override_transformer_config"]["recompute_granularity"] == "full"
    assert mt["override_transformer_config"]["recompute_method"] == "block"
    assert mt["override_transformer_config"]["recompute_num_layers"] == 8
    assert mt["virtual_pipeline_model_parallel_size"] == 2
    # NPU: the Ascend docs turn mbridge off for VPP; only 0.7.0's worker accepts that (F1).
    assert mt["use_mbridge"] is (version != "0.7.0")
    assert mt["use_remove_padding"] is True
    assert mt["tensor_model_parallel_size"] == 4 and mt["pipeline_model_parallel_size"] == 2
    assert cfg["actor_rollout_ref"]["rollout"]["enable_prefix_caching"] is True
    assert cfg["actor_rollout_ref"]["actor"]["use_dynamic_bsz"] is True
    assert cfg["trainer"]["resume_mode"] == "auto"
    assert cfg["trainer"]["device"] == "npu"
    assert cfg["trainer"]["total_training_steps"] == 4
    assert cfg["algorithm"]["filter_groups"]["enable"] is True
    if version == "0.7.0":
        assert mt["grad_offload"] is True
        assert cfg["reward_model"]["reward_manager"] == "dapo"
    else:
        assert "grad_offload" not in mt
        assert cfg["reward"]["reward_manager"]["name"] == "dapo"

    cfg = _composed(version, plan_for(version, "megatron", "dapo", "sync", "0000000"))
    mt = cfg["actor_rollout_ref"]["actor"]["megatron"]
    assert mt["param_offload"] is False and mt["use_remove_padding"] is False
    # A default-off feature emits nothing: verl's default (prefix caching on) stands (D1).
    assert cfg["actor_rollout_ref"]["rollout"]["enable_prefix_caching"] is True
    assert mt["virtual_pipeline_model_parallel_size"] is None

    cfg = _composed(version, plan_for(version, "fsdp", "grpo", "one_step_off_policy", "0010100"))
    ar = cfg["actor_rollout_ref"]
    assert ar["actor"]["fsdp_config"]["param_offload"] is True
    assert ar["actor"]["fsdp_config"]["optimizer_offload"] is True
    assert ar["model"]["enable_gradient_checkpointing"] is True
    assert ar["hybrid_engine"] is False
    assert cfg["rollout"]["n_gpus_per_node"] == 4 and cfg["trainer"]["n_gpus_per_node"] == 4
    assert ar["actor"]["use_kl_loss"] is True


@pytest.mark.parametrize("version", VERSIONS)
def test_composition_catches_bad_keys(version: str) -> None:
    """The harness can fail: a misspelt extra override and the seed's 0.9.1-less grad_offload key."""
    _need(version)
    plan = plan_for(
        version, "megatron", "grpo", "sync", "0000000",
        extra_overrides=["actor_rollout_ref.actor.megatron.virtual_pipeline_parallel_size=2"],
    )
    assert plan.ok
    e = plan.command.entry
    [err] = verlcompose.compose_many(version, e.config_dir, e.config_name, [plan.command.override_texts()])
    assert err is not None and "Could not override" in err
    seed_key = ["actor_rollout_ref.actor.megatron.grad_offload=True"]
    plan = plan_for(version, "megatron", "grpo", "sync", "0000000", extra_overrides=seed_key)
    [err] = verlcompose.compose_many(version, e.config_dir, e.config_name, [plan.command.override_texts()])
    assert (err is None) == (version == "0.7.0")


@pytest.mark.parametrize("version", VERSIONS)
def test_audit_findings_in_the_composed_config(version: str) -> None:
    """The composed values behind the audit's findings (reference/fidelity-audit.md), per version."""
    _need(version)
    # F3: 0.7.0 one-step-off asserts actor.strategy == critic.strategy.
    cfg = _composed(version, plan_for(version, "fsdp2", "grpo", "one_step_off_policy", "1100000"))
    assert cfg["actor_rollout_ref"]["actor"]["strategy"] == "fsdp2"
    if version == "0.7.0":
        assert cfg["critic"]["strategy"] == "fsdp2"
    # S2: torch.compile off where the FSDP code reads it.
    cfg = _composed(version, plan_for(version, "fsdp", "grpo", "sync", "1100000"))
    ar = cfg["actor_rollout_ref"]
    if version == "0.9.1":
        assert ar["actor"]["fsdp_config"]["use_torch_compile"] is False
        assert ar["ref"]["fsdp_config"]["use_torch_compile"] is False
    else:
        assert ar["actor"]["use_torch_compile"] is False and ar["ref"]["use_torch_compile"] is False
    # M3: GRPO drops over-long prompts instead of aborting on truncation 'error'.
    assert cfg["data"]["filter_overlong_prompts"] is True and cfg["data"]["truncation"] == "error"
    # D1/D2: left at their defaults, prefix caching and chunked prefill keep verl's defaults (on).
    assert ar["rollout"]["enable_prefix_caching"] is True and ar["rollout"]["enable_chunked_prefill"] is True
    # F2: sglang on NPU uses the Ascend attention backend.
    cfg = _composed(version, plan_for(version, "fsdp", "grpo", "sync", "1100000", **{"train.rollout_engine": "sglang"}))
    assert cfg["actor_rollout_ref"]["rollout"]["engine_kwargs"]["sglang"]["attention_backend"] == "ascend"
    # S5: chunked prefill turned off explicitly on 0.9.1: max_model_len and the batch are prompt+response.
    plan = plan_for(version, "megatron", "grpo", "sync", "1100000", **{"features.disable": ["chunked_prefill"]})
    if version == "0.9.1":
        ro = _composed(version, plan)["actor_rollout_ref"]["rollout"]
        assert ro["enable_chunked_prefill"] is False
        assert ro["max_model_len"] == ro["max_num_batched_tokens"] == 2048 + 8192
    else:  # S1: 0.7.0 cannot turn it off: nothing is written and the plan says so
        assert not any("chunked_prefill" in o for o in plan.command.override_texts())
        assert plan.command.features["chunked_prefill"].label() == "verl default"


@pytest.mark.parametrize("version", GROUPED_VERSIONS)
def test_the_shared_composition_equals_a_full_compose(version: str) -> None:
    """tests/verlcompose.py composes the config-group part once and applies each list's key overrides to a
    copy with Hydra's own function: for lists that touch every feature, both strategies, one-step-off's recipe
    entry, a config-group override and a bad key, the result (or the error) is exactly a full compose's."""
    _need(version)
    cases = [
        ("megatron", "dapo", "sync", "1111111", {}),
        ("megatron", "grpo", "sync", "0000000", {}),
        ("fsdp", "grpo", "one_step_off_policy", "0010100", {}),
        ("fsdp", "grpo", "sync", "1100000", {"train.rollout_engine": "sglang"}),
        ("megatron", "grpo", "sync", "0000000",
         {"extra_overrides": ["actor_rollout_ref.actor.megatron.virtual_pipeline_parallel_size=2"]}),
        ("megatron", "grpo", "sync", "0000000", {"extra_overrides": ["actor_rollout_ref.actor.megatron.grad_offload=True"]}),
        ("fsdp", "grpo", "sync", "0000000", {"extra_overrides": ["actor_rollout_ref.rollout.no_such_key=1"]}),
        ("fsdp", "grpo", "sync", "0000000", {"extra_overrides": ["+actor_rollout_ref.rollout.new_key=1"]}),
    ]
    shared_used = 0
    for strategy, algorithm, mode, mask, extra in cases:
        plan = plan_for(version, strategy, algorithm, mode, mask, **extra)
        assert plan.ok, [f.line() for f in plan.findings]
        e, overrides = plan.command.entry, plan.command.override_texts()
        with verlcompose._initialised(version, e.config_dir):
            try:
                full: object = verlcompose._full(version, e.config_name, overrides)
            except Exception as exc:
                full = f"{type(exc).__name__}: {exc}"
            try:
                shared: object = verlcompose._shared(version, e.config_dir, e.config_name, overrides)
            except Exception as exc:
                shared = f"{type(exc).__name__}: {exc}"
        assert shared is not None, (mask, extra)  # none of these needs the fallback
        shared_used += 1
        assert shared == full, (strategy, mode, mask, extra)
    assert shared_used == len(cases)
    # a config-group choice goes into the shared part, and a wrong one is Hydra's error there too
    plan = plan_for(version, "fsdp", "grpo", "sync", "0000000")
    e, overrides = plan.command.entry, plan.command.override_texts()
    group = "actor@actor_rollout_ref.actor"
    with verlcompose._initialised(version, e.config_dir):
        choice = [*overrides, f"{group}=dp_actor"]
        assert verlcompose._shared(version, e.config_dir, e.config_name, choice) == verlcompose._full(
            version, e.config_name, choice)
        bad = [*overrides, f"{group}=no_such_option"]
        with pytest.raises(Exception, match="no_such_option") as full_err:
            verlcompose._full(version, e.config_name, bad)
        with pytest.raises(type(full_err.value), match="no_such_option"):
            verlcompose._shared(version, e.config_dir, e.config_name, bad)
