"""The asserts of verl 0.9.1's async trainers as rules (``separate_async``, ``fully_async``), each with its
citation (file:line in the 0.9.1 wheel; ``tests/checks/test_rule_parity.py`` checks them against the source).

The rules read the value each key will have in the composed config: the user's ``extra_overrides`` (passed
last, so they win) over what verlctl emits for the spec. What verlctl emits satisfies verl's asserts by
construction; an extra override (or a spec field) can still break them, and verl would then stop only after
Ray and the model are up. Registered in :data:`verlctl.checks.rules.RULES` when imported (checks/spec_checks.py imports it).

Each mode's one-key asserts are a table (:data:`SEPARATE_ASYNC`, :data:`FULLY_ASYNC`) of :class:`Assert` rows, read
by one function (:func:`_asserts`); a row's citation is both the rule's and the message's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Assert:
    """One assert of an async trainer on one config key, as data.

    ``planned``: what verlctl emits for the key; ``bad``: True where verl's assert fails on the value;
    ``message``: what is wrong, with ``{key}``, ``{v}`` (the value's repr) and ``{cite}`` (verl path:line);
    ``spec_field``: the spec field to name when the value is verlctl's own (None: always extra_overrides)."""

    code: str
    key: str
    planned: Callable[[RuleCtx], Any]
    bad: Callable[[Any], bool]
    cite: Cite
    message: str
    hint: str
    spec_field: str | None = None

    @property
    def codes(self) -> tuple[str, ...]:
        """The finding code it emits (tests/checks/test_finding_codes.py collects a rule object's ``codes``)."""
        return (self.code,)


def _asserts(ctx: RuleCtx, mode: str, table: tuple[Assert, ...]) -> Iterable[Finding]:
    """The findings of ``table``'s asserts for a run in ``mode`` (none for another mode)."""
    if ctx.spec.mode != mode:
        return
    for a in table:
        v, field = _value(ctx, a.key, a.planned(ctx))
        if a.bad(v):
            cite = f"verl {a.cite.version} {a.cite.path}:{a.cite.line}"
            yield error(
                a.code,
                a.message.format(key=a.key, v=repr(v), cite=cite),
                (field or a.spec_field) if a.spec_field is not None else "extra_overrides",
                a.hint.format(key=a.key),
            )


def _not_positive(v: Any) -> bool:
    n = _num(v)
    return n is None or n <= 0


def _negative(v: Any) -> bool:
    n = _num(v)
    return n is None or n < 0


def _below_one(v: Any) -> bool:
    n = _num(v)
    return n is None or n < 1


def _is_not(want: Any) -> Callable[[Any], bool]:
    """True for a value other than ``want`` (a boolean never equals a number here)."""
    if isinstance(want, bool):
        return lambda v: v is not want
    return lambda v: v != want or isinstance(v, bool)


_POOL = "{key} is {v}: separate_async runs the rollout on its own pool and asserts it is > 0 ({cite})"
_POOL_HINT = "remove the {key} override (verlctl sets it from train.rollout_devices / train.rollout_nodes)"
_BATCH = ("{key} is {v}: the fully async rollouter streams prompts one at a time and asserts {key} == %s ({cite}); "
          "the prompts per step are train.train_batch_size")
_BATCH_HINT = "remove the {key} override; set train.train_batch_size / train.parameter_sync_step instead"

SEPARATE_ASYNC: tuple[Assert, ...] = (
    Assert("async_rollout_pool", f"{AR}.rollout.nnodes", lambda c: c.rollout_nnodes, _not_positive,
           Cite(V091, SEP, 64, "assert config.actor_rollout_ref.rollout.nnodes > 0"), _POOL, _POOL_HINT,
           "train.rollout_devices"),
    Assert("async_rollout_pool", f"{AR}.rollout.n_gpus_per_node", lambda c: c.spec.train.rollout_devices,
           _not_positive, Cite(V091, SEP, 65, "assert config.actor_rollout_ref.rollout.n_gpus_per_node > 0"),
           _POOL, _POOL_HINT, "train.rollout_devices"),
    Assert("async_checkpoint_engine", f"{AR}.rollout.checkpoint_engine.backend",
           lambda c: c.spec.train.checkpoint_engine or "nccl", lambda v: v == "naive",
           Cite(V091, SEP, 68, 'assert config.actor_rollout_ref.rollout.checkpoint_engine.backend != "naive"'),
           "checkpoint_engine.backend is naive: separate_async syncs weights to a separate rollout pool and "
           "refuses it ({cite})",
           "use train.checkpoint_engine: nccl (HCCL on NPU), nixl or mooncake, and drop the override",
           "train.checkpoint_engine"),
)

FULLY_ASYNC: tuple[Assert, ...] = (
    Assert("fully_async_hybrid_engine", f"{AR}.hybrid_engine", lambda c: False, _is_not(False),
           Cite(V091, ROLLOUTER, 350, "assert not self.hybrid_engine"),
           "{key} is {v}: the fully async rollouter and trainer assert it is False ({cite})",
           "remove the {key} override (verlctl sets False)"),
    Assert("fully_async_batch", "data.train_batch_size", lambda c: 0, _is_not(0),
           Cite(V091, ROLLOUTER, 351, 'assert self.config.data.train_batch_size == 0, "train_batch_size must be zero"'),
           _BATCH % 0, _BATCH_HINT),
    Assert("fully_async_batch", "data.gen_batch_size", lambda c: 1, _is_not(1),
           Cite(V091, ROLLOUTER, 352, 'assert self.config.data.gen_batch_size == 1, "gen_batch_size must be one"'),
           _BATCH % 1, _BATCH_HINT),
    Assert("fully_async_staleness", "async_training.staleness_threshold",
           lambda c: c.spec.train.staleness_threshold or 0.0, _negative,
           Cite(V091, ROLLOUTER, 353, "assert self.config.async_training.staleness_threshold >= 0"),
           "{key} is {v}: it must be a number >= 0 ({cite})",
           "use train.staleness_threshold (>= 0) instead of the override", "train.staleness_threshold"),
    Assert("fully_async_staleness", "async_training.trigger_parameter_sync_step",
           lambda c: c.spec.train.parameter_sync_step or 1, _below_one,
           Cite(V091, ROLLOUTER, 354, "assert self.config.async_training.trigger_parameter_sync_step >= 1"),
           "{key} is {v}: it must be >= 1 ({cite})", "use train.parameter_sync_step (>= 1) instead of the override"),
    Assert("fully_async_log_probs", f"{AR}.rollout.calculate_log_probs", lambda c: True, _is_not(True),
           Cite(V091, ROLLOUTER, 733, "assert self.config.actor_rollout_ref.rollout.calculate_log_probs"),
           "{key} is {v}: fully async trains on the rollout's log-probs and asserts it ({cite})",
           "remove the {key} override"),
)


def _codes(table: tuple[Assert, ...], *more: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys([a.code for a in table] + list(more)))


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


_SWITCH = Cite(V091, SEP, 100, "raise ValueError(")


@rule(
    "separate_async_pool",
    _codes(SEPARATE_ASYNC, "async_switch_disaggregation"),
    Severity.ERROR,
    versions=(V091,),
    cites=(*(a.cite for a in SEPARATE_ASYNC), _SWITCH),
)
def _separate_pool(ctx: RuleCtx) -> Iterable[Finding]:
    """separate_async: a standalone rollout pool, a real checkpoint engine, no hybrid switch with a
    disaggregated (prefill/decode) rollout."""
    yield from _asserts(ctx, "separate_async", SEPARATE_ASYNC)
    if ctx.spec.mode != "separate_async":
        return
    switch, _ = _value(ctx, "trainer.v1.separate_async.hybrid_rollout.enable_switch", False)
    disagg, _ = _value(ctx, f"{AR}.rollout.disaggregation.enabled", False)
    if switch is True and disagg is True:
        yield error(
            "async_switch_disaggregation",
            "trainer.v1.separate_async.hybrid_rollout.enable_switch does not support rollout disaggregation "
            f"(prefill/decode): verl raises ValueError at start-up (verl {V091} {_SWITCH.path}:{_SWITCH.line})",
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
    _codes(FULLY_ASYNC),
    Severity.ERROR,
    versions=(V091,),
    cites=(*(a.cite for a in FULLY_ASYNC[:1]), Cite(V091, FA_TRAINER, 76, "assert not self.hybrid_engine"),
           *(a.cite for a in FULLY_ASYNC[1:])),
)
def _fully_async(ctx: RuleCtx) -> Iterable[Finding]:
    """fully_async: no hybrid engine, prompts streamed one by one, a non-negative staleness, rollout log-probs."""
    yield from _asserts(ctx, "fully_async", FULLY_ASYNC)
