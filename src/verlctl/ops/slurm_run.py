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

from verlctl.backends.base import LaunchRequest
from verlctl.errors import EXIT_FAILURE, RuntimeFailure, VerlctlError
from verlctl.render.slurm import SlurmOptions
from verlctl.runtime import slurm
from verlctl.runtime.records import RunRecord, SlurmJobRef
from verlctl.spec.resolve import ResolvedSpec

JOB_SCRIPT = "job.sbatch"
#: Secrets the job gets from the 0600 env file only, never from the submitting environment.
SECRET_ENV = ("SWANLAB_API_KEY",)


def job_dir_for(resolved: ResolvedSpec, run_id: str) -> Path:
    logs = resolved.spec.paths.logs or ""
    if not logs.startswith("/"):
        raise VerlctlError(f"paths.logs {logs!r}: a Slurm run keeps its job files there and needs an absolute "
                           "path on storage every node mounts; set paths.logs to one")
    return Path(logs) / "verlctl-slurm" / run_id


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


def job_name_of(script: str) -> str:
    for line in script.splitlines():
        if line.startswith("#SBATCH --job-name="):
            return line.split("=", 1)[1]
    raise RuntimeFailure("the rendered job has no --job-name")  # pragma: no cover - the template writes one


def submit_job(record: RunRecord, resolved: ResolvedSpec, opts: SlurmOptions, reason: str,
               resumed_from: str | None) -> SlurmJobRef:
    """Render and submit one job of the run (the first, or a resubmission); recorded before it returns."""
    from verlctl.files import write_file

    the_plan, rendered, script = render_job(resolved, opts)
    job_dir = Path(record.scripts_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    n = len(record.slurm_jobs) + 1
    script_path = write_file(job_dir / f"job-{n}.sbatch", script.encode(), 0o755)
    if n == 1:  # a resubmission keeps it: the recorded spec has no secrets to render it again from
        write_file(job_dir / "verlctl.env", rendered.env_file.encode(), 0o600)  # secrets: 0600 from the start
    prefix = "" if n == 1 else f"attempt-{n}/"
    for name, text in {**rendered.files, JOB_SCRIPT: script}.items():
        record.write_file(prefix + name, text.encode("utf-8"))
    # sbatch hands the submitting environment to the job (and slurmctld keeps it in its state): what the 0600
    # env file carries, the SwanLab key above all, is left out of it.
    private = {*rendered.command.env_file, *SECRET_ENV}
    env = {k: v for k, v in os.environ.items() if k not in private}
    job_id = slurm.submit(script_path, job_dir, str(job_dir / "slurm-%j.out"), env=env)
    features = [k for k, s in the_plan.command.features.items() if s.on and s.applicable]
    ref = SlurmJobRef(number=n, job_id=job_id, job_name=job_name_of(script), submitted_at=time.time(),
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
    from verlctl.ops.resume import resume_action
    from verlctl.render.slurm import check_options

    spec = resolved.spec
    check_options(opts, spec.device)
    run_id = run_id_for(spec.logging.experiment or "run", dry_run=dry_run)
    job_dir = job_dir_for(resolved, run_id)
    _plan, rendered, script = render_job(resolved, opts)  # errors before anything is written
    actions = [
        Action(S.WRITE_JOB, f"write the job ({JOB_SCRIPT}) and the 0600 env file into {job_dir}"),
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
    from verlctl.ops.interrupts import launch_guard
    from verlctl.ops.resume import resume_point

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
            _remove_env_file(record)
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
            if slurm.cancel(ref.job_id, ref.job_name):
                cancelled.append(ref.job_id)
        except Exception:  # noqa: BLE001 - the controller did not answer: named, for `verlctl stop` or scancel
            unsure.append(ref.job_id)
    _remove_env_file(record)
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
    from verlctl.ops.markers import RAY_START_FAILURES

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
            if slurm.cancel(ref.job_id, ref.job_name):
                record.event("stopped", job_id=ref.job_id, reason=f"retry after {category}")
                _await_end(ref)
        except RuntimeFailure as exc:
            _remove_env_file(record)
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


#: How long a cancelled job may take to end (Slurm's KillWait, then its epilog) before a resubmission gives up.
CANCEL_END_S = 90.0


def _await_end(ref: SlurmJobRef, timeout: float = CANCEL_END_S) -> None:
    """Wait until the cancelled job ``ref`` is known to have ended; a RuntimeFailure naming it else."""
    deadline = time.monotonic() + timeout
    while True:
        st = slurm.known_state(ref.job_id)
        if st.answered and not st.live:
            return
        if time.monotonic() >= deadline:
            how = f"Slurm still reports it {st.state}" if st.answered else "Slurm did not say whether it ended"
            raise RuntimeFailure(f"Slurm job {ref.job_id} was cancelled but {how} after {timeout:.0f}s",
                                 hint=f"check it with `squeue --jobs={ref.job_id}`; cancel it with "
                                      f"`scancel {ref.job_id}`")
        time.sleep(1.0)


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
    from verlctl.ops.markers import TRAINING_MARKER, has_progress

    deadline = time.monotonic() + timeout
    st = slurm.state(ref.job_id)
    while time.monotonic() < deadline:
        text = slurm.read_output(ref.output).decode(errors="replace")
        after = text.split(TRAINING_MARKER, 1)[1] if TRAINING_MARKER in text else ""
        if after and has_progress(after):
            first = next((ln for ln in after.splitlines()[1:] if ln.strip()), "")
            record.event("verified", job_id=ref.job_id, first_line=first[:300])
            console.print(f"training is running: {first.strip()[:160]}", highlight=False, markup=False)
            return None
        st = slurm.state(ref.job_id)
        if not st.live and st.state != "UNKNOWN":
            time.sleep(1.0)
            return (slurm.read_output(ref.output).decode(errors="replace"),
                    f"Slurm job {ref.job_id} ended ({st.state}, exit {st.exit_code}) before training started")
        time.sleep(2.0)
    if st.state == "PENDING":
        record.event("queued", job_id=ref.job_id, reason=st.reason)
        console.print(f"Slurm job {ref.job_id} is still queued ({st.reason or 'pending'}): follow it with "
                      "`verlctl status`", highlight=False, markup=False)
        return None
    return (slurm.read_output(ref.output).decode(errors="replace"),
            f"training did not start within {int(timeout)}s (Slurm job {ref.job_id} is {st.state})")


def _diagnosis(text: str) -> tuple[str | None, Any]:
    """The root cause's category of a job's output, and that finding (None, None without one)."""
    from verlctl.monitor.summary import diagnose_text

    findings = diagnose_text(text).findings
    return (findings[0].category, findings[0]) if findings else (None, None)


def _fail(record: RunRecord, ref: SlurmJobRef, text: str, why: str) -> None:
    if slurm.cancel(ref.job_id, ref.job_name):
        record.event("stopped", job_id=ref.job_id, reason="launch failed")
    _remove_env_file(record)
    category, top = _diagnosis(text)
    tail = [ln for ln in text.splitlines() if ln.strip()][-15:]
    reason, hint = why, None
    if top is not None:
        reason, hint = f"{why}: {top.category}: {top.message}", top.hint
    sys.stderr.write("".join(f"  {ln}\n" for ln in tail))
    record.event("failure", category=category, reason=reason)
    raise RuntimeFailure(reason, hint=hint, code=EXIT_FAILURE)


def _remove_env_file(record: RunRecord) -> None:
    with contextlib.suppress(OSError):
        os.unlink(Path(record.scripts_dir) / "verlctl.env")


# ------------------------------------------------------------------------------------- status, logs, stop


def slurm_status(record: RunRecord) -> dict[str, Any]:
    from verlctl.ops.inspect import summarise, watcher_alive, watcher_outcome

    ref = record.slurm_jobs[-1] if record.slurm_jobs else None
    st = slurm.state(ref.job_id) if ref else None
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
        size = slurm.output_size(ref.output) or 0
        summarise(slurm.read_output(ref.output, max(0, size - 256 * 1024)).decode(errors="replace"), doc)
    watcher_outcome(record, doc)
    return doc


def slurm_logs(record: RunRecord, follow: bool, lines: int) -> int:
    from verlctl.runtime.records import load_run

    if not record.slurm_jobs:
        raise VerlctlError(f"run {record.run_id} has no Slurm job")
    ref = record.slurm_jobs[-1]
    size = slurm.output_size(ref.output)
    if size is None and not follow:
        raise VerlctlError(f"no output at {ref.output} yet (Slurm job {ref.job_id} is {slurm.state(ref.job_id).state})")
    start = max(0, (size or 0) - 256 * 1024) if lines else 0
    out = slurm.read_output(ref.output, start, max_bytes=1 << 40 if not lines else 256 * 1024)
    text_lines = out.decode(errors="replace").splitlines(keepends=True)
    sys.stdout.write("".join(text_lines[-lines:] if lines else text_lines))
    sys.stdout.flush()
    if not follow:
        return 0
    pos = size or 0
    idle = 0.0
    try:
        while True:
            data = slurm.read_output(ref.output, pos)
            if data:
                sys.stdout.write(data.decode(errors="replace"))
                sys.stdout.flush()
                pos += len(data)
                idle = 0.0
                continue
            idle += 1.0
            if idle >= 5:
                current = load_run(record.run_id)
                if current.slurm_jobs and current.slurm_jobs[-1].job_id != ref.job_id:
                    ref, pos = current.slurm_jobs[-1], 0  # the watcher resubmitted: follow the new job
                    sys.stdout.write(f"[verlctl] following the resubmitted Slurm job {ref.job_id}\n")
                    idle = 0.0
                elif not slurm.state(ref.job_id).live and not _watcher_running(current):
                    return 0
            time.sleep(1.0)
    except KeyboardInterrupt:
        return 0


def _watcher_running(record: RunRecord) -> bool:
    from verlctl.ops.inspect import watcher_alive

    return bool(record.watcher_pid) and watcher_alive(record)


def slurm_stop(record: RunRecord, grace: float, console: Any, watching: bool) -> dict[str, Any]:
    """Cancel the run's current job (its id only, checked against its name); wait (bounded) for its end.
    ``watching``: a watcher was alive before the run was marked stopped.

    Returns the ``stop --json`` object (as for a local run, with ``slurm_job``: {job_id, cancelled, state})."""
    from verlctl.ops.inspect import stop_watcher

    result: dict[str, Any] = {"run_id": record.run_id, "watcher_stopped": None, "signalled": [],
                              "not_signalled": None, "containers": [], "warnings": [], "slurm_job": None}
    result["watcher_stopped"] = stop_watcher(record, watching, console)  # first: it never resubmits a stopped run
    # Every earlier job of the run that Slurm still names as live goes too (a start-up retry or a recovery
    # whose first job did not end), then the current one below.
    result["earlier_jobs_cancelled"] = []
    for earlier in record.slurm_jobs[:-1]:
        try:
            if slurm.cancel(earlier.job_id, earlier.job_name):
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
    sent = slurm.cancel(ref.job_id, ref.job_name)
    _remove_env_file(record)
    if not sent:
        state = slurm.state(ref.job_id).state
        result["slurm_job"] = {"job_id": ref.job_id, "cancelled": False, "state": state}
        result["not_signalled"] = f"Slurm job {ref.job_id} had already ended ({state})"
        console.print(f"Slurm job {ref.job_id} had already ended ({state})", highlight=False, markup=False)
        record.event("stop", job_id=ref.job_id, cancelled=False)
        return result
    record.event("stop", job_id=ref.job_id, cancelled=True)
    deadline = time.monotonic() + max(grace, 5.0) + 60.0  # Slurm's KillWait before SIGKILL, then the epilog
    st = slurm.state(ref.job_id)
    while st.live and time.monotonic() < deadline:
        time.sleep(1.0)
        st = slurm.state(ref.job_id)
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
                from verlctl.ops.resume import resume_point

                job = self.record.slurm_jobs[-1]
                nothing = resume_trained_nothing(  # verl's tracker is read only when the step lines say nothing
                    job.resumed_from, self._max_step, self._total, job.number,
                    saved_at=lambda: resume_point(self.record.checkpoints, self.current.spec))
                if nothing is not None:
                    self.emit("resume_failed", reason=f"gave up: {nothing}", attempt=job.number)
                    self._give_up(Decision(False, f"gave up: {nothing}"), "resume_no_progress")
                    return 1
                _remove_env_file(self.record)  # no job of the run will read it again (it holds the secrets)
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
        from verlctl.ops.watcher import FINISHED_MARKER, LiveStatus

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
            data = slurm.read_output(ref.output, pos)
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
                                slurm.cancel(ref.job_id, ref.job_name)
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
                st = slurm.state(ref.job_id)
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
                    slurm.cancel(ref.job_id, ref.job_name)
            if not data:
                time.sleep(self.poll_s)

    _max_step: int | None = None  # the current job's highest step seen, and its total (resume_trained_nothing)
    _total: int | None = None

    def _give_up(self, decision: Any, category: str | None) -> None:
        reason = decision.reason if decision.reason.startswith("gave up:") else f"gave up: {decision.reason}"
        self.say(f"verlctl watch: {reason}")
        _remove_env_file(self.record)  # no resubmission will read it again (it holds the secrets)
        self.emit("gave_up", category=category, reason=reason, advice=decision.advice)
        self.record.write_status({**(self.record.read_status() or {}), "phase": "failed", "reason": reason})

    def _resubmit(self, decision: Any, category: str | None) -> None:
        from verlctl.ops.resume import resume_point

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
