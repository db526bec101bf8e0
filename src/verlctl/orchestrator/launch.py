"""``verlctl launch``: a validated spec to a verified training process in a container (or on the host).

Phases (the first seed's 4-8): container (reuse / start / create, pull) → readiness (python, device tool,
verl version) → preflight compose with the container's own verl + Hydra → SwanLab → copy the scripts and
the 0600 env file → start detached in its own process group → verify it started → record the run.
With ``dry_run`` every action is printed in order and nothing is created, started or written.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlctl.backends.base import (
    RELAUNCH_STAGES,
    Action,
    ContainerRequest,
    LaunchRequest,
    MountRequest,
    run_id_for,
)
from verlctl.backends.base import Stage as S
from verlctl.backends.docker import DockerBackend, NodeTarget, attempt_marker
from verlctl.checks.findings import Finding, Severity, has_errors
from verlctl.errors import EXIT_FAILURE, RuntimeFailure, VerlctlError
from verlctl.orchestrator import preflight
from verlctl.orchestrator.markers import RAY_START_FAILURES, after_marker, first_line, progress_shown
from verlctl.orchestrator.resume import resume_action, resume_point
from verlctl.orchestrator.stages import walk
from verlctl.plan import Plan, make_plan
from verlctl.render.render import ENV_FILE, START_SCRIPT, TRAIN_SCRIPT, Rendered
from verlctl.runtime.executor import Executor, FileSpec, GroupRef
from verlctl.runtime.records import Attempt, RunRecord
from verlctl.runtime.workdirs import directories_to_create
from verlctl.spec.resolve import ResolvedSpec


@dataclass
class LaunchOptions:
    yes: bool = False
    dry_run: bool = False
    pull: bool = False
    verify_timeout: float = 300.0
    settle_s: float = 10.0
    out_dir: Path | None = None  # dry-run: where to write the rendered files
    canary: bool = False  # one step, a checkpoint, a resume and a weight sync first (orchestrator/canary.py)
    canary_timeout: float = 3600.0  # seconds for each canary phase
    out_force: bool = False  # dry-run: replace the files of the set already in out_dir


@dataclass
class Readiness:
    python: str | None = None
    verl_version: str | None = None
    device_tool: str | None = None
    devices_seen: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class _Walk:
    """What the stages of one launch hand on to the later ones."""

    plan: Plan
    rendered: Rendered | None = None
    gate: str | None = None
    pgid: int | None = None
    group: GroupRef | None = None


class Reporter:
    """Prints progress lines (one per action) and keeps them for the dry-run listing."""

    def __init__(self, console: Any, quiet: bool = False) -> None:
        self.console = console
        self.quiet = quiet
        self.lines: list[str] = []

    def step(self, text: str) -> None:
        self.lines.append(text)
        if not self.quiet:
            self.console.print(f"[bold cyan]→[/] {_esc(text)}", highlight=False)

    def note(self, text: str) -> None:
        if not self.quiet:
            self.console.print(f"  [dim]{_esc(text)}[/dim]", highlight=False)

    def warn(self, text: str) -> None:
        self.console.print(f"  [yellow]warning:[/yellow] {_esc(text)}", highlight=False)


def _esc(text: str) -> str:
    """User text (paths, names, tool output) printed inside rich markup: ``[v1]`` must stay literal."""
    from rich.markup import escape

    return escape(str(text))


def _target_paths(resolved: ResolvedSpec, run_id: str) -> tuple[str, str, str]:
    spec = resolved.spec
    workdir = spec.container.workdir.rstrip("/") or "/"
    scripts_dir = f"{workdir}/.verlctl/runs/{run_id}"
    run_log = f"{(spec.paths.logs or workdir + '/logs').rstrip('/')}/verlctl-{run_id}.log"
    return workdir, scripts_dir, run_log


class Launcher:
    def __init__(self, resolved: ResolvedSpec, options: LaunchOptions, console: Any,
                 confirm: Callable[[Plan, list[str]], bool] | None = None) -> None:
        self.resolved = resolved
        self.options = options
        self.console = console
        self.report = Reporter(console)
        self.confirm = confirm
        # the target (engine clients, container plans, executors, worker nodes): the local backend's
        self.backend = DockerBackend(console, self.report)
        self.record: RunRecord | None = None
        self.actions: list[str] = []  # what run() planned, and its findings (launch --json)
        self.last_failure_category: str | None = None  # the diagnosis of the last failed verify
        self.findings: list[Finding] = []
        self.declined = False  # the confirmation was answered no
        self._gate: str | None = None  # the start gate of the attempt being launched (closed on an interrupt)
        self.facts: Any = None  # the verdict's facts (CheckFacts), collected once
        self.verdict: Any = None  # the Verdict of run()
        self.request: LaunchRequest | None = None  # what prepare() planned
        self.the_plan: Plan | None = None

    # The target's state, kept by the backend (the canary, the fabric check and the stages read it here).
    @property
    def client(self) -> Any:
        return self.backend.client

    @property
    def container(self) -> Any:
        return self.backend.container

    @property
    def container_plan(self) -> Any:
        return self.backend.container_plan

    @property
    def executor(self) -> Executor | None:
        return self.backend.executor

    @executor.setter
    def executor(self, ex: Executor | None) -> None:
        self.backend.executor = ex

    @property
    def workers(self) -> list[NodeTarget]:
        return self.backend.workers

    @workers.setter
    def workers(self, workers: list[NodeTarget]) -> None:
        self.backend.workers = workers

    @property
    def blocked(self) -> list[str]:
        return self.backend.blocked

    # --------------------------------------------------------------------------------- planning

    def plan(self) -> Plan:
        """The one verdict (``checks/verdict.py``) on the facts ``check`` collects (``collect_facts``)."""
        if self.facts is None:
            from verlctl.orchestrator.machine_facts import collect_facts

            self.facts = collect_facts(self.resolved, pull=self.options.pull)
        return make_plan(self.resolved, facts=self.facts)

    def not_checked(self) -> list[dict[str, str]]:
        """The verdict's rules that could not run (``launch --json``)."""
        return self.verdict.to_json() if self.verdict is not None else []

    def planned_actions(self, the_plan: Plan, run_id: str) -> list[str]:
        return [a.text for a in self.staged_actions(the_plan, run_id)]

    def staged_actions(self, the_plan: Plan, run_id: str) -> list[Action]:
        """The dry-run listing, each line with the stage that takes it (``backends.base.Stage``)."""
        spec = self.resolved.spec
        _workdir, scripts_dir, run_log = _target_paths(self.resolved, run_id)
        acts: list[Action] = [Action(S.PREPARE_TARGET, d) for d in directories_to_create(spec, run_id)]
        if spec.container.runtime == "docker":
            head = f" on {spec.cluster.master_addr} (Ray head)" if self.workers else ""
            for m in (self.container_plan.added_mounts if self.container_plan is not None else []):
                acts.append(Action(S.PREPARE_TARGET, f"mount {m.host} at the same path (covers {m.why}){head}"))
            if self.container_plan is not None:
                acts += [Action(S.PREPARE_TARGET, a + head) for a in self.container_plan.actions()]
            else:
                acts.append(Action(S.PREPARE_TARGET, f"prepare container {spec.container.name}{head}: blocked by the errors above"))
            for w in self.workers:
                acts += [Action(S.PREPARE_TARGET, f"{a} on {w.address} (over ssh)") for a in w.plan.actions()]
            where = f"container {spec.container.name}"
        else:
            where = "this host"
        if self.workers:
            acts.append(Action(S.START_WORKERS, f"copy the scripts to every node; start {START_SCRIPT} on "
                        f"{', '.join(w.address for w in self.workers)} as Ray workers (they join the head)"))
        if self.workers:
            acts.append(Action(S.NODE_PREFLIGHT, "pre-flight on every node: the same image, Python and Ray; a marker the head writes to the "
                        "checkpoint directory read back on every node; the route to the head; HCCL ports; /dev/shm"))
        if self._fabric_wanted():
            from verlctl.orchestrator.fabric import backend_of

            acts.append(Action(S.FABRIC, f"fabric test in the run's containers: all-reduce ({', '.join(f'{m} MiB' for m in spec.cluster.fabric.sizes_mib)}) "
                        f"and point-to-point over {backend_of(spec)} across {spec.cluster.node_count * len(spec.cluster.devices)} devices; "
                        "a link below the floor or an init failure stops the launch"))
        acts.append(Action(S.READINESS, f"check readiness in {where}: python version, { {'npu': 'npu-smi info', 'gpu': 'nvidia-smi'}.get(spec.device, 'no device tool (device: cpu)') }, installed verl version"))
        acts.append(Action(S.COPY, f"copy {START_SCRIPT}, {TRAIN_SCRIPT} and {ENV_FILE} (mode 0600) to {where}:{scripts_dir}"))
        acts.append(Action(S.START_HEAD, f"start `bash {scripts_dir}/{START_SCRIPT}` in its own process group, output to {run_log}: "
                    "Ray starts; training waits until the checks below pass (else everything started is stopped)"))
        if spec.cluster.node_count > 1:  # single-node runs bind it to 127.0.0.1 (render.py)
            acts.append(Action(S.START_HEAD, f"note: Ray's dashboard listens on 0.0.0.0:{spec.cluster.dashboard_port} of the head "
                        "(multi-node), without authentication: anyone who reaches that port can run code as the "
                        "run's user; restrict it with a firewall"))
        acts.append(Action(S.PREFLIGHT, f"preflight: compose the {len(the_plan.command.overrides)} overrides with {where}'s verl + Hydra "
                    f"({the_plan.command.entry.config_name})"))
        sw = spec.logging.swanlab
        if sw.enabled:
            acts.append(Action(S.SWANLAB, f"SwanLab ({sw.mode}): check `import swanlab` in {where}, install it with pip if missing"))
            if sw.mode == "cloud":
                acts.append(Action(S.SWANLAB, f"SwanLab: check the login to {sw.host} with the key from the 0600 env file "
                            "(nothing saved)"))
        if self.options.canary:
            from verlctl.orchestrator.canary import CANARY_DIR

            acts.append(Action(S.CANARY, f"canary in {where}: 1 step + a checkpoint, then a resume from it + 1 step (weight sync), "
                        f"with checkpoints under {spec.paths.checkpoints}/{CANARY_DIR}/{run_id} (removed when it "
                        "passes); the full run starts only if both pass"))
        acts.append(Action(S.START_HEAD, resume_action(spec.paths.checkpoints, spec)))
        acts.append(Action(S.VERIFY, f"verify within {int(self.options.verify_timeout)}s that {the_plan.command.entry.module} runs"))
        acts.append(Action(S.RECORD, f"record the run (id {run_id}) under the state dir"))
        return acts

    # ---------------------------------------------------------------------------------- running

    def prepare(self) -> LaunchRequest:
        """What this launch would do, as data (``backends.base.LaunchRequest``); nothing is changed. The
        verdict's findings are kept in ``self.findings`` (a request may be blocked by them)."""
        spec = self.resolved.spec
        opts = self.options
        multi = len(spec.cluster.nodes) > 1
        if spec.cluster.node_count > max(1, len(spec.cluster.nodes)):
            raise VerlctlError(
                f"cluster.nnodes is {spec.cluster.nnodes} but no hosts are listed in cluster.nodes: a scheduler "
                "picks them; use `verlctl launch --backend slurm` (or list the hosts in cluster.nodes)"
            )
        if opts.canary and multi:
            raise VerlctlError("launch --canary runs on one node for now; this spec lists "
                               f"{len(spec.cluster.nodes)} nodes in cluster.nodes",
                               hint="launch without --canary, or try the canary with a one-node spec first")
        if multi and spec.container.runtime != "docker":
            raise VerlctlError(
                "a multi-node launch needs container.runtime: docker (the other nodes are driven through their "
                "Docker engines over ssh)",
                hint="or run `verlctl plan -o DIR` and start start_verl.sh on every node yourself",
            )
        if spec.container.runtime == "docker":
            self.backend.plan_containers(spec, multi=multi, pull=opts.pull,
                                         image_explicit=self.resolved.explicit("container.image"),
                                         name_explicit=self.resolved.explicit("container.name"))
        the_plan = self.plan()
        if self.blocked and not has_errors(the_plan.findings):
            raise VerlctlError(self.blocked[0])  # a refusal no rule foresaw: the run stops here, as before
        run_id = run_id_for(spec.logging.experiment or "run", dry_run=opts.dry_run)
        staged = self.staged_actions(the_plan, run_id)
        self.actions, self.findings, self.verdict = [a.text for a in staged], the_plan.findings, the_plan.verdict
        self.the_plan = the_plan
        self.request = self._request(the_plan, run_id, staged)
        return self.request

    def _request(self, the_plan: Plan, run_id: str, staged: list[Action]) -> LaunchRequest:
        spec = self.resolved.spec
        workdir, scripts_dir, run_log = _target_paths(self.resolved, run_id)
        docker = spec.container.runtime == "docker"
        try:  # a spec with errors renders too (only a launch without errors runs it)
            rendered: Rendered | None = the_plan.render()
        except VerlctlError:
            rendered = None
        plans = [("local" if not self.workers else spec.cluster.master_addr or "local", self.container_plan)]
        plans += [(w.address, w.plan) for w in self.workers]
        proxies = sorted(_proxy_names(spec))
        containers = tuple(
            ContainerRequest(node=node, name=p.name, image=p.image, exists=p.exists, state=p.state,
                             pull=bool(p.pull or not p.image_present),
                             mounts=tuple(MountRequest(m.host, m.target, m.mode, m.why) for m in p.mounts),
                             added_mounts=tuple(MountRequest(m.host, m.target, m.mode, m.why) for m in p.added_mounts),
                             devices=tuple(p.devices), env_names=tuple(proxies))
            for node, p in plans if docker and p is not None)
        order = self.launch_stages()
        return LaunchRequest(
            backend="host" if not docker else ("ssh" if self.workers else "docker"), run_id=run_id,
            target=f"container {spec.container.name}" if docker else "this host", workdir=workdir,
            scripts_dir=scripts_dir, run_log=run_log, files=dict(rendered.files) if rendered else {},
            env_file_names=tuple(sorted(the_plan.command.env_file)), containers=containers, stages=order,
            plan=tuple(staged), blocked=tuple(self.blocked),
        )

    def run(self) -> RunRecord | None:
        spec = self.resolved.spec
        opts = self.options
        request = self.request if self.request is not None else self.prepare()
        the_plan, run_id, actions = self.the_plan, request.run_id, request.actions()
        assert the_plan is not None
        if opts.dry_run:
            self._dry_run(the_plan, request)
            return None
        if has_errors(the_plan.findings):
            self._print_findings(the_plan.findings)
            if the_plan.verdict is not None:
                from verlctl.report import print_not_checked

                print_not_checked(self.console, the_plan.verdict.not_checked_lines())
            if self.blocked:  # the container could not be planned (the engine, the image …): that first
                raise VerlctlError(f"{self.blocked[0]} (every problem is listed above): nothing was changed")
            raise VerlctlError("the spec has errors (listed above): nothing was changed")
        plans = [("", self.container_plan)] if self.container_plan is not None else []
        plans += [(f" on {w.address}", w.plan) for w in self.workers]
        for where, plan in plans:
            for note in plan.notes:
                self.report.warn(note + where)
            if plan.missing_mounts:
                raise VerlctlError(
                    f"container {spec.container.name}{where} does not mount {plan.missing_mounts[0]}; "
                    "mounts cannot be added to an existing container",
                    hint="use another container.name (a new container gets every mount), or add the mount and recreate it",
                )
        if not opts.yes and (self.confirm is None or not self.confirm(the_plan, actions)):
            self.declined = True
            self.console.print("nothing was changed")
            return None
        if opts.yes:  # nothing was shown for confirmation: show what is not an error (errors stopped above)
            shown = [f for f in the_plan.findings if f.severity is Severity.WARNING]
            if shown:
                self._print_findings(shown)
            if resume_point(spec.paths.checkpoints, spec) is not None:  # said in the checklist, not shown with --yes
                self.report.note(resume_action(spec.paths.checkpoints, spec))
        return self._execute_interruptible(the_plan, run_id)

    def _execute_interruptible(self, the_plan: Plan, run_id: str) -> RunRecord:
        """:meth:`_execute` under the launch guard (orchestrator/interrupts.py): on a signal (SIGINT, SIGTERM, SIGHUP,
        SIGQUIT) or an exception that is not a VerlctlError, :meth:`abort` (the failed-launch clean-up), then
        one line (exit 130 for a signal)."""
        from verlctl.orchestrator.interrupts import launch_guard

        with launch_guard(self.abort):
            return self._execute(the_plan, run_id)

    def abort(self, what: str) -> str:
        """The failed-launch clean-up for a launch that ended by ``what`` (a signal, an unexpected error): the
        gate is closed (``gate.fail``: the script stops what it started), the attempt is stopped (verified), the
        key file and the container this launch created are removed, the run is marked stopped. The one line
        that says so. Also after a finished launch whose watcher could not be started (the flow's guard)."""
        if self.record is None:
            return f"interrupted ({what}) before anything was started: nothing changed"
        return self._clean_up_interrupted(self.record, what)

    def _clean_up_interrupted(self, record: RunRecord, what: str) -> str:
        """The failed-launch clean-up after an interrupt; the one line that says what was done."""
        if self._gate and self.executor is not None:
            with contextlib.suppress(Exception):  # the script stops itself at the gate (and Ray with it)
                self.executor.run(["touch", "--", f"{self._gate}.fail"], timeout=30)
        self._adopt_created_container(record)
        cleaned = self._clean_up_failed(record)
        record.stopped = True  # no watcher restarts it; `status` says stopped
        with contextlib.suppress(OSError):
            record.event("launch_interrupted", signal=what, pgid=record.pgid, **cleaned)
        with contextlib.suppress(OSError):
            record.save()
        done = []
        if record.pgid is not None:
            done.append(f"process group {record.pgid} stopped")
        done += [f"container {c} removed" for c in cleaned.get("removed_containers", [])]
        return (f"interrupted ({what}) during launch of run {record.run_id}: "
                + (", ".join(done) if done else "nothing had been started") + "; the run is marked stopped")

    def _print_findings(self, findings: list[Finding]) -> None:
        from verlctl.report import print_findings

        print_findings(self.console, findings)

    def _dry_run(self, the_plan: Plan, request: LaunchRequest) -> None:
        """The human listing of ``request`` (``--json`` prints :meth:`LaunchRequest.to_json` beside it)."""
        actions = request.actions()
        self._print_findings(the_plan.findings)
        if the_plan.verdict is not None:
            from verlctl.report import print_not_checked

            print_not_checked(self.console, the_plan.verdict.not_checked_lines())
        self.console.print("[bold]dry run[/bold]: these actions would be taken, in order (nothing is changed):")
        for i, a in enumerate(actions, 1):
            self.console.print(f"  {i:2}. {a}", highlight=False, markup=False)
        if has_errors(the_plan.findings):
            raise VerlctlError("the spec has errors (listed above)")
        if self.options.out_dir is not None:
            for p in the_plan.render().write(self.options.out_dir, force=self.options.out_force):
                self.console.print(f"wrote {p}", highlight=False, markup=False)

    def _execute(self, the_plan: Plan, run_id: str) -> RunRecord:
        spec = self.resolved.spec
        workdir, scripts_dir, run_log = _target_paths(self.resolved, run_id)
        record = RunRecord(
            run_id=run_id,
            created_at=time.time(),
            runtime=spec.container.runtime,
            workdir=workdir,
            scripts_dir=scripts_dir,
            run_log=run_log,
            train_log="",
            checkpoints=spec.paths.checkpoints or "",
            experiment=spec.logging.experiment or "",
            verl_version=the_plan.command.version,
            container_name=spec.container.name if spec.container.runtime == "docker" else None,
            image=spec.container.image if spec.container.runtime == "docker" else None,
            python_env=spec.container.python_env if spec.container.runtime == "host" else None,
        )
        self.record = record
        try:
            record.save()
            record.event("launch", actions=self.planned_actions(the_plan, run_id))
        except OSError as exc:  # a full or read-only state dir: nothing was started yet
            raise VerlctlError(f"cannot record the run under {record.dir}: {exc.strerror or exc}: nothing was "
                               "started", hint="free space in the state dir (or set VERLCTL_STATE_DIR)") from None
        if self.workers:
            c = spec.cluster
            record.head_address = c.master_addr
            record.ssh_user, record.ssh_port, record.remote_docker_socket = c.ssh_user, c.ssh_port, c.remote_docker_socket
            record.ssh_config = c.ssh_config
        steps = self._launch_steps(record, _Walk(the_plan), scripts_dir, workdir)
        try:
            walk(self.request.stages if self.request is not None else self.launch_stages(), steps)
        except (VerlctlError, OSError) as exc:
            # An OSError here is the run record that cannot be written (a full state dir): the same clean-up
            # as any failed launch (stop what started, the key file, the containers it created), one line.
            if isinstance(exc, OSError):
                exc = VerlctlError(f"cannot write the run record in {record.dir}: {exc.strerror or exc}: the "
                                   "launch is undone", hint="free space in the state dir (or set VERLCTL_STATE_DIR)")
            cleaned = self._clean_up_failed(record)
            with contextlib.suppress(OSError):  # the same full disk may refuse these too
                record.event("launch_failed", error=exc.message, hint=exc.hint, **cleaned)
                record.save()
            raise exc from None
        return record

    def launch_stages(self) -> tuple[S, ...]:
        """The stages this launch walks, in order (``backends.base.Stage``)."""
        spec = self.resolved.spec
        return tuple(s for s in S if s not in (S.WRITE_JOB, S.SUBMIT, S.WRITE_MANIFEST)
                     and (s is not S.CANARY or self.options.canary)
                     and (s not in (S.NODE_PREFLIGHT, S.START_WORKERS) or self.workers)
                     and (s is not S.FABRIC or self._fabric_wanted())
                     and (s is not S.SWANLAB or spec.logging.swanlab.enabled))

    def _launch_steps(self, record: RunRecord, w: _Walk, scripts_dir: str,
                      workdir: str) -> dict[S, Callable[[], None]]:
        """What each stage of a launch does (:meth:`_execute` walks them)."""
        spec = self.resolved.spec

        def head() -> Executor:
            assert self.executor is not None
            return self.executor

        def prepare_target() -> None:
            self.executor = self._prepare_target(record)

        def readiness() -> None:
            ready = self._readiness(head())
            for t in self.workers:  # each worker's container once the head is ready, then its readiness
                t.executor = self._prepare_worker(record, t)
                self._readiness(t.executor)
            w.plan = self._retarget_version(w.plan, ready)
            self._known_defects(record, head(), w.plan)
            record.verl_version = w.plan.command.version

        def node_preflight() -> None:
            self._check_nodes(record, w.plan)

        def fabric() -> None:
            self._check_fabric(record, w.plan)

        def rendered() -> Rendered:
            if w.rendered is None:
                w.rendered = w.plan.render()
                record.train_log = w.rendered.log_file
            return w.rendered

        def canary() -> None:
            from verlctl.orchestrator.canary import Canary

            rendered()
            self._preflight(head(), w.plan, scripts_dir, workdir)  # a bad key fails before any run
            Canary(self, record, w.plan, self.options.canary_timeout).run()

        def copy() -> None:
            for ex in [head(), *(t.executor for t in self.workers if t.executor)]:
                self._copy(ex, rendered(), scripts_dir)
            self._write_record_files(record, rendered())

        def start_workers() -> None:
            self.start_workers(record, w.plan, reason="launch")

        def start_head() -> None:
            # Ray comes up while verlctl checks the overrides and SwanLab; the script starts training only
            # once the gate opens (and stops, with everything it started, if the checks fail).
            w.gate = f"{scripts_dir}/gate"
            self._gate = w.gate
            w.pgid = self.start(head(), record, w.plan, reason="launch", gate=w.gate,
                                resumed_from=resume_point(spec.paths.checkpoints, spec))
            w.group = record.attempts[-1].ref

        def gated(step: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                try:
                    step()
                except VerlctlError:
                    head().run(["touch", f"{w.gate}.fail"], timeout=30)
                    assert w.group is not None
                    head().stop_group(w.group, grace_s=20)
                    self.stop_workers(record)
                    record.event("stopped", pgid=w.pgid, reason="checks failed before training")
                    raise
            return run

        def preflight() -> None:
            self._preflight(head(), w.plan, scripts_dir, workdir)

        def swanlab() -> None:
            from verlctl.orchestrator import swanlab

            record.swanlab_url = swanlab.setup(head(), self.resolved, scripts_dir, self.report)
            for t in self.workers:  # the logger may run in a Ray worker on any node
                if t.executor is not None:
                    swanlab.setup(t.executor, self.resolved, scripts_dir, self.report, login=False)

        def open_gate() -> None:
            head().run(["touch", f"{w.gate}.ok"], timeout=30)

        def verify() -> None:
            assert w.group is not None
            self.verify_retrying_ray(head(), record, w.group, w.plan, gate=w.gate,
                                     resumed_from=record.attempts[-1].resumed_from)

        return {S.PREPARE_TARGET: prepare_target, S.READINESS: readiness, S.NODE_PREFLIGHT: node_preflight,
                S.FABRIC: fabric, S.CANARY: canary, S.COPY: copy, S.START_WORKERS: start_workers, S.START_HEAD: start_head,
                S.PREFLIGHT: gated(preflight), S.SWANLAB: gated(swanlab), S.OPEN_GATE: open_gate, S.VERIFY: verify,
                S.RECORD: record.save}

    # ------------------------------------------------------------------------------- the target
    # (the local backend's: backends/docker.py; verl's part, the proxy environment, is composed here)

    def _proxies(self, record: RunRecord) -> dict[str, str]:
        """The proxy environment a created container gets (verl's part: ``verl.environment.proxy_env``)."""
        if self.resolved.spec.container.runtime != "docker":
            return {}  # the host runtime: no container to give it to
        from verlctl.verl.environment import proxy_env
        from verlctl.verl.table import Ctx

        return proxy_env(Ctx(self.resolved.spec, record.verl_version))

    def _prepare_target(self, record: RunRecord) -> Executor:
        return self.backend.prepare_target(record, self.resolved.spec, self._proxies(record))

    def _prepare_worker(self, record: RunRecord, w: NodeTarget) -> Executor:
        return self.backend.prepare_worker(record, w, self.resolved.spec, self._proxies(record))

    def start_workers(self, record: RunRecord, the_plan: Plan, reason: str) -> None:
        """Start the script on every other node as a Ray worker (it retries joining the head)."""
        self.backend.start_workers(record, reason)

    def stop_workers(self, record: RunRecord) -> None:
        self.backend.stop_workers(record)

    def _clean_up_failed(self, record: RunRecord) -> dict[str, Any]:
        return self.backend.clean_up_failed(record)

    def _adopt_created_container(self, record: RunRecord) -> None:
        self.backend.adopt_created_container(record)

    def _readiness(self, ex: Executor) -> Readiness:
        spec = self.resolved.spec
        self.report.step(f"readiness of {ex.describe()}")
        r = Readiness()
        tool = {"npu": "npu-smi", "gpu": "nvidia-smi"}.get(spec.device, "")  # cpu: the demo layer, no tool
        # One round trip: python, the installed verl (metadata only, verl is not imported), the device tool.
        script = (
            'echo "@@python"; python3 --version 2>&1 || echo "@@fail $?"; '
            'echo "@@verl"; python3 -c "import importlib.metadata as m; print(m.version(\'verl\'))" 2>/dev/null; '
            'echo "@@tool"; "$@" 2>&1; echo "@@status $?"'
        )
        argv = ["bash", "-c", script, "readiness", *([tool, "info"] if tool == "npu-smi" else [tool] if tool else [])]
        for _ in range(3):  # the script always prints "@@python" first: without it, its output was lost
            res = ex.run(argv, timeout=90)
            if "@@python" in res.out:
                break
        sections = _sections(res.out)
        python = sections.get("python", "").strip()
        if not python.startswith("Python") or "@@fail" in python:
            seen = python[:200] or res.err.strip()[:200] or f"exit {res.code}, no output"
            raise RuntimeFailure(f"{ex.describe()}: python3 is not available ({seen})")
        r.python = python.splitlines()[0]
        self.report.note(r.python)
        verl = sections.get("verl", "").strip()
        if verl:
            r.verl_version = verl.splitlines()[-1]
            self.report.note(f"verl {r.verl_version} installed")
        else:
            self.report.warn(f"{ex.describe()}: no verl distribution found (importlib.metadata)")
        tool_out = sections.get("tool", "")
        status = tool_out.rsplit("@@status", 1)[-1].strip() if "@@status" in tool_out else "?"
        tool_out = tool_out.rsplit("@@status", 1)[0]
        if status != "0":
            raise RuntimeFailure(
                f"{ex.describe()}: `{tool}` failed ({' '.join(tool_out.split())[:200] or 'exit ' + status})",
                hint="check the device nodes and driver mounts of the container",
            )
        if not tool:
            self.report.note("device: cpu (the demo device layer): no device tool to ask")
            return r
        res = type(res)(0, tool_out, "")
        r.device_tool = tool
        r.devices_seen = _count_devices(tool, res.out)
        if r.devices_seen is not None:
            self.report.note(f"{tool}: {r.devices_seen} device(s) visible")
            if r.devices_seen < len(spec.cluster.devices):
                self.report.warn(
                    f"{tool} shows {r.devices_seen} device(s) but cluster.devices lists {len(spec.cluster.devices)}"
                )
        return r

    def _check_nodes(self, record: RunRecord, the_plan: Plan) -> None:
        """The multi-node pre-flight (orchestrator/node_preflight.py): every node agrees before anything starts."""
        from verlctl.orchestrator.node_preflight import check_nodes

        assert self.executor is not None
        self.report.step("pre-flight on every node: image, Python and Ray, the checkpoint directory, the route to "
                         "the head, HCCL ports, /dev/shm")
        targets = [(self.resolved.spec.cluster.master_addr or "", True, self.executor)]
        targets += [(w.address, False, w.executor) for w in self.workers if w.executor is not None]
        result = check_nodes(self.resolved.spec, targets, record.run_id, the_plan.command.version,
                             the_plan.command.env)
        record.event("node_preflight", nodes=[n.model_dump() for n in result.nodes],
                     findings=[f.model_dump(mode="json") for f in result.findings])
        if result.findings:
            self._print_findings(result.findings)
        if has_errors(result.findings):
            raise VerlctlError("the multi-node pre-flight found errors (listed above): nothing was started")

    def _fabric_wanted(self) -> bool:
        from verlctl.orchestrator.fabric import wanted

        return wanted(self.resolved.spec)

    def _check_fabric(self, record: RunRecord, the_plan: Plan) -> None:
        """The collective fabric gate (orchestrator/fabric.py): bytes moved between every node's devices before training."""
        from verlctl.orchestrator.fabric import backend_of, run_fabric

        assert self.executor is not None
        spec = self.resolved.spec
        self.report.step(f"fabric test: all-reduce and point-to-point over {backend_of(spec)} across every node and "
                         "device (--skip-fabric skips it)")
        targets = [(spec.cluster.master_addr or "", self.executor)]
        targets += [(w.address, w.executor) for w in self.workers if w.executor is not None]
        result = run_fabric(spec, targets, the_plan.command.env)
        record.event("fabric", seconds=round(result.seconds, 1), run=result.run.model_dump(),
                     findings=[f.model_dump(mode="json") for f in result.findings])
        if result.findings:
            self._print_findings(result.findings)
        if has_errors(result.findings):
            raise VerlctlError("the collective fabric test found errors (listed above): nothing was started",
                               hint="fix the link or node named above, or launch with --skip-fabric to train anyway")

    def _known_defects(self, record: RunRecord, ex: Executor, the_plan: Plan) -> None:
        """The known-defect gate against the stack read inside the target (verlctl/verl/known_defects.yaml):
        an error entry stops the launch before anything starts, a warning is printed."""
        from verlctl.checks.defects import known_defect_findings
        from verlctl.detect.check_probes import VERSIONS_SNIPPET, parse_versions

        res = ex.run(["python3", "-c", VERSIONS_SNIPPET], timeout=60)
        versions = parse_versions(res.out, ex.describe()) if res.ok else None
        if versions is None:
            self.report.warn(f"{ex.describe()}: the stack versions could not be read; known-defect gate skipped")
            return
        on = {n for n, s in the_plan.command.features.items() if s.on and s.applicable}
        findings = known_defect_findings(self.resolved.spec, on, versions, versioned_only=True)
        record.event("known_defects", stack=versions.stack, findings=[f.model_dump(mode="json") for f in findings])
        if findings:
            self._print_findings(findings)
        if has_errors(findings):
            raise VerlctlError("a known defect of the target's stack (listed above) breaks this run: nothing was "
                               "started", hint=next(f.hint for f in findings if f.severity is Severity.ERROR))

    def _retarget_version(self, the_plan: Plan, ready: Readiness) -> Plan:
        spec = self.resolved.spec
        installed = ready.verl_version
        from verlctl.verl.entrypoints import SUPPORTED_VERSIONS

        if spec.verl_version == "auto":
            if installed is None:
                raise VerlctlError("verl_version is auto but no verl is installed in the target")
            base = ".".join(installed.split(".")[:3])
            if base not in SUPPORTED_VERSIONS:
                raise VerlctlError(
                    f"the target has verl {installed}; verlctl supports {', '.join(SUPPORTED_VERSIONS)}",
                    hint="set verl_version explicitly to the closest supported version",
                )
            self.report.note(f"verl_version auto -> {base} (installed in the target)")
            new = make_plan(self.resolved, container_version=base, facts=self.facts)
            if has_errors(new.findings):
                self._print_findings(new.findings)
                raise VerlctlError(f"the spec has errors for verl {base}")
            return new
        if installed is not None and not installed.startswith(spec.verl_version):
            self.report.warn(f"the spec targets verl {spec.verl_version} but the target has {installed}")
        return the_plan

    def _preflight(self, ex: Executor, the_plan: Plan, scripts_dir: str, workdir: str) -> None:
        """The in-target look-up (``orchestrator/preflight.py``), the one ``check`` and the verdict of this launch ran: not
        again when the verdict looked, to the end, for this very command (its facts hold the look-up of the
        running container, or of a throw-away container of this image); else here, in the target, with the
        same findings (``checks.container.target_lookup_findings``)."""
        from verlctl.checks.container import target_lookup_findings

        # (multi-node: the verdict looked with this host's engine, the head may be another: look there)
        before = getattr(self.facts, "target_lookup", None) if self.facts is not None and not self.workers else None
        if before is not None and before.finished and before.payload_sha == preflight.payload_sha(
                the_plan.command, workdir):
            self.report.step(f"preflight: looked up before launch in {before.where} "
                             f"({len(the_plan.command.overrides)} overrides)")
            if before.validation:
                self.report.note(f"verl validate_config: {before.validation}")
            return
        self.report.step(f"preflight: compose {len(the_plan.command.overrides)} overrides with the target's verl")
        look = preflight.look_up(ex, the_plan.command, workdir, scripts_dir, timeout=180)
        if not look.finished:
            raise VerlctlError(f"preflight in {look.where}: {look.message}: nothing was trained",
                               hint="a loaded host can be slow to import verl: try again, or check the target's "
                               "python3 by hand")
        findings = target_lookup_findings(self.resolved.spec, look)
        for f in findings:
            if f.severity is not Severity.ERROR:
                self.report.warn(f.message)
        first = next((f for f in findings if f.severity is Severity.ERROR), None)
        if first is not None:
            raise VerlctlError(f"{first.field}: {first.message}" if first.field else first.message, hint=first.hint)
        if look.kind == "source":
            raise VerlctlError(f"preflight compose failed: {look.message}")
        self.report.note("all overrides compose")
        if look.validation:
            self.report.note(f"verl validate_config: {look.validation}")

    def _copy(self, ex: Executor, rendered: Rendered, scripts_dir: str, env_file: bool = True) -> None:
        names = f"{START_SCRIPT}, {TRAIN_SCRIPT}" + (f", {ENV_FILE}" if env_file else "")
        self.report.step(f"copy {names} to {ex.describe()}:{scripts_dir}")
        files = {
            START_SCRIPT: FileSpec(rendered.files[START_SCRIPT].encode(), 0o755),
            TRAIN_SCRIPT: FileSpec(rendered.files[TRAIN_SCRIPT].encode(), 0o755),
        }
        if env_file:
            files[ENV_FILE] = FileSpec(rendered.env_file.encode(), 0o600)
        ex.put_files(scripts_dir, files)

    def copy_scripts(self, ex: Executor, rendered: Rendered, scripts_dir: str, env_file: bool = True) -> None:
        """Copy the rendered scripts (and the 0600 env file) into the target (the canary's phases use it)."""
        self._copy(ex, rendered, scripts_dir, env_file)

    def prepare_relaunch(self, ex: Executor, record: RunRecord) -> tuple[Plan, Rendered]:
        """Check and compose the next attempt (spec checks, preflight in the target) without touching the
        running one: the watcher does this while the failed attempt is being torn down."""
        container_version = record.verl_version if self.resolved.spec.verl_version == "auto" else None
        the_plan = make_plan(self.resolved, container_version=container_version)
        the_plan.findings = _without_secrets_in_target(ex, record, the_plan.findings)
        if has_errors(the_plan.findings):
            first = next(f for f in the_plan.findings if f.severity is Severity.ERROR)
            raise VerlctlError("the changed spec has errors: " + first.message)
        rendered = the_plan.render()
        self._preflight(ex, the_plan, record.scripts_dir, record.workdir)
        return the_plan, rendered

    def relaunch(self, ex: Executor, record: RunRecord, reason: str, resumed_from: str | None,
                 prepared: tuple[Plan, Rendered] | None = None) -> Plan:
        """Start a new attempt of a recorded run with this (changed) spec: preflight, copy, start.

        The 0600 env file already in the target is kept (it is not re-rendered: the recorded spec has no
        secrets)."""
        done: list[tuple[Plan, Rendered]] = [prepared] if prepared is not None else []

        def preflight() -> None:  # done already when the watcher prepared the attempt
            if not done:
                done.append(self.prepare_relaunch(ex, record))

        def copy() -> None:
            rendered = done[0][1]
            self._copy(ex, rendered, record.scripts_dir, env_file=False)
            if record.workers:
                from verlctl.backends.docker import worker_targets

                self.workers = [NodeTarget(w.address, None, None, wex) for w, wex, _ in worker_targets(record)]
                for target in self.workers:
                    if target.executor is None:
                        raise RuntimeFailure(f"the container on {target.address} is not running: cannot restart")
                    self._copy(target.executor, rendered, record.scripts_dir, env_file=False)

        def start_workers() -> None:
            if record.workers:
                self.start_workers(record, done[0][0], reason=reason)

        def start_head() -> None:
            the_plan, rendered = done[0]
            attempt = f"attempt-{len(record.attempts) + 1}"
            for name, text in rendered.files.items():
                record.write_file(f"{attempt}/{name}", text.encode("utf-8"))
            self.start(ex, record, the_plan, reason=reason, resumed_from=resumed_from)

        walk(RELAUNCH_STAGES, {S.PREFLIGHT: preflight, S.COPY: copy, S.START_WORKERS: start_workers,
                               S.START_HEAD: start_head})
        return done[0][0]

    def _write_record_files(self, record: RunRecord, rendered: Rendered) -> None:
        for name, text in rendered.files.items():  # atomic: never a torn copy (a full state dir: OSError)
            record.write_file(name, text.encode("utf-8"))

    # ------------------------------------------------------------------------ start and verify

    def start(self, ex: Executor, record: RunRecord, the_plan: Plan, reason: str,
              resumed_from: str | None = None, gate: str | None = None) -> int:
        self.report.step(f"start {START_SCRIPT} ({reason})")
        env = {"VERLCTL_RAY_TMP": f"/tmp/verlctl-ray-{record.run_id[-4:]}{len(record.attempts)}"}
        if gate:
            env["VERLCTL_GATE"] = gate
        if record.workers:
            env["VERLCTL_ROLE"] = "head"
        log_offset = ex.file_size(record.run_log) or 0
        ref = ex.start_group(["bash", f"{record.scripts_dir}/{START_SCRIPT}"], record.run_log,
                             attempt_marker(record.run_id, len(record.attempts) + 1), cwd=record.workdir, env=env)
        pgid = ref.pgid
        features = [n for n, s in the_plan.command.features.items() if s.on and s.applicable]
        record.attempts.append(Attempt(number=len(record.attempts) + 1, pgid=pgid, started_at=time.time(),
                                       features=features, reason=reason, resumed_from=resumed_from,
                                       log_offset=log_offset, marker=ref.marker, leader_start=ref.start,
                                       container_started_at=ref.container_started_at))
        record.pgid = pgid
        record.save()
        record.event("started", pgid=pgid, attempt=len(record.attempts), reason=reason, features=features,
                     resumed_from=resumed_from)
        self.report.note(f"process group {pgid}, log {record.run_log}")
        return pgid

    def verify_retrying_ray(self, ex: Executor, record: RunRecord, group: GroupRef, the_plan: Plan,
                            gate: str | None = None, resumed_from: str | None = None) -> None:
        """:meth:`verify`; a single-node start that failed because Ray did not come up (its start-up timed out
        on a loaded host: :data:`RAY_START_FAILURES`) is started once more (a new attempt, same scripts)
        before the launch gives up."""
        module = the_plan.command.entry.module
        try:
            self.verify(ex, record, group, module)
            return
        except RuntimeFailure as exc:
            category = self.last_failure_category
            if category not in RAY_START_FAILURES or record.workers:
                raise
            self.report.warn(f"Ray did not come up ({category}: {exc.message}); starting once more "
                             "(a loaded host is the usual cause)")
        record.event("ray_start_retry", category=category, attempt=len(record.attempts))
        if ex.group_alive(group):
            ex.stop_group(group, grace_s=20, ray_grace_s=0)
        self.start(ex, record, the_plan, reason=f"retry after {category}", resumed_from=resumed_from, gate=gate)
        self.verify(ex, record, record.attempts[-1].ref, module)

    def verify(self, ex: Executor, record: RunRecord, group: GroupRef, module: str) -> None:
        """Wait (bounded) until the training command runs and has printed; fail with the reason if it dies.

        The log is followed as a stream (no re-reading); liveness is checked every couple of seconds, so the
        wait costs the machine (and the start-up being waited for) almost nothing."""
        from verlctl.runtime.follow import Follower

        self.report.step(f"verify that {module} started (up to {int(self.options.verify_timeout)}s)")
        deadline = time.monotonic() + self.options.verify_timeout
        follower = Follower(ex, record.run_log, record.attempts[-1].log_offset if record.attempts else 0,
                            owner=record.run_id)
        text = ""
        first_line_at: float | None = None
        next_check = 0.0
        try:
            while time.monotonic() < deadline:
                text += follower.get(timeout=0.5)
                now = time.monotonic()
                if first_line_at is None and first_line(after_marker(text)) is not None:
                    first_line_at = now  # the trainer printed: its settle time runs from here
                    next_check = 0.0
                if now < next_check:
                    continue
                next_check = now + 2.0
                # Training progress proves the trainer started (what happens later is the watcher's job).
                first = progress_shown(text)
                if first is None and not ex.group_alive(group):
                    # Gone: judge the log's whole text (a short run prints its steps and ends between two looks).
                    text += follower.drain(since=time.monotonic(), bound_s=10.0)
                    first = progress_shown(text)
                    if first is None:
                        self._fail_verify(record, text, "the training process exited during start-up (process "
                                          f"group {group.pgid} is no longer in {ex.describe()})")
                started = first is not None
                first = first or first_line(after_marker(text))
                # Still alive settle_s after its first line (not after the marker: on a loaded host the trainer's
                # interpreter may take longer than that to print at all, and a start-up crash right after its
                # first line would be called a start).
                if not started and first_line_at is not None and now - first_line_at >= self.options.settle_s:
                    started = _module_running(ex, group.pgid, module)
                if started and first is not None:
                    record.event("verified", first_line=first[:300])
                    self.report.note(f"training is running: {first.strip()[:160]}")
                    return
        finally:
            follower.stop()
        self._fail_verify(record, text, f"training did not start within {int(self.options.verify_timeout)}s")

    def _fail_verify(self, record: RunRecord, text: str, why: str) -> None:
        from verlctl.monitor.summary import diagnose_text

        result = diagnose_text(text)
        tail = [ln for ln in text.splitlines() if ln.strip()][-15:]
        self.console.print(f"[bold red]{_esc(why)}[/bold red]; last lines of {_esc(record.run_log)}:")
        for ln in tail:
            self.console.print(f"  {ln}", highlight=False, markup=False)
        reason = why
        hint = None
        if result.findings:
            top = result.findings[0]
            reason = f"{why}: {top.category}: {top.message}"
            hint = top.hint
        self.last_failure_category = result.findings[0].category if result.findings else None
        record.event("failure", category=self.last_failure_category, reason=reason)
        record.save()
        raise RuntimeFailure(reason, hint=hint, code=EXIT_FAILURE)


def _without_secrets_in_target(ex: Executor, record: RunRecord, findings: list[Finding]) -> list[Finding]:
    """A relaunch keeps the 0600 env file already in the target; the recorded spec has no secrets. Drop
    the "needs an API key" error when that file holds the key (checked inside the target: the key is
    never read back, printed or passed in argv)."""
    if not any(f.code == "swanlab_api_key" for f in findings):
        return findings
    from verlctl.render.render import ENV_FILE

    env_file = f"{record.scripts_dir}/{ENV_FILE}"
    res = ex.run(["bash", "-c", 'set -a; . "$1" >/dev/null 2>&1 || exit 3; [ -n "${SWANLAB_API_KEY:-}" ]',
                  "verlctl-key-check", env_file], timeout=30)
    if not res.ok:
        raise VerlctlError(
            f"SwanLab cloud mode needs an API key and the run's env file {env_file} in {ex.describe()} has none",
            hint="relaunch by hand with SWANLAB_API_KEY exported (`verlctl launch`), or use mode offline",
        )
    return [f for f in findings if f.code != "swanlab_api_key"]


def _proxy_names(spec: Any) -> list[str]:
    """The proxy variables a created container gets (names only: a proxy URL may hold a password)."""
    from verlctl.verl.environment import proxy_env
    from verlctl.verl.table import Ctx

    return list(proxy_env(Ctx(spec, spec.verl_version)))


def _sections(text: str) -> dict[str, str]:
    """Split ``@@name`` delimited output into sections."""
    out: dict[str, str] = {}
    name: str | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith("@@") and line[2:].strip() in ("python", "verl", "tool"):
            name = line[2:].strip()
            out[name] = ""
        elif name is not None:
            out[name] += line
    return out


def _count_devices(tool: str, text: str) -> int | None:
    try:
        if tool == "npu-smi":
            from verlctl.detect.npu import parse_npu_smi_info

            return len(parse_npu_smi_info(text).devices)
        from verlctl.detect.gpu import parse_nvidia_smi

        return len(parse_nvidia_smi(text).devices)
    except Exception:
        return None


def _module_running(ex: Executor, pgid: int, module: str) -> bool:
    res = ex.run(["ps", "-eo", "pgid=,stat=,args="], timeout=30)
    if not res.ok:
        return True  # cannot tell; the group is alive
    for line in res.out.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0] == str(pgid) and not parts[1].startswith("Z") and f"-m {module}" in parts[2]:
            return True
    return False


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)


def quote_argv(argv: list[str]) -> str:
    return shlex.join(argv)
