"""verlctl's presets against verl's own defaults: which keys an imported script may leave to verl, and which
settings verlctl makes on purpose (and says so).

* :data:`LEAVE_TO_VERL`: keys verlctl's tables (base rows, features) write as a preset of its own. A script
  that does not set one runs with verl's default, so ``verlctl import`` lists it in the spec's
  ``verl_defaults`` and verlctl then writes nothing for it (issue 23 G3: "a key the script leaves at verl's
  default is not emitted"). Each with why verlctl's own preset is not needed for the script's run.
* :data:`DECLARED`: keys verlctl writes on purpose even where the script leaves verl's default, because
  verl's default breaks the run verlctl launches. ``verlctl import`` lists each as "verlctl sets KEY=VALUE
  because ..." with its code, and the plan shows them (``verlctl_setting``).

``tests/inputs/test_import_parity.py`` checks both against the official scripts composed with verl's own config.
"""

from __future__ import annotations

from dataclasses import dataclass

AR = "actor_rollout_ref"


@dataclass(frozen=True)
class Leave:
    key: str
    why: str  # why verl's default is right for a script that leaves the key alone
    needs_feature: str | None = None  # only where the script turns this feature on (else verl needs the key)


LEAVE_TO_VERL: dict[str, Leave] = {
    x.key: x
    for x in (
        Leave("data.filter_overlong_prompts", "verl keeps over-long prompts by default; verlctl's data check warns "
              "about them (prompt_too_long)"),
        Leave("data.truncation", "verl's default 'error' stops at the first over-long prompt, as the script would"),
        Leave(f"{AR}.actor.clip_ratio_c", "the dual-clip bound of verl's policy loss (3.0)"),
        Leave(f"{AR}.actor.ppo_micro_batch_size_per_gpu", "with dynamic batching verl packs micro-batches by "
              "ppo_max_token_len_per_gpu and does not read the micro-batch size", "dynamic_batch"),
        Leave(f"{AR}.ref.log_prob_micro_batch_size_per_gpu", "with dynamic batching the reference packs by "
              "log_prob_max_token_len_per_gpu", "dynamic_batch"),
        Leave(f"{AR}.rollout.log_prob_micro_batch_size_per_gpu", "with dynamic batching the rollout's log-prob "
              "pass packs by log_prob_max_token_len_per_gpu", "dynamic_batch"),
        Leave(f"{AR}.actor.ppo_max_token_len_per_gpu", "verl's default token budget (16384) per device"),
        Leave(f"{AR}.ref.log_prob_max_token_len_per_gpu", "verl's default: the actor's ppo_max_token_len_per_gpu"),
        Leave(f"{AR}.rollout.log_prob_max_token_len_per_gpu", "verl's default: the actor's ppo_max_token_len_per_gpu"),
        Leave(f"{AR}.rollout.max_model_len", "verl's default (null) is the model's max_position_embeddings; the "
              "verdict check max_model_len warns where responses would be cut"),
        Leave(f"{AR}.rollout.max_num_batched_tokens", "without chunked prefill verl 0.9.1 raises it to max_model_len "
              "itself (workers/rollout/vllm_rollout/vllm_async_server.py:1113-1119 _validate_configs); verl's "
              "default (8192) otherwise"),
        Leave("algorithm.filter_groups.enable", "verl's default: no dynamic sampling (the script does not filter "
              "groups)"),
        Leave("algorithm.filter_groups.metric", "read only with filter_groups.enable"),
        Leave("algorithm.kl_ctrl.kl_coef", "read only with algorithm.use_kl_in_reward"),
        Leave(f"{AR}.ref.log_prob_use_dynamic_bsz", "verl's default follows actor.use_dynamic_bsz"),
        Leave("reward_model.overlong_buffer.enable", "the script leaves the overlong penalty off"),
        Leave("reward_model.overlong_buffer.len", "the script leaves the overlong penalty off"),
        Leave("reward_model.overlong_buffer.penalty_factor", "the script leaves the overlong penalty off"),
        Leave("reward_model.reward_kwargs.overlong_buffer_cfg.enable", "not in verl's config: the script's reward "
              "manager reads its own settings"),
        Leave("reward_model.reward_kwargs.overlong_buffer_cfg.len", "not in verl's config (see enable)"),
        Leave("reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor", "not in verl's config (see enable)"),
        Leave("reward_model.reward_kwargs.overlong_buffer_cfg.log", "not in verl's config (see enable)"),
        Leave("reward_model.reward_kwargs.max_resp_len", "not in verl's config (see enable)"),
    )
}


@dataclass(frozen=True)
class Declared:
    key: str
    code: str
    why: str


#: Settings verlctl makes on purpose where verl's default would break the run it launches.
DECLARED: dict[str, Declared] = {
    x.key: x
    for x in (
        Declared("trainer.default_local_dir", "checkpoints_on_host",
                 "checkpoints go to an absolute directory on the host (paths.checkpoints), not to verl's "
                 "relative checkpoints/<project>/<experiment> inside the container, so they outlive it and "
                 "every restart resumes from them"),
        Declared(f"{AR}.actor.use_torch_compile", "npu_no_torch_compile",
                 "torch.compile is not supported by torch_npu for these models (verl's official NPU scripts "
                 "turn it off)"),
        Declared(f"{AR}.ref.use_torch_compile", "npu_no_torch_compile",
                 "torch.compile is not supported by torch_npu for these models"),
        Declared(f"{AR}.actor.fsdp_config.use_torch_compile", "npu_no_torch_compile",
                 "torch.compile is not supported by torch_npu; verl 0.9.1's FSDP engine reads "
                 "fsdp_config.use_torch_compile (a script's actor.use_torch_compile=False is ignored there)"),
        Declared(f"{AR}.ref.fsdp_config.use_torch_compile", "npu_no_torch_compile",
                 "torch.compile is not supported by torch_npu (verl 0.9.1 reads fsdp_config.use_torch_compile)"),
    )
}


def leave_to_verl(key: str, features_on: set[str]) -> bool:
    """An import may leave ``key`` to verl (the script does not set it)."""
    x = LEAVE_TO_VERL.get(key)
    return x is not None and (x.needs_feature is None or x.needs_feature in features_on)


#: Spec fields whose verlctl default differs from verl's: a script that does not set the key imports verl's
#: default (Hydra key -> spec path, verl's default; the same in 0.7.0 and 0.9.1:
#: verl/trainer/config/data/legacy_data.yaml:42 train_batch_size: 1024, rollout/rollout.yaml n: 1).
SPEC_FROM_VERL: dict[str, tuple[str, int | str]] = {
    "data.train_batch_size": ("train.train_batch_size", 1024),
    f"{AR}.rollout.n": ("train.responses_per_prompt", 1),
    # verl/trainer/config/ppo_trainer.yaml (0.7.0:135,138; 0.9.1:150,153): the run's names in the loggers and in
    # verl's default checkpoint directory checkpoints/${project_name}/${experiment_name}
    "trainer.project_name": ("logging.project", "verl_examples"),
    "trainer.experiment_name": ("logging.experiment", "gsm8k"),
}


def declared_settings(overrides: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(code, KEY=VALUE, why) of the DECLARED settings among a command's (key, text) override lines."""
    return [(DECLARED[key].code, text, DECLARED[key].why) for key, text in overrides if key in DECLARED]
