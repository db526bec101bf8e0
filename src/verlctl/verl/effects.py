"""The effect map: for every Hydra key verlctl can emit, the verl code that READS it, per verl version (and
strategy / rollout engine where the reader differs).

A key the code path of a version never reads is accepted by Hydra and does nothing: that is how settings went
silently ineffective before (``reference/fidelity-audit.md`` S1-S5). ``tests/verl/test_effect_map.py`` enumerates
every key ``plan`` emits over the supported combinations and fails for one without a reader here, and checks
each citation against the verl source under ``.cache/verl/<version>`` (the 0.7.0 recipe sources, which the
wheel lacks, are test fixtures under ``tests/fixtures/verl-source/v0.7.0/<path>.txt``).

A reader is ``path`` (relative to the version's source root: ``verl/...`` or ``recipe/...``) and ``reads``, a
regular expression that a line of that file matches: the line that reads the key (an attribute access, a
``.get``, a dataclass field read by the named code, or, for a config-group choice, the defaults list entry).
"""

from __future__ import annotations

from dataclasses import dataclass

V070 = "0.7.0"
V091 = "0.9.1"
VERSIONS = (V070, V091)


@dataclass(frozen=True)
class Reader:
    path: str
    reads: str  # regex matched against each line of ``path``
    strategies: frozenset[str] | None = None  # {"megatron"} or {"fsdp"} (fsdp2 counts as fsdp); None: any
    engines: frozenset[str] | None = None  # rollout engine ("vllm", "sglang"); None: any
    note: str = ""
    modes: frozenset[str] | None = None  # the trainer modes whose code path this is; None: any

    def covers(self, strategy: str, engine: str, mode: str | None = None) -> bool:
        family = "megatron" if strategy == "megatron" else "fsdp"
        return (
            (self.strategies is None or family in self.strategies)
            and (self.engines is None or engine in self.engines)
            and (mode is None or self.modes is None or mode in self.modes)
        )


MEG = frozenset({"megatron"})
FS = frozenset({"fsdp"})
VLLM = frozenset({"vllm"})
SGL = frozenset({"sglang"})


def r(path: str, reads: str, strategies: frozenset[str] | None = None, engines: frozenset[str] | None = None,
      note: str = "", modes: frozenset[str] | None = None) -> Reader:
    return Reader(path, reads, strategies, engines, note, modes)


def both(*readers: Reader) -> dict[str, tuple[Reader, ...]]:
    """The same readers in 0.7.0 and 0.9.1."""
    return {V070: readers, V091: readers}


RT = "verl/trainer/ppo/ray_trainer.py"
V1 = "verl/trainer/ppo/v1/trainer_base.py"
DP_ACTOR = "verl/workers/actor/dp_actor.py"
MEG_ACTOR = "verl/workers/actor/megatron_actor.py"
FSDP_W = "verl/workers/fsdp_workers.py"
MEG_W = "verl/workers/megatron_workers.py"
ENGINE_W = "verl/workers/engine_workers.py"
FSDP_E = "verl/workers/engine/fsdp/transformer_impl.py"
MEG_E = "verl/workers/engine/megatron/transformer_impl.py"
MS_E = "verl/workers/engine/mindspeed/transformer_impl.py"
LOSSES = "verl/workers/utils/losses.py"
ALGOS = "verl/trainer/ppo/core_algos.py"
VLLM_S = "verl/workers/rollout/vllm_rollout/vllm_async_server.py"
SGL_S = "verl/workers/rollout/sglang_rollout/async_sglang_server.py"
DATASET = "verl/utils/dataset/rl_dataset.py"
DAPO_RM = "verl/experimental/reward_loop/reward_manager/dapo.py"
REWARD_LOOP = "verl/experimental/reward_loop/reward_loop.py"
REC_DAPO = "recipe/dapo/main_dapo.py"
REC_DAPO_T = "recipe/dapo/dapo_ray_trainer.py"
REC_OSO = "recipe/one_step_off_policy/main_ppo.py"
REC_OSO_T = "recipe/one_step_off_policy/ray_trainer.py"
OSO_091 = "verl/experimental/one_step_off_policy/main_ppo.py"
MAIN_070 = "verl/trainer/main_ppo.py"
MAIN_091 = "verl/trainer/main_ppo.py"
CFG_091 = "verl/workers/config/engine.py"
SEP_T = "verl/trainer/ppo/v1/trainer_separate_async.py"
COL_T = "verl/trainer/ppo/v1/trainer_colocate_async.py"
FA_MAIN = "verl/experimental/fully_async_policy/fully_async_main.py"
FA_T = "verl/experimental/fully_async_policy/fully_async_trainer.py"
FA_R = "verl/experimental/fully_async_policy/fully_async_rollouter.py"
CKPT_E = "verl/checkpoint_engine/base.py"
OSO_M = frozenset({"one_step_off_policy"})
SEP_M = frozenset({"separate_async"})
COL_M = frozenset({"colocate_async"})
FA_M = frozenset({"fully_async"})

AR = "actor_rollout_ref"

EFFECTS: dict[str, dict[str, tuple[Reader, ...]]] = {
    # ---------------------------------------------------------------------------------------- data
    "data.train_files": {V070: (r(RT, r"data\.train_files"),), V091: (r(V1, r"data\.train_files"),)},
    "data.val_files": {V070: (r(RT, r"data\.val_files"),), V091: (r(V1, r"data\.val_files"),)},
    "data.prompt_key": both(r(DATASET, r'config\.get\("prompt_key"')),
    "data.max_prompt_length": both(r(DATASET, r'config\.get\("max_prompt_length"')),
    "data.max_response_length": both(
        r("verl/trainer/config/rollout/rollout.yaml", r"^response_length: \$\{oc\.select:data\.max_response_length",
          note="rollout.response_length, which the rollout servers read"),
    ),
    "data.train_batch_size": {V070: (r(RT, r"data\.train_batch_size"),), V091: (r(V1, r"data\.train_batch_size"),)},
    "data.truncation": both(r(DATASET, r'config\.get\("truncation"')),
    "data.filter_overlong_prompts": both(r(DATASET, r'config\.get\("filter_overlong_prompts"')),
    "data.gen_batch_size": {V070: (r(RT, r'data\.get\("gen_batch_size"'),)},
    # ---------------------------------------------------------------------------------------- model / actor
    f"{AR}.model.path": both(r("verl/workers/config/model.py", r"copy_to_local\(self\.path")),
    f"{AR}.actor.optim.lr": {
        V070: (r("verl/workers/config/optimizer.py", r'"lr": config\.lr', FS),
               r("verl/utils/megatron/optimizer.py", r'"lr": optim_config\.lr', MEG)),
        V091: (r("verl/workers/config/optimizer.py", r'"lr": config\.lr', FS),
               r("verl/utils/megatron/optimizer.py", r'"lr": optim_config\.lr', MEG)),
    },
    f"{AR}.actor.optim.lr_warmup_steps": {
        V070: (r(FSDP_W, r"lr_warmup_steps", FS), r("verl/utils/megatron/optimizer.py", r"lr_warmup_steps", MEG)),
        V091: (r(FSDP_E, r"lr_warmup_steps", FS), r("verl/utils/megatron/optimizer.py", r"lr_warmup_steps", MEG)),
    },
    f"{AR}.actor.ppo_mini_batch_size": {
        V070: (r(FSDP_W, r"actor\.ppo_mini_batch_size \*=", FS), r(MEG_W, r"actor\.ppo_mini_batch_size \*=", MEG)),
        V091: (r(V1, r"ppo_mini_batch_size"),),
    },
    f"{AR}.actor.ppo_micro_batch_size_per_gpu": {
        V070: (r(DP_ACTOR, r"self\.config\.ppo_micro_batch_size_per_gpu", FS),
               r(MEG_ACTOR, r"ppo_micro_batch_size_per_gpu", MEG)),
        V091: (r(ENGINE_W, r"ppo_micro_batch_size_per_gpu"),),
    },
    f"{AR}.ref.log_prob_micro_batch_size_per_gpu": {
        V070: (r(FSDP_W, r"ref\.log_prob_micro_batch_size_per_gpu", FS), r(MEG_W, r"log_prob_micro_batch_size_per_gpu", MEG)),
        V091: (r(ENGINE_W, r"log_prob_micro_batch_size_per_gpu"),),
    },
    f"{AR}.rollout.log_prob_micro_batch_size_per_gpu": {
        V070: (r(FSDP_W, r"rollout\.log_prob_micro_batch_size_per_gpu", FS), r(MEG_W, r"log_prob_micro_batch_size_per_gpu", MEG)),
        V091: (r(ENGINE_W, r"log_prob_micro_batch_size_per_gpu"),),
    },
    f"{AR}.actor.entropy_coeff": {
        V070: (r(DP_ACTOR, r"self\.config\.entropy_coeff", FS), r(MEG_ACTOR, r"entropy_coeff", MEG)),
        V091: (r(LOSSES, r"config\.entropy_coeff"),),
    },
    f"{AR}.actor.loss_agg_mode": {
        V070: (r(DP_ACTOR, r"self\.config\.loss_agg_mode", FS), r(MEG_ACTOR, r"loss_agg_mode", MEG)),
        V091: (r(LOSSES, r"config\.loss_agg_mode"),),
    },
    f"{AR}.actor.strategy": {
        V070: (r(MAIN_070, r"actor_rollout_ref\.actor\.strategy"),),
        V091: (r(ENGINE_W, r"actor_strategy = self\.config\.actor\.strategy"),),
    },
    "critic.strategy": {V070: (r(REC_OSO, r"assert config\.actor_rollout_ref\.actor\.strategy == config\.critic\.strategy"),)},
    f"{AR}.actor.use_torch_compile": {
        V070: (r(DP_ACTOR, r'self\.config\.get\("use_torch_compile", True\)', FS),),
    },
    f"{AR}.ref.use_torch_compile": {
        V070: (r(DP_ACTOR, r'self\.config\.get\("use_torch_compile", True\)', FS,
                 note="the reference model is a DataParallelPPOActor built from the ref config"),),
    },
    f"{AR}.actor.fsdp_config.use_torch_compile": {V091: (r(FSDP_E, r"self\.engine_config\.use_torch_compile", FS),)},
    f"{AR}.ref.fsdp_config.use_torch_compile": {V091: (r(FSDP_E, r"self\.engine_config\.use_torch_compile", FS),)},
    # ---------------------------------------------------------------------------------------- Megatron parallelism
    **{
        f"{AR}.actor.megatron.{key}": {
            V070: (r(MEG_W, rf"{key}=self\.config\.actor\.megatron\.{key}", MEG),),
            V091: (r(MEG_E, rf"{key}=self\.engine_config\.{key}", MEG),),
        }
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
    },
    # The reference model's Megatron config (a ref-only worker builds from it; 0.9.1 gives it its own engine).
    **{
        f"{AR}.ref.megatron.{key}": {
            V070: (r(MEG_W, r"self\.config\.actor\.megatron if not self\._is_ref else self\.config\.ref\.megatron", MEG),),
            V091: (r(MEG_E, rf"{key}=self\.engine_config\.{key}", MEG),
                   r(ENGINE_W, r"ref_config: ActorConfig = omega_conf_to_dataclass\(self\.config\.ref\)", MEG)),
        }
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
    },
    f"{AR}.actor.megatron.virtual_pipeline_model_parallel_size": {
        V070: (r(MEG_W, r"virtual_pipeline_model_parallel_size", MEG),),
        V091: (r(MEG_E, r"virtual_pipeline_model_parallel_size", MEG),),
    },
    f"{AR}.actor.megatron.use_mbridge": {V070: (r(MEG_W, r"if megatron_config\.use_mbridge", MEG),)},
    f"{AR}.actor.megatron.use_distributed_optimizer": {
        V070: (r("verl/utils/megatron/optimizer.py", r"use_distributed_optimizer", MEG),),
        V091: (r("verl/utils/megatron/optimizer.py", r"use_distributed_optimizer", MEG),),
    },
    f"{AR}.actor.megatron.use_remove_padding": {
        V070: (r(MEG_ACTOR, r"self\.config\.megatron\.use_remove_padding", MEG),),
        V091: (r(MEG_E, r"engine_config\.use_remove_padding", MEG),),
    },
    # override_transformer_config is a free dict handed to Megatron's TransformerConfig (MindSpeed on NPU).
    **{
        f"{AR}.actor.megatron.override_transformer_config.{key}": {
            V070: (r(MEG_W, r"override_transformer_config", MEG),),
            V091: (r(MEG_E, r"override_transformer_config = ", MEG),),
        }
        for key in ("recompute_granularity", "recompute_method", "recompute_num_layers", "attention_backend")
    },
    **{
        f"{AR}.actor.megatron.override_transformer_config.{key}": {
            V070: (r(MEG_W, r'repatch\(self\.config\.actor\.megatron\.get\("override_transformer_config"', MEG,
                     note="MindSpeed repatch"),),
            V091: (r(MS_E, r"override_transformer_config", MEG, note="MindSpeed repatch"),),
        }
        for key in ("swap_optimizer", "use_flash_attn")
    },
    # ---------------------------------------------------------------------------------------- offload / memory
    f"{AR}.actor.megatron.param_offload": {
        V070: (r(MEG_W, r'actor\.megatron\.get\("param_offload"', MEG),), V091: (r(MEG_E, r"engine_config\.param_offload", MEG),),
    },
    f"{AR}.actor.megatron.optimizer_offload": {
        V070: (r(MEG_W, r'actor\.megatron\.get\("optimizer_offload"', MEG),),
        V091: (r(MEG_E, r"engine_config\.optimizer_offload", MEG),),
    },
    f"{AR}.actor.megatron.grad_offload": {V070: (r(MEG_W, r'actor\.megatron\.get\("grad_offload"', MEG),)},
    f"{AR}.ref.megatron.param_offload": {
        V070: (r(MEG_W, r'ref\.megatron\.get\("param_offload"', MEG),),
        V091: (r(MEG_E, r"engine_config\.param_offload", MEG),),
    },
    f"{AR}.actor.fsdp_config.param_offload": {
        V070: (r(FSDP_W, r'actor\.fsdp_config\.get\("param_offload"', FS),),
        V091: (r(FSDP_E, r"self\.engine_config\.param_offload", FS),),
    },
    f"{AR}.actor.fsdp_config.optimizer_offload": {
        V070: (r(FSDP_W, r'actor\.fsdp_config\.get\("optimizer_offload"', FS),),
        V091: (r(FSDP_E, r"self\.engine_config\.optimizer_offload", FS),),
    },
    f"{AR}.ref.fsdp_config.param_offload": {
        V070: (r(FSDP_W, r'ref\.fsdp_config\.get\("param_offload"', FS),),
        V091: (r(FSDP_E, r"self\.engine_config\.param_offload", FS),),
    },
    f"{AR}.model.enable_activation_offload": {
        V070: (r(FSDP_W, r"enable_activation_offload", FS),),
        V091: (r(FSDP_E, r"self\.model_config\.enable_activation_offload", FS),),
    },
    f"{AR}.model.enable_gradient_checkpointing": {
        V070: (r(FSDP_W, r"enable_gradient_checkpointing", FS),),
        V091: (r(FSDP_E, r"self\.model_config\.enable_gradient_checkpointing", FS),),
    },
    f"{AR}.actor.entropy_checkpointing": {
        V070: (r(DP_ACTOR, r"self\.config\.entropy_checkpointing", FS),),
        V091: (r(FSDP_E, r"entropy_checkpointing", FS),
               r("verl/trainer/config/actor/dp_actor.yaml", r"entropy_checkpointing: \$\{oc\.select:actor_rollout_ref\.actor\.entropy_checkpointing",
                 FS, note="actor.entropy_checkpointing reaches fsdp_config.entropy_checkpointing")),
    },
    # ---------------------------------------------------------------------------------------- features
    f"{AR}.model.use_remove_padding": {
        V070: (r(FSDP_W, r'use_remove_padding = self\.config\.model\.get\("use_remove_padding"', FS),
               r(ENGINE_W, r"use_remove_padding = self\.model_config\.use_remove_padding", MEG,
                 note="engine-worker path; the legacy Megatron actor reads actor.megatron.use_remove_padding")),
        V091: (r(ENGINE_W, r'model_config\.get\("use_remove_padding"'),),
    },
    f"{AR}.actor.use_dynamic_bsz": {
        V070: (r(DP_ACTOR, r"self\.config\.use_dynamic_bsz", FS), r(MEG_ACTOR, r"use_dynamic_bsz", MEG)),
        V091: (r(ENGINE_W, r"use_dynamic_bsz"),),
    },
    f"{AR}.ref.log_prob_use_dynamic_bsz": {
        V070: (r(FSDP_W, r"log_prob_use_dynamic_bsz", FS), r(MEG_W, r"log_prob_use_dynamic_bsz", MEG)),
        V091: (r(ENGINE_W, r"log_prob_use_dynamic_bsz"),),
    },
    f"{AR}.rollout.log_prob_use_dynamic_bsz": {
        V070: (r(FSDP_W, r"log_prob_use_dynamic_bsz", FS), r(MEG_W, r"log_prob_use_dynamic_bsz", MEG)),
        V091: (r(ENGINE_W, r"log_prob_use_dynamic_bsz"),),
    },
    f"{AR}.actor.ppo_max_token_len_per_gpu": {
        V070: (r(DP_ACTOR, r"self\.config\.ppo_max_token_len_per_gpu", FS), r(MEG_ACTOR, r"ppo_max_token_len_per_gpu", MEG)),
        V091: (r(ENGINE_W, r"ppo_max_token_len_per_gpu"),),
    },
    f"{AR}.ref.log_prob_max_token_len_per_gpu": {
        V070: (r(FSDP_W, r"log_prob_max_token_len_per_gpu", FS), r(MEG_W, r"log_prob_max_token_len_per_gpu", MEG)),
        V091: (r(ENGINE_W, r"log_prob_max_token_len_per_gpu"),),
    },
    f"{AR}.rollout.log_prob_max_token_len_per_gpu": {
        V070: (r(FSDP_W, r"log_prob_max_token_len_per_gpu", FS), r(MEG_W, r"log_prob_max_token_len_per_gpu", MEG)),
        V091: (r(ENGINE_W, r"log_prob_max_token_len_per_gpu"),),
    },
    f"{AR}.model.override_config.attn_implementation": {
        V070: (r(FSDP_W, r"attn_implementation", FS),),
        V091: (r("verl/workers/config/model.py", r"attn_implementation", FS),),
    },
    f"{AR}.rollout.enable_prefix_caching": both(r(VLLM_S, r'"enable_prefix_caching": self\.config\.enable_prefix_caching', engines=VLLM)),
    f"{AR}.rollout.enable_chunked_prefill": both(r(VLLM_S, r'"enable_chunked_prefill": self\.config\.enable_chunked_prefill', engines=VLLM)),
    f"{AR}.rollout.max_num_batched_tokens": {
        V091: (r(VLLM_S, r'"max_num_batched_tokens": self\.config\.max_num_batched_tokens', engines=VLLM),),
    },
    f"{AR}.rollout.max_model_len": {V091: (r(VLLM_S, r"if self\.config\.max_model_len is None", engines=VLLM),)},
    # ---------------------------------------------------------------------------------------- rollout
    f"{AR}.rollout.name": {
        V070: (r("verl/experimental/agent_loop/agent_loop.py", r"get_rollout_replica_class\(self\.config\.actor_rollout_ref\.rollout\.name\)"),),
        V091: (r("verl/workers/rollout/llm_server.py", r"self\.rollout_replica_class = get_rollout_replica_class\("),),
    },
    f"{AR}.rollout.n": {V070: (r(RT, r"rollout\.n\b"),), V091: (r(V1, r"rollout\.n\b"),)},
    f"{AR}.rollout.tensor_model_parallel_size": {
        V070: (r(FSDP_W, r"rollout\.tensor_model_parallel_size", FS), r(MEG_W, r"rollout\.tensor_model_parallel_size", MEG)),
        V091: (r(ENGINE_W, r"tensor_model_parallel_size"),),
    },
    f"{AR}.rollout.gpu_memory_utilization": both(
        r(VLLM_S, r'"gpu_memory_utilization": self\.config\.gpu_memory_utilization', engines=VLLM),
        r(SGL_S, r"self\.config\.gpu_memory_utilization", engines=SGL),
    ),
    f"{AR}.rollout.engine_kwargs.sglang.attention_backend": both(
        r(SGL_S, r'attention_backend = engine_kwargs\.pop\("attention_backend", None\)', engines=SGL),
    ),
    # ---------------------------------------------------------------------------------------- algorithm
    "algorithm.adv_estimator": {V070: (r(RT, r"adv_estimator"),), V091: (r(V1, r"adv_estimator"),)},
    "algorithm.use_kl_in_reward": {V070: (r(RT, r"use_kl_in_reward"),), V091: (r(V1, r"use_kl_in_reward"),)},
    "algorithm.kl_ctrl.kl_coef": both(r(ALGOS, r"kl_coef=kl_ctrl\.kl_coef")),
    f"{AR}.actor.use_kl_loss": {
        V070: (r(DP_ACTOR, r"self\.config\.use_kl_loss", FS), r(MEG_ACTOR, r"use_kl_loss", MEG)),
        V091: (r(LOSSES, r"config\.use_kl_loss"),),
    },
    f"{AR}.actor.kl_loss_coef": {
        V070: (r(DP_ACTOR, r"self\.config\.kl_loss_coef", FS), r(MEG_ACTOR, r"kl_loss_coef", MEG)),
        V091: (r(LOSSES, r"config\.kl_loss_coef"),),
    },
    f"{AR}.actor.kl_loss_type": {
        V070: (r(DP_ACTOR, r"self\.config\.kl_loss_type", FS), r(MEG_ACTOR, r"kl_loss_type", MEG)),
        V091: (r(LOSSES, r"config\.kl_loss_type"),),
    },
    f"{AR}.actor.clip_ratio_low": both(r(ALGOS, r"config\.clip_ratio_low")),
    f"{AR}.actor.clip_ratio_high": both(r(ALGOS, r"config\.clip_ratio_high")),
    f"{AR}.actor.clip_ratio_c": both(r(ALGOS, r"clip_ratio_c")),
    "algorithm.filter_groups.enable": {
        V070: (r(REC_DAPO_T, r"self\.config\.algorithm\.filter_groups\.enable"),),
        V091: (r(V1, r'filter_groups\.get\("enable", False\)'),),
    },
    "algorithm.filter_groups.metric": {
        V070: (r(REC_DAPO_T, r"self\.config\.algorithm\.filter_groups\.metric"),),
        V091: (r(V1, r'filter_metric = filter_groups\.get\("metric", None\)'),),
    },
    "algorithm.filter_groups.max_num_gen_batches": {
        V070: (r(REC_DAPO_T, r"self\.config\.algorithm\.filter_groups\.max_num_gen_batches"),),
    },
    # ---------------------------------------------------------------------------------------- reward
    "reward_model.reward_manager": {V070: (r(REWARD_LOOP, r"reward_manager"),)},
    **{
        f"reward_model.overlong_buffer.{key}": {V070: (r(REC_DAPO, r"overlong_buffer_cfg=config\.reward_model\.overlong_buffer"),)}
        for key in ("enable", "len", "penalty_factor")
    },
    **{
        f"{root}.reward_kwargs.overlong_buffer_cfg.{key}": {v: (r(DAPO_RM, rf"overlong_buffer_cfg\.{key}"),)}
        for root, v in (("reward_model", V070), ("reward", V091))
        for key in ("enable", "len", "penalty_factor", "log")
    },
    "reward_model.reward_kwargs.max_resp_len": {V070: (r(DAPO_RM, r"max_resp_len"),)},
    "reward.reward_kwargs.max_resp_len": {V091: (r(DAPO_RM, r"max_resp_len"),)},
    "reward.reward_manager.name": {V091: (r(REWARD_LOOP, r"reward_manager"),)},
    # ---------------------------------------------------------------------------------------- one-step-off
    f"{AR}.hybrid_engine": {
        V070: (r(REC_OSO_T, r"self\.hybrid_engine = config\.actor_rollout_ref\.hybrid_engine"),),
        V091: (r("verl/experimental/one_step_off_policy/ray_trainer.py", r"hybrid_engine", modes=OSO_M),
               r(FA_T, r"self\.hybrid_engine = config\.actor_rollout_ref\.hybrid_engine", modes=FA_M)),
    },
    "rollout.nnodes": {
        V070: (r(REC_OSO, r"config\.rollout\.nnodes"),),
        V091: (r(OSO_091, r"config\.rollout\.nnodes", modes=OSO_M),
               r(FA_MAIN, r"config\.actor_rollout_ref\.rollout\.nnodes = config\.rollout\.nnodes", modes=FA_M)),
    },
    "rollout.n_gpus_per_node": {
        V070: (r(REC_OSO, r"config\.rollout\.n_gpus_per_node"),),
        V091: (r(OSO_091, r"config\.rollout\.n_gpus_per_node", modes=OSO_M),
               r(FA_MAIN, r"config\.actor_rollout_ref\.rollout\.n_gpus_per_node = config\.rollout\.n_gpus_per_node",
                 modes=FA_M)),
    },
    # ---------------------------------------------------------------------------------------- 0.9.1 async trainers
    "trainer.use_v1": {V091: (r(MAIN_091, r"if config\.trainer\.use_v1:"),)},
    "trainer.v1.trainer_mode": {V091: (r(MAIN_091, r"get_trainer_cls\(config\.trainer\.v1\.trainer_mode\)"),)},
    "trainer.v1.colocate_async.num_warmup_batches": {
        V091: (r(COL_T, r"trainer\.v1\.colocate_async\.num_warmup_batches", modes=COL_M),),
    },
    "trainer.v1.separate_async.num_warmup_batches": {
        V091: (r(SEP_T, r"trainer\.v1\.separate_async\.num_warmup_batches", modes=SEP_M),),
    },
    "trainer.v1.separate_async.parameter_sync_step": {
        V091: (r(SEP_T, r"parameter_sync_step = config\.trainer\.v1\.separate_async\.parameter_sync_step", modes=SEP_M),
               r(V1, r'get\("parameter_sync_step", 1\)', note="the step loop: parameter_sync_step mini-batches")),
    },
    f"{AR}.rollout.nnodes": {V091: (r(SEP_T, r"rollout\.nnodes", modes=SEP_M),)},
    f"{AR}.rollout.n_gpus_per_node": {V091: (r(SEP_T, r"rollout\.n_gpus_per_node", modes=SEP_M),)},
    f"{AR}.rollout.checkpoint_engine.backend": {
        V091: (r(CKPT_E, r"self\.backend_cls = CheckpointEngineRegistry\.get\(config\.backend\)",
                 note="CheckpointEngineManager, built from actor_rollout_ref.rollout.checkpoint_engine"),),
    },
    "async_training.trigger_parameter_sync_step": {
        V091: (r(FA_T, r"self\.trigger_parameter_sync_step = config\.async_training\.trigger_parameter_sync_step",
                 modes=FA_M),),
    },
    "async_training.staleness_threshold": {
        V091: (r(FA_R, r'self\.staleness_threshold: float = config\.async_training\.get\("staleness_threshold"',
                 modes=FA_M),),
    },
    "rollout.total_rollout_steps": {
        V091: (r(FA_R, r"self\.config\.rollout\.total_rollout_steps is not None", modes=FA_M),),
    },
    # ---------------------------------------------------------------------------------------- trainer
    **{
        f"trainer.{key}": {V070: (r(RT, rf"trainer\.{key}\b"),), V091: (r(V1, rf"trainer\.{key}\b"),)}
        for key in (
            "logger", "project_name", "experiment_name", "total_training_steps", "save_freq", "test_freq",
            "default_local_dir", "resume_mode",
        )
    },
    "trainer.val_before_train": both(r(RT, r'trainer\.get\("val_before_train", True\)')),
    "trainer.nnodes": {V070: (r(MAIN_070, r"trainer\.nnodes"),), V091: (r(V1, r"trainer\.nnodes"),)},
    "trainer.n_gpus_per_node": {V070: (r(MAIN_070, r"trainer\.n_gpus_per_node"),), V091: (r(V1, r"trainer\.n_gpus_per_node"),)},
    "trainer.device": {V070: (r(RT, r"trainer\.device"),), V091: (r(V1, r"trainer\.device"),)},
    # ---------------------------------------------------------------------------------------- config groups
    "model_engine": {V091: (r("verl/trainer/config/ppo_trainer.yaml", r"^\s*- model_engine: dp"),)},
}


def readers(key: str, version: str, strategy: str, engine: str, mode: str | None = None) -> tuple[Reader, ...]:
    """The readers of ``key`` on this code path (empty: nothing reads it there); ``mode`` None: any mode."""
    return tuple(x for x in EFFECTS.get(key, {}).get(version, ()) if x.covers(strategy, engine, mode))
