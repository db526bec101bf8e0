"""``launch --backend slurm`` and the run commands on a Slurm run: submit, status, logs, stop, watch.

The job is the sbatch script of ``verlctl export slurm`` (the plan's two scripts, one ``srun`` step per node).
Its directory ``<paths.logs>/verlctl-slurm/<run id>`` (storage the nodes share, like the checkpoints) holds the
0600 env file and the job's output files ``slurm-<job id>.out``; the run record keeps every submission's job id
(``RunRecord.slurm_jobs``). Status comes from squeue / scontrol / sacct and the output file; ``stop`` cancels
the current job id only (after checking Slurm still names it as this run's job). The watcher follows the output
file and, on out-of-memory, resubmits with the next rung of the OOM ladder; the trainer resumes from the last
checkpoint (``trainer.resume_mode=auto``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from verlctl.backends import slurm as target
from verlctl.backends.base import LaunchRequest
from verlctl.errors import EXIT_FAILURE, RuntimeFailure, VerlctlError
from verlctl.render.slurm import SlurmOptions
from verlctl.runtime import slurm
from verlctl.runtime.records import RunRecord, SlurmJobRef
from verlctl.spec.resolve import ResolvedSpec

#: Secrets the job gets from the 0600 env file only, never from the submitting environment.
SECRET_ENV = ("SWANLAB_API_KEY",)


def render_job(resolved: ResolvedSpec, opts: SlurmOptions) -> tuple[Any, Any, str]:
    """(plan, rendered scripts, sbatch text) for this spec; a spec with errors is one line."""
    from verlctl.checks.findings import Severity, has_errors
    from verlctl.plan import make_plan
    from verlctl.render.render import render
    from verlctl.render.slurm import ray_port_args, render_sbatch

    spec = resolved.spec
    the_plan = make_plan(resolved)
    if has_errors(the_plan.findings):
        first = next(f for f in the_plan.findings if f.severity is Severity.ERROR)
        raise VerlctlError(f"the spec has errors: {first.field}: {first.message}", hint=first.hint)
    c = spec.cluster
    rendered = render(resolved, the_plan.command, tuple(ray_port_args(c.ray_port, c.dashboard_port, c.ray_start_args)))
    docker = spec.container.runtime == "docker"
    job = render_sbatch(
        rendered, nnodes=c.node_count, nodelist=list(c.nodes), devices_per_node=len(c.devices), device=spec.device,
        master_addr=c.master_addr if c.master_addr and resolved.explicit("cluster.master_addr") else "",
        ray_port=c.ray_port, join_timeout=c.join_timeout_s, experiment=spec.logging.experiment or "verl", opts=opts,
        docker_args=slurm.docker_step_args(spec) if docker else None, image=spec.container.image if docker else None,
        driver_mounts=slurm.docker_step_driver_mounts(spec) if docker else None,
    )
    return the_plan, rendered, job.script


def submit_job(record: RunRecord, resolved: ResolvedSpec, opts: SlurmOptions, reason: str,
               resumed_from: str | None) -> SlurmJobRef:
    """Render and submit one job of the run (the first, or a resubmission); recorded before it returns."""
    the_plan, rendered, script = render_job(resolved, opts)
    n, script_path = target.write_job(record, script, rendered.env_file, rendered.files)
    # sbatch hands the submitting environment to the job (and slurmctld keeps it in its state): what the 0600
    # env file carries, the SwanLab key above all, is left out of it.
    job_id = target.sbatch(record, script_path, {*rendered.command.env_file, *SECRET_ENV})
    job_dir = Path(record.scripts_dir)
    features = [k for k, s in the_plan.command.features.items() if s.on and s.applicable]
    ref = SlurmJobRef(number=n, job_id=job_id, job_name=target.job_name_of(script), submitted_at=time.time(),
                      output=str(job_dir / f"slurm-{job_id}.out"), features=features, reason=reason,
                      resumed_from=resumed_from)
    record.slurm_jobs.append(ref)
    record.run_log = ref.output
    record.verl_version = the_plan.command.version
    record.save()
    record.event("submitted", job_id=job_id, attempt=n, reason=reason, features=features, resumed_from=resumed_from)
    record.event("started", job_id=job_id, attempt=n, reason=reason, features=features, resumed_from=resumed_from)
    return ref


# ------------------------------------------------------------------------------------------------- launch


def prepare_slurm(resolved: ResolvedSpec, opts: SlurmOptions, *, dry_run: bool,
                  verify_timeout: float) -> LaunchRequest:
    """The Slurm backend's LaunchRequest: the job's sbatch text, the rendered scripts, the actions; nothing is
    written or submitted (a spec with errors is one line)."""
    from verlctl.backends.base import Action, run_id_for
    from verlctl.backends.base import Stage as S
    from verlctl.orchestrator.resume import resume_action
    from verlctl.render.slurm import check_options

    spec = resolved.spec
    check_options(opts, spec.device)
    run_id = run_id_for(spec.logging.experiment or "run", dry_run=dry_run)
    job_dir = target.job_dir_for(resolved.spec.paths.logs or "", run_id)
    _plan, rendered, script = render_job(resolved, opts)  # errors before anything is written
    actions = [
        Action(S.WRITE_JOB, f"write the job ({target.JOB_SCRIPT}) and the 0600 env file into {job_dir}"),
        Action(S.SUBMIT, f"sbatch --parsable it: {spec.cluster.node_count} node(s), one srun step per node (Ray "
                         "head, then workers)"),
        Action(S.SUBMIT, resume_action(spec.paths.checkpoints, spec)),
        Action(S.VERIFY, f"verify within {int(verify_timeout)}s that training started (a job still queued then is "
                         "left queued)"),
        Action(S.RECORD, f"record the run (id {run_id}) under the state dir"),
    ]
    return LaunchRequest(
        backend="slurm", run_id=run_id, target=f"{spec.cluster.node_count} Slurm node(s)",
        workdir=spec.container.workdir, scripts_dir=str(job_dir), run_log=str(job_dir / "slurm-%j.out"),
        files=dict(rendered.files), env_file_names=tuple(sorted(rendered.command.env_file)), sbatch=script,
        stages=(S.WRITE_JOB, S.SUBMIT, S.VERIFY, S.RECORD), plan=tuple(actions),
    )


def launch_slurm(resolved: ResolvedSpec, opts: SlurmOptions, console: Any, *, yes: bool, dry_run: bool,
                 verify_timeout: float, actions_out: list[str] | None = None,
                 request: LaunchRequest | None = None, started: list[RunRecord] | None = None) -> RunRecord | None:
    """Write, submit and verify the run's job (``started``: the record is appended to it as soon as it is made,
    for the launch guard's clean-up); None for a dry run."""
    from verlctl.orchestrator.interrupts import launch_guard
    from verlctl.orchestrator.resume import resume_point

    spec = resolved.spec
    if request is None:
        request = prepare_slurm(resolved, opts, dry_run=dry_run, verify_timeout=verify_timeout)
    run_id = request.run_id
    job_dir = Path(request.scripts_dir)
    actions = request.actions()
    if actions_out is not None:
        actions_out.extend(actions)
    if dry_run or not yes:
        console.print("[bold]dry run[/bold]: these actions would be taken, in order (nothing is changed):"
                      if dry_run else "launch --backend slurm would:")
        for i, a in enumerate(actions, 1):
            console.print(f"  {i:2}. {a}", highlight=False, markup=False)
        if dry_run:
            return None
        raise VerlctlError("launch --backend slurm asks no questions: pass --yes to submit the job")
    record = RunRecord(
        run_id=run_id, created_at=time.time(), runtime="slurm", workdir=spec.container.workdir,
        scripts_dir=str(job_dir), run_log="", train_log="", checkpoints=spec.paths.checkpoints or "",
        experiment=spec.logging.experiment or "", verl_version="",
        image=spec.container.image if spec.container.runtime == "docker" else None,
    )
    if started is not None:
        started.append(record)
    with launch_guard(lambda what: abort_slurm_launch(record, what)):
        record.save()
        record.event("launch", actions=actions, backend="slurm")
        _save_options(record, opts)
        try:
            ref = submit_job(record, resolved, opts, "launch", resume_point(spec.paths.checkpoints, spec))
        except VerlctlError as exc:
            target.remove_env_file(record)
            record.event("launch_failed", error=exc.message)
            raise
        console.print(f"submitted Slurm job {ref.job_id} ({ref.job_name}); output {ref.output}", highlight=False,
                      markup=False)
        verify_job(record, ref, verify_timeout, console, resolved, opts)
    return record


def abort_slurm_launch(record: RunRecord, what: str) -> str:
    """The failed-launch clean-up of a Slurm launch: every job of the run that Slurm still names as the run's
    is cancelled (its id, checked against its name), the key file removed, the run marked stopped; one line."""
    cancelled, unsure = [], []
    for ref in record.slurm_jobs:
        try:
            if target.cancel(ref):
                cancelled.append(ref.job_id)
        except Exception:  # noqa: BLE001 - the controller did not answer: named, for `verlctl stop` or scancel
            unsure.append(ref.job_id)
    target.remove_env_file(record)
    record.stopped = True
    with contextlib.suppress(OSError):
        record.event("launch_interrupted", signal=what, cancelled_jobs=cancelled, unsure_jobs=unsure)
    with contextlib.suppress(OSError):
        record.save()
    done = [f"Slurm job {j} cancelled" for j in cancelled] + [
        f"Slurm job {j} could not be cancelled (run `verlctl stop {record.run_id}` or `scancel {j}`)" for j in unsure]
    return (f"interrupted ({what}) during launch of run {record.run_id}: "
            + (", ".join(done) if done else "no Slurm job was running") + "; the run is marked stopped")


def verify_job(record: RunRecord, ref: SlurmJobRef, timeout: float, console: Any, resolved: ResolvedSpec,
               opts: SlurmOptions) -> None:
    """Until training prints progress in the job's output (:func:`await_training`); a job that ended first
    because Ray did not come up (:data:`RAY_START_FAILURES`, a loaded host) is submitted once more (a new job,
    the same scripts and resume point), as a single-node launch starts once more; any other end, or a second
    one, is the launch's failure with the diagnosis of the job's output."""
    from verlctl.orchestrator.markers import RAY_START_FAILURES

    ended = await_training(record, ref, timeout, console)
    if ended is None:
        return
    text, why = ended
    category = _diagnosis(text)[0]
    if category in RAY_START_FAILURES:
        console.print(f"warning: Ray did not come up in Slurm job {ref.job_id} ({category}); submitting the job "
                      "once more (a loaded host is the usual cause)", highlight=False, markup=False)
        record.event("ray_start_retry", category=category, attempt=ref.number, job_id=ref.job_id)
        # Never two jobs of one run: one that timed out still RUNNING (a worker's Ray retrying to join) goes first
        # (scancel of this job id, after Slurm still names it as this run's; a job that ended is left as it is).
        # The next job is submitted only once this one is known to have ended: a state Slurm does not give (a
        # busy slurmctld) is asked again, and then stops the launch naming the job (slurm.cancel).
        try:
            if target.cancel(ref):
                record.event("stopped", job_id=ref.job_id, reason=f"retry after {category}")
                target.await_end(ref)
        except RuntimeFailure as exc:
            target.remove_env_file(record)
            record.event("launch_failed", error=exc.message, job_id=ref.job_id)
            raise RuntimeFailure(f"not submitting Slurm job {ref.job_id} again: {exc.message}", hint=exc.hint) from None
        ref = submit_job(record, resolved, opts, f"retry after {category}", ref.resumed_from)
        console.print(f"submitted Slurm job {ref.job_id} ({ref.job_name}); output {ref.output}", highlight=False,
                      markup=False)
        ended = await_training(record, ref, timeout, console)
        if ended is None:
            return
        text, why = ended
    _fail(record, ref, text, why)


def _save_options(record: RunRecord, opts: SlurmOptions) -> None:
    import json

    record.write_file("slurm-options.json", json.dumps(opts.__dict__).encode("utf-8"))


def load_options(record: RunRecord) -> SlurmOptions:
    import json

    try:
        data = json.loads(record.read_file("slurm-options.json").decode("utf-8"))
    except (OSError, ValueError):
        return SlurmOptions()
    return SlurmOptions(**{k: v for k, v in data.items() if k in SlurmOptions.__dataclass_fields__})


def await_training(record: RunRecord, ref: SlurmJobRef, timeout: float, console: Any) -> tuple[str, str] | None:
    """Until training prints progress in the job's output: None then, and None for a job still queued at the
    deadline (left queued, said); else (the job's output, why it is no start) for a job that ended first or
    ran without progress to the deadline."""
    from verlctl.orchestrator.markers import progress_shown

    def verified(text: str) -> bool:
        first = progress_shown(text)
        if first is not None:
            record.event("verified", job_id=ref.job_id, first_line=first[:300])
            console.print(f"training is running: {first.strip()[:160]}", highlight=False, markup=False)
        return first is not None

    deadline = time.monotonic() + timeout
    st = target.job_state(ref)
    while time.monotonic() < deadline:
        if verified(target.read_output(ref).decode(errors="replace")):
            return None
        st = target.job_state(ref)
        if not st.live and st.state != "UNKNOWN":
            time.sleep(1.0)
            # The job's whole output, read after it ended: a short run prints its steps and ends between two looks.
            text = target.read_output(ref).decode(errors="replace")
            if verified(text):
                return None
            return text, f"Slurm job {ref.job_id} ended ({st.state}, exit {st.exit_code}) before training started"
        time.sleep(2.0)
    if st.state == "PENDING":
        record.event("queued", job_id=ref.job_id, reason=st.reason)
        console.print(f"Slurm job {ref.job_id} is still queued ({st.reason or 'pending'}): follow it with "
                      "`verlctl status`", highlight=False, markup=False)
        return None
    return (target.read_output(ref).decode(errors="replace"),
            f"training did not start within {int(timeout)}s (Slurm job {ref.job_id} is {st.state})")


def _diagnosis(text: str) -> tuple[str | None, Any]:
    """The root cause's category of a job's output, and that finding (None, None without one)."""
    from verlctl.monitor.summary import diagnose_text

    findings = diagnose_text(text).findings
    return (findings[0].category, findings[0]) if findings else (None, None)


def _fail(record: RunRecord, ref: SlurmJobRef, text: str, why: str) -> None:
    if target.cancel(ref):
        record.event("stopped", job_id=ref.job_id, reason="launch failed")
    target.remove_env_file(record)
    category, top = _diagnosis(text)
    tail = [ln for ln in text.splitlines() if ln.strip()][-15:]
    reason, hint = why, None
    if top is not None:
        reason, hint = f"{why}: {top.category}: {top.message}", top.hint
    sys.stderr.write("".join(f"  {ln}\n" for ln in tail))
    record.event("failure", category=category, reason=reason)
    raise RuntimeFailure(reason, hint=hint, code=EXIT_FAILURE)


# ------------------------------------------------------------------------------------- status, logs, stop


def slurm_status(record: RunRecord) -> dict[str, Any]:
    from verlctl.orchestrator.inspect import summarise, watcher_alive, watcher_outcome

    ref = record.slurm_jobs[-1] if record.slurm_jobs else None
    st = target.job_state(ref) if ref else None
    alive = bool(st and st.live)
    state = (st.state.lower() if st else "not submitted")
    if st and not st.live:
        state = "finished" if st.state == "COMPLETED" else f"failed ({st.state}, exit {st.exit_code})"
    if record.stopped and not alive:
        state = "stopped"
    doc: dict[str, Any] = {
        "run_id": record.run_id, "experiment": record.experiment, "runtime": "slurm", "container": {},
        "pgid": None, "alive": alive, "state": state, "identity": None,
        "slurm": st.as_dict() if st else None,
        "attempts": [j.model_dump() for j in record.slurm_jobs],
        "run_log": record.run_log, "train_log": record.train_log, "checkpoints": record.checkpoints,
        "swanlab_url": record.swanlab_url, "watcher": {"pid": record.watcher_pid, "alive": watcher_alive(record)},
        "progress": None, "last_step": None, "last_error": None, "last_line": None,
    }
    live = record.read_status()
    if live:
        doc["live"] = live
    if ref is not None:
        size = target.output_size(ref) or 0
        summarise(target.read_output(ref, max(0, size - 256 * 1024)).decode(errors="replace"), doc)
    watcher_outcome(record, doc)
    return doc


def slurm_logs(record: RunRecord, follow: bool, lines: int) -> int:
    return target.show_output(record, follow, lines, _watcher_running)


def _watcher_running(record: RunRecord) -> bool:
    from verlctl.orchestrator.inspect import watcher_alive

    return bool(record.watcher_pid) and watcher_alive(record)


def slurm_stop(record: RunRecord, grace: float, console: Any, watching: bool) -> dict[str, Any]:
    """Cancel the run's current job (its id only, checked against its name); wait (bounded) for its end.
    ``watching``: a watcher was alive before the run was marked stopped.

    Returns the ``stop --json`` object (as for a local run, with ``slurm_job``: {job_id, cancelled, state})."""
    from verlctl.orchestrator.inspect import stop_watcher

    result: dict[str, Any] = {"run_id": record.run_id, "watcher_stopped": None, "signalled": [],
                              "not_signalled": None, "containers": [], "warnings": [], "slurm_job": None}
    result["watcher_stopped"] = stop_watcher(record, watching, console)  # first: it never resubmits a stopped run
    # Every earlier job of the run that Slurm still names as live goes too (a start-up retry or a recovery
    # whose first job did not end), then the current one below.
    result["earlier_jobs_cancelled"] = []
    for earlier in record.slurm_jobs[:-1]:
        try:
            if target.cancel(earlier):
                result["earlier_jobs_cancelled"].append(earlier.job_id)
                record.event("stop", job_id=earlier.job_id, cancelled=True)
                console.print(f"cancelled earlier Slurm job {earlier.job_id} of the run", highlight=False,
                              markup=False)
        except RuntimeFailure as exc:
            result["warnings"].append(exc.message)
            console.print(f"warning: {exc.message}", highlight=False, markup=False)
    ref = record.slurm_jobs[-1] if record.slurm_jobs else None
    if ref is None:
        result["not_signalled"] = "no Slurm job was recorded for this run"
        console.print("nothing to stop: no Slurm job was recorded for this run", highlight=False)
        return result
    sent = target.cancel(ref)
    target.remove_env_file(record)
    if not sent:
        state = target.job_state(ref).state
        result["slurm_job"] = {"job_id": ref.job_id, "cancelled": False, "state": state}
        result["not_signalled"] = f"Slurm job {ref.job_id} had already ended ({state})"
        console.print(f"Slurm job {ref.job_id} had already ended ({state})", highlight=False, markup=False)
        record.event("stop", job_id=ref.job_id, cancelled=False)
        return result
    record.event("stop", job_id=ref.job_id, cancelled=True)
    deadline = time.monotonic() + max(grace, 5.0) + 60.0  # Slurm's KillWait before SIGKILL, then the epilog
    st = target.job_state(ref)
    while st.live and time.monotonic() < deadline:
        time.sleep(1.0)
        st = target.job_state(ref)
    result["slurm_job"] = {"job_id": ref.job_id, "cancelled": True, "state": st.state}
    if st.live:
        raise RuntimeFailure(f"cancelled Slurm job {ref.job_id}; Slurm still reports it {st.state}")
    console.print(f"cancelled Slurm job {ref.job_id} ({st.state})", highlight=False, markup=False)
    record.event("stopped", job_id=ref.job_id, state=st.state)
    return result


# ------------------------------------------------------------------------------------------------ watcher


class SlurmWatcher:
    """Follows the current job's output; on its end: finished, or classify and (OOM) resubmit."""

    def __init__(self, record: RunRecord, resolved: ResolvedSpec, say: Any = print, poll_s: float = 1.0,
                 error_grace_s: float = 60.0) -> None:
        from verlctl.monitor.recovery import History

        self.record = record
        self.resolved = resolved
        self.current = resolved
        self.say = say
        self.poll_s = poll_s
        self.error_grace_s = error_grace_s
        self.history = History()
        from verlctl.monitor.health import HealthTracker, Settings

        # training health over the whole run, as the local watcher judges it (monitor/health.py)
        self.health = HealthTracker(Settings.from_spec(resolved.spec))

    def emit(self, kind: str, **data: Any) -> None:
        self.record.event(kind, **data)

    def _stopped(self) -> bool:
        from verlctl.runtime.records import load_run

        try:
            return load_run(self.record.run_id).stopped
        except VerlctlError:
            return True

    def run(self) -> int:
        from verlctl.monitor.recovery import Decision, decide
        from verlctl.verl.compose import resolve_features

        ref = self.record.slurm_jobs[-1]
        self.say(f"verlctl watch: watching run {self.record.run_id}: Slurm job {ref.job_id}, output {ref.output}")
        self.emit("watch_started", pid=os.getpid())
        while True:
            kind, finding = self.watch_job(self.record.slurm_jobs[-1])
            if kind == "health":
                self._give_up(Decision(False, f"gave up: training health: {finding.title}: {finding.message} "
                                       "(recovery.health.stop_on): the job was cancelled", advice=[finding.hint]),
                              f"health_{finding.rule}")
                return 1
            if kind == "finished":
                from verlctl.monitor.health import resume_trained_nothing
                from verlctl.orchestrator.resume import resume_point

                job = self.record.slurm_jobs[-1]
                nothing = resume_trained_nothing(  # verl's tracker is read only when the step lines say nothing
                    job.resumed_from, self._max_step, self._total, job.number,
                    saved_at=lambda: resume_point(self.record.checkpoints, self.current.spec))
                if nothing is not None:
                    self.emit("resume_failed", reason=f"gave up: {nothing}", attempt=job.number)
                    self._give_up(Decision(False, f"gave up: {nothing}"), "resume_no_progress")
                    return 1
                target.remove_env_file(self.record)  # no job of the run will read it again (it holds the secrets)
                self.emit("finished", attempt=len(self.record.slurm_jobs))
                self.record.write_status({**(self.record.read_status() or {}), "phase": "finished"})
                return 0
            if kind == "stopped":
                self.emit("watch_stopped")
                return 0
            category = finding.category if finding else None
            states, _ = resolve_features(self.current, self.record.verl_version)
            decision = decide(category, self.resolved.spec, {n: s.on and s.applicable for n, s in states.items()},
                              self.history)
            if not decision.restart:
                self._give_up(decision, category)
                return 1
            try:
                self._resubmit(decision, category)
            except VerlctlError as exc:
                self._give_up(Decision(False, f"gave up: cannot resubmit: {exc.message}"), category)
                return 1

    def watch_job(self, ref: SlurmJobRef) -> tuple[str, Any]:
        from verlctl.monitor.catalogue import Classifier
        from verlctl.monitor.events import ErrorFound, LogParser, Progress, StepMetrics, TotalSteps
        from verlctl.monitor.health import warning_line
        from verlctl.orchestrator.watcher import FINISHED_MARKER, LiveStatus

        classifier = Classifier()
        parser = LogParser(classifier)
        live = LiveStatus(attempt=ref.number)
        self._max_step, self._total = None, None
        pos = 0
        finished = False
        first_error_at: float | None = None
        alerted = False
        ended_at: float | None = None
        last_state = 0.0
        while True:
            data = target.read_output(ref, pos)
            now = time.time()
            if data:
                pos += len(data)
                text = data.decode(errors="replace")
                finished = finished or FINISHED_MARKER in text
                for ev in parser.feed(text):
                    if isinstance(ev, Progress):
                        live.step, live.total, live.phase = ev.step, ev.total or live.total, "training"
                        live.max_step = max(ev.step, live.max_step or 0)
                        live.last_progress_at = now
                    elif isinstance(ev, TotalSteps):
                        live.total = ev.total
                    elif isinstance(ev, StepMetrics):
                        live.max_step = max(ev.step, live.max_step or 0)
                        for w in self.health.feed(ev.step, ev.metrics):
                            live.health = [x.to_dict() for x in self.health.warnings]
                            stops = w.rule in self.health.settings.stop_on
                            self.say(f"verlctl watch: {warning_line(w.to_dict())}")
                            self.emit("health", attempt=ref.number, stops=stops, **w.to_dict())
                            if stops:
                                target.cancel(ref)
                                return "health", w
                    elif isinstance(ev, ErrorFound) and first_error_at is None:
                        first_error_at = now
                self._max_step, self._total = live.max_step, live.total
                live.updated_at = now
                self.record.write_status(live.as_dict())
            if first_error_at is not None and not alerted and (ended_at or now - first_error_at >= 3.0):
                findings = classifier.findings()
                if findings:
                    alerted = True
                    f = findings[0]
                    self.say(f"verlctl watch: {f.category}: {f.message}")
                    self.emit("alert", category=f.category, message=f.message, hint=f.hint, attempt=ref.number)
            if self._stopped():
                return "stopped", None
            if now - last_state >= 2.0:
                last_state = now
                st = target.job_state(ref)
                if not st.live and ended_at is None:
                    ended_at = now
                if ended_at is not None and now - ended_at >= 2.0:  # the output's last lines are in
                    findings = classifier.findings()
                    if finished and st.state == "COMPLETED":
                        return "finished", None
                    root = findings[0] if findings else None
                    self.emit("job_ended", job_id=ref.job_id, state=st.state, exit_code=st.exit_code,
                              category=root.category if root else None)
                    return "failed", root
                if (ended_at is None and first_error_at is not None and now - first_error_at >= self.error_grace_s
                        and classifier.findings() and classifier.findings()[0].category == "device_oom"):
                    # Hanging after an out-of-memory error: end this job (ours, by id) and recover.
                    target.cancel(ref)
            if not data:
                time.sleep(self.poll_s)

    _max_step: int | None = None  # the current job's highest step seen, and its total (resume_trained_nothing)
    _total: int | None = None

    def _give_up(self, decision: Any, category: str | None) -> None:
        reason = decision.reason if decision.reason.startswith("gave up:") else f"gave up: {decision.reason}"
        self.say(f"verlctl watch: {reason}")
        target.remove_env_file(self.record)  # no resubmission will read it again (it holds the secrets)
        self.emit("gave_up", category=category, reason=reason, advice=decision.advice)
        self.record.write_status({**(self.record.read_status() or {}), "phase": "failed", "reason": reason})

    def _resubmit(self, decision: Any, category: str | None) -> None:
        from verlctl.orchestrator.resume import resume_point

        added = [*self.history.added, decision.add_feature] if decision.add_feature else list(self.history.added)
        enable = list(self.resolved.spec.features.enable) + [f for f in added
                                                             if f not in self.resolved.spec.features.enable]
        resolved = self.record.load_spec(recovery={"features.enable": enable} if added else None)
        if decision.add_feature:
            self.history.oom_retries += 1
            self.history.added.append(decision.add_feature)
        else:
            self.history.restarts += 1
        resumed_from = resume_point(self.record.checkpoints, resolved.spec)
        self.emit("recovery", category=category, reason=decision.reason, add_feature=decision.add_feature,
                  features_added=list(self.history.added), resumed_from=resumed_from)
        self.say(f"verlctl watch: {decision.reason}" + (f"; resuming from {resumed_from}" if resumed_from else ""))
        ref = submit_job(self.record, resolved, load_options(self.record), decision.reason, resumed_from)
        self.say(f"verlctl watch: resubmitted as Slurm job {ref.job_id}")
        self.current = resolved
