"""What the orchestrator and the backends share: the stages of a launch and its request as data, and the backend
interface (TorchX's schedulers, SkyPilot's backends).

``prepare(...) -> LaunchRequest`` (the orchestrator's, ``orchestrator/runs.py``): typed data, computed without changing
anything: the rendered scripts, the containers with their mounts and environment variable *names* (never a
value: the 0600 env file and the proxies may hold secrets), the sbatch text or the RayJob manifest, and the
ordered stages with the action each takes. ``launch --dry-run`` prints it (``--json``:
:meth:`LaunchRequest.to_json`; the human listing is :meth:`LaunchRequest.actions`). ``submit(request)`` walks
the stages (``orchestrator/stages.py``). Nothing here knows verl: a backend is handed the rendered scripts.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from verlctl.errors import VerlctlError


class Stage(str, enum.Enum):
    """The stages of a launch, in the order they run (a relaunch walks fewer, :data:`RELAUNCH_STAGES`)."""

    PREPARE_TARGET = "prepare_target"  # directories, image pull, container create/start (or the host)
    READINESS = "readiness"  # python, the device tool, the installed verl
    NODE_PREFLIGHT = "node_preflight"  # multi-node: every node agrees
    FABRIC = "fabric"  # more than one device: the collective test across every node and device
    CANARY = "canary"
    COPY = "copy"  # the scripts (and the 0600 env file) into every target
    START_WORKERS = "start_workers"
    START_HEAD = "start_head"  # behind the start gate
    PREFLIGHT = "preflight"  # compose the overrides with the target's verl + Hydra
    SWANLAB = "swanlab"
    OPEN_GATE = "open_gate"
    VERIFY = "verify"
    RECORD = "record"
    WRITE_JOB = "write_job"  # Slurm: the job script and the env file on shared storage
    SUBMIT = "submit"  # Slurm: sbatch; KubeRay: kubectl apply (the user's)
    WRITE_MANIFEST = "write_manifest"  # KubeRay


#: What a relaunch of a recorded run walks: the target exists and is ready; no image, no container create.
RELAUNCH_STAGES: tuple[Stage, ...] = (Stage.PREFLIGHT, Stage.COPY, Stage.START_WORKERS, Stage.START_HEAD)


@dataclass(frozen=True)
class MountRequest:
    host: str
    target: str
    mode: str
    why: str


@dataclass(frozen=True)
class ContainerRequest:
    """One container of the launch: reused (``exists``) or created from ``image``."""

    node: str  # "local", or the node's address
    name: str
    image: str
    exists: bool
    state: str | None
    pull: bool
    mounts: tuple[MountRequest, ...]
    added_mounts: tuple[MountRequest, ...]
    devices: tuple[str, ...]
    env_names: tuple[str, ...]  # names only: the values (proxies) may hold credentials


@dataclass(frozen=True)
class Action:
    stage: Stage
    text: str


@dataclass(frozen=True)
class LaunchRequest:
    """What a launch would do, as data. Deterministic for one spec, machine state and run id."""

    backend: str  # docker | ssh | host | slurm | kuberay
    run_id: str
    target: str  # where the scripts run, in words
    workdir: str
    scripts_dir: str
    run_log: str
    files: dict[str, str] = field(default_factory=dict)  # the rendered scripts (no secrets)
    env_file_names: tuple[str, ...] = ()  # the 0600 env file's variable names (never the values)
    containers: tuple[ContainerRequest, ...] = ()
    sbatch: str | None = None
    manifest: str | None = None
    stages: tuple[Stage, ...] = ()
    plan: tuple[Action, ...] = ()  # the listing, in the order it is shown
    blocked: tuple[str, ...] = ()  # what could not be planned (the verdict's findings say why)

    def actions(self) -> list[str]:
        """Today's numbered dry-run sentences (and the ``actions`` of ``launch --json``)."""
        return [a.text for a in self.plan]

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["stages"] = [s.value for s in self.stages]
        doc["plan"] = [{"stage": a.stage.value, "text": a.text} for a in self.plan]
        return doc


@dataclass(frozen=True)
class Change:
    """What a relaunch changes: the features recovery adds, and why."""

    reason: str
    enable: tuple[str, ...] = ()
    resumed_from: str | None = None


class Backend(Protocol):
    """A backend: it knows its target and nothing of verl. What the orchestrator calls on every backend is its
    ``name`` (a ``launch --backend`` name) and the ``console`` its progress goes to; the target operations are
    each backend's own (``backends/docker.py``: containers, executors, SSH nodes, the host; ``backends/slurm.py``:
    the job's files, sbatch, squeue, scancel; ``backends/kuberay.py``: the manifest), called by the
    orchestrator's module that drives that backend (``orchestrator/launch.py``, ``orchestrator/slurm_run.py``, ``orchestrator/flow.py``).
    The verbs of a run (prepare, submit, status, logs, stop, watch, relaunch) are the orchestrator's
    (``orchestrator/runs.py``: ``Run``)."""

    name: str
    console: Any


class NotOnBackend(VerlctlError):
    """An operation this backend leaves to another tool (KubeRay: kubectl)."""


#: Fixes the run id of a dry run (golden tests compare whole requests); a real launch refuses it.
RUN_ID_ENV = "VERLCTL_RUN_ID"


def run_id_for(experiment: str, dry_run: bool) -> str:
    """A new run id (``runtime.records.new_run_id``), or ``$VERLCTL_RUN_ID`` for a dry run."""
    import os
    import re

    from verlctl.runtime.records import new_run_id

    fixed = os.environ.get(RUN_ID_ENV)
    if not fixed:
        return new_run_id(experiment)
    if not dry_run:
        raise VerlctlError(f"{RUN_ID_ENV} fixes the run id of a dry run only; a launch makes a new one",
                           hint=f"unset {RUN_ID_ENV} (or add --dry-run)")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", fixed):
        raise VerlctlError(f"{RUN_ID_ENV} {fixed!r}: a run id is letters, digits, '.', '_' and '-' (at most 100)",
                           hint=f"set {RUN_ID_ENV} to e.g. golden-run, or unset it")
    return fixed
