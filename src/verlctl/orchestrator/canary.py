"""``verlctl launch --canary``: before the long run, prove on the real cluster that one step, a checkpoint save,
a resume from it and a weight sync work; only then does the full run start.

Two short runs of the spec's own command (the same image, devices, model, data and overrides), as attempts of
the run (so ``status``, ``logs`` and ``stop`` see them), with only these changed:

* ``train.steps`` 1 then 2, ``train.save_freq`` 1, no validation (``test_freq`` -1, ``val_before_train``
  false), console logging only (no SwanLab experiment for the canary), the experiment name ``<name>-canary``;
* ``paths.checkpoints`` = ``<paths.checkpoints>/.verlctl-canary/<run id>``: a directory of its own, so the real
  run starts clean (verl's auto-resume reads only the tracker file of its own ``default_local_dir``, and the
  canary's one-step scheduler state is not what the long run wants). It is removed when the canary passes and
  kept (named in the error) when it fails.

Phase 1 (step + checkpoint) passes when the run ends well ("training finished"), step 1's metrics were printed
and ``global_step_1`` with ``latest_checkpointed_iteration.txt`` = 1 is on disk. Phase 2 (resume + weight
sync) passes when verl says ``Resuming from .../global_step_1``, step 2 ran and the tracker says 2; the weight
sync is verl 0.9.1's ``timing_s/update_weights`` (actor -> rollout, every step); verl 0.7.0 does not time it
separately (its sharding manager syncs inside ``timing_s/gen``), so there step 2's generation after the resume
is the evidence. The times (verl's own ``timing_s/step``, ``timing_s/save_checkpoint``,
``timing_s/update_weights`` and each phase's wall time, start-up included) are printed and recorded in the
run's ``canary`` event.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from verlctl.errors import RuntimeFailure, VerlctlError
from verlctl.spec.resolve import ResolvedSpec

if TYPE_CHECKING:
    from verlctl.plan import Plan
    from verlctl.render.render import Rendered
    from verlctl.runtime.executor import Executor
    from verlctl.runtime.records import RunRecord


class CanaryHost(Protocol):
    """What the canary needs of the launch that runs it (orchestrator/launch.py's Launcher), so that this module does not
    import the launcher (no import circle, tests/project/test_layers.py)."""

    executor: Executor | None
    resolved: ResolvedSpec
    report: Any

    def copy_scripts(self, ex: Executor, rendered: Rendered, scripts_dir: str, env_file: bool = True) -> None: ...

    def start(self, ex: Executor, record: RunRecord, the_plan: Plan, reason: str,
              resumed_from: str | None = None, gate: str | None = None) -> int: ...

CANARY_DIR = ".verlctl-canary"
TRACKER = "latest_checkpointed_iteration.txt"
_RESUMED_RE = re.compile(r"Resuming from \S*global_step_(?P<step>\d+)")
POLL_S = 2.0


def canary_dir(checkpoints: str, run_id: str) -> str:
    return f"{checkpoints.rstrip('/')}/{CANARY_DIR}/{run_id}"


def linked_canary_dir(ex: Executor, where: str) -> str | None:
    """The canary's directory or its parent (``<checkpoints>/.verlctl-canary``) when it is a symbolic link in
    the run's target (planted, or left by hand), else None: the canary never writes through one."""
    parent = where.rsplit("/", 1)[0]
    for path in (parent, where):
        if ex.run(["test", "-L", path], timeout=30).ok:
            return path
    return None


def canary_spec(resolved: ResolvedSpec, checkpoints: str, steps: int) -> ResolvedSpec:
    """The spec of a canary phase: the user's, with the few settings above changed."""
    spec = resolved.spec
    train = spec.train.model_copy(update={"steps": steps, "save_freq": 1, "test_freq": -1, "val_before_train": False})
    paths = spec.paths.model_copy(update={"checkpoints": checkpoints})
    swanlab = spec.logging.swanlab.model_copy(update={"enabled": False})
    logging = spec.logging.model_copy(
        update={"experiment": f"{spec.logging.experiment or 'run'}-canary", "swanlab": swanlab, "console": True}
    )
    return ResolvedSpec(spec.model_copy(update={"train": train, "paths": paths, "logging": logging}),
                        dict(resolved.origins), set(resolved.answered))


@dataclass
class PhaseResult:
    name: str
    wall_s: float
    finished: bool
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)
    resumed_step: int | None = None
    tracker: str | None = None
    root: Any = None  # the catalogue's root-cause finding of the phase's log, if any

    def metric(self, key: str) -> float | None:
        for step in sorted(self.steps):
            value = self.steps[step].get(key)
            if isinstance(value, int | float):
                return float(value)
        return None


@dataclass
class Canary:
    launcher: CanaryHost
    record: RunRecord
    the_plan: Plan
    timeout_s: float
    phases: list[PhaseResult] = field(default_factory=list)

    @property
    def ex(self) -> Executor:
        assert self.launcher.executor is not None
        return self.launcher.executor

    def run(self) -> dict[str, Any]:
        spec = self.launcher.resolved.spec
        if not spec.paths.checkpoints:
            raise VerlctlError("launch --canary needs paths.checkpoints: the canary saves a checkpoint and resumes "
                               "from it", hint="set paths.checkpoints (a directory every node sees)")
        where = canary_dir(spec.paths.checkpoints, self.record.run_id)
        link = linked_canary_dir(self.ex, where)
        if link is not None:
            raise RuntimeFailure(f"the canary's directory {link} is a symbolic link: the canary writes only into "
                                 "a directory of its own, never through a link (nothing was written); the full run "
                                 "was not started", hint=f"remove the link {link}, or check who made it")
        self.launcher.report.step(f"canary: 1 step + checkpoint, then resume + 1 step, in {where}")
        t0 = time.monotonic()
        first = self._phase("step + checkpoint", where, steps=1, resumed_from=None)
        why = self._first_failed(first, where)
        if why is None:
            second = self._phase("resume + weight sync", where, steps=2, resumed_from=f"{where}/global_step_1")
            why = self._second_failed(second, where)
        timings = self._timings()
        summary = {"passed": why is None, "checkpoints": where, "wall_s": round(time.monotonic() - t0, 1),
                   "timings": timings, "phases": [self._phase_doc(p) for p in self.phases]}
        self.record.event("canary", **summary, **({"reason": why} if why else {}))
        self.record.save()
        if why is not None:
            raise RuntimeFailure(f"the canary failed: {why}; the full run was not started",
                                 hint=f"the canary's checkpoints are kept in {where}; its log is {self.record.run_log}")
        self.launcher.report.note("canary passed: " + _timings_text(timings, self.the_plan.command.version))
        self._remove(where)
        return summary

    # ---------------------------------------------------------------------------------------- phases

    def _phase(self, name: str, where: str, steps: int, resumed_from: str | None) -> PhaseResult:
        from verlctl.checks.findings import Severity
        from verlctl.monitor.catalogue import Classifier
        from verlctl.monitor.events import LogParser, StepMetrics
        from verlctl.plan import make_plan
        from verlctl.runtime.follow import Follower

        plan = make_plan(canary_spec(self.launcher.resolved, where, steps), container_version=self.the_plan.command.version)
        errors = [f for f in plan.findings if f.severity is Severity.ERROR]
        if errors:
            raise VerlctlError(f"the canary's spec has errors: {errors[0].message}")
        rendered = plan.render()
        self.launcher.copy_scripts(self.ex, rendered, self.record.scripts_dir, env_file=False)
        started = time.monotonic()
        self.launcher.start(self.ex, self.record, plan, reason=f"canary: {name}", resumed_from=resumed_from)
        attempt = self.record.attempts[-1]
        classifier = Classifier()
        parser = LogParser(classifier)
        follower = Follower(self.ex, self.record.run_log, attempt.log_offset, owner=self.record.run_id)
        result = PhaseResult(name, 0.0, False)
        window = ""  # the end of what was read: a marker may be split across reads
        deadline = started + self.timeout_s
        next_check = 0.0
        try:
            alive = True
            while alive:
                text = follower.get(timeout=1.0)
                if text:
                    window = self._scan(result, parser, window, text)
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + POLL_S
                    alive = self.ex.group_alive(attempt.ref) if attempt.ref is not None else False
                if alive and now >= deadline:
                    assert attempt.ref is not None
                    self.ex.stop_group(attempt.ref, grace_s=20)
                    self.record.event("stopped", pgid=attempt.pgid, reason=f"canary {name} timed out")
                    raise RuntimeFailure(
                        f"the canary ({name}) did not finish within {int(self.timeout_s)}s; the full run was not "
                        "started", hint=f"its log is {self.record.run_log}; give more time with --canary-timeout")
            rest = follower.drain(since=time.monotonic(), bound_s=10.0)  # what the dying group wrote last
            if rest:
                window = self._scan(result, parser, window, rest)
        finally:
            follower.stop()
        for ev in parser.close():
            if isinstance(ev, StepMetrics):
                result.steps[ev.step] = dict(ev.metrics)
        result.wall_s = round(time.monotonic() - started, 1)
        findings = classifier.findings()
        result.root = findings[0] if findings else None
        raw = self.ex.read_file(f"{where}/{TRACKER}")
        result.tracker = raw.decode("utf-8", "replace").strip() if raw is not None else None
        self.phases.append(result)
        self.record.event("canary_phase", **self._phase_doc(result))
        self.launcher.report.note(f"canary {name}: {'ended well' if result.finished else 'failed'} in "
                                  f"{result.wall_s:.0f}s")
        return result

    @staticmethod
    def _scan(result: PhaseResult, parser: Any, window: str, text: str) -> str:
        """Feed ``text`` to the parser and look for the markers; returns the new window."""
        from verlctl.monitor.events import StepMetrics
        from verlctl.orchestrator.markers import FINISHED_MARKER

        for ev in parser.feed(text):
            if isinstance(ev, StepMetrics):
                result.steps[ev.step] = dict(ev.metrics)
        window = window[-500:] + text
        if FINISHED_MARKER in window:
            result.finished = True
        m = _RESUMED_RE.search(window)
        if m is not None and result.resumed_step is None:
            result.resumed_step = int(m.group("step"))
        return window

    def _failed_run(self, p: PhaseResult) -> str | None:
        if p.finished:
            return None
        if p.root is not None:
            return f"{p.name}: {p.root.category}: {p.root.message}"
        return f"{p.name}: the training did not end well (no 'training finished' from start_verl.sh)"

    def _first_failed(self, p: PhaseResult, where: str) -> str | None:
        why = self._failed_run(p)
        if why is not None:
            return why
        if 1 not in p.steps:
            return f"{p.name}: no metrics of step 1 were printed"
        if p.tracker != "1" or not self.ex.run(["test", "-d", f"{where}/global_step_1"], timeout=30).ok:
            return f"{p.name}: no checkpoint global_step_1 in {where} ({TRACKER}: {p.tracker or 'missing'})"
        return None

    def _second_failed(self, p: PhaseResult, where: str) -> str | None:
        why = self._failed_run(p)
        if why is not None:
            return why
        if p.resumed_step != 1:
            return f"{p.name}: verl did not resume from {where}/global_step_1 (no 'Resuming from' line)"
        if 2 not in p.steps:
            return f"{p.name}: no metrics of step 2 were printed after the resume"
        if p.tracker != "2":
            return f"{p.name}: the checkpoint of step 2 is missing ({TRACKER}: {p.tracker or 'missing'})"
        if self.the_plan.command.version != "0.7.0" and p.metric("timing_s/update_weights") is None:
            return f"{p.name}: no weight sync was timed (verl's timing_s/update_weights is missing from the steps)"
        return None

    # ---------------------------------------------------------------------------------------- report

    def _timings(self) -> dict[str, float | None]:
        first = self.phases[0] if self.phases else None
        second = self.phases[1] if len(self.phases) > 1 else None
        syncs = [p.metric("timing_s/update_weights") for p in self.phases]
        return {
            "step_s": first.metric("timing_s/step") if first else None,
            "checkpoint_save_s": first.metric("timing_s/save_checkpoint") if first else None,
            "step_and_checkpoint_wall_s": first.wall_s if first else None,
            "resume_and_step_wall_s": second.wall_s if second else None,
            "resumed_step_s": second.metric("timing_s/step") if second else None,
            "weight_sync_s": next((s for s in syncs if s is not None), None),
        }

    @staticmethod
    def _phase_doc(p: PhaseResult) -> dict[str, Any]:
        return {"phase": p.name, "wall_s": p.wall_s, "finished": p.finished, "steps": sorted(p.steps),
                "resumed_step": p.resumed_step, "tracker": p.tracker,
                "root_cause": p.root.category if p.root is not None else None}

    def _remove(self, where: str) -> None:
        """Remove the canary's own checkpoint directory (a real directory, not through a planted link)."""
        script = ('p=$1; d=$(dirname -- "$p"); '
                  '[ -d "$p" ] && [ ! -L "$p" ] && [ ! -L "$d" ] && rm -rf -- "$p" && { rmdir -- "$d" 2>/dev/null; true; }')
        res = self.ex.run(["bash", "-c", script, "canary-cleanup", where], timeout=300)
        if not res.ok:
            self.launcher.report.warn(f"the canary's checkpoints in {where} could not be removed: remove them by hand")


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}s"


def _timings_text(t: dict[str, float | None], version: str) -> str:
    sync = _seconds(t["weight_sync_s"]) if t["weight_sync_s"] is not None or version != "0.7.0" else \
        "not timed separately by verl 0.7.0 (inside timing_s/gen)"
    return (f"step {_seconds(t['step_s'])}, checkpoint save {_seconds(t['checkpoint_save_s'])}, weight sync {sync} "
            f"(verl's timings); step + checkpoint {_seconds(t['step_and_checkpoint_wall_s'])}, "
            f"resume + step {_seconds(t['resume_and_step_wall_s'])} wall, start-up included")
