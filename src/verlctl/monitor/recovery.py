"""Recovery decisions (pure logic): the OOM ladder, the bounded restart budget, and the final advice.

On ``device_oom`` the next memory feature of the ladder (``offload``, then ``recompute``) is added, at most
``recovery.max_oom_retries`` times. A feature the user enabled is never removed; one the user explicitly
disabled is skipped with a notice. Other categories restart only when listed in ``recovery.restart_on``,
within ``recovery.max_restarts``. Checkpoints are never touched: every restart resumes (``resume_mode=auto``)
from the same checkpoint directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verlctl.checks.memory import rung_can_help
from verlctl.spec.model import RunSpec, TrainSpec
from verlctl.verl.features import OOM_LADDER, OOM_LADDER_SIDE


@dataclass
class History:
    oom_retries: int = 0
    restarts: int = 0
    added: list[str] = field(default_factory=list)  # features added by recovery, in order


@dataclass
class Decision:
    restart: bool
    reason: str
    add_feature: str | None = None
    notices: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)


def enabled_features(spec: RunSpec, on: dict[str, bool]) -> set[str]:
    return {name for name, state in on.items() if state}


def decide(category: str | None, spec: RunSpec, features_on: dict[str, bool], history: History,
           side: str | None = None) -> Decision:
    """``side``: whose devices ran out of memory (``trainer`` / ``rollout``) in a mode that gives each its own
    devices (:func:`verlctl.verl.modes.device_side`); a rung that frees the other side's memory is skipped."""
    r = spec.recovery
    if category == "host_oom":
        return _host_oom(spec, features_on, history)
    if category == "device_oom":
        notices: list[str] = []
        if history.oom_retries >= r.max_oom_retries:
            return Decision(False, f"out of memory after {history.oom_retries} recovery attempt(s): giving up",
                            notices=notices, advice=oom_advice(spec))
        disabled = {n.strip().lower() for n in spec.features.disable}
        rungs: list[str] = []  # what became of each rung, in words (the give-up reason says them all)
        for feature in OOM_LADDER:
            if features_on.get(feature):
                rungs.append(f"{feature} is on" + (" (added by the ladder)" if feature in history.added else ""))
                continue
            if feature in disabled:
                notices.append(f"{feature} is explicitly disabled (features.disable): skipped by the OOM ladder")
                rungs.append(f"{feature} is disabled (features.disable)")
                continue
            frees = OOM_LADDER_SIDE.get(feature)
            if side is not None and frees is not None and frees != side:
                notices.append(f"{feature} skipped by the OOM ladder: it frees the {frees}'s device memory, and the "
                               f"{side}'s devices ran out ({spec.mode} gives each its own devices)")
                rungs.append(f"{feature} was skipped: it frees the {frees}'s memory, the {side}'s ran out")
                continue
            if not rung_can_help(spec, features_on, feature):
                notices.append(f"{feature} skipped by the OOM ladder: the memory estimate says it cannot help "
                               "(or host RAM is too short for offload)")
                rungs.append(f"{feature} was skipped: the memory estimate says it cannot help")
                continue
            return Decision(True, f"out of memory: restarting with {feature} added", add_feature=feature,
                            notices=notices)
        if side == "rollout":
            return Decision(False, "out of memory on the rollout's own devices: the OOM ladder's features free "
                            "the trainer's memory only", notices=notices, advice=rollout_oom_advice(spec))
        return Decision(False, "out of memory and the OOM ladder has no rung left: " + "; ".join(rungs),
                        notices=notices, advice=oom_advice(spec))
    if category is not None and category in r.restart_on:
        if history.restarts >= r.max_restarts:
            return Decision(False, f"{category}: restart budget ({r.max_restarts}) used up")
        return Decision(True, f"{category}: restarting ({history.restarts + 1}/{r.max_restarts})")
    if category == "stalled" and r.restart_on_stall:
        if history.restarts >= r.max_restarts:
            return Decision(False, f"stalled: restart budget ({r.max_restarts}) used up")
        return Decision(True, f"stalled: restarting ({history.restarts + 1}/{r.max_restarts})")
    return Decision(False, f"{category or 'unknown failure'}: no automatic restart (recovery.restart_on)")


def _host_oom(spec: RunSpec, features_on: dict[str, bool], history: History) -> Decision:
    """Host RAM ran out (Ray's memory monitor, the kernel OOM killer): not a device OOM. The OOM ladder's
    offload moves state *to* host RAM, so it is never climbed here. A plain restart only when the user
    listed ``host_oom`` in ``recovery.restart_on`` (within ``max_restarts``); otherwise give up with advice."""
    r = spec.recovery
    advice = ["give the node (or the container) more RAM, or use more nodes",
              "lower host-side memory: smaller train.train_batch_size, fewer dataloader / reward workers, "
              "HF_DEACTIVATE_ASYNC_LOAD=1 in env"]
    on = [f for f in ("offload", "swap_optimizer") if features_on.get(f)]
    if on:
        added = [f for f in on if f in history.added]
        advice.insert(0, f"turn {', '.join(on)} off (it keeps model state in host RAM)"
                      + (f"; the OOM ladder added {', '.join(added)} after a device OOM" if added else ""))
    if "host_oom" in r.restart_on:
        if history.restarts >= r.max_restarts:
            return Decision(False, f"host_oom: restart budget ({r.max_restarts}) used up", advice=advice)
        return Decision(True, f"host_oom: restarting without adding offload ({history.restarts + 1}/"
                              f"{r.max_restarts})")
    return Decision(False, "the host ran out of RAM (not device memory): offload would add to host memory, "
                           "so no memory feature is added", advice=advice)


#: The shortest ``max_response_length`` the advice proposes (shorter answers truncate most reasoning).
MIN_RESPONSE_LENGTH = 256


def _move(verb: str, key: str, old: float, new: float, tail: str = "") -> list[str]:
    """``verb key from old to new`` when ``new`` moves ``old`` the way ``verb`` says (lower / shorten: down,
    raise: up); nothing when it would not move it, or move it the other way."""
    down = verb in ("lower", "shorten")
    if (new < old) if down else (new > old):
        return [f"{verb} {key} from {old} to {new}{tail}"]
    return []


def _shorter_response(t: TrainSpec) -> list[str]:
    n = t.max_response_length
    return _move("shorten", "train.max_response_length", n, max(MIN_RESPONSE_LENGTH, n // 2))


def _lower_utilization(t: TrainSpec) -> list[str]:
    u = t.rollout_memory_utilization
    if u <= 0.35:
        return []
    return _move("lower", "train.rollout_memory_utilization", u, round(max(0.3, u - 0.1), 2))


def oom_advice(spec: RunSpec) -> list[str]:
    """Concrete next steps once the memory features are exhausted: each moves a value the way that saves memory
    (never to the value it has, never the other way)."""
    t = spec.train
    out = _move("lower", "train.micro_batch_size_per_device", t.micro_batch_size_per_device,
                max(1, t.micro_batch_size_per_device // 2))
    out += _shorter_response(t)
    out += _lower_utilization(t)
    total = len(spec.cluster.devices) * spec.cluster.node_count
    if spec.strategy == "megatron":
        more_tp = t.tensor_parallel * 2
        if total % (more_tp * t.pipeline_parallel * t.context_parallel) == 0:
            out += _move("raise", "train.tensor_parallel", t.tensor_parallel, more_tp)
        elif total % (t.tensor_parallel * t.pipeline_parallel * 2 * t.context_parallel) == 0:
            out += _move("raise", "train.pipeline_parallel", t.pipeline_parallel, t.pipeline_parallel * 2)
    if t.responses_per_prompt > 4:
        out += _move("lower", "train.responses_per_prompt", t.responses_per_prompt, t.responses_per_prompt // 2)
    return out


def rollout_oom_advice(spec: RunSpec) -> list[str]:
    """Next steps for a rollout that ran out of its own devices' memory (a disaggregated mode)."""
    t = spec.train
    out = _lower_utilization(t)
    devices = t.rollout_devices or 0
    tp = t.rollout_tensor_parallel or t.tensor_parallel
    if devices >= tp * 2 and devices % (tp * 2) == 0:
        out += _move("raise", "train.rollout_tensor_parallel", tp, tp * 2,
                     " (the model's weights and KV cache spread over more rollout devices)")
    out += _shorter_response(t)
    return out
