"""The training container: connect to the engine, reuse or create, devices, mounts, readiness.

The Docker API version is always negotiated (``docker.from_env()``), never pinned: the engine here is
Debian's 20.10 (API 1.41), which rejects newer pinned clients (``reference/stack.md`` §5).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from verlctl.errors import RuntimeFailure, VerlctlError

if TYPE_CHECKING:  # the spec model is not imported by `status` / `stop` (start-up time, issue 24)
    from verlctl.spec.model import RunSpec

LABEL_PREFIX = "io.verlctl"

#: Ascend device nodes shared by all NPUs (verl / vllm-ascend docs).
NPU_SHARED_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
#: Ascend driver files mounted read-only when they exist on the host.
NPU_DRIVER_MOUNTS = (
    "/usr/local/Ascend/driver",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/usr/local/sbin/npu-smi",
    "/etc/ascend_install.info",
    "/usr/local/Ascend/firmware",
    "/usr/local/Ascend/toolbox",
)


def connect(timeout: float = 10, base_url: str | None = None, where: str | None = None) -> Any:
    """A Docker client with a negotiated API version, or a one-line failure."""
    try:
        import docker
    except ImportError:  # pragma: no cover - a core dependency
        raise RuntimeFailure("the docker Python package is not installed") from None
    try:
        if base_url is None:
            client = docker.from_env(timeout=int(timeout))
        else:
            client = docker.DockerClient(base_url=base_url, version="auto", timeout=int(timeout))
        # (no ping: negotiating the API version above has asked the engine already, one call fewer)
    except Exception as exc:
        host = where or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        msg = " ".join(str(exc).split())[:200]
        raise RuntimeFailure(
            f"the Docker engine is not reachable at {host}: {msg}",
            hint="start dockerd (or set DOCKER_HOST), or use container.runtime: host",
        ) from None
    return client


@dataclass
class Mount:
    host: str
    target: str
    mode: str = "rw"
    why: str = ""


@dataclass
class ContainerPlan:
    name: str
    image: str
    exists: bool
    state: str | None = None  # running / exited / created …
    container_id: str | None = None
    existing_image: str | None = None
    mounts: list[Mount] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    added_mounts: list[Mount] = field(default_factory=list)  # mounts added to cover spec paths
    missing_mounts: list[str] = field(default_factory=list)  # spec paths a reused container does not see
    image_present: bool = True
    pull: bool = False
    notes: list[str] = field(default_factory=list)

    def actions(self) -> list[str]:
        if self.exists:
            out = [f"reuse container {self.name} ({self.state})"]
            if self.state != "running":
                out.append(f"start container {self.name}")
            return out
        out = []
        if not self.image_present:
            out.append(f"pull image {self.image}")
        out.append(
            f"create container {self.name} from {self.image}: {len(self.devices)} device node(s), "
            f"{len(self.mounts)} mount(s), network=host, ipc=host"
        )
        out.append(f"start container {self.name}")
        return out


def _covering(path: str, mounts: list[Mount]) -> Mount | None:
    p = PurePosixPath(path)
    for m in mounts:
        t = PurePosixPath(m.target)
        if p == t or t in p.parents:
            return m
    return None


def spec_mount_needs(spec: RunSpec) -> list[tuple[str, str, bool]]:
    """(path, why, must_exist_on_host) for every host path the training process reads or writes."""
    p = spec.paths
    needs: list[tuple[str, str, bool]] = []
    if p.model:
        needs.append((p.model, "paths.model", True))
    for f in p.train_files or []:
        needs.append((str(PurePosixPath(f).parent), "paths.train_files", True))
    for f in p.val_files or []:
        needs.append((str(PurePosixPath(f).parent), "paths.val_files", True))
    if p.checkpoints:
        needs.append((p.checkpoints, "paths.checkpoints", False))
    if p.logs:
        needs.append((p.logs, "paths.logs", False))
    sw = spec.logging.swanlab
    if sw.enabled and sw.mode in ("offline", "local", "cloud") and sw.log_dir:
        needs.append((sw.log_dir, "logging.swanlab.log_dir", False))
    return needs


def plan_mounts(spec: RunSpec) -> tuple[list[Mount], list[Mount], list[str]]:
    """Mounts for a new container: the spec's own, plus one per uncovered spec path (same path inside).

    Returns (all mounts, added mounts, problems). Paths under the container work dir live in the container
    and are not mounted (mounting over the verl checkout would hide it).
    """
    mounts: list[Mount] = []
    problems: list[str] = []
    for m in spec.container.mounts:
        parts = m.split(":")
        mounts.append(Mount(parts[0], parts[1], parts[2] if len(parts) == 3 else "rw", "container.mounts"))
    added: list[Mount] = []
    workdir = PurePosixPath(spec.container.workdir)
    for path, why, must_exist in spec_mount_needs(spec):
        pp = PurePosixPath(path)
        if not pp.is_absolute():
            problems.append(f"{why}: {path!r} is not an absolute path and cannot be mounted")
            continue
        if pp == workdir or workdir in pp.parents:
            continue
        if _covering(path, mounts + added):
            continue
        if pp == PurePosixPath("/"):
            problems.append(f"{why}: refusing to mount / into the container")
            continue
        host = Path(path)
        if must_exist and not host.exists():
            problems.append(f"{why}: {path} does not exist on this host, so it cannot be mounted")
            continue
        added.append(Mount(path, path, "rw", why))
    return mounts + added, added, problems


def npu_devices(spec: RunSpec) -> tuple[list[str], list[str]]:
    """Device nodes for the chosen NPUs plus the shared ones; and the ids whose node is missing."""
    nodes: list[str] = []
    missing: list[str] = []
    for d in spec.cluster.devices:
        path = f"/dev/davinci{d}"
        if os.path.exists(path):
            nodes.append(path)
        else:
            missing.append(path)
    for path in NPU_SHARED_DEVICES:
        if os.path.exists(path):
            nodes.append(path)
    return nodes, missing


def driver_mounts() -> list[Mount]:
    return [Mount(p, p, "ro", "Ascend driver") for p in NPU_DRIVER_MOUNTS if os.path.exists(p)]


def find_container(client: Any, name: str) -> Any | None:
    import docker

    try:
        return client.containers.get(name)
    except docker.errors.NotFound:
        return None
    except docker.errors.APIError as exc:
        raise RuntimeFailure(f"cannot inspect container {name}: {exc.explanation or exc}") from None


def image_present(client: Any, image: str) -> bool:
    import docker

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.APIError as exc:
        raise RuntimeFailure(f"cannot inspect image {image}: {exc.explanation or exc}") from None
    return True


def _created_elsewhere(container: Any) -> str | None:
    """Whose it is, when the container was created by a run this state directory does not record (the same
    ``user@host`` label is every user of a shared account, review A13); None when one of its runs created it."""
    from verlctl.runtime.records import all_runs, runs_dir

    run = (container.labels or {}).get(f"{LABEL_PREFIX}.run")
    try:
        recorded = {r.run_id for r in all_runs()}
    except VerlctlError:
        recorded = set()
    if run and run in recorded:
        return None
    owner = (container.labels or {}).get(f"{LABEL_PREFIX}.created-by") or "?"
    return (f"was created by run {run or '?'} of {owner}, which is not recorded in {runs_dir()} (another user of "
            "this account, or another state directory)")


def container_image_names(container: Any) -> set[str]:
    names = set(container.image.tags or [])
    names.add(container.image.id)
    cfg = container.attrs.get("Config", {}).get("Image")
    if cfg:
        names.add(cfg)
    return names


def plan_container(client: Any, spec: RunSpec, allow_pull: bool, image_explicit: bool = False,
                   name: str | None = None, name_explicit: bool = True) -> ContainerPlan:
    """What to do about the container. A name taken by a container of another image is reused (with a
    warning) unless the spec names its image explicitly: then it is an error. A container found under the
    *default* name (``name_explicit`` false) is reused only if verlctl created it for this user on this host:
    on a shared server the default name may be a colleague's container."""
    c = spec.container.model_copy(update={"name": name}) if name else spec.container
    existing = find_container(client, c.name)
    if existing is not None and not name_explicit:
        owner = (existing.labels or {}).get(f"{LABEL_PREFIX}.created-by")
        if owner != creator():
            who = f"was created by {owner}" if owner else "was not created by verlctl"
            raise VerlctlError(
                f"a container named {c.name} already exists and {who}: verlctl does not reuse it by default",
                hint=f"to reuse it deliberately, name it: --set container.name={c.name} (or container.name in the "
                "spec); otherwise choose another container.name",
            )
        foreign = _created_elsewhere(existing)
        if foreign is not None:
            raise VerlctlError(
                f"a container named {c.name} already exists and {foreign}: verlctl does not reuse it by default",
                hint=f"on a shared account it may be a colleague's: to reuse it deliberately, name it: --set "
                f"container.name={c.name}; otherwise choose another container.name",
            )
    if existing is not None:
        plan = ContainerPlan(
            c.name,
            c.image,
            True,
            state=existing.status,
            container_id=existing.id,
            existing_image=(existing.image.tags or [existing.image.id])[0],
        )
        if c.image not in container_image_names(existing):
            if image_explicit:
                raise VerlctlError(
                    f"container name {c.name} is taken by a container of image {plan.existing_image}, "
                    f"not {c.image}",
                    hint="choose another container.name, or leave container.image unset to reuse that container",
                )
            plan.notes.append(
                f"container {c.name} runs image {plan.existing_image}, not the spec's {c.image}: reusing it anyway"
            )
        mounted = [
            Mount(m.get("Source", ""), m.get("Destination", ""), "rw" if m.get("RW", True) else "ro")
            for m in existing.attrs.get("Mounts", [])
        ]
        workdir = PurePosixPath(c.workdir)
        for path, why, _ in spec_mount_needs(spec):
            pp = PurePosixPath(path)
            if pp == workdir or workdir in pp.parents:
                continue
            if not _covering(path, mounted):
                plan.missing_mounts.append(f"{why} ({path})")
        return plan
    plan = ContainerPlan(c.name, c.image, False)
    plan.image_present = image_present(client, c.image)
    if not plan.image_present:
        if not (allow_pull or c.pull):
            raise VerlctlError(
                f"image {c.image} is not present locally and pulling is not allowed",
                hint="pass --pull (or set container.pull: true), or choose a local image with container.image",
            )
        plan.pull = True
    mounts, added, problems = plan_mounts(spec)
    if problems:
        raise VerlctlError(problems[0])
    if spec.device == "npu":
        devices, missing = npu_devices(spec)
        if missing and not c.privileged:
            raise VerlctlError(
                f"device node {missing[0]} does not exist on this host (cluster.devices = {spec.cluster.devices})",
                hint="check `npu-smi info` and cluster.devices, or use container.privileged: true",
            )
        plan.devices = devices
        mounts += [m for m in driver_mounts() if not _covering(m.target, mounts)]
    plan.mounts = mounts
    plan.added_mounts = added
    return plan


def creator() -> str:
    """``user@host`` of whoever runs verlctl now (the ``created-by`` label of the containers it creates)."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def labels_for(run_id: str, experiment: str) -> dict[str, str]:
    """Labels of a container verlctl creates: the run that created it (only that run may remove it) and who."""
    return {f"{LABEL_PREFIX}.run": run_id, f"{LABEL_PREFIX}.experiment": experiment, f"{LABEL_PREFIX}.managed": "1",
            f"{LABEL_PREFIX}.created-by": creator()}


def create_container(client: Any, spec: RunSpec, plan: ContainerPlan, labels: dict[str, str],
                     environment: dict[str, str]) -> Any:
    import docker

    c = spec.container
    kwargs: dict[str, Any] = {
        "name": plan.name,
        "command": ["sleep", "infinity"],
        "detach": True,
        "init": True,
        "network_mode": "host",
        "ipc_mode": "host",
        "shm_size": c.shm_size,
        "labels": labels,
        "environment": environment,
        "volumes": {m.host: {"bind": m.target, "mode": m.mode} for m in plan.mounts},
        "working_dir": c.workdir,
    }
    if c.privileged:
        kwargs["privileged"] = True
    if spec.device == "npu":
        kwargs["devices"] = [f"{d}:{d}:rwm" for d in plan.devices]
    else:
        from docker.types import DeviceRequest

        kwargs["device_requests"] = [
            DeviceRequest(device_ids=[str(d) for d in spec.cluster.devices], capabilities=[["gpu"]])
        ]
    for m in plan.added_mounts:
        # Output directories are created on the host so that the bind mount has a source.
        if not Path(m.host).exists():
            Path(m.host).mkdir(parents=True, exist_ok=True)
    try:
        container = client.containers.create(c.image, **kwargs)
    except docker.errors.APIError as exc:
        raise RuntimeFailure(f"cannot create container {plan.name}: {' '.join(str(exc.explanation or exc).split())}") from None
    return container


def start_container(container: Any) -> None:
    import docker

    try:
        container.start()
        container.reload()
    except docker.errors.APIError as exc:
        raise RuntimeFailure(
            f"cannot start container {container.name}: {' '.join(str(exc.explanation or exc).split())}"
        ) from None
    if container.status != "running":
        raise RuntimeFailure(f"container {container.name} did not stay running (state {container.status})")


def pull_image(client: Any, image: str, console: Any) -> None:
    """Pull with a progress display (layer by layer)."""
    import docker

    repo, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "latest")
    try:
        from rich.progress import Progress

        with Progress(console=console, transient=True) as progress:
            tasks: dict[str, Any] = {}
            for ev in client.api.pull(repo, tag=tag or "latest", stream=True, decode=True):
                lid = ev.get("id")
                detail = ev.get("progressDetail") or {}
                if lid and detail.get("total"):
                    if lid not in tasks:
                        tasks[lid] = progress.add_task(f"{lid} {ev.get('status', '')}", total=detail["total"])
                    progress.update(tasks[lid], completed=detail.get("current", 0))
                if "error" in ev:
                    raise RuntimeFailure(f"cannot pull {image}: {ev['error']}")
    except docker.errors.APIError as exc:
        raise RuntimeFailure(f"cannot pull {image}: {' '.join(str(exc.explanation or exc).split())}") from None


def run_in_image(client: Any, image: str, argv: list[str], timeout: float) -> str | None:
    """Run ``argv`` once in a new, throw-away container of the local ``image`` (no network, no mounts, never
    pulled) and return its standard output; None when the image is not local, the command fails or does not
    end within ``timeout`` seconds. The container is labelled as verlctl's and removed by its id afterwards."""
    import docker

    container = None
    try:
        container = client.containers.create(
            image, entrypoint=[argv[0]], command=argv[1:], network_disabled=True, detach=True,
            labels={f"{LABEL_PREFIX}.managed": "1", f"{LABEL_PREFIX}.created-by": creator(),
                    f"{LABEL_PREFIX}.purpose": "read-versions"},
        )
        container.start()
        result = container.wait(timeout=timeout)
        if int(result.get("StatusCode", 1)) != 0:
            return None
        return bytes(container.logs(stdout=True, stderr=False)).decode(errors="replace")
    except Exception:  # ImageNotFound, APIError, the read timeout of wait: no answer
        return None
    finally:
        if container is not None:
            with contextlib.suppress(docker.errors.DockerException, OSError):
                container.remove(force=True)
