"""The asserts of verl 0.9.1's async trainers as rules (``separate_async``, ``fully_async``), each with its
citation (file:line in the 0.9.1 wheel; ``tests/test_rule_parity.py`` checks them against the source).

The rules read the value each key will have in the composed config: the user's ``extra_overrides`` (passed
last, so they win) over what verlctl emits for the spec. What verlctl emits satisfies verl's asserts by
construction; an extra override (or a spec field) can still break them, and verl would then stop only after
Ray and the model are up. Registered in :data:`verlctl.checks.rules.RULES` when imported (checks/spec_checks.py imports it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from verlctl.checks.findings import Finding, Severity, error
from verlctl.checks.rules import V091, Cite, RuleCtx, rule

AR = "actor_rollout_ref"
SEP = "verl/trainer/ppo/v1/trainer_separate_async.py"
ROLLOUTER = "verl/experimental/fully_async_policy/fully_async_rollouter.py"
FA_TRAINER = "verl/experimental/fully_async_policy/fully_async_trainer.py"

_MISSING = object()


def _extra(ctx: RuleCtx, key: str) -> Any:
    """The value the user's extra overrides give ``key`` (the last one wins), or ``_MISSING``."""
    import yaml

    found: Any = _MISSING
    for raw in ctx.spec.extra_overrides:
        k, _, value = raw.partition("=")
        if k.lstrip("+~") != key:
            continue
        if k.startswith("~"):
            found = _MISSING
            continue
        try:
            found = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            found = value
    return found


def _value(ctx: RuleCtx, key: str, planned: Any) -> tuple[Any, str]:
    """(the effective value of ``key``, the field to name): an extra override, else what verlctl plans."""
    v = _extra(ctx, key)
    if v is not _MISSING:
        return v, "extra_overrides"
    return planned, ""


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _where(field: str, default: str) -> str:
    return field or default


@rule(
    "separate_async_batch",
    ("async_batch_sync_step",),
    Severity.ERROR,
    versions=(V091,),
    cites=(
        Cite(V091, SEP, 59, "assert train_batch_size == parameter_sync_step * ppo_mini_batch_size"),
        Cite(V091, "verl/trainer/ppo/v1/trainer_base.py", 535, "assert train_batch_size % self.parameter_sync_step == 0"),
    ),
)
def _sync_step(ctx: RuleCtx) -> Iterable[Finding]:
    """separate_async / fully_async: a step is parameter_sync_step mini-batches, the whole train batch."""
    if ctx.spec.mode not in ("separate_async", "fully_async"):
        return
    t = ctx.spec.train
    pss = t.parameter_sync_step
    mini = ctx.mini
    if pss is None:
        yield error(
            "async_batch_sync_step",
            f"train.mini_batch_size ({mini}) does not divide train.train_batch_size ({t.train_batch_size}): "
            f"{ctx.spec.mode} needs train_batch_size == parameter_sync_step * mini_batch_size"
            + (_cite(ctx) if ctx.spec.mode == "separate_async" else ""),
            "train.mini_batch_size",
            "choose a mini_batch_size that divides train_batch_size, or set train.parameter_sync_step",
        )
        return
    if t.train_batch_size != pss * mini:
        yield error(
            "async_batch_sync_step",
            f"train_batch_size ({t.train_batch_size}) != parameter_sync_step ({pss}) * mini_batch_size ({mini}) "
            f"= {pss * mini}: {ctx.spec.mode} trains parameter_sync_step mini-batches per weight sync"
            + (_cite(ctx) if ctx.spec.mode == "separate_async" else ""),
            "train.parameter_sync_step",
            f"set train.train_batch_size to {pss * mini}, or train.mini_batch_size to a divisor of it and "
            "parameter_sync_step = train_batch_size / mini_batch_size",
        )


def _cite(ctx: RuleCtx) -> str:
    from verlctl.checks.rules import RULES

    for r in RULES:
        if r.name == "separate_async_batch":
            return f" (verl {V091} {r.cites[0].path}:{r.cites[0].line})"
    return ""


@rule(
    "separate_async_pool",
    ("async_rollout_pool", "async_checkpoint_engine", "async_switch_disaggregation"),
    Severity.ERROR,
    versions=(V091,),
    cites=(
        Cite(V091, SEP, 64, "assert config.actor_rollout_ref.rollout.nnodes > 0"),
        Cite(V091, SEP, 65, "assert config.actor_rollout_ref.rollout.n_gpus_per_node > 0"),
        Cite(V091, SEP, 68, 'assert config.actor_rollout_ref.rollout.checkpoint_engine.backend != "naive"'),
        Cite(V091, SEP, 100, "raise ValueError("),
    ),
)
def _separate_pool(ctx: RuleCtx) -> Iterable[Finding]:
    """separate_async: a standalone rollout pool, a real checkpoint engine, a reward model on its own pool."""
    if ctx.spec.mode != "separate_async":
        return
    t = ctx.spec.train
    for key, planned in (("nnodes", ctx.rollout_nnodes), ("n_gpus_per_node", t.rollout_devices)):
        v, field = _value(ctx, f"{AR}.rollout.{key}", planned)
        n = _num(v)
        if n is None or n <= 0:
            yield error(
                "async_rollout_pool",
                f"{AR}.rollout.{key} is {v!r}: separate_async runs the rollout on its own pool and asserts it is "
                f"> 0 (verl {V091} {SEP}:{64 if key == 'nnodes' else 65})",
                _where(field, "train.rollout_devices"),
                f"remove the {AR}.rollout.{key} override (verlctl sets it from train.rollout_devices / "
                "train.rollout_nodes)",
            )
    backend, field = _value(ctx, f"{AR}.rollout.checkpoint_engine.backend", t.checkpoint_engine or "nccl")
    if backend == "naive":
        yield error(
            "async_checkpoint_engine",
            f"checkpoint_engine.backend is naive: separate_async syncs weights to a separate rollout pool and "
            f"refuses it (verl {V091} {SEP}:68)",
            _where(field, "train.checkpoint_engine"),
            "use train.checkpoint_engine: nccl (HCCL on NPU), nixl or mooncake, and drop the override",
        )
    switch, _ = _value(ctx, "trainer.v1.separate_async.hybrid_rollout.enable_switch", False)
    disagg, _ = _value(ctx, f"{AR}.rollout.disaggregation.enabled", False)
    if switch is True and disagg is True:
        yield error(
            "async_switch_disaggregation",
            "trainer.v1.separate_async.hybrid_rollout.enable_switch does not support rollout disaggregation "
            f"(prefill/decode): verl raises ValueError at start-up (verl {V091} {SEP}:100)",
            "extra_overrides",
            "drop one of the two overrides (enable_switch or rollout.disaggregation.enabled)",
        )


@rule(
    "async_reward_pool",
    ("async_reward_pool",),
    Severity.ERROR,
    versions=(V091,),
    cites=(
        Cite(V091, SEP, 72, "assert config.reward.reward_model.enable_resource_pool"),
        Cite(V091, ROLLOUTER, 362, "assert self.config.reward.reward_model.enable_resource_pool"),
    ),
)
def _reward_pool(ctx: RuleCtx) -> Iterable[Finding]:
    """separate_async / fully_async: a reward model runs on its own resource pool."""
    cites = {"separate_async": f"verl {V091} {SEP}:72", "fully_async": f"verl {V091} {ROLLOUTER}:362"}
    cite = cites.get(ctx.spec.mode)
    if cite is None:
        return
    enable, _ = _value(ctx, "reward.reward_model.enable", False)
    pool, _ = _value(ctx, "reward.reward_model.enable_resource_pool", False)
    if enable is True and pool is not True:
        yield error(
            "async_reward_pool",
            f"a reward model colocated with training (reward.reward_model.enable_resource_pool is not True) is "
            f"refused in {ctx.spec.mode}: the asynchronous rollout never pauses to free device memory ({cite})",
            "extra_overrides",
            "add reward.reward_model.enable_resource_pool=True with reward.reward_model.nnodes / n_gpus_per_node",
        )


@rule(
    "fully_async_asserts",
    ("fully_async_hybrid_engine", "fully_async_batch", "fully_async_staleness", "fully_async_log_probs"),
    Severity.ERROR,
    versions=(V091,),
    cites=(
        Cite(V091, ROLLOUTER, 350, "assert not self.hybrid_engine"),
        Cite(V091, FA_TRAINER, 76, "assert not self.hybrid_engine"),
        Cite(V091, ROLLOUTER, 351, 'assert self.config.data.train_batch_size == 0, "train_batch_size must be zero"'),
        Cite(V091, ROLLOUTER, 352, 'assert self.config.data.gen_batch_size == 1, "gen_batch_size must be one"'),
        Cite(V091, ROLLOUTER, 353, "assert self.config.async_training.staleness_threshold >= 0"),
        Cite(V091, ROLLOUTER, 354, "assert self.config.async_training.trigger_parameter_sync_step >= 1"),
        Cite(V091, ROLLOUTER, 733, "assert self.config.actor_rollout_ref.rollout.calculate_log_probs"),
    ),
)
def _fully_async(ctx: RuleCtx) -> Iterable[Finding]:
    """fully_async: no hybrid engine, prompts streamed one by one, a non-negative staleness, rollout log-probs."""
    if ctx.spec.mode != "fully_async":
        return
    where = f"verl {V091} {ROLLOUTER}"
    v, _ = _value(ctx, f"{AR}.hybrid_engine", False)
    if v is not False:
        yield error(
            "fully_async_hybrid_engine",
            f"{AR}.hybrid_engine is {v!r}: the fully async rollouter and trainer assert it is False ({where}:350)",
            "extra_overrides",
            f"remove the {AR}.hybrid_engine override (verlctl sets False)",
        )
    for key, want, line in (("data.train_batch_size", 0, 351), ("data.gen_batch_size", 1, 352)):
        v, _ = _value(ctx, key, want)
        if v != want or isinstance(v, bool):
            yield error(
                "fully_async_batch",
                f"{key} is {v!r}: the fully async rollouter streams prompts one at a time and asserts {key} == "
                f"{want} ({where}:{line}); the prompts per step are train.train_batch_size",
                "extra_overrides",
                f"remove the {key} override; set train.train_batch_size / train.parameter_sync_step instead",
            )
    st, field = _value(ctx, "async_training.staleness_threshold", ctx.spec.train.staleness_threshold or 0.0)
    n = _num(st)
    if n is None or n < 0:
        yield error(
            "fully_async_staleness",
            f"async_training.staleness_threshold is {st!r}: it must be a number >= 0 ({where}:353)",
            _where(field, "train.staleness_threshold"),
            "use train.staleness_threshold (>= 0) instead of the override",
        )
    sync, _ = _value(ctx, "async_training.trigger_parameter_sync_step", ctx.spec.train.parameter_sync_step or 1)
    n = _num(sync)
    if n is None or n < 1:
        yield error(
            "fully_async_staleness",
            f"async_training.trigger_parameter_sync_step is {sync!r}: it must be >= 1 ({where}:354)",
            "extra_overrides",
            "use train.parameter_sync_step (>= 1) instead of the override",
        )
    lp, _ = _value(ctx, f"{AR}.rollout.calculate_log_probs", True)
    if lp is not True:
        yield error(
            "fully_async_log_probs",
            f"{AR}.rollout.calculate_log_probs is {lp!r}: fully async trains on the rollout's log-probs and "
            f"asserts it ({where}:733)",
            "extra_overrides",
            f"remove the {AR}.rollout.calculate_log_probs override",
        )
