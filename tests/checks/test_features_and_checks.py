"""Feature registry semantics and the spec checks (the rules verl enforces, and the seeds' non-rules)."""

from __future__ import annotations

import pytest

from verlctl.checks.findings import Severity
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec
from verlctl.verl.features import BY_BIT, FEATURES, mask_for

from conftest import BASE_PATHS, FIXTURES, run_cli


def plan(**flags):
    return make_plan(load_spec(None, flags={**BASE_PATHS, **flags}, environ={}))


def codes(p, severity: Severity | None = None) -> set[str]:
    return {f.code for f in p.findings if severity is None or f.severity is severity}


def overrides(p) -> list[str]:
    return p.command.override_texts()


def test_mask_bits_follow_the_seed_order() -> None:
    assert [BY_BIT[i].name for i in range(7)] == [
        "remove_padding", "dynamic_batch", "offload", "prefix_cache", "recompute", "swap_optimizer", "vpp",
    ]
    p = plan(**{"features.mask": "0010000"})
    states = p.command.features
    assert states["offload"].on and states["offload"].explicit_on
    assert not states["remove_padding"].on and not states["dynamic_batch"].on
    assert "mask 0010000 bit 2 = 1" in states["offload"].reason
    # Features outside the mask keep their category default.
    assert states["flash_attn"].on and not states["chunked_prefill"].on
    assert mask_for({n: s.on for n, s in states.items()}) == "0010000"


def test_categories_and_defaults_match_the_second_seed() -> None:
    cats = {f.name: (f.category.value, f.default_on) for f in FEATURES}
    for name in ("flash_attn", "dynamic_batch", "remove_padding", "gradient_checkpointing"):
        assert cats[name] == ("performance", True)
    for name in ("offload", "recompute"):
        assert cats[name] == ("memory", False)
    for name in ("prefix_cache", "chunked_prefill", "swap_optimizer", "vpp"):
        assert cats[name] == ("optional", False)


def test_swap_optimizer_forces_optimizer_offload_off_with_a_notice() -> None:
    p = plan(**{"features.enable": ["offload", "swap_optimizer"]})
    ov = overrides(p)
    assert "actor_rollout_ref.actor.megatron.optimizer_offload=False" in ov
    assert "actor_rollout_ref.actor.megatron.param_offload=True" in ov
    assert "+actor_rollout_ref.actor.megatron.override_transformer_config.swap_optimizer=True" in ov
    assert "actor_rollout_ref.actor.megatron.use_distributed_optimizer=True" in ov
    [notice] = [f for f in p.findings if f.code == "feature_conflict"]
    assert "optimizer offload is forced off" in notice.message
    assert p.ok


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        ({"features.enable": ["swap_optimizer"], "device": "gpu"}, "device"),
        ({"features.enable": ["swap_optimizer"], "strategy": "fsdp"}, "strategy"),
        ({"features.enable": ["vpp"], "strategy": "fsdp"}, "strategy"),
        ({"features.enable": ["vpp"], "train.pipeline_parallel": 1}, "train.pipeline_parallel"),
    ],
)
def test_prerequisites_are_errors_naming_the_field(flags: dict, field: str) -> None:
    p = plan(**flags)
    assert not p.ok
    assert field in {f.field for f in p.findings if f.code == "feature_prerequisite"}


def test_vpp_on_npu_turns_mbridge_off_and_says_why(tmp_path) -> None:
    p = plan(**{"features.enable": ["vpp"]})
    assert "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size=2" in overrides(p)
    assert "actor_rollout_ref.actor.megatron.use_mbridge=False" in overrides(p)
    rendered = p.render()
    assert "VPP and mbridge cannot be on together" in rendered.files["run_training.sh"]
    p = plan(**{"features.enable": ["vpp"], "device": "gpu"})
    assert not any("use_mbridge" in o for o in overrides(p))


def test_version_specific_keys_and_the_script_says_why() -> None:
    old = plan(**{"features.enable": ["offload"], "verl_version": "0.7.0"})
    new = plan(**{"features.enable": ["offload"], "verl_version": "0.9.1"})
    assert "actor_rollout_ref.actor.megatron.grad_offload=True" in overrides(old)
    assert not any("grad_offload" in o for o in overrides(new))
    assert "has no actor.megatron.grad_offload" in new.render().files["run_training.sh"]
    assert "actor_rollout_ref.actor.megatron.use_remove_padding=True" in overrides(old)
    assert "ignores model.use_remove_padding" in old.render().files["run_training.sh"]
    assert new.command.entry.module == "verl.trainer.main_ppo"
    assert overrides(new)[0] == "model_engine=megatron"


def test_entrypoints_per_version_algorithm_mode() -> None:
    cases = {
        ("0.7.0", "dapo", "sync", "megatron"): ("recipe.dapo.main_dapo", "dapo_megatron_trainer"),
        ("0.7.0", "dapo", "sync", "fsdp"): ("recipe.dapo.main_dapo", "dapo_trainer"),
        ("0.7.0", "grpo", "sync", "megatron"): ("verl.trainer.main_ppo", "ppo_megatron_trainer"),
        ("0.7.0", "grpo", "one_step_off_policy", "fsdp"): (
            "recipe.one_step_off_policy.main_ppo", "one_step_off_ppo_trainer"),
        ("0.9.1", "dapo", "sync", "megatron"): ("verl.trainer.main_ppo", "ppo_trainer"),
        ("0.9.1", "grpo", "one_step_off_policy", "megatron"): (
            "verl.experimental.one_step_off_policy.main_ppo", "one_step_off_ppo_megatron_trainer"),
    }
    for (version, algorithm, mode, strategy), (module, config) in cases.items():
        extra = {"train.tensor_parallel": 2} if mode != "sync" else {}
        p = plan(verl_version=version, algorithm=algorithm, mode=mode, strategy=strategy, **extra)
        assert (p.command.entry.module, p.command.entry.config_name) == (module, config)


def test_explicit_enable_disable_and_contradictions() -> None:
    p = plan(**{"features.disable": ["dynamic_batch"], "features.enable": ["prefix_cache"]})
    assert not p.command.features["dynamic_batch"].on and p.command.features["dynamic_batch"].explicit_off
    assert "actor_rollout_ref.rollout.enable_prefix_caching=True" in overrides(p)
    p = plan(**{"features.enable": ["offload"], "features.disable": ["offload"]})
    assert "feature_enable_disable" in codes(p, Severity.ERROR)
    p = plan(**{"features.mask": "0010000", "features.disable": ["offload"]})
    assert "feature_mask_disable" in codes(p, Severity.ERROR)
    p = plan(**{"features.enable": ["ofload"]})
    [f] = [f for f in p.findings if f.code == "unknown_feature"]
    assert "did you mean 'offload'" in (f.hint or "")


def test_fsdp_recompute_wins_over_gradient_checkpointing_off() -> None:
    p = plan(strategy="fsdp", **{"features.enable": ["recompute"], "features.disable": ["gradient_checkpointing"]})
    ov = overrides(p)
    assert "actor_rollout_ref.model.enable_gradient_checkpointing=True" in ov
    assert ov.count("actor_rollout_ref.model.enable_gradient_checkpointing=True") == 1
    assert not any(o == "actor_rollout_ref.model.enable_gradient_checkpointing=False" for o in ov)


# ------------------------------------------------------------------------------------- checks


def test_total_devices_must_be_divisible_by_tp_pp_cp() -> None:
    p = plan(**{"train.tensor_parallel": 3})
    [f] = [f for f in p.findings if f.code == "parallel_divisibility"]
    assert f.field == "train.tensor_parallel" and "1, 2, 4, 8" in (f.hint or "")


def test_seed_rules_verl_does_not_enforce_are_only_informational() -> None:
    # TP4*PP1 on 8 devices per node violates the seed's (tp*pp) % npus_per_node rule; rollout TP 2 != TP 4.
    p = plan(**{"train.pipeline_parallel": 1, "train.rollout_tensor_parallel": 2})
    assert p.ok
    infos = {f.code for f in p.findings if f.severity is Severity.INFO}
    assert {"seed_rule_tp_pp_per_node", "seed_rule_gen_tp"} <= infos


def test_rollout_world_size_and_cross_node_replicas() -> None:
    p = plan(**{"train.rollout_tensor_parallel": 3})
    assert "rollout_divisibility" in codes(p, Severity.ERROR)
    p = plan(**{"cluster.nodes": ["a", "b"], "train.rollout_tensor_parallel": 16})
    assert p.ok
    p = plan(**{"cluster.devices": [0, 1, 2, 3, 4, 5], "cluster.nodes": ["a", "b"], "train.tensor_parallel": 2,
                "train.pipeline_parallel": 1, "train.rollout_tensor_parallel": 12,
                "train.train_batch_size": 36})
    assert "rollout_replica_nodes" not in codes(p)
    p = plan(**{"cluster.devices": [0, 1, 2, 3], "cluster.nodes": ["a", "b", "c", "d"], "train.tensor_parallel": 2,
                "train.pipeline_parallel": 1, "train.rollout_tensor_parallel": 8})
    assert "rollout_replica_nodes" not in codes(p)
    # 3 nodes x 4 devices, rollout TP 6: divides the 12 devices, but a replica would take 1.5 nodes.
    p = plan(**{"cluster.devices": [0, 1, 2, 3], "cluster.nodes": ["a", "b", "c"], "train.tensor_parallel": 2,
                "train.pipeline_parallel": 1, "train.rollout_tensor_parallel": 6, "train.train_batch_size": 24})
    assert codes(p, Severity.ERROR) == {"rollout_replica_nodes"}


def test_batch_arithmetic() -> None:
    p = plan(**{"train.mini_batch_size": 64})
    assert "mini_batch_size" in codes(p, Severity.ERROR)
    p = plan(**{"train.responses_per_prompt": 1})  # verl runs a group of one: a warning, not a refusal
    assert "rollout_n" in codes(p, Severity.WARNING) and p.ok
    # Without dynamic batch: the normalised mini batch must be divisible by the micro batch.
    p = plan(**{"features.disable": ["dynamic_batch"], "train.micro_batch_size_per_device": 3})
    assert "micro_batch_divisibility" in codes(p, Severity.ERROR)
    p = plan(**{"features.disable": ["dynamic_batch"], "train.micro_batch_size_per_device": 4})
    assert p.ok


def test_one_step_off_device_split_must_fit_the_node() -> None:
    p = plan(mode="one_step_off_policy", **{"train.trainer_devices": 6, "train.rollout_devices": 4,
                                           "train.tensor_parallel": 2, "train.pipeline_parallel": 1})
    assert "device_split" in codes(p, Severity.ERROR)
    p = plan(mode="one_step_off_policy", **{"train.tensor_parallel": 2})
    assert p.ok
    assert "trainer.n_gpus_per_node=4" in overrides(p) and "rollout.n_gpus_per_node=4" in overrides(p)


def test_cloud_swanlab_needs_host_and_key() -> None:
    p = plan(**{"logging.swanlab.enabled": True})
    assert {"swanlab_host", "swanlab_api_key"} <= codes(p, Severity.ERROR)
    p = plan(**{"logging.swanlab.enabled": True, "logging.swanlab.mode": "offline"})
    assert p.ok


def test_features_command_lists_registry_and_explains_a_mask() -> None:
    res = run_cli("features", "--json", "--mask", "1000001")
    assert res.code == 0
    doc = res.json()
    by = {r["name"]: r for r in doc["features"]}
    assert by["remove_padding"]["in_mask"] is True and by["vpp"]["in_mask"] is True
    assert by["offload"]["in_mask"] is False and "in_mask" not in by["flash_attn"]
    res = run_cli("features", "--mask", "10")
    assert res.code == 2 and res.err.startswith("error: --mask: invalid mask '10'")


def test_plan_with_errors_exits_2_and_writes_nothing(tmp_path) -> None:
    import yaml

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"paths": {"model": "/m", "train_files": "/t", "val_files": "/v"},
                                    "strategy": "fsdp", "features": {"mask": "0000011"}}))
    res = run_cli("plan", "-c", str(spec), "-o", str(tmp_path / "out"), "--json")
    assert res.code == 2
    assert {f["code"] for f in res.json()["findings"] if f["severity"] == "error"} == {"feature_prerequisite"}
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- the fidelity audit's findings


def only(p, code: str):
    [f] = [f for f in p.findings if f.code == code]
    return f


def test_f1_vpp_on_0_9_1_keeps_mbridge_and_warns() -> None:
    p = plan(**{"features.enable": ["vpp"], "verl_version": "0.9.1"})
    assert not any("use_mbridge" in o for o in overrides(p))
    f = only(p, "vpp_mbridge_unverified")
    assert f.severity is Severity.WARNING and "use_mbridge must be True" in f.message
    assert "transformer_impl.py:191" in f.message
    assert "vpp_mbridge_unverified" not in codes(plan(**{"features.enable": ["vpp"], "verl_version": "0.7.0"}))


def test_f2_sglang_on_npu_uses_the_ascend_attention_backend() -> None:
    key = "+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=ascend"
    assert key in overrides(plan(**{"train.rollout_engine": "sglang"}))
    assert key not in overrides(plan(**{"train.rollout_engine": "sglang", "device": "gpu"}))
    assert key not in overrides(plan())


def test_f3_fsdp2_one_step_off_on_0_7_0_sets_the_critic_strategy() -> None:
    p = plan(mode="one_step_off_policy", strategy="fsdp2", algorithm="grpo", verl_version="0.7.0")
    assert "critic.strategy=fsdp2" in overrides(p)


def test_f5_0_9_1_mini_batch_times_n_must_split_over_dp() -> None:
    flags = {"verl_version": "0.9.1", "strategy": "fsdp", "algorithm": "grpo", "train.train_batch_size": 6,
             "train.mini_batch_size": 3, "train.responses_per_prompt": 4}
    f = only(plan(**flags), "mini_batch_dp")
    assert f.severity is Severity.ERROR and "3*4 = 12" in f.message and "8 data-parallel" in f.message
    assert "engine_workers.py:267" in f.message
    assert "mini_batch_dp" not in codes(plan(**{**flags, "verl_version": "0.7.0"}))
    assert "mini_batch_dp" not in codes(plan(**{**flags, "train.mini_batch_size": 2, "train.train_batch_size": 4}))


def test_f6_0_7_0_fsdp_micro_rule_holds_with_dynamic_batching() -> None:
    flags = {"strategy": "fsdp", "algorithm": "grpo", "train.micro_batch_size_per_device": 3}
    p = plan(**flags)
    assert p.command.features["dynamic_batch"].on
    f = only(p, "micro_batch_divisibility")
    assert "even with dynamic batching" in f.message and "fsdp_workers.py:256" in f.message
    # 0.9.1 and Megatron do not assert it with dynamic batching.
    assert "micro_batch_divisibility" not in codes(plan(**{**flags, "verl_version": "0.9.1"}))
    assert "micro_batch_divisibility" not in codes(plan(**{**flags, "strategy": "megatron"}))


def test_f8_0_7_0_agent_loop_needs_equal_chunks() -> None:
    flags = {"algorithm": "grpo", "train.train_batch_size": 3, "train.responses_per_prompt": 5,
             "train.mini_batch_size": 3, "cluster.devices": [0], "strategy": "fsdp"}
    f = only(plan(**flags), "agent_loop_chunks")
    assert f.severity is Severity.ERROR and "15 sequences" in f.message and "8 equal chunks" in f.message
    assert "agent_loop_chunks" not in codes(plan(**{**flags, "verl_version": "0.9.1"}))
    # The DAPO generation batch is what is chunked; an explicit num_workers is honoured.
    dapo = {**flags, "algorithm": "dapo", "train.gen_batch_size": 3, "train.train_batch_size": 8}
    assert only(plan(**dapo), "agent_loop_chunks").field == "train.gen_batch_size"
    ok = {**flags, "extra_overrides": ["actor_rollout_ref.rollout.agent.num_workers=5"]}
    assert "agent_loop_chunks" not in codes(plan(**ok))


def test_f7_uniform_recompute_layers_must_divide_the_stage(tmp_path) -> None:
    import json as _json

    from verlctl.checks.model_checks import check_model_fit
    from verlctl.detect.models import inspect_model

    from launch_support import write_model

    d = tmp_path / "Qwen3-8B"
    write_model(d)
    cfg = _json.loads((d / "config.json").read_text())
    cfg.update(num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8)
    (d / "config.json").write_text(_json.dumps(cfg))
    model = inspect_model(str(d))
    flags = {"features.recompute_method": "uniform", "features.recompute_num_layers": 7,
             "train.pipeline_parallel": 2, "train.tensor_parallel": 4}
    spec = load_spec(None, flags={**BASE_PATHS, **flags}, environ={}).spec
    [f] = [f for f in check_model_fit(spec, model, recompute_on=True) if f.code == "model_recompute_layers"]
    assert "18 per pipeline stage" in f.message and f.field == "features.recompute_num_layers"
    assert "1, 2, 3, 6, 9, 18" in (f.hint or "")
    assert not check_model_fit(spec, model, recompute_on=False)
    spec6 = load_spec(None, flags={**BASE_PATHS, **flags, "features.recompute_num_layers": 6}, environ={}).spec
    assert not check_model_fit(spec6, model, recompute_on=True)


def test_f9_noset_only_with_devices_0_to_n_minus_1() -> None:
    noset = "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"
    assert plan().command.env[noset] == "1"
    sub = plan(**{"cluster.devices": [4, 5, 6, 7], "train.tensor_parallel": 4, "train.pipeline_parallel": 1})
    assert noset not in sub.command.env
    assert sub.command.env["ASCEND_RT_VISIBLE_DEVICES"] == "4,5,6,7"


def test_one_step_off_leaves_noset_unset_as_its_official_npu_script_does() -> None:
    """verl's one-step-off NPU script (8 rollout + 8 training NPUs on one node) exports no NOSET; with it, a
    disaggregated placement puts tensors on the wrong device (reference A3: verl#2971, verl-omni PR#227)."""
    noset = "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"
    official = (FIXTURES / "official-scripts" / "0.7.0" / "recipe" / "one_step_off_policy"
                / "shell" / "grpo_qwen3_8b_gsm8k_fsdp2_8_8_npu.sh").read_text()
    assert noset not in official and "ASCEND_RT_VISIBLE_DEVICES" not in official
    for version in ("0.7.0", "0.9.1"):
        oso = plan(verl_version=version, mode="one_step_off_policy", strategy="fsdp",
                   **{"cluster.devices": list(range(16)), "train.rollout_devices": 8, "train.trainer_devices": 8})
        assert noset not in oso.command.env, version
        assert oso.command.env["ASCEND_RT_VISIBLE_DEVICES"] == ",".join(str(d) for d in range(16))


def test_s1_d1_d2_off_by_default_writes_nothing_and_0_7_0_cannot_turn_off() -> None:
    p = plan(verl_version="0.9.1")
    assert not any("prefix_caching" in o or "chunked_prefill" in o for o in overrides(p))
    assert p.command.features["prefix_cache"].label() == "verl default"
    off = plan(verl_version="0.9.1", **{"features.disable": ["prefix_cache", "chunked_prefill"]})
    assert "actor_rollout_ref.rollout.enable_prefix_caching=False" in overrides(off)
    assert "actor_rollout_ref.rollout.enable_chunked_prefill=False" in overrides(off)
    assert off.command.features["prefix_cache"].label() == "off"
    old = plan(verl_version="0.7.0", **{"features.disable": ["prefix_cache"]})
    assert not any("prefix_caching" in o for o in overrides(old))
    assert old.command.features["prefix_cache"].label() == "verl default"
    f = only(old, "feature_cannot_turn_off")
    assert "drops False" in f.message and f.severity is Severity.WARNING
    # A mask's 0 bit for a default-off feature leaves verl's default; for a default-on one it turns it off.
    m = plan(**{"features.mask": "0000000"})
    assert not any("prefix_caching" in o for o in overrides(m))
    assert "actor_rollout_ref.model.use_remove_padding=False" in overrides(m)


def test_s3_0_9_1_dapo_drops_keys_its_trainer_ignores() -> None:
    p = plan(verl_version="0.9.1", **{"train.gen_batch_size": 64})
    assert not any("max_num_gen_batches" in o or "gen_batch_size" in o for o in overrides(p))
    old = plan(verl_version="0.7.0", **{"train.gen_batch_size": 64})
    assert "data.gen_batch_size=64" in overrides(old)
    assert "algorithm.filter_groups.max_num_gen_batches=10" in overrides(old)


def test_s4_vllm_only_features_are_na_with_sglang() -> None:
    p = plan(**{"train.rollout_engine": "sglang", "features.enable": ["prefix_cache"]})
    st = p.command.features["prefix_cache"]
    assert st.label() == "n/a" and "sglang" in st.reason
    assert p.command.features["chunked_prefill"].label() == "n/a"
    assert not any("prefix_caching" in o or "batched_tokens" in o for o in overrides(p))


def test_s2_torch_compile_keys_where_the_code_reads_them() -> None:
    new = overrides(plan(verl_version="0.9.1", strategy="fsdp", algorithm="grpo"))
    assert "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False" in new
    assert "actor_rollout_ref.actor.use_torch_compile=False" not in new
    assert not any("use_torch_compile" in o for o in overrides(plan()))  # Megatron reads neither key


def test_s7_a_note_stays_with_its_feature() -> None:
    text = plan(verl_version="0.9.1", **{"features.enable": ["offload", "prefix_cache"]}).render().files["run_training.sh"]
    pfx = text.index("# feature prefix_cache")
    assert "has no actor.megatron.grad_offload" in text[:pfx]
    assert "grad_offload" not in text[pfx:]


def test_m3_grpo_filters_over_long_prompts() -> None:
    assert "data.filter_overlong_prompts=True" in overrides(plan(algorithm="grpo"))
    assert "data.truncation=left" in overrides(plan(algorithm="dapo"))


def test_m4_the_official_npu_environment() -> None:
    env = plan().command.env
    assert env["HCCL_EXEC_TIMEOUT"] == "3600" and env["HCCL_CONNECT_TIMEOUT"] == "3600"
    assert env["HCCL_ASYNC_ERROR_HANDLING"] == "0" and env["TASK_QUEUE_ENABLE"] == "1"
    assert env["RAY_DEDUP_LOGS"] == "0" and env["HYDRA_FULL_ERROR"] == "1"
    assert env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "0"  # no 30 s drain of a node whose head has gone
    assert plan(device="gpu", env={"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "5"}).command.env[
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "5"
    oso = plan(mode="one_step_off_policy", **{"train.tensor_parallel": 2}).command.env
    assert oso["HCCL_EXEC_TIMEOUT"] == "60000" and oso["HCCL_CONNECT_TIMEOUT"] == "7200"
    assert "HCCL_EXEC_TIMEOUT" not in plan(device="gpu").command.env
    text = plan().render().files["start_verl.sh"]
    assert "ulimit -n 32768" in text and '--node-ip-address="$NODE_IP"' in text
    # The user's env still wins.
    assert plan(env={"TASK_QUEUE_ENABLE": "2"}).command.env["TASK_QUEUE_ENABLE"] == "2"


def test_save_freq_beyond_the_last_step_is_reported() -> None:
    f = only(plan(**{"train.steps": 4, "train.save_freq": 10}), "checkpoints_after_last_step")
    assert f.severity is Severity.WARNING and f.field == "train.save_freq"
    assert "checkpoints_after_last_step" not in codes(plan(**{"train.steps": 4, "train.save_freq": 2}))


def test_m1_check_probes_the_recipe_entry_in_the_work_dir(tmp_path) -> None:
    from verlctl.checks.container import check_recipe
    from verlctl.orchestrator.machine_facts import collect_recipe

    workdir = tmp_path / "verl"
    workdir.mkdir()
    flags = {**BASE_PATHS, "container.runtime": "host", "container.workdir": str(workdir)}
    resolved = load_spec(None, flags=flags, environ={})
    missing = collect_recipe(resolved, None, 5)
    assert missing == "recipe/dapo/main_dapo.py"
    [f] = check_recipe(resolved.spec, missing)
    assert f.severity is Severity.ERROR and f.field == "container.workdir"
    assert "git submodule update --init recipe" in (f.hint or "")
    (workdir / "recipe" / "dapo").mkdir(parents=True)
    (workdir / "recipe" / "dapo" / "main_dapo.py").write_text("")
    assert collect_recipe(resolved, None, 5) is None
    # verl.trainer.main_ppo is in the wheel: nothing to probe.
    grpo = load_spec(None, flags={**flags, "algorithm": "grpo"}, environ={})
    assert collect_recipe(grpo, None, 5) is None


def test_m5_one_step_off_split_by_whole_nodes() -> None:
    nodes = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    flags = {"mode": "one_step_off_policy", "cluster.nodes": nodes, "train.rollout_nodes": 2,
             "train.tensor_parallel": 4, "train.pipeline_parallel": 2}
    p = plan(**flags)
    assert p.ok, [f.line() for f in p.findings]
    ov = overrides(p)
    for o in ("trainer.nnodes=2", "trainer.n_gpus_per_node=8", "rollout.nnodes=2", "rollout.n_gpus_per_node=8"):
        assert o in ov
    # With one rollout node the trainer has 3 nodes x 8 devices: TP4*PP2 leaves DP 3, which 256 sequences
    # do not split over: the batch rules use the trainer's own world.
    assert "batch_dp_divisibility" in codes(plan(**{**flags, "train.rollout_nodes": 1}))
    f = only(plan(**{**flags, "train.rollout_nodes": 4}), "node_split")
    assert f.field == "train.rollout_nodes" and f.severity is Severity.ERROR
    assert "device_split" in codes(plan(**{**flags, "train.rollout_devices": 9}))


def test_s5_chunked_prefill_off_on_0_9_1_bounds_max_model_len() -> None:
    flags = {"verl_version": "0.9.1", "features.disable": ["chunked_prefill"]}
    ov = overrides(plan(**flags))
    assert "actor_rollout_ref.rollout.max_model_len=10240" in ov  # 2048 + 8192, not max_position_embeddings
    assert "actor_rollout_ref.rollout.max_num_batched_tokens=10240" in ov
    short = overrides(plan(**flags, **{"train.max_prompt_length": 512, "train.max_response_length": 512}))
    assert "actor_rollout_ref.rollout.max_model_len=1024" in short
    assert "actor_rollout_ref.rollout.max_num_batched_tokens=8192" in short  # never below verl's default
