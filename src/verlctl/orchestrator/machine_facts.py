"""Collecting the facts ``verlctl check`` reads (:class:`verlctl.checks.facts.CheckFacts`): the host probes at
the same time, each bounded by a time budget; the Docker engine's view of the spec's image and container; and
the in-container fallbacks (the parquet schema check and the checkpoint probe) when the spec's container exists
and runs. It only reads, except for the write test of the checkpoint directory (a temp file, created and
removed).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from verlctl.checks.devices import busy_pids
from verlctl.checks.facts import CheckFacts, LiveRun
from verlctl.checks.storage import collect_storage
from verlctl.detect.check_probes import (
    CHECKPOINT_PROBE_SNIPPET,
    DEFAULT_BUDGET_S,
    VERSIONS_SNIPPET,
    CheckpointProbe,
    DatasetCheck,
    DockerFacts,
    ImageVersions,
    TargetLookup,
    check_dataset_file,
    dataset_paths,
    parse_checkpoint_probe,
    parse_versions,
    probe_checkpoint_dir,
    resolve_ipv4,
)
from verlctl.detect.common import (
    CallTimeout,
    Unavailable,
    UnavailableCode,
    run_probes_concurrently,
    unavailable,
)
from verlctl.detect.datasets import parquet_check_argv, parse_parquet_check_output
from verlctl.detect.machine import MachineState
from verlctl.detect.models import ModelInfo, inspect_model
from verlctl.runtime.holders import describe_holders
from verlctl.spec.model import RunSpec
from verlctl.spec.resolve import ResolvedSpec


class _Docker:
    """The Docker side of the collection: the facts, and the running container (for in-container checks)."""

    def __init__(self, facts: DockerFacts, client: Any = None, container_id: str | None = None) -> None:
        self.facts = facts
        self.client = client
        self.container_id = container_id
        self.lookup: TargetLookup | None = None  # the in-target look-up (collect_lookup)
        self.no_lookup: str | None = None  # why there is none, and what would look

    def executor(self) -> Any:
        if self.client is None or self.container_id is None or not self.facts.running:
            return None
        from verlctl.runtime.executor import DockerExecutor

        return DockerExecutor(self.client, self.container_id, self.facts.container)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def collect_docker(spec: RunSpec, timeout: float, *, pull: bool = False, name_explicit: bool = True,
                   image_explicit: bool = False) -> _Docker:
    """The engine's view of the spec's image and container, as launch would plan it (``name_explicit``: a
    container found under the default name is reused only when this user created it)."""
    from verlctl.errors import VerlctlError
    from verlctl.runtime import containers

    c = spec.container
    facts = DockerFacts(image=c.image, container=c.name, pull=pull)
    try:
        client = containers.connect(timeout)
    except VerlctlError as exc:
        facts.error = exc.message
        return _Docker(facts)
    found = _Docker(facts, client)
    try:
        facts.engine_version = client.version().get("Version")
        facts.image_present = containers.image_present(client, c.image)
        existing = containers.find_container(client, c.name)
        if existing is not None:
            owner = (existing.labels or {}).get(f"{containers.LABEL_PREFIX}.created-by")
            if not name_explicit and owner != containers.creator():
                facts.foreign = f"was created by {owner}" if owner else "was not created by verlctl"
            plan = containers.plan_container(client, spec, allow_pull=True, image_explicit=False)
            facts.exists, facts.state = True, plan.state
            # the reference the container was created from (an image's first tag may be another alias)
            facts.container_image = existing.attrs.get("Config", {}).get("Image") or plan.existing_image
            facts.image_note = plan.notes[0] if plan.notes else None
            facts.missing_mounts = [_split_mount_note(m) for m in plan.missing_mounts]
            found.container_id = existing.id
    except VerlctlError as exc:
        facts.error = exc.message
    except Exception as exc:  # transport errors of the SDK are not all DockerException
        facts.error = f"the Docker engine failed: {' '.join(str(exc).split())[:200]}"
    return found


def _split_mount_note(note: str) -> tuple[str, str]:
    """``'paths.model (/mnt/models/x)'`` -> ``('paths.model', '/mnt/models/x')``."""
    field, _, rest = note.partition(" (")
    return field, rest.rstrip(")")


def _container_datasets(checks: list[DatasetCheck], docker: _Docker, timeout: float) -> None:
    """Schema checks that failed for want of pyarrow here: run them in the running container instead."""
    ex = docker.executor()
    todo = [
        c
        for c in checks
        if isinstance(c.verl_schema, Unavailable) and c.verl_schema.code is UnavailableCode.MISSING_DEPENDENCY
    ]
    if ex is None or not todo:
        return
    unmounted = {path for _, path in docker.facts.missing_mounts}
    for c in [c for c in todo if any(c.path == p or c.path.startswith(p.rstrip("/") + "/") for p in unmounted)]:
        c.verl_schema = unavailable(
            "datasets", UnavailableCode.NOT_PRESENT, f"no pyarrow here, and container {ex.name} does not mount it"
        )
        todo.remove(c)
    if not todo:
        return
    from verlctl.errors import VerlctlError

    try:
        res = ex.run(parquet_check_argv([c.path for c in todo]), timeout=timeout)
    except VerlctlError as exc:
        for c in todo:
            c.verl_schema = unavailable("datasets", UnavailableCode.FAILED, f"in container {ex.name}: {exc.message}")
        return
    results = parse_parquet_check_output(res.out, "container") if res.ok else []
    if len(results) != len(todo):
        reason = (res.err or res.out).strip()[-200:] or f"exit {res.code}"
        for c in todo:
            c.verl_schema = unavailable("datasets", UnavailableCode.FAILED, f"the check in container {ex.name} failed: {reason}")
        return
    for c, r in zip(todo, results):
        c.verl_schema = r


def _checkpoint_inside_container(spec: RunSpec) -> bool:
    """Paths under the container's work dir are not mounted: they live in the container."""
    path, workdir = spec.paths.checkpoints, spec.container.workdir.rstrip("/")
    return spec.container.runtime == "docker" and path is not None and (path == workdir or path.startswith(workdir + "/"))


def _collect_checkpoint(spec: RunSpec, docker: _Docker | None, timeout: float) -> CheckpointProbe | Unavailable | None:
    path = spec.paths.checkpoints
    if path is None:
        return None
    if not _checkpoint_inside_container(spec):
        return probe_checkpoint_dir(path, timeout)
    ex = docker.executor() if docker is not None else None
    if ex is None:
        return unavailable(
            "checkpoints",
            UnavailableCode.NOT_PRESENT,
            f"{path} is under the container work dir {spec.container.workdir} (inside container "
            f"{spec.container.name}), and that container is not running",
        )
    from verlctl.errors import VerlctlError

    try:
        res = ex.run(["python3", "-c", CHECKPOINT_PROBE_SNIPPET, path], timeout=timeout)
    except VerlctlError as exc:
        return unavailable("checkpoints", UnavailableCode.FAILED, exc.message)
    return parse_checkpoint_probe(res.out, f"container {ex.name}")


def _inside_workdir(spec: RunSpec, path: str) -> bool:
    workdir = spec.container.workdir.rstrip("/")
    return spec.container.runtime == "docker" and (path == workdir or path.startswith(workdir + "/"))


def collect_log_disk(spec: RunSpec, checkpoint: Any, timeout: float) -> tuple[Any, bool | None]:
    """Free space where paths.logs is (a host directory, mounted at the same path in a container), and whether
    the checkpoints (probed on this host) are on the same file system; (None, None) when paths.logs is unset or
    lies in the container's work dir."""
    from verlctl.detect.system import DiskSpace, disk_space

    path = spec.paths.logs
    if not path or _inside_workdir(spec, path):
        return None, None
    disk = disk_space(path, min(timeout, 5.0))
    shared: bool | None = None
    if isinstance(disk, DiskSpace) and isinstance(checkpoint, CheckpointProbe) and checkpoint.checked_in == "host":
        try:
            shared = os.stat(disk.checked_path).st_dev == os.stat(checkpoint.checked_path).st_dev
        except OSError:
            shared = None
    return disk, shared


#: The in-target look-up's time bound, in multiples of check's --budget. Its fast steps (versions, recipe file,
#: packages, composition) take seconds; the entry's imports and verl's validate_config load torch (a minute on a
#: loaded 2-core host): where the bound ends them, the verdict says so and launch looks again in its preflight.
LOOKUP_BUDGETS = 1


def collect_lookup(resolved: ResolvedSpec, docker: _Docker | None, timeout: float) -> tuple[TargetLookup | None, str]:
    """The in-target look-up (``orchestrator/preflight.py``: the stack's versions, the recipe file, the packages the
    overrides need, the entry's imports, the Hydra composition, verl's validate_config) where training would
    run: the spec's running container; else, when the container does not exist yet, a throw-away container of
    the local image (with the mounts launch gives); on this host with container.runtime: host. None and why
    (with what would look) where there is nothing to look into. Bounded by ``timeout``."""
    from verlctl.errors import VerlctlError
    from verlctl.orchestrator import preflight
    from verlctl.verl.compose import build_command

    spec = resolved.spec
    command = build_command(resolved)
    workdir = spec.container.workdir.rstrip("/") or "/"
    try:
        if spec.container.runtime == "host":
            import shutil

            from verlctl.runtime.executor import HostExecutor

            host = HostExecutor(spec.container.python_env)
            if shutil.which("python3", path=host.environ().get("PATH")) is None:
                return None, "no python3 on this host's PATH (launch's readiness check says so)"
            if not os.path.isdir(workdir):
                return None, (f"the work dir {workdir} does not exist on this host yet (launch looks inside before "
                              "training starts)")
            return preflight.look_up(host, command, workdir, timeout=timeout), ""
        d = docker.facts if docker is not None else None
        if docker is None or d is None or d.error:
            return None, "no Docker engine"
        if d.exists and d.foreign:
            return None, f"container {d.container} is not this user's (see container_not_yours)"
        ex = docker.executor()
        if ex is not None:
            return preflight.look_up(ex, command, workdir, timeout=timeout), ""
        if d.exists:
            return None, (f"container {d.container} is {d.state or 'not running'}: start it (`docker start "
                          f"{d.container}`) for check to look inside, or launch starts it and looks inside before "
                          "training starts")
        if not d.image_present:
            return None, (f"image {d.image} is not present locally: pull it for check to look inside (launch "
                          "looks inside its container before training starts)")
        from verlctl.runtime import containers

        plan = containers.plan_container(docker.client, spec, allow_pull=True, image_explicit=False)
        mounts = [(m.host, m.target) for m in plan.mounts]
        return preflight.look_up_in_image(docker.client, spec.container.image, mounts, command, workdir, timeout), ""
    except VerlctlError as exc:
        return None, f"the look-up could not run: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - the SDK's transport errors: a reason, never a traceback
        return None, f"the look-up could not run: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def collect_recipe(resolved: ResolvedSpec, docker: _Docker | None, timeout: float) -> str | None:
    """The recipe entry file (e.g. recipe/dapo/main_dapo.py) when the work dir lacks it; None when present,
    not needed, or not checkable (the container is not running)."""
    from verlctl.verl.compose import effective_version
    from verlctl.verl.entrypoints import entry_for

    spec = resolved.spec
    entry = entry_for(effective_version(resolved)[0], spec.algorithm, spec.mode, spec.strategy)
    if entry.source_file is None:
        return None
    path = f"{spec.container.workdir.rstrip('/')}/{entry.source_file}"
    if spec.container.runtime == "host":
        return None if os.path.isfile(path) else entry.source_file
    ex = docker.executor() if docker is not None else None
    if ex is None:
        return None
    from verlctl.errors import VerlctlError

    try:
        res = ex.run(["test", "-f", path], timeout=timeout)
    except VerlctlError:
        return None
    return None if res.ok else entry.source_file


def collect_versions(spec: RunSpec, docker: _Docker | None, timeout: float) -> ImageVersions | None:
    """The Python and Ray that python3 finds where training runs: in the spec's running container, or on this
    host with container.runtime: host. None when that cannot be asked (no running container)."""
    if spec.container.runtime == "host":
        import subprocess

        try:
            from verlctl.runtime.executor import HostExecutor

            res = subprocess.run(["python3", "-c", VERSIONS_SNIPPET], capture_output=True, text=True,
                                 timeout=timeout, check=False, env=HostExecutor(spec.container.python_env).environ())
        except (OSError, subprocess.TimeoutExpired):
            return None
        return parse_versions(res.stdout, "this host's python3") if res.returncode == 0 else None
    ex = docker.executor() if docker is not None else None
    if ex is None:
        return None
    from verlctl.errors import VerlctlError

    try:
        res = ex.run(["python3", "-c", VERSIONS_SNIPPET], timeout=timeout)
    except VerlctlError:
        return None
    return parse_versions(res.out, f"container {ex.name}") if res.ok else None


def _as_result(value: object, probe: str) -> Any:
    if isinstance(value, CallTimeout):
        return unavailable(probe, UnavailableCode.TIMEOUT, f"the {probe} check did not finish in time")
    if isinstance(value, BaseException):
        return unavailable(probe, UnavailableCode.ERROR, f"the {probe} check failed: {type(value).__name__}: {value}")
    return value


def _machine_result(spec: RunSpec, value: object) -> MachineState:
    """The probes' MachineState; if detect_machine itself failed, say so in the fields the checks read."""
    if isinstance(value, MachineState):
        return value
    failed = _as_result(value if isinstance(value, BaseException) else CallTimeout(), "machine")
    if spec.device == "npu":
        return MachineState(npu=failed, network=failed)
    return MachineState(gpu=failed, network=failed)


def _dataset_results(spec: RunSpec, value: object) -> list[DatasetCheck]:
    if isinstance(value, list):
        return value
    failed = _as_result(value if isinstance(value, BaseException) else CallTimeout(), "datasets")
    return [DatasetCheck(field=f, path=p, file=failed) for f, p in dataset_paths(spec)]


def device_nodes_missing(spec: RunSpec) -> list[str] | None:
    if spec.device != "npu":
        return None
    return [f"/dev/davinci{d}" for d in spec.cluster.devices if not os.path.exists(f"/dev/davinci{d}")]


def resume_step(spec: RunSpec) -> int | None:
    from verlctl.orchestrator.resume import resume_point

    point = resume_point(spec.paths.checkpoints, spec)
    return int(point.rsplit("_", 1)[1]) if point else None


def checkpoint_users(spec: RunSpec) -> list[str]:
    """The runs recorded in this state dir, not stopped, whose checkpoint directory is paths.checkpoints (A5; the
    lock file that start_verl.sh holds covers the runs of other state dirs and users)."""
    from verlctl.errors import VerlctlError
    from verlctl.runtime.records import all_runs

    try:
        return [r.run_id for r in all_runs() if r.checkpoints == spec.paths.checkpoints and not r.stopped]
    except VerlctlError:
        return []


def _nodes_of(nodes: list[str], single: bool) -> set[str]:
    return {"this machine"} if single else set(nodes)


def live_runs(spec: RunSpec) -> list[LiveRun]:
    """This user's recorded runs that are not over and whose spec uses devices of ``spec`` on a node of
    ``spec`` (O5): read through the record gate (``records.scan_runs``: refused and damaged records are never
    used) and each run's own spec (``RunRecord.load_spec``, which checks the record again); their state as
    ``verlctl list`` decides it (the verified process check where the record does not say). Slurm runs are
    placed by the scheduler and are not compared."""
    from verlctl.errors import VerlctlError
    from verlctl.orchestrator.inspect import run_states
    from verlctl.runtime.records import scan_runs

    try:
        runs, _damaged = scan_runs()
    except VerlctlError:
        return []
    mine = _nodes_of(list(spec.cluster.nodes), spec.cluster.node_count <= 1)
    wanted = set(spec.cluster.devices)
    candidates: list[tuple[Any, list[int]]] = []
    for r in runs:
        if r.stopped or r.runtime not in ("docker", "host"):
            continue
        theirs = _nodes_of([a for a in (r.head_address, *(w.address for w in r.workers)) if a],
                           r.head_address is None and not r.workers)
        if not mine & theirs:
            continue
        try:
            other = r.load_spec().spec
        except VerlctlError:
            continue
        if other.device != spec.device:
            continue
        shared = sorted(wanted & set(other.cluster.devices))
        if shared:
            candidates.append((r, shared))
    if not candidates:
        return []
    states = run_states([r for r, _ in candidates])
    out: list[LiveRun] = []
    for r, shared in candidates:
        st = states.get(r.run_id)
        state = st.state if st is not None else "unknown"
        if state in ("running", "unknown"):
            out.append(LiveRun(run_id=r.run_id, devices=shared, state=state, why=st.why if st is not None else ""))
    return out


def ray_ports_busy(spec: RunSpec) -> list[int] | None:
    """Multi-node runs start the head on master_addr (maybe not this host): only a single node is tested."""
    from verlctl.checks.field_checks import ports_in_use

    if len(spec.cluster.nodes) > 1:
        return None
    c = spec.cluster
    return ports_in_use(list(dict.fromkeys((c.ray_port, c.dashboard_port))), reuse=True)  # Ray binds so too


def hccl_ports_busy(resolved: ResolvedSpec) -> dict[str, list[int]] | None:
    from verlctl.checks.field_checks import hccl_port_ranges, ports_in_use
    from verlctl.verl.compose import build_command

    if resolved.spec.device != "npu":
        return None
    ranges = hccl_port_ranges(resolved.spec, build_command(resolved).env)
    return {name: ports_in_use(ports) for name, ports in ranges.items()}


def collect_facts(resolved: ResolvedSpec, budget_s: float = DEFAULT_BUDGET_S, *, machine: MachineState | None = None,
                  pull: bool = False, prompts: bool = True, skip: dict[str, str] | None = None) -> CheckFacts:
    """Every fact the verdict's rules read (``checks/verdict.py``), collected here: the probes at the same time,
    each within ``budget_s``; then the in-container fallbacks (parquet schemas without pyarrow here,
    checkpoints under the container work dir), the image's contents, live ports. ``machine``: a MachineState
    already detected (the wizard's), used instead of probing the host again. What cannot be collected is
    named in ``not_collected`` with why; ``skip``: the needs (``checks.verdict.Need`` values: "docker",
    "image", "live") not to collect, with the reason to report."""
    skip = dict(skip or {})
    facts = _collect(resolved, budget_s, machine, pull, ask_docker="docker" not in skip, look="image" not in skip)
    no_lookup = facts.not_collected.get("target")
    from verlctl.checks.field_checks import collect_prompt_lengths

    spec = resolved.spec
    if prompts:
        facts.prompt_lengths = collect_prompt_lengths(resolved, facts, budget_s)
    facts.device_nodes_missing = device_nodes_missing(spec)
    facts.resume_step = resume_step(spec)
    if "services" not in skip:
        facts.swanlab_reach = swanlab_reach(spec)
    if "live" not in skip:
        facts.ray_ports_busy = ray_ports_busy(spec)
        facts.hccl_ports_busy = hccl_ports_busy(resolved)
        facts.checkpoint_users = checkpoint_users(spec)
        facts.live_runs = live_runs(spec)
    missing: dict[str, str] = {}
    if len(spec.cluster.nodes) > 1:
        missing["nodes"] = "the per-node pre-flight runs in verlctl launch, inside every node's container"
    if spec.container.runtime == "docker" and "docker" not in skip:
        d = facts.docker
        if d is None or d.error:  # the docker rule reports the engine itself (docker_engine)
            missing["image"] = "no Docker engine"
        elif facts.target_lookup is None:
            missing["image"] = no_lookup or (f"container {d.container} is not running" if d.exists
                                             else f"container {d.container} does not exist yet (launch creates it)")
    if facts.target_lookup is None and "image" not in skip:
        missing["target"] = missing.get("image") or no_lookup or "nothing to look into"
    m = facts.model
    if not isinstance(m, ModelInfo) or (m.num_layers is None and m.num_attention_heads is None):
        why = "paths.model is not set" if not spec.paths.model else f"no readable config.json under {spec.paths.model}"
        missing["model"] = why
    facts.not_collected = {**missing, **skip}
    return facts


def _collect(resolved: ResolvedSpec, budget_s: float, given: MachineState | None, pull: bool,
             ask_docker: bool = True, look: bool = True) -> CheckFacts:
    """Run every probe ``check`` needs, at the same time, each within ``budget_s``; then the in-container
    fallbacks (parquet schemas without pyarrow here, checkpoints under the container work dir)."""
    from verlctl.detect.machine import DetectOptions, detect_machine

    spec = resolved.spec
    probes: list[Any] = ["npu", "gpu", "network", "system"]  # both kinds: a GPU host with device npu (U19)
    options = DetectOptions(
        probes=probes, npu_timeout_s=budget_s, gpu_timeout_s=budget_s, system_timeout_s=min(budget_s, 5.0)
    )
    calls: dict[str, tuple[Callable[[], object], float]] = {
        "machine": ((lambda: given) if given is not None else (lambda: detect_machine(options)), 2 * budget_s + 5),
        "datasets": (lambda: [check_dataset_file(f, p, budget_s) for f, p in dataset_paths(spec)], budget_s * 2 + 2),
        "ips": (lambda: resolve_ipv4(spec.cluster.master_addr, budget_s), budget_s + 1),
    }
    if spec.paths.model:
        model_path = spec.paths.model
        calls["model"] = (lambda: inspect_model(model_path), budget_s)
    lookup_s = LOOKUP_BUDGETS * budget_s
    if spec.container.runtime == "docker" and ask_docker:
        name_explicit = resolved.explicit("container.name")

        def docker_and_lookup() -> _Docker:
            found = collect_docker(spec, budget_s, pull=pull, name_explicit=name_explicit)
            if look:  # in the same thread: the look-up runs while the host is probed
                found.lookup, found.no_lookup = collect_lookup(resolved, found, lookup_s)
            return found

        calls["docker"] = (docker_and_lookup, 3 * budget_s + 5 + (lookup_s + 45 if look else 0))
    elif spec.container.runtime == "host" and look:
        calls["lookup"] = (lambda: collect_lookup(resolved, None, lookup_s), lookup_s + 30)
    got = run_probes_concurrently(calls)
    machine = _machine_result(spec, got["machine"])
    docker = got.get("docker")
    docker = docker if isinstance(docker, _Docker) else None
    if spec.container.runtime == "docker" and docker is None and "docker" in calls:
        docker = _Docker(DockerFacts(image=spec.container.image, container=spec.container.name,
                                     error=f"the Docker engine did not answer within {budget_s:g} s"))
    datasets = _dataset_results(spec, got["datasets"])
    lookup, no_lookup = _lookup_result(spec, docker, got.get("lookup"), look, lookup_s)
    try:
        if docker is not None:
            _container_datasets(datasets, docker, budget_s)
        checkpoint = _collect_checkpoint(spec, docker, budget_s)
        if lookup is not None:  # the look-up read them too: one look inside, not three
            from verlctl.verl.compose import effective_version
            from verlctl.verl.entrypoints import entry_for

            entry = entry_for(effective_version(resolved)[0], spec.algorithm, spec.mode, spec.strategy)
            recipe_missing = entry.source_file if lookup.kind == "source" else None
            versions = lookup.versions
        else:
            recipe_missing = collect_recipe(resolved, docker, budget_s)
            versions = collect_versions(spec, docker, budget_s)
    finally:
        if docker is not None:
            docker.close()
    log_disk, log_shared = collect_log_disk(spec, checkpoint, budget_s)
    facts = CheckFacts(
        machine=machine,
        log_disk=log_disk,
        log_shares_checkpoint_fs=log_shared,
        model=_as_result(got["model"], "model") if "model" in got else None,
        datasets=datasets,
        checkpoint=checkpoint,
        docker=docker.facts if docker is not None else None,
        master_ips=got["ips"] if isinstance(got["ips"], list) else [],
        storage=collect_storage(spec),
        recipe_missing=recipe_missing,
        holders=describe_holders(busy_pids(spec, machine)),
        image_versions=versions,
        target_lookup=lookup,
    )
    if lookup is None and no_lookup:
        facts.not_collected = {"target": no_lookup}
    return facts


def _lookup_result(spec: RunSpec, docker: _Docker | None, got: object, look: bool,
                   bound: float) -> tuple[TargetLookup | None, str]:
    """The look-up of the docker probe's thread (or the host's own probe), or why there is none."""
    if not look:
        return None, ""
    if spec.container.runtime == "docker":
        if docker is None:
            return None, ""
        return docker.lookup, docker.no_lookup or ("" if docker.lookup else "the look-up did not run")
    if isinstance(got, tuple):
        return got[0], got[1]
    return None, f"the look-up did not answer within {bound:g} s"


def swanlab_reach(spec: RunSpec) -> Any:
    """The SwanLab host tried as the container reaches it (None: SwanLab reaches no server in this spec)."""
    from verlctl.checks.swanlab_reach import swanlab_target
    from verlctl.detect.reach import try_url

    url = swanlab_target(spec)
    if url is None:
        return None
    p = spec.container.proxy
    return try_url(url, http_proxy=p.http, https_proxy=p.https, no_proxy=p.no_proxy)


#: What ``init`` (and the wizard's final check) does not collect: it writes a spec, for this host or later.
INIT_SKIPS = {
    "docker": "init writes a spec; verlctl check and launch ask the Docker engine (image, container, devices)",
    "image": "init writes a spec; verlctl check and launch look inside the image",
    "target": "init writes a spec; verlctl check and launch look inside the image (packages, entry, composition)",
    "live": "init writes a spec; verlctl check and launch test the ports and live runs",
    "services": "init writes a spec; verlctl check and launch try the SwanLab host",
}


def wizard_facts(resolved: ResolvedSpec, machine: MachineState | None) -> CheckFacts:
    """The facts of the wizard's final verdict: those of ``check`` on this host (the machine the wizard
    detected; None: probe it now, as ``init --yes`` does) and files, without the Docker engine, the image and
    the live ports (:data:`INIT_SKIPS`): ``launch`` collects those before it decides."""
    return collect_facts(resolved, machine=machine, skip=INIT_SKIPS)
