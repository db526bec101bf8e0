"""Training health: a run that trains but does not learn, judged from verl's own step metrics.

verl prints one line of metrics per step (``step:N - key:value - ...``). A run can be healthy by every other
measure (no error, steps advancing) and still learn nothing: every advantage 0, a learning rate of 0, every
response cut at ``max_response_length``, a collapsed entropy, a gradient norm that is NaN, a rollout whose
log-probs drift from the actor's. Each rule here reads the metrics verl itself logs (the citations are verl
0.7.0's and 0.9.1's source, ``verl/...:line``), with a threshold the run spec tunes under
``recovery.health.*`` (:class:`verlctl.spec.model.HealthSpec`).

One evaluator for every caller: :class:`HealthTracker` takes the steps one at a time (the watcher feeds it as
the log streams) and :func:`evaluate` runs it over a list of steps (``status``, ``report``, ``diagnose``).
A warning never stops a run by itself; ``recovery.health.stop_on`` names the rules that should (the watcher
stops the run and gives up with the warning as its reason).

:func:`resume_trained_nothing` is the one judgement of "a resume that trained nothing" (an attempt that
resumed from a checkpoint, trained 0 steps past it and exited 0), used by the watcher and by the run's state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: verl's metric names the rules read (and the charts draw), with where verl logs each.
ADV_MAX, ADV_MIN = "critic/advantages/max", "critic/advantages/min"
SCORE_MAX, SCORE_MIN = "critic/score/max", "critic/score/min"
CLIP_RATIO = "response_length/clip_ratio"
ENTROPY = "actor/entropy"
GRAD_NORM = "actor/grad_norm"
CRITIC_GRAD_NORM = "critic/grad_norm"
LR = "actor/lr"
PROBS_DIFF_MEAN = "training/rollout_probs_diff_mean"
PROBS_DIFF_VALID = "training/rollout_probs_diff_valid"
EVICTED = "training/filter_groups/evicted_samples"

#: The keys a step must keep for the rules (a step sink keeps only these).
KEYS = frozenset({ADV_MAX, ADV_MIN, SCORE_MAX, SCORE_MIN, CLIP_RATIO, ENTROPY, GRAD_NORM, CRITIC_GRAD_NORM, LR,
                  PROBS_DIFF_MEAN, PROBS_DIFF_VALID, EVICTED})


#: A place in verl's source: (version, path, line).
Source = tuple[str, str, int]


@dataclass(frozen=True)
class Rule:
    name: str
    title: str
    metrics: tuple[str, ...]  # the verl metrics the rule reads
    sources: tuple[Source, ...]  # where verl logs them (tests/monitor/test_training_health.py reads each line)
    hint: str

    @property
    def citation(self) -> str:
        """"critic/advantages/max, …: verl 0.7.0 verl/trainer/ppo/metric_utils.py:170; 0.9.1 …"."""
        by_version: dict[str, list[str]] = {}
        for version, path, lineno in self.sources:
            by_version.setdefault(version, []).append(f"{path}:{lineno}")
        return (", ".join(self.metrics) + ": "
                + "; ".join(f"verl {v} " + ", ".join(places) for v, places in by_version.items()))


_DATA_METRICS_070 = "verl/trainer/ppo/metric_utils.py"
RULES: tuple[Rule, ...] = (
    Rule("no_learning_signal", "no learning signal", (ADV_MAX, ADV_MIN, SCORE_MAX, SCORE_MIN),
         (("0.7.0", _DATA_METRICS_070, 170), ("0.7.0", _DATA_METRICS_070, 162),
          ("0.9.1", _DATA_METRICS_070, 565), ("0.9.1", _DATA_METRICS_070, 557)),
         "every group's responses got the same reward, so GRPO's advantages are 0 and the update does nothing: "
         "check that the reward function scores this data (data_source, the answer format), or use a reward "
         "with variance; tune with recovery.health.no_signal_steps"),
    Rule("filter_groups_evict_all", "DAPO filter_groups evicts the groups", (EVICTED,),
         (("0.9.1", "verl/trainer/ppo/v1/replay_buffer.py", 374), ("0.9.1", "verl/trainer/ppo/v1/utils.py", 44)),
         "DAPO's filter_groups drops every group whose responses all scored the same: most generated groups "
         "carry no signal; check the reward, or turn algorithm.filter_groups off while it is flat"),
    Rule("lr_zero", "learning rate 0 after warm-up", (LR,),
         (("0.7.0", "verl/workers/fsdp_workers.py", 931), ("0.7.0", "verl/workers/megatron_workers.py", 748),
          ("0.9.1", "verl/workers/engine_workers.py", 216)),
         "the optimizer steps with a learning rate of 0 (a scheduler whose total steps stayed -1, as in verl "
         "#6683): check actor_rollout_ref.actor.optim (lr, lr_warmup_steps, total_training_steps)"),
    Rule("lr_pinned", "learning rate did not move through warm-up", (LR,),
         (("0.7.0", "verl/workers/fsdp_workers.py", 931), ("0.9.1", "verl/workers/engine_workers.py", 216)),
         "train.warmup_steps is set but the logged learning rate stayed the same through it: the scheduler is "
         "not stepping; check actor_rollout_ref.actor.optim.lr_warmup_steps and the scheduler's total steps"),
    Rule("overlong", "responses pinned at max_response_length", (CLIP_RATIO,),
         (("0.7.0", _DATA_METRICS_070, 192), ("0.9.1", _DATA_METRICS_070, 576)),
         "most responses are cut at train.max_response_length: their rewards judge truncated text; raise "
         "train.max_response_length, or add an overlong penalty (DAPO's overlong buffer)"),
    Rule("entropy_collapse", "entropy collapse", (ENTROPY,),
         (("0.7.0", "verl/trainer/ppo/ray_trainer.py", 1466), ("0.7.0", "verl/workers/actor/dp_actor.py", 523),
          ("0.9.1", "verl/trainer/ppo/v1/trainer_base.py", 1684), ("0.9.1", "verl/trainer/ppo/ray_trainer.py", 1597)),
         "the policy's entropy fell below the bound: it has stopped exploring; lower the learning rate, use "
         "clip-higher (DAPO's clip_ratio_high) or an entropy bonus (actor.entropy_coeff)"),
    Rule("grad_norm_nonfinite", "gradient norm NaN/inf", (GRAD_NORM, CRITIC_GRAD_NORM),
         (("0.7.0", "verl/workers/actor/dp_actor.py", 553), ("0.9.1", "verl/workers/engine_workers.py", 214),
          ("0.9.1", "verl/trainer/ppo/v1/trainer_base.py", 1948)),
         "the gradient norm is not a number: the update is skipped or corrupts the weights; look for a bf16 "
         "overflow, a zero-length batch or a learning rate too high; resume from the last good checkpoint"),
    Rule("logprob_drift", "rollout log-probs drift from the actor's", (PROBS_DIFF_MEAN, PROBS_DIFF_VALID),
         (("0.7.0", "verl/utils/debug/metrics.py", 106), ("0.9.1", "verl/utils/debug/metrics.py", 118),
          ("0.9.1", "verl/utils/debug/metrics.py", 106)),
         "the rollout engine's token probabilities differ from the actor's for the same tokens: the rollout "
         "runs different weights or kernels (a failed weight sync, a precision mismatch); check the weight "
         "sync and the rollout's dtype"),
)
RULE_NAMES: tuple[str, ...] = tuple(r.name for r in RULES)
_BY_NAME = {r.name: r for r in RULES}


@dataclass
class HealthWarning:
    rule: str
    message: str
    step: int  # the step it was first seen at
    metric: str
    value: float | None
    citation: str
    hint: str
    title: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "title": self.title, "message": self.message, "step": self.step,
                "metric": self.metric, "value": self.value, "citation": self.citation, "hint": self.hint}


@dataclass
class Settings:
    """The thresholds (the run spec's ``recovery.health``; these defaults are HealthSpec's)."""

    no_signal_steps: int = 3
    overlong_ratio: float = 0.9
    window: int = 3
    min_entropy: float = 0.01
    max_probs_diff_mean: float = 0.05
    warmup_steps: int = 0
    evicted_ratio: float = 0.9
    batch_samples: int | None = None  # train_batch_size x responses_per_prompt: what one step trains on
    stop_on: tuple[str, ...] = ()
    off: tuple[str, ...] = ()  # rules not judged

    @classmethod
    def from_spec(cls, spec: Any) -> Settings:
        """From a :class:`verlctl.spec.model.RunSpec` (None or a spec without the section: the defaults)."""
        h = getattr(getattr(spec, "recovery", None), "health", None)
        if h is None:
            return cls()
        train = getattr(spec, "train", None)
        warmup = h.warmup_steps if h.warmup_steps is not None else (getattr(train, "warmup_steps", None) or 0)
        batch = None
        if train is not None and getattr(train, "train_batch_size", None) and getattr(train, "responses_per_prompt", None):
            batch = int(train.train_batch_size) * int(train.responses_per_prompt)
        stop = tuple(RULE_NAMES) if "all" in h.stop_on else tuple(h.stop_on)
        return cls(no_signal_steps=h.no_signal_steps, overlong_ratio=h.overlong_ratio, window=h.window,
                   min_entropy=h.min_entropy, max_probs_diff_mean=h.max_probs_diff_mean, warmup_steps=int(warmup),
                   evicted_ratio=h.evicted_ratio, batch_samples=batch, stop_on=stop, off=tuple(h.ignore))


def _num(metrics: Mapping[str, Any], key: str) -> float | None:
    v = metrics.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


@dataclass
class HealthTracker:
    """Feed the steps in order (:meth:`feed`); each rule fires once, at the step its condition has held for
    its window. A step seen again (a restart resumed before it) counts once: streaks follow the step number."""

    settings: Settings = field(default_factory=Settings)
    warnings: list[HealthWarning] = field(default_factory=list)
    _streaks: dict[str, list[int]] = field(default_factory=dict)  # rule -> the steps of its current streak
    _last_step: int | None = None
    _lr_seen: list[tuple[int, float]] = field(default_factory=list)

    @property
    def fired(self) -> set[str]:
        return {w.rule for w in self.warnings}

    def feed(self, step: int, metrics: Mapping[str, Any]) -> list[HealthWarning]:
        """The warnings that fire at this step (each rule at most once per tracker)."""
        if self._last_step is not None and step <= self._last_step:  # a restart resumed before this step
            self._streaks = {k: [s for s in v if s < step] for k, v in self._streaks.items()}
            self._lr_seen = [(s, v) for s, v in self._lr_seen if s < step]
        self._last_step = step
        s = self.settings
        new: list[HealthWarning] = []

        def streak(rule: str, holds: bool, need: int, metric: str, value: float | None, message: str) -> None:
            steps = self._streaks.setdefault(rule, [])
            if not holds:
                steps.clear()
                return
            if steps and steps[-1] != step - 1:
                steps.clear()  # a gap in the steps seen: start the streak again
            steps.append(step)
            if len(steps) >= need and rule not in self.fired and rule not in {w.rule for w in new} \
                    and rule not in s.off:
                first = steps[-need]
                new.append(self._warning(rule, message.format(n=len(steps), first=first, step=step), first,
                                         metric, value))

        # no learning signal: every advantage 0 (GRPO/RLOO: every group's rewards equal); without advantages
        # in the line, every score equal across the batch
        adv_max, adv_min = _num(metrics, ADV_MAX), _num(metrics, ADV_MIN)
        if adv_max is not None and adv_min is not None:
            flat = adv_max == 0.0 and adv_min == 0.0
            streak("no_learning_signal", flat, s.no_signal_steps, ADV_MAX, adv_max,
                   "every advantage was 0 for {n} steps in a row (steps {first}-{step}: critic/advantages/max = "
                   "critic/advantages/min = 0): the updates learn nothing")
        else:
            sc_max, sc_min = _num(metrics, SCORE_MAX), _num(metrics, SCORE_MIN)
            if sc_max is not None and sc_min is not None:
                streak("no_learning_signal", sc_max == sc_min, s.no_signal_steps, SCORE_MAX, sc_max,
                       "every response scored the same for {n} steps in a row (steps {first}-{step}: "
                       f"critic/score/max = critic/score/min = {_fmt(sc_max)}): no group has a reward to learn from")
        evicted = _num(metrics, EVICTED)
        if evicted is not None and s.batch_samples:
            share = evicted / s.batch_samples
            streak("filter_groups_evict_all", share >= s.evicted_ratio, s.window, EVICTED, evicted,
                   f"DAPO's filter_groups evicted {evicted:.0f} samples at step {{step}} ({share:.0%} of the "
                   f"{s.batch_samples} a step trains on; bound recovery.health.evicted_ratio "
                   f"{s.evicted_ratio:g}) for {{n}} steps in a row")
        lr = _num(metrics, LR)
        if lr is not None:
            self._lr_seen.append((step, lr))
            past = step > s.warmup_steps
            streak("lr_zero", past and lr == 0.0, 1, LR, lr,
                   f"the learning rate (actor/lr) is 0 at step {{step}}, after the {s.warmup_steps} warm-up "
                   "step(s): the optimizer changes nothing")
            w = s.warmup_steps
            if w >= 2 and step > w and "lr_pinned" not in self.fired and "lr_pinned" not in s.off:
                during = [v for st, v in self._lr_seen if st <= w]
                if len(during) >= 2 and len(set(during)) == 1 and lr == during[0] and lr != 0.0:
                    new.append(self._warning(
                        "lr_pinned", f"the learning rate (actor/lr) stayed {_fmt(lr)} through the {w} warm-up "
                        f"steps and at step {step}: the scheduler does not move", step, LR, lr))
        clip = _num(metrics, CLIP_RATIO)
        if clip is not None:
            streak("overlong", clip >= s.overlong_ratio, s.window, CLIP_RATIO, clip,
                   f"{clip:.0%} of the responses ended at max_response_length at step {{step}} (bound "
                   f"recovery.health.overlong_ratio {s.overlong_ratio:g}) for {{n}} steps in a row")
        entropy = _num(metrics, ENTROPY)
        if entropy is not None and s.min_entropy > 0:
            streak("entropy_collapse", entropy < s.min_entropy, s.window, ENTROPY, entropy,
                   f"the policy's entropy (actor/entropy) was {_fmt(entropy)} at step {{step}}, below "
                   f"recovery.health.min_entropy {s.min_entropy:g}, for {{n}} steps in a row")
        for key in (GRAD_NORM, CRITIC_GRAD_NORM):
            g = _num(metrics, key)
            if g is not None and not math.isfinite(g):
                streak("grad_norm_nonfinite", True, 1, key, g,
                       f"the gradient norm ({key}) is {g} at step {{step}}")
                break
        else:
            self._streaks.pop("grad_norm_nonfinite", None)
        diff = _num(metrics, PROBS_DIFF_MEAN)
        valid = _num(metrics, PROBS_DIFF_VALID)
        if diff is not None and valid != 0.0:
            streak("logprob_drift", not math.isfinite(diff) or diff > s.max_probs_diff_mean, s.window,
                   PROBS_DIFF_MEAN, diff,
                   f"the rollout's token probabilities differ from the actor's by {_fmt(diff)} on average at step "
                   f"{{step}} (training/rollout_probs_diff_mean; bound recovery.health.max_probs_diff_mean "
                   f"{s.max_probs_diff_mean:g}) for {{n}} steps in a row")
        self.warnings.extend(new)
        return new

    def _warning(self, rule: str, message: str, step: int, metric: str, value: float | None) -> HealthWarning:
        r = _BY_NAME[rule]
        shown = value if value is None or math.isfinite(value) else None
        return HealthWarning(rule=rule, title=r.title, message=message, step=step, metric=metric, value=shown,
                             citation=r.citation, hint=r.hint)


def evaluate(steps: Iterable[tuple[int, Mapping[str, Any]]], settings: Settings | None = None) -> list[HealthWarning]:
    """The warnings over ``steps`` (``(step, metrics)`` in log order): what :class:`HealthTracker` says."""
    tracker = HealthTracker(settings or Settings())
    for step, metrics in steps:
        tracker.feed(int(step), metrics)
    return tracker.warnings


def warning_line(w: Mapping[str, Any]) -> str:
    """One line for a warning (``status``, the watcher): "health: no learning signal (step 3): …"."""
    return f"health: {w.get('title') or w.get('rule')} (step {w.get('step')}): {w.get('message')}"


class HealthSink:
    """A step sink (:class:`verlctl.monitor.diagnose.StepSink`) that keeps only what the rules read, so that a
    whole log is judged in memory bounded by its number of steps."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, float]] = {}

    def fast(self, step: int, body: bytes) -> None:
        from verlctl.monitor.events import split_metrics

        self._keep(step, split_metrics(body.decode(errors="replace")).metrics)

    def event(self, event: Any) -> None:
        self._keep(event.step, event.metrics)

    def flush(self) -> None:
        pass

    def _keep(self, step: int, metrics: Mapping[str, Any]) -> None:
        kept = {k: float(v) for k, v in metrics.items()
                if k in KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)}
        if step in self.steps:  # printed again (a restart): the last attempt's values
            del self.steps[step]
        self.steps[step] = kept

    def items(self) -> list[tuple[int, dict[str, float]]]:
        return sorted(self.steps.items())


def evaluate_text(text: str, settings: Settings | None = None) -> list[HealthWarning]:
    """The warnings over the step lines of a log's text (the same parser as ``diagnose``)."""
    from verlctl.monitor.diagnose import diagnose_bytes

    sink = HealthSink()
    diagnose_bytes(text.encode("utf-8", errors="replace"), sink)
    return evaluate(sink.items(), settings)


def _checkpoint_step(folder: str | None) -> int | None:
    _, found, tail = (folder or "").rstrip("/").rpartition("global_step_")
    return int(tail) if found and tail.isdigit() else None


def resume_trained_nothing(resumed_from: str | None, max_step: int | None, total: int | None,
                           attempt: int, saved_at: str | Callable[[], str | None] | None = None) -> str | None:
    """Why an attempt that ended well (exit 0) is a failure: it resumed from ``resumed_from``
    (``.../global_step_N``) and trained no step past N (verl resuming at an epoch boundary ran 0 steps and
    exited 0: verl #7401, PR #5725). None when it trained past it, did not resume, or the checkpoint was the
    last step (nothing was left to train). ``saved_at``: the checkpoint verl's tracker names once the attempt
    ended (``.../global_step_M``): M > N is a step trained and saved, whether or not its step line reached the
    log (Ray drops what an actor printed in the last moment before the driver exits: a run whose last step ends
    it can lose that step's line); a callable is asked only when the log alone says nothing was trained."""
    resumed = _checkpoint_step(resumed_from)
    if resumed is None:
        return None
    if total is not None and resumed >= total:
        return None
    if max_step is not None and max_step > resumed:
        return None
    saved = _checkpoint_step(saved_at() if callable(saved_at) else saved_at)
    if saved is not None and saved > resumed:
        return None
    seen = "no step" if max_step is None else f"step {max_step}"
    # The facts first (a one-line verdict such as `status`'s is cut to its first 160 characters), the path last.
    return (f"attempt {attempt} exited 0 having trained 0 steps (last seen: {seen}"
            + (f" of {total}" if total else "")
            + f") after resuming from global_step_{resumed}: check trainer.total_training_steps / total_epochs "
            f"against the checkpoint, or move the checkpoint away to start fresh (resumed from {resumed_from})")


def record_settings(record: Any) -> Settings:
    """The thresholds of a recorded run (its resolved spec); the defaults when the spec cannot be read."""
    try:
        return Settings.from_spec(record.load_spec().spec)
    except Exception:  # noqa: BLE001 - a damaged or older record: judge with the defaults
        return Settings()


def run_warnings(found: Iterable[HealthWarning], events: Iterable[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """A run's warnings for ``status`` and ``report``: the evaluator's over the log they read (``found``), then
    the watcher's ``health`` events (the same evaluator, over the whole run as it streamed) of other rules."""
    out = [w.to_dict() for w in found]
    rules = {w["rule"] for w in out}
    for e in events:
        if e.get("event") == "health" and e.get("rule") not in rules:
            rules.add(str(e.get("rule")))
            out.append({k: e.get(k) for k in ("rule", "title", "message", "step", "metric", "value", "citation",
                                              "hint")})
    return out
