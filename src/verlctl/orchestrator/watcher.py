"""The watcher: follows a run's log, keeps a live status, speaks up only on errors, and recovers.

* Silent while healthy: progress and metrics go to the run's ``status.json`` (for ``verlctl status``).
* On an error: the classified root cause and its hint are printed, an ``alert`` event is appended to
  ``events.jsonl`` and the user's ``--notify-cmd`` gets the event as JSON on stdin.
* On ``device_oom``: stop the run's process group, wait (bounded) for device memory to be released, add the
  next memory feature and relaunch with ``resume_mode=auto`` on the same checkpoint dir; check that the
  trainer resumed from the checkpoint recorded before the restart.
* No progress for a phase-dependent time: a ``stalled`` event (restart only if the user asked for it).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from verlctl.errors import VerlctlError
from verlctl.monitor.catalogue import RAY_DAEMONS_EXITED, Classifier, Finding
from verlctl.monitor.events import ErrorFound, LogParser, Phase, PhaseKind, Progress, StepMetrics, TotalSteps
from verlctl.monitor.health import (
    HealthTracker,
    HealthWarning,
    Settings,
    resume_trained_nothing,
    warning_line,
)
from verlctl.monitor.recovery import Decision, History, decide
from verlctl.orchestrator.markers import EXIT_MARKER, FINISHED_MARKER  # re-exported for the watcher's callers
from verlctl.runtime.executor import Executor
from verlctl.runtime.follow import Follower
from verlctl.runtime.records import RunRecord

# The watcher's timings and bounds. Each is documented for users in docs/recovery.md ("What the watcher waits
# for"), and tests/orchestrator/test_watcher_timings.py holds the two together.

#: How often the watcher checks that the run log still exists while the attempt runs (a deleted log).
LOG_CHECK_EVERY_S = 15.0
#: A log or checkpoint file system with less free space than this is full (a run that ended without an error).
DISK_FULL_BELOW_KIB = 1024
#: How long the user's ``--notify-cmd`` may take for one event before it is killed (the watch goes on).
NOTIFY_TIMEOUT_S = 60
#: An attempt whose Ray head died: what is left of it gets SIGTERM, then SIGKILL after this many seconds.
HEAD_DIED_GRACE_S = 10
#: A failed attempt's Ray daemons get SIGKILL after this many seconds (they serve nothing to save).
TEARDOWN_RAY_GRACE_S = 0
#: The longest ``df`` (disk full?), or the device tool (device memory released?), may take.
DF_TIMEOUT_S = 30
DEVICE_TOOL_TIMEOUT_S = 60
#: How often the device tool is asked whether the failed attempt's device memory is released.
MEMORY_POLL_S = 2
#: The most read of verl's checkpoint tracker (``latest_checkpointed_iteration.txt``: one step number).
TRACKER_MAX_BYTES = 64
#: Before giving up on an attempt whose training ended, how long start_verl.sh is given to stop its Ray.
GIVE_UP_WAIT_S = 30.0
#: How long to wait for a restarting Docker engine before giving up on the run's container.
ENGINE_WAIT_S = 60.0
#: The most of a Docker engine's error message kept in a ``target_lost`` event.
ENGINE_ERROR_CHARS = 300
#: A stall is called only when it still holds this long after it was first seen, and the run log was read to its end
#: after that moment (a watcher that was not scheduled, or a log read that lagged, is no stalled training).
STALL_CONFIRM_S = 2.0


# ------------------------------------------------------------------------------------------------ status


@dataclass
class StallJudge:
    """Calls a stall only on a log that was read: a lack of progress first seen at ``suspect_at`` is the verdict
    once it still holds ``confirm_s`` later *and* the follower read the log to its end after ``suspect_at``
    (``synced_at``). A watcher that was not scheduled for a while, or a log read that lagged behind, sees no
    progress for that long although the training wrote it: that is no stall. A reader that stays behind for a
    whole further limit does not hide a stall for ever: it is called then, and says the log was behind."""

    confirm_s: float = STALL_CONFIRM_S
    suspect_at: float | None = None

    def verdict(self, reason: str | None, limit: float, now: float, synced_at: float) -> str | None:
        if reason is None:
            self.suspect_at = None
            return None
        if self.suspect_at is None:
            self.suspect_at = now
        waited = now - self.suspect_at
        if waited < self.confirm_s:
            return None
        if synced_at >= self.suspect_at:
            return reason
        if waited >= limit:
            return f"{reason}; the run log was not read to its end for the last {waited:.0f}s"
        return None


@dataclass
class LiveStatus:
    attempt: int
    step: int | None = None
    total: int | None = None
    eta_s: float | None = None
    seconds_per_step: float | None = None
    last_metrics: dict[str, float] = field(default_factory=dict)
    phase: str = "starting"
    last_progress_at: float = field(default_factory=time.time)  # wall clock, for `status`
    progress_mono: float = field(default_factory=time.monotonic)  # the same moment, for the stall's durations
    step_times: list[float] = field(default_factory=list)
    updated_at: float = field(default_factory=time.time)
    max_step: int | None = None
    health: list[dict[str, Any]] = field(default_factory=list)  # the run's training-health warnings so far

    def progressed(self, timed: bool) -> None:
        """A step advanced now; ``timed``: a step was seen before it, so the time since is a step time."""
        mono = time.monotonic()
        if timed:
            self.step_times.append(mono - self.progress_mono)
        self.progress_mono = mono
        self.last_progress_at = time.time()

    def as_dict(self) -> dict[str, Any]:
        m = self.last_metrics
        return {
            "attempt": self.attempt,
            "phase": self.phase,
            "step": self.step,
            "total": self.total,
            "eta_s": self.eta_s,
            "seconds_per_step": self.seconds_per_step,
            "score": m.get("critic/score/mean"),
            "response_length": m.get("response_length/mean"),
            "last_progress_at": self.last_progress_at,
            "updated_at": self.updated_at,
            "health": self.health,
        }


class RelaunchBackend(Protocol):
    """What the watcher needs of the run's verbs (``orchestrator/runs.py``: ``LocalRun``): the relaunch is orchestration
    (``Launcher.relaunch``); the worker nodes and the key files are the backend's target operations, reached
    through it."""

    def workers(self, handle: Any) -> list[tuple[Any, Executor | None, dict[str, Any]]]: ...

    def remove_key_files(self, handle: Any, ex: Executor | None, say: Callable[[str], None]) -> list[str]: ...

    def prepare_relaunch(self, handle: Any, ex: Executor, change: Any) -> Any: ...

    def relaunch(self, handle: Any, change: Any, prepared: Any = None, ex: Executor | None = None) -> Any: ...


@dataclass
class AttemptOutcome:
    kind: str  # finished | failed | stalled | stopped | lost | health
    finding: Finding | None = None  # the root cause
    detail: str = ""
    max_step: int | None = None  # the highest training step seen in this attempt
    total: int | None = None
    group_alive: bool = False  # the training ended but start_verl.sh is still stopping Ray


# ----------------------------------------------------------------------------------------------- watcher


class WatchStopped(VerlctlError):
    """The run was marked stopped before the watcher relaunched it."""


def become_watcher(record: RunRecord) -> int:
    """Take the run's watcher lock (one watcher per run; refused with the holder named) and record this
    process as its watcher, hand-started or spawned by `launch --watch`. The descriptor holds the lock."""
    from verlctl.runtime.records import hold_watch_lock, load_run, record_lock

    fd = hold_watch_lock(record)
    pid = _own_pid()
    with record_lock(record):
        fresh = load_run(record.run_id)
        if fresh.watcher_pid != pid:
            fresh.watcher_pid = pid
            fresh.save()
    record.watcher_pid = pid
    record.event("watcher_recorded", pid=pid)
    return fd


class Watcher:
    def __init__(
        self,
        record: RunRecord,
        executor: Executor,
        resolved: Any,
        notify_cmd: str | None = None,
        say: Callable[[str], None] = print,
        liveness_every_s: float = 2.5,
        error_grace_s: float = 60.0,
        alert_delay_s: float = 3.0,
        backend: RelaunchBackend | None = None,
    ) -> None:
        if backend is None:
            raise TypeError("Watcher needs the run's verbs (verlctl.orchestrator.runs.run_for(record))")
        self.backend = backend  # relaunch, the worker nodes, the key files: through the run's verbs
        self.record = record
        self.ex = executor
        self.resolved = resolved  # the run's spec as launched (ResolvedSpec): what the user asked for
        self.current = resolved  # the spec of the current attempt (with the features recovery added)
        self.notify_cmd = notify_cmd
        self.say = say
        self.liveness_every_s = liveness_every_s
        self.error_grace_s = error_grace_s
        self.alert_delay_s = alert_delay_s
        self.history = History()
        # Training health over the whole run (every attempt): each warning once, an event and a line each.
        self.health = HealthTracker(Settings.from_spec(resolved.spec))
        self._health_stop: HealthWarning | None = None  # a warning recovery.health.stop_on names
        self.engine_wait_s = ENGINE_WAIT_S
        self._worker_ex: dict[str, Executor | None] | None = None
        self._nodes_down: set[str] = set()
        self._worker_info: dict[str, str] = {}
        self._early: tuple[list[str], Any] | None = None  # a next attempt being prepared (see _early_oom)
        self._oom_before: Any = None  # the OOM-kill counters when the attempt's watch started (monitor/killed.py)
        self._early_side: str | None = None  # whose devices the OOM that started it hit (see _side)
        # The run directory's files a relaunch reads, kept to write them again when the directory goes
        # (see _record_lost): the resolved spec as launched (no secrets in it).
        from verlctl.spec.sources import MAX_SPEC_BYTES

        self._kept: dict[str, bytes] = {}
        with contextlib.suppress(OSError, ValueError):
            self._kept[record.spec_file] = record.read_file(record.spec_file, MAX_SPEC_BYTES)
        self._lock_fd: int | None = None  # the watcher lock taken again in a rewritten directory

    # -------------------------------------------------------------------------------- reporting

    def emit(self, kind: str, **data: Any) -> dict[str, Any]:
        try:
            ev = self.record.event(kind, **data)
        except OSError as exc:
            self._record_lost(exc)
            ev = {"time": time.time(), "run": self.record.run_id, "event": kind, **data}
            with contextlib.suppress(OSError):
                ev = self.record.event(kind, **data)
        if self.notify_cmd and kind in ("alert", "stalled", "recovery", "gave_up", "health"):
            try:
                done = subprocess.run(self.notify_cmd, shell=True, input=json.dumps(ev, default=str), text=True,
                                      timeout=NOTIFY_TIMEOUT_S, check=False, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                self.say(f"verlctl watch: --notify-cmd took longer than {NOTIFY_TIMEOUT_S:g} s for the {kind} event: "
                         "killed; the watch goes on")
            except OSError as exc:
                self.say(f"verlctl watch: --notify-cmd could not be started: {exc.strerror or exc}")
            else:
                if done.returncode != 0:
                    self.say(f"verlctl watch: --notify-cmd exited with status {done.returncode} for the {kind} event")
        return ev

    def _write_status(self, status: dict[str, Any]) -> None:
        try:
            self.record.write_status(status)
        except OSError as exc:
            self._record_lost(exc)
            with contextlib.suppress(OSError):
                self.record.write_status(status)

    def _record_lost(self, exc: OSError) -> None:
        """The run's record directory cannot be written (moved or removed under the watcher, a full disk): one
        warning line, the record written again from memory (so that `status` and `stop` still find the run),
        and the watch goes on."""
        why = exc.strerror or str(exc)
        if not getattr(self, "_record_warned", False):
            self._record_warned = True
            self.say(f"verlctl watch: warning: the run record {self.record.dir} cannot be written ({why}): "
                     "writing it again from memory; the watch goes on")
        if not (self.record.dir / "run.json").exists():  # never over a record `stop` may have marked since
            with contextlib.suppress(OSError):
                self.record.save()
            self._rewrite_kept()

    def _rewrite_kept(self) -> None:
        """After the record was written again from memory: the spec a relaunch reads (so the next OOM is
        still recovered), and this watcher's lock on the new directory's ``watcher.lock`` (so a second
        `verlctl watch` is refused by the one-watcher rule, not by a missing file)."""
        from verlctl.runtime.records import hold_watch_lock

        for name, data in self._kept.items():
            if not (self.record.dir / name).exists():
                try:
                    self.record.write_file(name, data)
                except OSError as exc:
                    self.say(f"verlctl watch: warning: {self.record.dir / name} cannot be written again "
                             f"({exc.strerror or exc}): a relaunch would not find it")
        if self._lock_fd is None:
            try:
                self._lock_fd = hold_watch_lock(self.record)
            except VerlctlError as exc:
                self.say(f"verlctl watch: warning: {exc.message}")

    # --------------------------------------------------------------------------------- the loop

    def run(self) -> int:
        self.say(self.started_line())
        self._check_workers()  # reach the worker nodes once before saying the watch started
        self.emit("watch_started", pid=_own_pid())
        while True:
            outcome = self.watch_attempt()
            if outcome.kind == "finished":
                failure = self._resume_failure(outcome)
                if failure is not None:
                    self.emit("resume_failed", reason=failure, attempt=len(self.record.attempts))
                    self._give_up(Decision(False, failure), "resume_no_progress")
                    return 1
                self.emit("finished", attempt=len(self.record.attempts))
                self._write_status({**(self.record.read_status() or {}), "phase": "finished"})
                self._remove_key_files()  # no attempt of the run will read it again (it holds the secrets)
                steps = (f" at step {outcome.max_step}" + (f" of {outcome.total}" if outcome.total else "")
                         if outcome.max_step is not None else "")
                self.say(f"verlctl watch: the run finished{steps} (attempt {len(self.record.attempts)}); "
                         "the watch ends")
                return 0
            if outcome.kind == "stopped":
                self.emit("watch_stopped", detail=outcome.detail)
                self.say(f"verlctl watch: {outcome.detail or 'the run was stopped'}; the watch ends")
                return 0
            if outcome.kind == "health":
                w = self._health_stop
                assert w is not None
                self._give_up(Decision(False, f"gave up: training health: {w.title}: {w.message} "
                                       "(recovery.health.stop_on): the run was stopped", advice=[w.hint]),
                              f"health_{w.rule}")
                return 1
            if outcome.kind == "lost":
                self._give_up(Decision(False, f"gave up: {outcome.detail}"), outcome.finding.category
                              if outcome.finding else None)
                return 1
            category = outcome.finding.category if outcome.finding else ("stalled" if outcome.kind == "stalled" else None)
            features_on = {n: s.on and s.applicable for n, s in self._features().items()}
            decision = decide(category, self.resolved.spec, features_on, self.history, self._side(outcome.finding))
            for notice in decision.notices:
                self.say(f"verlctl watch: {notice}")
                self.emit("notice", message=notice)
            if not decision.restart:
                if outcome.group_alive:
                    self._wait_group_end(self.record.attempts[-1].ref, GIVE_UP_WAIT_S)
                self._give_up(decision, category)
                return 1
            try:
                self._restart(decision, category)
            except WatchStopped as exc:
                self.say(f"verlctl watch: {exc.message}")
                self.emit("watch_stopped", detail=exc.message)
                return 0
            except VerlctlError as exc:
                self._give_up(Decision(False, f"gave up: cannot relaunch: {exc.message}",
                                       advice=[exc.hint] if exc.hint else []), category)
                return 1

    def started_line(self) -> str:
        """What the watcher follows, and that it stays quiet while the run is healthy."""
        r = self.record
        attempt = r.attempts[-1] if r.attempts else None
        where = f"container {r.container_name}" if r.runtime == "docker" else "this host"
        group = f"process group {attempt.pgid} (attempt {attempt.number})" if attempt else "no process group"
        nodes = f", {len(r.workers)} worker node(s)" if r.workers else ""
        return (f"verlctl watch: watching run {r.run_id}: {group} in {where}{nodes}, log {r.run_log}. "
                "Silent while healthy: only errors, recoveries, stalls and the end are printed here; "
                f"progress: `verlctl status {r.run_id}`")

    def _resume_failure(self, outcome: AttemptOutcome) -> str | None:
        """A resumed attempt that ended "successfully" without training a step past its checkpoint (verl
        resuming at an epoch boundary ran 0 steps and exited 0) is a failure, not the end of training
        (:func:`verlctl.monitor.health.resume_trained_nothing`, the run state's judgement too)."""
        attempt = self.record.attempts[-1]
        why = resume_trained_nothing(attempt.resumed_from, outcome.max_step, outcome.total, attempt.number,
                                     saved_at=self._latest_checkpoint)  # read only when the step lines say nothing
        return None if why is None else f"gave up: {why}"

    def _features(self) -> dict[str, Any]:
        from verlctl.verl.compose import resolve_features

        states, _ = resolve_features(self.current, self.record.verl_version)
        return states

    def watch_attempt(self) -> AttemptOutcome:
        from verlctl.render.render import TRAIN_SCRIPT

        attempt = self.record.attempts[-1]
        pgid = attempt.ref  # identity verified before every liveness verdict and signal
        self._early = None
        classifier = Classifier()
        parser = LogParser(classifier)
        live = LiveStatus(attempt=attempt.number)
        follower = Follower(self.ex, self.record.run_log, attempt.log_offset, owner=self.record.run_id)
        first_error_at: float | None = None
        alerted = False
        last_liveness = 0.0
        last_status_write = 0.0
        finished = False
        exit_status: str | None = None
        dead_since: float | None = None
        dead_seen_at = 0.0  # time.monotonic() when the attempt was first seen gone (the follower's clock)
        head = HeadDaemons()
        training_seen = False
        head_exited: str | None = None  # the head's `ray start` said its daemons exited (from the log)
        log_checked_at = time.time()  # when the run log was last seen to exist (a deleted log is reported)
        log_gone = False
        judge = StallJudge()
        self._oom_before = self._oom_counters(pgid)  # a SIGKILL is called OOM only on new OOM kills (O2)
        try:
            while True:
                text = follower.get(timeout=1.0)
                now = time.time()
                if text:
                    if FINISHED_MARKER in text:
                        finished = True
                    if EXIT_MARKER in text:
                        exit_status = (text.partition(EXIT_MARKER)[2].split() or ["?"])[0]
                    for ev in parser.feed(text):
                        self._on_event(ev, live, attempt.resumed_from)
                        if isinstance(ev, ErrorFound) and first_error_at is None:
                            first_error_at = now
                        if isinstance(ev, ErrorFound) and RAY_DAEMONS_EXITED in ev.finding.excerpt:
                            head_exited = f"its `ray start` says {RAY_DAEMONS_EXITED!r} (log line {ev.line})"
                    if self._health_stop is not None and not (finished or exit_status):
                        return self._stop_for_health(pgid, attempt.number, live)
                # Alert once per attempt, with the root cause: wait until the traceback is complete (the
                # group ended, or a few seconds passed) so that an OOM inside a RayTaskError is the OOM.
                if first_error_at is not None and not alerted and (
                    dead_since is not None or now - first_error_at >= self.alert_delay_s
                ):
                    findings = classifier.findings()
                    # An unclassified traceback after the last step is the teardown's until the attempt ends
                    # otherwise: a finished run says it was not fatal (alerted then, if the attempt fails).
                    if not findings or not classifier.in_teardown(findings[0]):
                        alerted = True
                        if findings:
                            self._alert(findings[0], attempt.number, live.step)
                if now - last_status_write >= 1.0:
                    live.updated_at = now
                    self._write_status(live.as_dict())
                    last_status_write = now
                if self._user_stopped():
                    return AttemptOutcome("stopped", detail="the run was stopped with `verlctl stop`")
                if head_exited is not None and not (finished or exit_status):
                    # The head's Ray reported its own daemons' exit: seen even by a watcher that started (or
                    # scanned) only after they were gone, which the process scan below cannot tell apart from
                    # a head never seen.
                    return self._head_died(head_exited, pgid, attempt.number, live)
                # Every liveness_every_s while healthy; every DEAD_CONFIRM_S once an error is in the log (its
                # traceback may stream for seconds, the end of the training is what is waited for).
                every = self.liveness_every_s if first_error_at is None else DEAD_CONFIRM_S
                if now - last_liveness >= every or (
                    text == "" and (dead_since is not None or follower.ended or first_error_at is not None)
                ):
                    last_liveness = now
                    verdict: dict[str, Any] = {}
                    try:
                        verdict = self.ex.verdict(pgid)
                        alive = bool(verdict["owned"])
                    except VerlctlError as exc:
                        lost = self._target_lost(exc, attempt.number, classifier.findings())
                        if lost is not None:
                            return lost
                        alive = True  # the engine answers again: a hiccup
                    # Only while the training script runs: after it ends, start_verl.sh stops Ray itself.
                    training = TRAIN_SCRIPT in (verdict.get("scripts") or [])
                    training_seen = training_seen or training
                    # The training ended after a device OOM: what is left is start_verl.sh stopping Ray (seconds);
                    # the attempt is over and its teardown (stop what is left) can start now.
                    oom = first_error_at is not None and self._early_oom(classifier)
                    ended = alive and "scripts" in verdict and training_seen and not training and oom
                    gone = head.update(verdict) if alive and training and not (finished or exit_status) else None
                    if gone == "suspect":
                        # Confirm with a second scan soon, not a whole interval later.
                        last_liveness = now - self.liveness_every_s + HEAD_CONFIRM_AFTER_S
                    elif gone is not None:
                        return self._head_died(gone, pgid, attempt.number, live)
                    self._check_workers()
                    if alive and not log_gone and now - log_checked_at >= LOG_CHECK_EVERY_S:
                        log_checked_at = now
                        log_gone = self._log_gone(attempt.number)
                    if not alive or ended:
                        if dead_since is None:
                            dead_since, dead_seen_at = now, time.monotonic()
                        # Read what the process wrote while dying before deciding (the log is streamed): the
                        # log read past the moment it was seen gone (a follower behind a busy machine would
                        # miss "training finished"), within LOG_CATCH_UP_S.
                        caught_up = follower.synced_at >= dead_seen_at or follower.ended or (
                            now - dead_since >= DEAD_CONFIRM_S + LOG_CATCH_UP_S)
                        if now - dead_since >= DEAD_CONFIRM_S and caught_up:
                            findings = classifier.findings()
                            root = findings[0] if findings else None
                            if finished:
                                # start_verl.sh says "training finished" only when the training command
                                # exited 0: whatever the log matched on the way was not fatal.
                                if root is not None and not alerted:
                                    self.say(f"verlctl watch: note: after the last step, log line {root.line}: "
                                             f"{root.message} (the run finished: its teardown, not a failure)")
                                return AttemptOutcome("finished", None, max_step=live.max_step, total=live.total)
                            if root is None:  # no error line: perhaps none could be written (a full disk)
                                root = self._disk_full(finding_line=parser.lines)  # where the log ends
                            if exit_status == "137" and (root is None or root.category != "device_oom"):
                                root = self._killed_finding(root, pgid)
                            if root is not None and not alerted:
                                self._alert(root, attempt.number, live.step)
                            if self._user_stopped():
                                return AttemptOutcome("stopped")
                            detail = f"process group {pgid} ended" + (f" (exit status {exit_status})" if exit_status else "")
                            if alive:
                                detail = f"the training of process group {pgid} ended"
                            return AttemptOutcome("failed", root, detail, group_alive=alive)
                if first_error_at is not None and now - first_error_at >= self.error_grace_s:
                    findings = classifier.findings()
                    root = findings[0] if findings else None
                    if root is not None and root.category == "device_oom" and self.ex.group_alive(pgid):
                        # A job hanging after an OOM (e.g. a driver waiting on a dead actor): treat as failed.
                        return AttemptOutcome("failed", root, "out of memory, process still hanging")
                stalled = self._stalled(live, judge, follower.synced_at)
                if stalled:
                    self.say(f"verlctl watch: stalled: {stalled}")
                    self.emit("stalled", reason=stalled, attempt=attempt.number,
                              hint="check `ray status` and dump the stuck processes with `py-spy dump --pid PID`")
                    return AttemptOutcome("stalled", detail=stalled)
        finally:
            follower.stop()

    # ----------------------------------------------------------------- the target and the nodes

    def _early_oom(self, classifier: Classifier) -> bool:
        """A device OOM is the root cause so far: start preparing the next attempt now (it does not touch the
        running one), so that the relaunch does not wait for it. True when that is the case."""
        findings = classifier.findings()
        if not findings or findings[0].category != "device_oom":
            return False
        if self._early is None:
            self._early_side = self._side(findings[0])
            self._early = self._start_prepare("device_oom")
        return True

    def _wait_group_end(self, ref: Any, timeout: float) -> None:
        _poll(timeout, 0.5, lambda: not self.ex.group_alive(ref))

    def _head_died(self, gone: str, pgid: Any, attempt: int, live: LiveStatus) -> AttemptOutcome:
        """The head's Ray daemon of this attempt is gone (seen twice, or its `ray start` said so): without its
        GCS the training cannot go on (Ray's driver would only give up after its GCS reconnect timeout, 60 s).
        Alert now, then stop what is left of the attempt (verified by identity) so that nothing waits on a
        dead cluster."""
        from verlctl.monitor.catalogue import CATALOGUE

        cat = next(c for c in CATALOGUE if c.name == "ray_gcs_unreachable")
        root = Finding(category="ray_gcs_unreachable", line=0, excerpt=gone,
                       message=f"the Ray head of attempt {attempt} is gone: {gone}; the training cannot reach "
                       "the GCS any more", hint=cat.hint + "; look at the head's `gcs_server.out` / `raylet.out` "
                       "and `dmesg` for why it died")
        self._alert(root, attempt, live.step)
        self.say(f"verlctl watch: stopping what is left of attempt {attempt} (process group {pgid})")
        try:
            self.ex.stop_group(pgid, grace_s=HEAD_DIED_GRACE_S)
        except VerlctlError as exc:
            self.say(f"verlctl watch: warning: could not stop process group {pgid}: {exc.message}")
        return AttemptOutcome("failed", root, f"the Ray head of process group {pgid} died",
                              max_step=live.max_step, total=live.total)

    def _target_lost(self, exc: VerlctlError, attempt: int, findings: list[Finding]) -> AttemptOutcome | None:
        """The run's container (or its engine) stopped answering: say so at once, with the container's
        state; wait (bounded) for an engine that is restarting, then report what became of the container.
        None when the container turns out to be running and answering again (a hiccup)."""
        state = target_state(self.ex)
        deadline = time.monotonic() + self.engine_wait_s
        while state["state"] == "running" and time.monotonic() < deadline:
            # The engine says running but the command failed: shutting down, or a hiccup. Ask again.
            time.sleep(0.5)
            try:
                self.ex.group_alive(self.record.attempts[-1].ref)
                return None
            except VerlctlError as again:
                exc = again
            state = target_state(self.ex)
        self.say(f"verlctl watch: lost the run's {self.ex.describe()}: {state['state']} ({exc.message})")
        # ``error``: why the command failed; an engine that does not answer says its own as ``engine_error``.
        lost = {k: v for k, v in state.items() if k != "error"}
        if "error" in state:
            lost["engine_error"] = state["error"]
        self.emit("target_lost", attempt=attempt, error=exc.message, **lost)
        self._write_status({**(self.record.read_status() or {}), "phase": "target lost",
                                  "target": state})
        if state["state"] == "engine unreachable":
            def back() -> bool:
                nonlocal state
                state = target_state(self.ex)
                return state["state"] != "engine unreachable"

            if _poll(self.engine_wait_s, 1.0, back):
                self.emit("engine_back", attempt=attempt, **state)
        what = state["state"]
        if state.get("exit_code") is not None and what not in ("running", "engine unreachable"):
            what += f" (exit code {state['exit_code']}" + (", OOM-killed" if state.get("oom_killed") else "") + ")"
        root = findings[0] if findings else None
        if state.get("oom_killed"):
            root = self._killed_finding(root, None, engine_oom_killed=True)
        detail = (f"the run's {self.ex.describe()} is {what}: the training cannot continue there; checkpoints "
                  f"are kept in {self.record.checkpoints or 'the checkpoint directory'}")
        if state["state"] == "running":
            detail = f"cannot reach the run's process group in {self.ex.describe()}: {exc.message}"
        return AttemptOutcome("lost", root, detail)

    def _oom_counters(self, pgid: Any, same_as: Any = None) -> Any:
        """The OOM-kill counters of the training's memory cgroup and the kernel log (monitor/killed.py): in a
        container its own cgroup, on the host the cgroup of the attempt's leader."""
        from verlctl.monitor.killed import read_counters
        from verlctl.runtime.executor import DockerExecutor

        leader = None if isinstance(self.ex, DockerExecutor) else getattr(pgid, "pgid", None)
        return read_counters(self.ex, leader, same_as)

    def _killed_finding(self, root: Finding | None, pgid: Any, engine_oom_killed: bool = False) -> Finding:
        """Exit 137 (SIGKILL) without a device out-of-memory error: host OOM only when the cgroup, the kernel
        log or the engine says so; otherwise "killed by signal 9", with OOM as one possibility. Never a reason
        to add offload (which moves memory *to* the host)."""
        from verlctl.monitor.catalogue import CATALOGUE
        from verlctl.monitor.killed import OomCounters, killed_finding, read_after

        host = next(c for c in CATALOGUE if c.name == "host_oom")
        before = self._oom_before or OomCounters()
        after = read_after(lambda: self._oom_counters(pgid, before), before)
        return killed_finding(root, before, after, engine_oom_killed,
                              host.hint + "; check `dmesg` / `journalctl -k` for 'Out of memory: Killed process'")

    def _check_workers(self) -> None:
        """Multi-node: each worker node's process group, through its engine (ssh). An unreachable node is
        reported once when it goes and once when it comes back; the head's training decides the outcome."""
        if not self.record.workers:
            return
        if self._worker_ex is None:
            try:
                targets = self.backend.workers(self.record)
            except VerlctlError as exc:
                targets = [(w, None, {"state": f"unreachable: {exc.message}"}) for w in self.record.workers]
            self._worker_ex = {w.address: wex for w, wex, _ in targets}
            self._worker_info = {w.address: str(info.get("state")) for w, _, info in targets}
        for w in self.record.workers:
            wex = self._worker_ex.get(w.address)
            problem = None
            if wex is None:
                state = self._worker_info.get(w.address, "unknown")
                problem = state if state.startswith("unreachable") else f"its container is {state}"
            elif w.ref is not None:
                try:
                    if not wex.group_alive(w.ref):
                        problem = f"its process group {w.pgid} ended"
                except VerlctlError as exc:
                    problem = f"unreachable: {exc.message}"
            if problem and w.address not in self._nodes_down:
                self._nodes_down.add(w.address)
                self.say(f"verlctl watch: worker node {w.address}: {problem}")
                self.emit("node_unreachable" if problem.startswith("unreachable") else "node_ended",
                          node=w.address, reason=problem)
            elif problem is None and w.address in self._nodes_down:
                self._nodes_down.discard(w.address)
                self.emit("node_back", node=w.address)

    def _log_gone(self, attempt: int) -> bool:
        """The run log no longer exists while the attempt runs (deleted, its directory moved): say so at once
        (the training's own `tee` log may still be intact), rather than waiting for the stall limit."""
        try:
            size = self.ex.file_size(self.record.run_log)
        except VerlctlError:
            return False
        if size is not None:
            return False
        train = self.record.train_log
        msg = (f"the run log {self.record.run_log} is gone (deleted or moved) while attempt {attempt} runs: "
               "progress and errors can no longer be followed" + (f"; the trainer's own log is {train}" if train else ""))
        self.say(f"verlctl watch: warning: {msg}")
        self.emit("log_gone", path=self.record.run_log, attempt=attempt, message=msg)
        return True

    def _disk_full(self, finding_line: int) -> Finding | None:
        """A run that ended without an error line: a full log or checkpoint disk is the likely reason (the
        error could not be written). A ``disk_full`` finding naming the full path, or None."""
        import posixpath

        from verlctl.monitor.catalogue import CATALOGUE

        paths = [("paths.logs", posixpath.dirname(self.record.run_log)), ("paths.checkpoints", self.record.checkpoints)]
        for field_name, path in paths:
            if not path:
                continue
            try:
                res = self.ex.run(["df", "-Pk", "--", path], timeout=DF_TIMEOUT_S)
            except VerlctlError:
                continue
            if not res.ok:
                continue
            try:  # POSIX df: a header line, then "Filesystem 1024-blocks Used Available Capacity Mounted-on"
                avail_kib = int((res.out or "").partition("\n")[2].split()[3])
            except (IndexError, ValueError):
                continue
            if avail_kib < DISK_FULL_BELOW_KIB:
                cat = next(c for c in CATALOGUE if c.name == "disk_full")
                return Finding(category="disk_full", line=finding_line, excerpt=f"df {path}: {avail_kib} KiB free",
                               message=f"the run ended without an error line and {field_name} {path} is full "
                               f"({avail_kib} KiB free): nothing more could be written there",
                               hint=cat.hint)
        return None

    def _alert(self, f: Finding, attempt: int, step: int | None = None) -> None:
        from verlctl.verl.modes import describe_process, process_in

        mode = self.resolved.spec.mode
        who = describe_process(mode, f.excerpt)  # a process of the run's mode: the rollouter, the queue, ...
        message = f"{f.message}: {who}" if who else f.message
        # A finding from a scan (the head's daemons gone, a SIGKILL with nothing in the log) has no log line.
        where = f" at log line {f.line}" if f.line > 0 else ""
        hint = self._hint(f)
        self.say(f"verlctl watch: {f.category}{where}: {message}")
        self.say(f"  hint: {hint}")
        proc = process_in(mode, f.excerpt)
        extra = {"process": proc.name, "role": proc.role} if proc is not None else {}
        self.emit("alert", category=f.category, line=f.line, message=message, hint=hint, excerpt=f.excerpt,
                  attempt=attempt, step=step, **extra)

    def _hint(self, f: Finding) -> str:
        """What to do about ``f`` with this watcher at work: for a device OOM, what its ladder does next (not
        "enable offload" while it adds it), or its advice when it will give up."""
        if f.category != "device_oom":
            return f.hint
        from verlctl.monitor.catalogue import oom_hint

        try:
            features_on = {n: s.on and s.applicable for n, s in self._features().items()}
            d = decide("device_oom", self.resolved.spec, features_on, self.history, self._side(f))
        except Exception:  # noqa: BLE001 - the hint is words; the decision itself is taken after the attempt
            return f.hint
        tried = [n for n, on in features_on.items() if on]
        if d.restart and d.add_feature:
            retries = self.resolved.spec.recovery.max_oom_retries
            return (f"nothing to do yet: this watcher restarts the run with `{d.add_feature}` added (OOM retry "
                    f"{self.history.oom_retries + 1} of {retries}); if the ladder gives up it says what to change")
        return oom_hint(tried, advice=d.advice)

    def _side(self, f: Finding | None) -> str | None:
        """Whose devices a device OOM hit, where the run's mode gives trainer and rollout their own."""
        from verlctl.verl.modes import device_side

        if f is None or f.category != "device_oom":
            return None
        return device_side(self.resolved.spec.mode, f.excerpt)

    def _on_event(self, ev: object, live: LiveStatus, resumed_from: str | None) -> None:
        if isinstance(ev, Progress):
            if live.step is None or ev.step > live.step:
                live.progressed(timed=live.step is not None)
            live.step = ev.step
            live.max_step = ev.step if live.max_step is None else max(ev.step, live.max_step)
            live.total = ev.total or live.total
            live.eta_s = ev.remaining_s
            live.seconds_per_step = ev.seconds_per_step
            live.phase = "training"
            if resumed_from and ev.step > 0:
                self._check_resumed(ev.step, resumed_from)
        if isinstance(ev, Progress | StepMetrics) and resumed_from and not self._advance_seen:
            resumed = _checkpoint_step(resumed_from)
            if resumed is not None and ev.step > resumed:
                self._advance_seen = True
                self.emit("resume_advanced", resumed_from=resumed_from, step=ev.step)
        if isinstance(ev, StepMetrics):  # also the step that said the resume advanced
            if live.step is None or ev.step > live.step:
                live.progressed(timed=live.step is not None)
                live.step = ev.step
            live.max_step = ev.step if live.max_step is None else max(ev.step, live.max_step)
            live.last_metrics = {k: float(v) for k, v in ev.metrics.items()}
            live.phase = "training"
            for w in self.health.feed(ev.step, ev.metrics):
                self._health_warning(w, live)
        elif isinstance(ev, TotalSteps):
            live.total = ev.total
        elif isinstance(ev, Phase):
            if ev.kind is PhaseKind.CHECKPOINT_SAVED:
                self.emit("checkpoint_saved", step=ev.step)
            elif ev.kind is PhaseKind.RAY_STARTED and live.phase == "starting":
                live.phase = "ray up"
            elif ev.kind is PhaseKind.WORKERS_STARTING and live.phase in ("starting", "ray up"):
                live.phase = "workers starting"

    _resume_checked = False
    _advance_seen = False

    def _health_warning(self, w: HealthWarning, live: LiveStatus) -> None:
        """A training-health warning: one line, one ``health`` event (and --notify-cmd), in status.json."""
        live.health = [x.to_dict() for x in self.health.warnings]
        stops = w.rule in self.health.settings.stop_on
        self.say(f"verlctl watch: {warning_line(w.to_dict())}")
        self.say(f"  hint: {w.hint}" + ("" if stops else " (a warning: the run goes on; "
                                                          "recovery.health.stop_on would stop it)"))
        self.emit("health", attempt=live.attempt, stops=stops, **w.to_dict())
        if stops and self._health_stop is None:
            self._health_stop = w

    def _stop_for_health(self, pgid: Any, attempt: int, live: LiveStatus) -> AttemptOutcome:
        """recovery.health.stop_on names a warning that fired: stop the attempt (verified by identity)."""
        w = self._health_stop
        assert w is not None
        self.say(f"verlctl watch: stopping attempt {attempt} (process group {pgid}): recovery.health.stop_on "
                 f"names {w.rule}")
        try:
            self.ex.stop_group(pgid, grace_s=HEAD_DIED_GRACE_S)
        except VerlctlError as exc:
            self.say(f"verlctl watch: warning: could not stop process group {pgid}: {exc.message}")
        return AttemptOutcome("health", None, w.message, max_step=live.max_step, total=live.total)

    def _check_resumed(self, initial_step: int, resumed_from: str) -> None:
        if self._resume_checked:
            return
        self._resume_checked = True
        expected = _checkpoint_step(resumed_from)
        ok = expected is not None and initial_step >= expected
        self.emit("resume_check", expected_checkpoint=resumed_from, first_step_seen=initial_step, resumed=ok)
        if not ok:
            self.say(f"verlctl watch: warning: the trainer started at step {initial_step}, "
                     f"not after the checkpoint {resumed_from}")

    def _stalled(self, live: LiveStatus, judge: StallJudge, synced_at: float) -> str | None:
        """The stall's reason once it is called (:class:`StallJudge`), else None. Durations are monotonic."""
        r = self.resolved.spec.recovery
        now = time.monotonic()
        idle = now - live.progress_mono
        if live.step_times:
            limit = max(float(r.stall_min_s), r.stall_step_factor * statistics.median(live.step_times))
            phase = "training"
        else:
            limit = float(r.stall_startup_s)
            phase = "start-up"
        reason = f"no progress for {idle:.0f}s during {phase} (limit {limit:.0f}s)" if idle >= limit else None
        return judge.verdict(reason, limit, now, synced_at)

    def _user_stopped(self) -> bool:
        from verlctl.runtime.records import load_run

        try:
            return load_run(self.record.run_id).stopped
        except Exception:  # noqa: BLE001
            return False

    # ------------------------------------------------------------------------------ recovery

    def _give_up(self, decision: Decision, category: str | None) -> None:
        reason = decision.reason if decision.reason.startswith("gave up:") else f"gave up: {decision.reason}"
        self.say(f"verlctl watch: {reason}")
        for a in decision.advice:
            self.say(f"  advice: {a}")
        ref = self.record.attempts[-1].ref if self.record.attempts else None
        with contextlib.suppress(Exception):  # best effort: the words only
            if ref is not None and self.ex.group_alive(ref):
                self.say(f"verlctl watch: the run's processes are left running (to inspect them, e.g. `py-spy "
                         f"dump`) and hold the devices: free them with `verlctl stop {self.record.run_id}`")
        self.emit("gave_up", category=category, reason=reason, advice=decision.advice)
        self._write_status({**(self.record.read_status() or {}), "phase": "failed", "reason": reason})
        self._remove_key_files()  # no relaunch will read it again (it holds the secrets)

    def _remove_key_files(self) -> None:
        self.backend.remove_key_files(self.record, self.ex, lambda text: self.say(f"verlctl watch: {text}"))

    def _start_prepare(self, category: str | None, decision: Decision | None = None) -> tuple[list[str], Any] | None:
        """Check and compose the attempt that ``decision`` (default: what :func:`decide` says now for
        ``category``) would start, in a background thread: (the features it enables, its future)."""
        import concurrent.futures

        from verlctl.backends.base import Change

        if decision is None:
            features_on = {n: s.on and s.applicable for n, s in self._features().items()}
            decision = decide(category, self.resolved.spec, features_on, self.history, self._early_side)
            if not decision.restart:
                return None
        added, enable = self._next_features(decision)

        def prepare() -> Any:
            return self.backend.prepare_relaunch(self.record, self.ex,
                                                 Change(decision.reason, tuple(enable) if added else ()))

        # What this thread imports while the preparation runs (the teardown reads the device tool's table),
        # imported before it starts: the preparation imports them too (make_plan: checks.facts → detect.machine
        # → detect.npu), and two threads importing one module at once can fail with importlib's
        # _DeadlockError, which ended the watcher on its first restart.
        import verlctl.detect.gpu
        import verlctl.detect.npu  # noqa: F401

        pool = concurrent.futures.ThreadPoolExecutor()
        try:
            return enable, pool.submit(prepare)
        finally:
            pool.shutdown(wait=False)  # the thread ends with prepare()

    def _next_features(self, decision: Decision) -> tuple[list[str], list[str]]:
        """The features recovery has added with ``decision``, and the list to enable in the next attempt."""
        added = [*self.history.added, decision.add_feature] if decision.add_feature else list(self.history.added)
        enable = list(self.resolved.spec.features.enable) + [f for f in added
                                                             if f not in self.resolved.spec.features.enable]
        return added, enable

    def _restart(self, decision: Decision, category: str | None) -> None:
        # The next attempt is checked and composed in the target while the failed one is torn down (which
        # happens even when the next one cannot be prepared); after a device OOM, from the moment it was
        # seen (see _early_oom).
        early, self._early = self._early, None
        prepared_early = early is not None and early[0] == self._next_features(decision)[1]
        if early is not None and prepared_early:
            prepared = early[1]
        else:
            started = self._start_prepare(category, decision)
            assert started is not None
            prepared = started[1]
        try:
            teardown_s = self._teardown()
        finally:
            outcome = prepared.exception()  # wait for it either way
        if outcome is not None:
            raise outcome
        the_next = prepared.result()
        if decision.add_feature:
            self.history.oom_retries += 1
            self.history.added.append(decision.add_feature)
        else:
            self.history.restarts += 1
        resumed_from = self._latest_checkpoint()
        self.emit("recovery", category=category, reason=decision.reason, add_feature=decision.add_feature,
                  features_added=list(self.history.added), resumed_from=resumed_from, teardown_s=teardown_s,
                  prepared_early=prepared_early)
        self.say(f"verlctl watch: {decision.reason}" + (f"; resuming from {resumed_from}" if resumed_from else ""))
        from verlctl.runtime.records import load_run, record_lock

        # Start the attempt and record it under the record's lock: `stop` marks the run under the same lock,
        # so either it sees this attempt (and stops it) or this watcher sees its mark (and starts nothing).
        with record_lock(self.record):
            if load_run(self.record.run_id).stopped:
                self.record.stopped = True
                raise WatchStopped("the run was stopped while the next attempt was prepared: not relaunched")
            from verlctl.backends.base import Change

            resolved = self.backend.relaunch(self.record, Change(decision.reason, resumed_from=resumed_from),
                                             prepared=the_next, ex=self.ex)
        self._resume_checked = False
        self._advance_seen = False
        self.current = resolved

    def _teardown(self) -> float:
        """Stop what is left of the failed attempt (every node) and wait for device memory; its duration."""
        started = time.monotonic()
        attempt = self.record.attempts[-1]
        # The attempt failed: its Ray daemons serve nothing to save, they get SIGKILL at once (the training's
        # processes get SIGTERM and the grace period).
        if self.ex.group_alive(attempt.ref):
            self.ex.stop_group(attempt.ref, ray_grace_s=TEARDOWN_RAY_GRACE_S)
        if self.record.workers:
            for w, wex, _ in self.backend.workers(self.record):
                if wex is not None and w.ref is not None and wex.group_alive(w.ref):
                    wex.stop_group(w.ref, ray_grace_s=TEARDOWN_RAY_GRACE_S)
        self._wait_memory_released()
        return round(time.monotonic() - started, 3)

    def _latest_checkpoint(self) -> str | None:
        """The checkpoint the next attempt resumes from, read in the run's target, for the spec's resume mode
        (orchestrator/resume.py: none with trainer.resume_mode=disable; verl's tracker and an existing folder with auto)."""
        from verlctl.orchestrator.resume import resume_point

        return resume_point(self.record.checkpoints, self.current.spec, read=lambda p: self.ex.read_file(p, max_bytes=TRACKER_MAX_BYTES),
                            is_dir=lambda path: self.ex.file_size(f"{path}/.") is not None)

    def _wait_memory_released(self) -> None:
        """Wait (bounded) until the device tool lists no process on the run's devices."""
        spec = self.resolved.spec
        tool = ["npu-smi", "info"] if spec.device == "npu" else ["nvidia-smi"]
        seen: list[str] = []  # what the device tool said last: no answer, or none of the run's devices busy

        def released() -> bool:
            res = self.ex.run(tool, timeout=DEVICE_TOOL_TIMEOUT_S)
            if not res.ok:
                seen.append("no tool")  # nothing to wait on
            elif not _busy_devices(spec.device, res.out) & set(spec.cluster.devices):
                seen.append("released")
            return bool(seen)

        if not _poll(spec.recovery.memory_release_timeout_s, MEMORY_POLL_S, released):
            self.say("verlctl watch: warning: device memory still in use after the wait; relaunching anyway")
            self.emit("memory_release_timeout")
        elif seen == ["released"]:
            self.emit("memory_released")


#: After a first scan without a Ray daemon of the head, the second scan that confirms it comes this soon.
HEAD_CONFIRM_AFTER_S = 0.5


class HeadDaemons:
    """The head's Ray daemons (``gcs_server``, ``raylet``) among the attempt's verified processes. Once seen,
    one missing while the attempt's group lives is a suspect; missing again in the next scan, the head died.
    Two scans, so that a scan that raced a process table change under load is no false alarm."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.suspect = False

    def update(self, verdict: dict[str, Any]) -> str | None:
        """None (fine or not started), ``"suspect"`` (first miss), or what died (confirmed)."""
        now = {str(k): int(v) for k, v in (verdict.get("ray") or {}).items()}
        for name, pid in now.items():
            self.seen[name] = pid
        missing = [f"{name} (pid {pid})" for name, pid in self.seen.items() if now.get(name) != pid]
        if not missing:
            self.suspect = False
            return None
        if not self.suspect:
            self.suspect = True
            return "suspect"
        return " and ".join(missing) + " ended"


#: How long after the attempt's end (or its training's end after a device OOM) the watcher reads what the
#: processes wrote while dying before it decides (the log is streamed: milliseconds; this is the margin).
DEAD_CONFIRM_S = 0.5
#: How long an ended attempt's verdict waits at most for the log follower to catch up with its end.
LOG_CATCH_UP_S = 10.0


def target_state(ex: Executor) -> dict[str, Any]:
    """The state of an executor's container as the engine reports it (``engine unreachable`` when it does
    not answer); ``{"state": "host"}`` for the host."""
    from verlctl.runtime.executor import DockerExecutor

    if not isinstance(ex, DockerExecutor):
        return {"state": "host"}
    try:
        info = ex.api.inspect_container(ex.container_id)
    except Exception as exc:  # noqa: BLE001 - docker.errors.NotFound, APIError, transport errors
        if type(exc).__name__ == "NotFound":
            return {"state": "removed"}
        return {"state": "engine unreachable", "error": " ".join(str(exc).split())[:ENGINE_ERROR_CHARS]}
    st = info.get("State") or {}
    return {"state": str(st.get("Status") or "unknown"), "exit_code": st.get("ExitCode"),
            "oom_killed": bool(st.get("OOMKilled")), "finished_at": st.get("FinishedAt")}


def _checkpoint_step(path: str | None) -> int | None:
    """The step of a ``.../global_step_N`` checkpoint folder; None for anything else."""
    _, found, step = (path or "").rstrip("/").rpartition("global_step_")
    return int(step) if found and step.isdigit() else None


def _poll(timeout_s: float, every_s: float, done: Callable[[], bool]) -> bool:
    """Ask ``done()`` every ``every_s`` seconds until it says True (True) or ``timeout_s`` has passed (False)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)
    return True


def _busy_devices(device: str, text: str) -> set[int]:
    try:
        if device == "npu":
            from verlctl.detect.npu import parse_npu_smi_info

            return {p.device for p in parse_npu_smi_info(text).processes}
        from verlctl.detect.gpu import parse_nvidia_smi

        return {p.device for p in parse_nvidia_smi(text).processes if p.device is not None}
    except Exception:  # noqa: BLE001 - unparseable: do not block the recovery
        return set()


def _own_pid() -> int:
    import os

    return os.getpid()
