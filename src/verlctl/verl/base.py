"""The overrides every run gets (data, model, algorithm, parallelism, trainer), as a declarative table.

Each row applies where its condition matches, in order. Feature overrides come after these rows and
``extra_overrides`` last. Sources: ``reference/verl.md`` §2 (DAPO/GRPO), §3 (parallelism), §4
(one-step-off), §6 (loggers), §7 (checkpoints).
"""

from __future__ import annotations

from dataclasses import dataclass

from verlctl.verl.table import AR, FSDP, MEGATRON, Ctx, Ov, When, when


@dataclass(frozen=True)
class Row:
    section: str
    when: When
    overrides: tuple[Ov, ...]
    note: str | None = None


def _files(paths: list[str] | None) -> object:
    paths = paths or []
    return paths[0] if len(paths) == 1 else list(paths)


def _logger(c: Ctx) -> list[str]:
    out = []
    if c.spec.logging.console:
        out.append("console")
    if c.spec.logging.swanlab.enabled:
        out.append("swanlab")
    return out or ["console"]


def _overlong_len(c: Ctx) -> int:
    # DAPO recipe: 4096-token buffer for 8k-20k responses; never more than half the response.
    return min(4096, c.spec.train.max_response_length // 2)


MT = f"{AR}.actor.megatron"
REF_MT = f"{AR}.ref.megatron"
DAPO = {"dapo"}
GRPO = {"grpo"}
SYNC = {"sync"}
OSO = {"one_step_off_policy"}
COLOCATE_ASYNC = {"colocate_async"}
SEPARATE_ASYNC = {"separate_async"}
FULLY_ASYNC = {"fully_async"}
V1_ASYNC = COLOCATE_ASYNC | SEPARATE_ASYNC

ROWS: tuple[Row, ...] = (
    Row(
        "data",
        when(),
        (
            Ov("data.train_files", lambda c: _files(c.spec.paths.train_files)),
            Ov("data.val_files", lambda c: _files(c.spec.paths.val_files)),
            Ov("data.prompt_key", "prompt"),
            Ov("data.max_prompt_length", lambda c: c.spec.train.max_prompt_length),
            Ov("data.max_response_length", lambda c: c.spec.train.max_response_length),
            Ov("data.train_batch_size", lambda c: c.spec.train.train_batch_size),
        ),
    ),
    Row("data", when(algorithms=DAPO), (Ov("data.truncation", "left"),)),
    Row(
        "data",
        when(algorithms=GRPO),
        (Ov("data.filter_overlong_prompts", True),),
        note="verl's default truncation is 'error': one over-long prompt would abort training; drop them instead",
    ),
    Row(
        "data",
        when(
            algorithms=DAPO, modes=SYNC, versions={"0.7.0"}, test=lambda c: c.spec.train.gen_batch_size is not None
        ),
        (Ov("data.gen_batch_size", lambda c: c.spec.train.gen_batch_size),),
    ),
    Row(
        "model",
        when(),
        (
            Ov(f"{AR}.model.path", lambda c: c.spec.paths.model),
            Ov(f"{AR}.actor.optim.lr", lambda c: c.spec.train.lr),
            Ov(f"{AR}.actor.ppo_mini_batch_size", lambda c: c.spec.train.mini_batch_size),
            Ov(f"{AR}.actor.ppo_micro_batch_size_per_gpu", lambda c: c.spec.train.micro_batch_size_per_device),
            Ov(f"{AR}.ref.log_prob_micro_batch_size_per_gpu", lambda c: c.spec.train.micro_batch_size_per_device),
            Ov(
                f"{AR}.rollout.log_prob_micro_batch_size_per_gpu",
                lambda c: c.spec.train.micro_batch_size_per_device,
            ),
            Ov(f"{AR}.actor.entropy_coeff", 0),
            Ov(f"{AR}.actor.loss_agg_mode", "token-mean"),
        ),
    ),
    Row(
        "model",
        when(test=lambda c: c.spec.train.warmup_steps is not None),
        (Ov(f"{AR}.actor.optim.lr_warmup_steps", lambda c: c.spec.train.warmup_steps),),
    ),
    Row("model", when(strategies={"fsdp2"}), (Ov(f"{AR}.actor.strategy", "fsdp2"),)),
    Row(
        "model",
        when(strategies={"fsdp2"}, versions={"0.7.0"}, modes=OSO),
        (Ov("critic.strategy", "fsdp2"),),
        note="the 0.7.0 one-step-off entry asserts actor.strategy == critic.strategy",
    ),
    Row(
        "model",
        when(devices={"npu"}, strategies=FSDP, versions={"0.7.0"}),
        (Ov(f"{AR}.actor.use_torch_compile", False), Ov(f"{AR}.ref.use_torch_compile", False)),
        note="torch.compile is not supported by torch_npu for these models (official NPU scripts disable it)",
    ),
    Row(
        "model",
        when(devices={"npu"}, strategies=FSDP, versions={"0.9.1"}),
        (
            Ov(f"{AR}.actor.fsdp_config.use_torch_compile", False),
            Ov(f"{AR}.ref.fsdp_config.use_torch_compile", False),
        ),
        note="torch.compile is not supported by torch_npu for these models; the 0.9.1 FSDP engine reads "
        "fsdp_config.use_torch_compile (actor.use_torch_compile is ignored there)",
    ),
    Row(
        "parallelism",
        when(strategies=MEGATRON),
        (
            Ov(f"{MT}.tensor_model_parallel_size", lambda c: c.spec.train.tensor_parallel),
            Ov(f"{MT}.pipeline_model_parallel_size", lambda c: c.spec.train.pipeline_parallel),
            Ov(f"{MT}.context_parallel_size", lambda c: c.spec.train.context_parallel),
            Ov(f"{REF_MT}.tensor_model_parallel_size", lambda c: c.spec.train.tensor_parallel),
            Ov(f"{REF_MT}.pipeline_model_parallel_size", lambda c: c.spec.train.pipeline_parallel),
            Ov(f"{REF_MT}.context_parallel_size", lambda c: c.spec.train.context_parallel),
        ),
    ),
    Row(
        "rollout",
        when(),
        (
            Ov(f"{AR}.rollout.name", lambda c: c.spec.train.rollout_engine),
            Ov(f"{AR}.rollout.n", lambda c: c.spec.train.responses_per_prompt),
            Ov(f"{AR}.rollout.tensor_model_parallel_size", lambda c: c.spec.train.rollout_tensor_parallel),
            Ov(f"{AR}.rollout.gpu_memory_utilization", lambda c: c.spec.train.rollout_memory_utilization),
        ),
    ),
    Row(
        "rollout",
        when(devices={"npu"}, test=lambda c: c.spec.train.rollout_engine == "sglang"),
        (Ov(f"{AR}.rollout.engine_kwargs.sglang.attention_backend", "ascend", prefix="+"),),
        note="without it verl's sglang server picks a CUDA attention backend (fa3 / flashinfer); the official "
        "NPU sglang scripts all set ascend",
    ),
    Row("algorithm", when(), (Ov("algorithm.adv_estimator", "grpo"), Ov("algorithm.use_kl_in_reward", False))),
    Row(
        "algorithm",
        when(algorithms=GRPO),
        (
            Ov(f"{AR}.actor.use_kl_loss", True),
            Ov(f"{AR}.actor.kl_loss_coef", 0.001),
            Ov(f"{AR}.actor.kl_loss_type", "low_var_kl"),
        ),
        note="GRPO: KL as a loss term (verl docs/algo/grpo.md)",
    ),
    Row(
        "algorithm",
        when(algorithms=DAPO),
        (
            Ov("algorithm.kl_ctrl.kl_coef", 0.0),
            Ov(f"{AR}.actor.use_kl_loss", False),
            Ov(f"{AR}.actor.kl_loss_coef", 0.0),
            Ov(f"{AR}.actor.clip_ratio_low", 0.2),
            Ov(f"{AR}.actor.clip_ratio_high", 0.28),
            Ov(f"{AR}.actor.clip_ratio_c", 10.0),
        ),
        note="DAPO: no KL, clip-higher (0.2 / 0.28), token-level loss",
    ),
    Row(
        "algorithm",
        when(algorithms=DAPO, modes=SYNC),
        (Ov("algorithm.filter_groups.enable", True), Ov("algorithm.filter_groups.metric", "acc")),
        note="DAPO dynamic sampling (filter groups whose rewards are all equal)",
    ),
    Row(
        "algorithm",
        when(algorithms=DAPO, modes=V1_ASYNC, versions={"0.9.1"}),
        (Ov("algorithm.filter_groups.enable", True), Ov("algorithm.filter_groups.metric", "acc")),
        note="DAPO dynamic sampling: the V1 replay buffer filters groups in every trainer_mode "
        "(trainer/ppo/v1/trainer_base.py _resolve_filter_groups_metric)",
    ),
    Row(
        "algorithm",
        when(algorithms=DAPO, modes=SYNC, versions={"0.7.0"}),
        (Ov("algorithm.filter_groups.max_num_gen_batches", 10),),
        note="0.7.0's DAPO trainer stops after this many generation batches per step (0.9.1's V1 trainer "
        "ignores the key and bounds generation with max_inflight_gen_batches instead)",
    ),
    Row(
        "reward",
        when(algorithms=DAPO, versions={"0.7.0"}, modes=SYNC),
        (
            Ov("reward_model.reward_manager", "dapo"),
            Ov("reward_model.overlong_buffer.enable", True),
            Ov("reward_model.overlong_buffer.len", _overlong_len),
            Ov("reward_model.overlong_buffer.penalty_factor", 1.0),
        ),
    ),
    Row(
        "reward",
        when(algorithms=DAPO, versions={"0.7.0"}, modes=OSO),
        (Ov("reward_model.reward_manager", "dapo"),),
    ),
    Row(
        "reward",
        when(algorithms=DAPO, versions={"0.7.0"}),
        (
            Ov("reward_model.reward_kwargs.overlong_buffer_cfg.enable", True, prefix="+"),
            Ov("reward_model.reward_kwargs.overlong_buffer_cfg.len", _overlong_len, prefix="+"),
            Ov("reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor", 1.0, prefix="+"),
            Ov("reward_model.reward_kwargs.overlong_buffer_cfg.log", False, prefix="+"),
            Ov("reward_model.reward_kwargs.max_resp_len", lambda c: c.spec.train.max_response_length, prefix="+"),
        ),
        note="0.7.0 computes rule rewards in the reward loop, which reads reward_model.reward_kwargs "
        "(reward_model.overlong_buffer alone is not applied there)",
    ),
    Row(
        "reward",
        when(algorithms=DAPO, versions={"0.9.1"}),
        (
            Ov("reward.reward_manager.name", "dapo"),
            Ov("reward.reward_kwargs.overlong_buffer_cfg.enable", True, prefix="+"),
            Ov("reward.reward_kwargs.overlong_buffer_cfg.len", _overlong_len, prefix="+"),
            Ov("reward.reward_kwargs.overlong_buffer_cfg.penalty_factor", 1.0, prefix="+"),
            Ov("reward.reward_kwargs.overlong_buffer_cfg.log", False, prefix="+"),
            Ov("reward.reward_kwargs.max_resp_len", lambda c: c.spec.train.max_response_length, prefix="+"),
        ),
        note="0.9.1 moved reward settings to reward.*; reward_kwargs is a free dict in the core config ('+')",
    ),
    Row(
        "one-step-off",
        when(modes=OSO | FULLY_ASYNC),
        (
            Ov(f"{AR}.hybrid_engine", False),
            Ov("rollout.nnodes", lambda c: c.rollout_nnodes),
            Ov("rollout.n_gpus_per_node", lambda c: c.spec.train.rollout_devices),
        ),
        note="trainer and rollout on separate devices of each node, or on separate whole nodes (rollout_nodes)",
    ),
    Row(
        "async",
        when(modes=V1_ASYNC, versions={"0.9.1"}),
        (Ov("trainer.use_v1", True), Ov("trainer.v1.trainer_mode", lambda c: c.spec.mode)),
        note="verl 0.9.1's V1 trainer (main_ppo.py: if config.trainer.use_v1; get_trainer_cls(trainer_mode)); "
        "use_v1 is written out because verl's neo branch plans to flip its default (verl #6999)",
    ),
    Row(
        "async",
        when(modes={"colocate_async"}, versions={"0.9.1"}, test=lambda c: c.spec.train.num_warmup_batches is not None),
        (Ov("trainer.v1.colocate_async.num_warmup_batches", lambda c: c.spec.train.num_warmup_batches),),
    ),
    Row(
        "async",
        when(modes={"separate_async"}, versions={"0.9.1"}, test=lambda c: c.spec.train.num_warmup_batches is not None),
        (Ov("trainer.v1.separate_async.num_warmup_batches", lambda c: c.spec.train.num_warmup_batches),),
    ),
    Row(
        "async",
        when(modes=SEPARATE_ASYNC, versions={"0.9.1"}),
        (
            Ov("trainer.v1.separate_async.parameter_sync_step", lambda c: c.spec.train.parameter_sync_step),
            Ov(f"{AR}.rollout.nnodes", lambda c: c.rollout_nnodes),
            Ov(f"{AR}.rollout.n_gpus_per_node", lambda c: c.spec.train.rollout_devices),
            Ov(f"{AR}.rollout.checkpoint_engine.backend", lambda c: c.spec.train.checkpoint_engine or "nccl"),
        ),
        note="the standalone rollout pool and the weight sync of separate_async "
        "(trainer_separate_async.py asserts nnodes > 0, n_gpus_per_node > 0, backend != naive); on NPU 'nccl' "
        "is verl's HCCL checkpoint engine (checkpoint_engine/hccl_checkpoint_engine.py registers it as nccl)",
    ),
    Row(
        "async",
        when(modes=FULLY_ASYNC, versions={"0.9.1"}),
        (
            Ov("data.train_batch_size", 0),
            Ov("async_training.trigger_parameter_sync_step", lambda c: c.spec.train.parameter_sync_step),
        ),
        note="fully async: the rollouter asserts data.train_batch_size == 0 and streams prompts one by one; the "
        "trainer takes parameter_sync_step mini-batches per step, so train.steps steps are "
        "steps*train_batch_size rollout prompts (fully_async_rollouter.py total_train_steps)",
    ),
    Row(
        "async",
        when(modes=FULLY_ASYNC, versions={"0.9.1"}, test=lambda c: c.spec.train.steps is not None),
        (Ov("rollout.total_rollout_steps", lambda c: (c.spec.train.steps or 0) * c.spec.train.train_batch_size),),
    ),
    Row(
        "async",
        when(modes=FULLY_ASYNC, versions={"0.9.1"}, test=lambda c: c.spec.train.staleness_threshold is not None),
        (Ov("async_training.staleness_threshold", lambda c: c.spec.train.staleness_threshold),),
    ),
    Row(
        "async",
        when(modes=FULLY_ASYNC, versions={"0.9.1"}, test=lambda c: c.spec.train.checkpoint_engine is not None),
        (Ov(f"{AR}.rollout.checkpoint_engine.backend", lambda c: c.spec.train.checkpoint_engine),),
    ),
    Row(
        "trainer",
        when(),
        (
            Ov("trainer.logger", _logger),
            Ov("trainer.project_name", lambda c: c.spec.logging.project),
            Ov("trainer.experiment_name", lambda c: c.spec.logging.experiment),
            Ov("trainer.nnodes", lambda c: c.trainer_nnodes),
            Ov("trainer.n_gpus_per_node", lambda c: c.train_devices_per_node),
            Ov("trainer.device", lambda c: "npu" if c.npu else "cuda"),
        ),
    ),
    Row(
        "trainer",
        # fully_async's trainer takes its step count from the rollouter (rollout.total_rollout_steps,
        # fully_async_rollouter.py:498-501, pushed by fully_async_main.py:90-92): nothing reads this key there
        when(test=lambda c: c.spec.train.steps is not None and c.spec.mode != "fully_async"),
        (Ov("trainer.total_training_steps", lambda c: c.spec.train.steps),),
    ),
    Row(
        "trainer",
        when(),
        (
            Ov("trainer.save_freq", lambda c: c.spec.train.save_freq),
            Ov("trainer.test_freq", lambda c: c.spec.train.test_freq),
            Ov("trainer.val_before_train", lambda c: c.spec.train.val_before_train),
            Ov("trainer.default_local_dir", lambda c: c.spec.paths.checkpoints),
            Ov("trainer.resume_mode", "auto"),
        ),
    ),
)
