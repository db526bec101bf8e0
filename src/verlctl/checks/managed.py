"""An extra override that replaces a key verlctl manages is never silent (issue 23, G9).

``extra_overrides`` come last and win. For the keys below verlctl derives the value from a spec field that
other parts of verlctl also use (Ray's resources, the devices it exposes, the memory estimate, the watcher's
step count): an extra override with another value would make verl ask for what verlctl never set up (an
imported ``trainer.nnodes=4`` under a single-node Ray start: verl's resource check raises "Total available
GPUs 8.0 is less than total desired GPUs 32"). ``plan`` refuses it and names the field to set instead.
Registered in :data:`verlctl.checks.rules.RULES` when imported (checks/spec_checks.py imports it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from verlctl.checks.findings import Finding, Severity, error
from verlctl.checks.rules import RuleCtx, rule

AR = "actor_rollout_ref"


def _rollout_keys(ctx: RuleCtx) -> dict[str, tuple[Callable[[RuleCtx], Any], str]]:
    t = ctx.spec.train
    if ctx.spec.mode in ("one_step_off_policy", "fully_async"):
        root = "rollout"
    elif ctx.spec.mode == "separate_async":
        root = f"{AR}.rollout"
    else:
        return {}
    return {
        f"{root}.nnodes": (lambda c: c.rollout_nnodes, "train.rollout_nodes (or cluster.nodes)"),
        f"{root}.n_gpus_per_node": (lambda c: t.rollout_devices, "train.rollout_devices"),
    }


def managed_keys(ctx: RuleCtx) -> dict[str, tuple[Callable[[RuleCtx], Any], str]]:
    """Hydra key -> (the value verlctl emits for this spec, the spec field to set instead)."""
    split = ctx.oso
    keys: dict[str, tuple[Callable[[RuleCtx], Any], str]] = {
        "trainer.nnodes": (lambda c: c.trainer_nnodes, "cluster.nodes (the node addresses) or cluster.nnodes"),
        "trainer.n_gpus_per_node": (
            lambda c: c.train_per_node, "train.trainer_devices" if split else "cluster.devices"),
        "trainer.device": (lambda c: "npu" if c.spec.device == "npu" else "cuda", "device"),
        "data.train_batch_size": (
            lambda c: 0 if c.spec.mode == "fully_async" else c.spec.train.train_batch_size, "train.train_batch_size"),
    }
    if ctx.spec.train.steps is not None and ctx.spec.mode != "fully_async":  # fully_async: unread (base.py)
        keys["trainer.total_training_steps"] = (lambda c: c.spec.train.steps, "train.steps")
    keys.update(_rollout_keys(ctx))
    return keys


def _parse(value: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError:
        return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


@rule("managed_override", ("managed_override",), Severity.ERROR)
def _managed(ctx: RuleCtx) -> Iterable[Finding]:
    """An extra override may not replace a key verlctl derives from a spec field with another value."""
    keys = managed_keys(ctx)
    for raw in ctx.spec.extra_overrides:
        key, _, value = raw.partition("=")
        key = key.lstrip("+~")
        if key not in keys:
            continue
        emitted, field = keys[key]
        ours = emitted(ctx)
        theirs = _parse(value)
        if _same(theirs, ours):
            continue
        yield error(
            "managed_override",
            f"extra override {raw!r} replaces {key}={ours}, which verlctl derives from {field.split(' ')[0]}: "
            "verl would then ask for what verlctl does not set up (its devices, its Ray resources, its steps)",
            "extra_overrides",
            f"remove it from extra_overrides and set {field} instead",
        )
