"""Render a Slurm batch script (``verlctl export slurm``) around the two generated launch scripts.

The job carries ``start_verl.sh`` and ``run_training.sh`` exactly as :func:`verlctl.render.render.render` made
them (embedded as quoted here-documents, written into the job's directory when it starts): the Slurm layer
only allocates the nodes, says which node leads (``VERLCTL_ROLE``, ``VERLCTL_MASTER_ADDR``) and runs one step
per node with ``srun`` on an explicit node. Values are checked here (``#SBATCH`` lines are read by sbatch, not
by a shell, so they admit no quoting) and the template holds layout only.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from verlctl.errors import VerlctlError
from verlctl.render.render import START_SCRIPT, TEMPLATES, TRAIN_SCRIPT, Rendered, jinja_env

#: Slurm's time-limit forms (sbatch(1) --time): minutes, minutes:seconds, hours:minutes:seconds,
#: days-hours, days-hours:minutes, days-hours:minutes:seconds, or no limit.
_TIME = re.compile(r"(?:[0-9]+-[0-9]+(?::[0-9]+){0,2}|[0-9]+(?::[0-9]+){0,2}|UNLIMITED|unlimited|infinite)")
_PARTITION = re.compile(r"[A-Za-z0-9_.-]+(?:,[A-Za-z0-9_.-]+)*")
#: A GRES is ``name[:type]`` (gres.conf(5)); verlctl adds the count (the devices per node).
_GRES = re.compile(r"(?P<name>[a-z][a-z0-9_]*)(?::(?P<type>[A-Za-z0-9_.-]+))?")
#: Slurm's GPU GRES is always named ``gpu`` (gres.conf(5): ``Name=gpu``; the model goes in the type).
GPU_GRES = "gpu"
#: Ray ports each job gets beside ``cluster.ray_port`` so that two jobs on one node do not collide on Ray's
#: fixed default (ray start: --dashboard-agent-listen-port 52365). Not --ray-client-server-port: a minimal
#: Ray (no ``ray[client]``) refuses to start with it (ray/_private/parameter.py ``_check_usage``), so a job
#: sharing nodes with another sets it in cluster.ray_start_args. The other ports are Ray's random ones.
DERIVED_PORTS = (("--dashboard-agent-listen-port", 1),)


@dataclass
class SlurmOptions:
    partition: str | None = None
    time: str | None = None
    gres: str | None = None
    cpus_per_task: int | None = None
    exclusive: bool = False
    output: str | None = None


@dataclass
class SlurmJob:
    script: str
    notes: list[str] = field(default_factory=list)


def check_options(opts: SlurmOptions, device: str) -> None:
    """One clear line naming the flag and the fix for a value sbatch would misread."""
    if opts.partition is not None and not _PARTITION.fullmatch(opts.partition):
        raise VerlctlError(f"--partition {opts.partition!r}: not a Slurm partition name; use letters, digits, "
                           "'_', '.', '-' (several separated by commas)")
    if opts.time is not None and not _TIME.fullmatch(opts.time):
        raise VerlctlError(f"--time {opts.time!r}: not a Slurm time limit; use MINUTES, HH:MM:SS, D-HH[:MM[:SS]] "
                           "or UNLIMITED")
    if opts.gres is not None:
        m = _GRES.fullmatch(opts.gres)
        if m is None:
            raise VerlctlError(f"--gres {opts.gres!r}: not a GRES name; give NAME or NAME:TYPE (e.g. gpu, "
                               "gpu:a100, npu); verlctl adds the count from cluster.devices")
        if device == "gpu" and m.group("name") != GPU_GRES:
            raise VerlctlError(f"--gres {opts.gres!r}: unknown GPU resource {m.group('name')!r}; Slurm names GPUs "
                               f"'{GPU_GRES}' (give gpu or gpu:TYPE, e.g. gpu:h100)")
    if opts.cpus_per_task is not None and opts.cpus_per_task < 1:
        raise VerlctlError(f"--cpus-per-task {opts.cpus_per_task}: give 1 or more")
    if opts.output is not None and (not opts.output or re.search(r"[\s\x00-\x1f\x7f]", opts.output)):
        raise VerlctlError(f"--output {opts.output!r}: give a path without spaces or control characters")


def ray_port_args(ray_port: int, dashboard_port: int, given: list[str]) -> list[str]:
    """The per-job Ray ports derived from the spec's ``cluster.ray_port`` (unless given in ray_start_args)."""
    names = {a.split("=", 1)[0] for a in given}
    out = []
    for name, offset in DERIVED_PORTS:
        port = ray_port + offset
        if name in names:
            continue
        if port > 65535 or port == dashboard_port:
            raise VerlctlError(
                f"cluster.ray_port {ray_port}: the Slurm job also uses port {port} ({name}); choose a "
                "ray_port at most 65534 whose next port is not cluster.dashboard_port"
            )
        out.append(f"{name}={port}")
    return out


def _job_name(experiment: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", experiment).strip("-.") or "verl"
    return f"verlctl-{name}"[:64]


def _delimiter(tag: str, text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    word = f"VERLCTL_{tag}_{digest}"
    if any(line == word for line in text.splitlines()):  # pragma: no cover - a sha256 prefix of the text itself
        raise VerlctlError("a generated script contains its own here-document delimiter")
    return word


def render_sbatch(
    rendered: Rendered,
    *,
    nnodes: int,
    nodelist: list[str],
    devices_per_node: int,
    device: str,
    master_addr: str,
    ray_port: int,
    join_timeout: int,
    experiment: str,
    opts: SlurmOptions,
    docker_args: list[str] | None = None,
    image: str | None = None,
    driver_mounts: list[str] | None = None,
) -> SlurmJob:
    """The sbatch script. ``docker_args`` (mounts, devices: from the runtime layer) and ``image`` wrap each
    step in ``docker run --init``; without them the steps run on the nodes themselves. ``driver_mounts``:
    host paths the step's container mounts read-only at the same path, each only if it exists on the node."""
    check_options(opts, device)
    notes: list[str] = []
    gres = None
    exclusive = opts.exclusive
    if opts.gres is not None:
        gres = f"{opts.gres}:{devices_per_node}"
    elif device == "gpu":
        gres = f"{GPU_GRES}:{devices_per_node}"
    else:
        exclusive = True
        notes.append(f"no --gres for the NPUs: the job takes whole nodes (--exclusive) and Ray is told "
                     f"{devices_per_node} NPU per node; give the site's GRES with --gres NAME")
    start = rendered.files[START_SCRIPT]
    train = rendered.files[TRAIN_SCRIPT]
    script = jinja_env(TEMPLATES).get_template("job.sbatch.j2").render(
        job_name=_job_name(experiment),
        nnodes=nnodes,
        nodelist=",".join(nodelist),
        gres=gres,
        exclusive=exclusive,
        partition=opts.partition,
        time=opts.time,
        cpus_per_task=opts.cpus_per_task,
        output=opts.output,
        master_addr=master_addr,
        ray_port=ray_port,
        join_timeout=join_timeout,
        start_name=START_SCRIPT,
        train_name=TRAIN_SCRIPT,
        start_script=start.rstrip("\n"),
        train_script=train.rstrip("\n"),
        start_eof=_delimiter("START", start),
        train_eof=_delimiter("TRAIN", train),
        docker_args=docker_args or [],
        image=image if docker_args is not None else None,
        driver_mounts=driver_mounts or [],
    )
    return SlurmJob(script, notes)
