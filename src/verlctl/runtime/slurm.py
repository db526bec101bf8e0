"""Slurm as a runtime: what a job step's container needs, and (``SlurmJob``) submit / state / output / cancel.

Knows nothing of verl: it runs the batch script it is given with ``sbatch --parsable``, reads the state of
that one job with ``squeue`` / ``sacct``, and cancels that job id only (``scancel -- ID``).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from verlctl.errors import RuntimeFailure
from verlctl.spec.model import RunSpec


def docker_step_args(spec: RunSpec) -> list[str]:
    """``docker run`` options (mounts and devices) for a job step's container on a Slurm node.

    The paths are the spec's (the same on every node: shared storage); nothing is checked on this host,
    which may not be a node of the cluster. Network and IPC are the host's; ``--init`` reaps Ray's children.
    """
    from verlctl.runtime.containers import NPU_SHARED_DEVICES, spec_mount_needs

    args = [f"--shm-size={spec.container.shm_size}", f"--workdir={spec.container.workdir}"]
    workdir = PurePosixPath(spec.container.workdir)
    seen: set[str] = set()
    for m in spec.container.mounts:
        args.append(f"--volume={m}")
        seen.add(m.split(":")[1] if ":" in m else m)
    for path, _why, _must in spec_mount_needs(spec):
        pp = PurePosixPath(path)
        if not pp.is_absolute() or pp == workdir or workdir in pp.parents or path in seen:
            continue
        seen.add(path)
        args.append(f"--volume={path}:{path}")
    if spec.device == "gpu":
        ids = ",".join(str(d) for d in spec.cluster.devices)
        args.append(f'--gpus="device={ids}"')
    elif spec.container.privileged:
        args.append("--privileged")
    else:
        args += [f"--device=/dev/davinci{d}" for d in spec.cluster.devices]
        args += [f"--device={d}" for d in NPU_SHARED_DEVICES]
    return args


def docker_step_driver_mounts(spec: RunSpec) -> list[str]:
    """The Ascend driver paths a job step's container mounts read-only, each only where it exists on the node
    (the job checks on each node: Docker would create a missing one as an empty root-owned directory there)."""
    from verlctl.runtime.containers import NPU_DRIVER_MOUNTS

    if spec.device == "gpu" or spec.container.privileged:
        return []
    return list(NPU_DRIVER_MOUNTS)


# ---------------------------------------------------------------------------------------------- the job

#: Slurm's job states that mean the job is still queued or running (squeue(1) JOB STATE CODES).
LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
                         "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "REQUEUE_FED", "REQUEUE_HOLD"})
_JOB_ID = re.compile(r"[0-9]{1,12}")


@dataclass
class JobState:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, ... or UNKNOWN
    reason: str = ""
    exit_code: str = ""  # "status:signal" once ended
    nodes: str = ""
    name: str = ""
    answered: bool = True  # False: no Slurm tool answered (a busy or unreachable slurmctld): the job may be live

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    def as_dict(self) -> dict[str, str]:
        return {"job_id": self.job_id, "state": self.state, "reason": self.reason, "exit_code": self.exit_code,
                "nodes": self.nodes, "name": self.name}


def _tool(argv: list[str], timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise RuntimeFailure(f"{argv[0]} is not installed here: Slurm's client commands are needed "
                             "(apt-get install slurm-client, or run on the cluster's login node)") from None
    except subprocess.TimeoutExpired:
        raise RuntimeFailure(f"{argv[0]} did not answer within {int(timeout)}s: is slurmctld reachable?") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def submit(script: Path, job_dir: Path, output: str, env: dict[str, str] | None = None) -> str:
    """``sbatch --parsable`` the script (the job's directory in ``VERLCTL_JOB_DIR``); its job id."""
    run_env = dict(os.environ if env is None else env)
    run_env["VERLCTL_JOB_DIR"] = str(job_dir)
    res = _tool(["sbatch", "--parsable", f"--output={output}", f"--chdir={job_dir}", "--", str(script)],
                env=run_env)
    if res.returncode != 0:
        raise RuntimeFailure(f"sbatch refused the job: {_one_line(res.stderr or res.stdout)}")
    job_id = res.stdout.strip().split(";", 1)[0]
    if not _JOB_ID.fullmatch(job_id):
        raise RuntimeFailure(f"sbatch --parsable printed {_one_line(res.stdout)!r}, not a job id")
    return job_id


def state(job_id: str) -> JobState:
    """The job's state: squeue while Slurm keeps it queued/running, then ``scontrol show job`` (kept
    MinJobAge seconds after the end), then ``sacct`` (when accounting is configured); else UNKNOWN."""
    if not _JOB_ID.fullmatch(job_id):
        raise RuntimeFailure(f"{job_id!r} is not a Slurm job id")
    answered = False  # whether slurmctld answered at all (an unknown job id is an answer; a time-out is not)

    def ask(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
        nonlocal answered
        try:
            res = _tool(argv)
        except RuntimeFailure:
            return None
        if res.returncode == 0 or "invalid job id" in (res.stderr + res.stdout).lower():
            answered = True
        return res

    res = ask(["squeue", "--noheader", f"--jobs={job_id}", "--format=%T|%r|%N|%j"])
    if res is not None and res.returncode == 0:
        for line in res.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4:
                return JobState(job_id, parts[0], parts[1] if parts[1] != "None" else "", "", parts[2], parts[3])
    res = ask(["scontrol", "show", "job", "--oneliner", job_id])
    if res is not None and res.returncode == 0 and "JobState=" in res.stdout:
        fields = dict(re.findall(r"(\w+)=(\S*)", res.stdout))
        return JobState(job_id, fields.get("JobState", "UNKNOWN"), "" if fields.get("Reason") == "None"
                        else fields.get("Reason", ""), fields.get("ExitCode", ""), fields.get("NodeList", ""),
                        fields.get("JobName", ""))
    try:
        res = _tool(["sacct", "--noheader", "--parsable2", f"--jobs={job_id}", "--format=State,ExitCode,NodeList,JobName",
                     "--allocations"])
    except RuntimeFailure:
        return JobState(job_id, "UNKNOWN", answered=answered)
    if res.returncode == 0 and res.stdout.strip():
        parts = res.stdout.splitlines()[0].split("|")
        if len(parts) == 4:
            return JobState(job_id, parts[0].split()[0], "", parts[1], parts[2], parts[3])
    return JobState(job_id, "UNKNOWN", answered=answered)


#: How often, and how far apart, a job's state is asked again while slurmctld does not answer.
STATE_TRIES = 4
STATE_RETRY_S = 2.0


def known_state(job_id: str, tries: int = STATE_TRIES, pause: float = STATE_RETRY_S) -> JobState:
    """:func:`state`, asked again (``tries`` times, ``pause`` apart) while no Slurm tool answers; the last one."""
    current = state(job_id)
    for _ in range(tries - 1):
        if current.answered:
            break
        time.sleep(pause)
        current = state(job_id)
    return current


def cancel(job_id: str, job_name: str) -> bool:
    """``scancel`` this job id only, and only while Slurm still names it as ours (its job name): a job id
    reused by the cluster later is never cancelled. True when a cancel was sent."""
    current = known_state(job_id)
    if not current.answered:  # never taken for "ended": a busy slurmctld says nothing of a job that still runs
        raise RuntimeFailure(f"Slurm did not answer about job {job_id} (squeue and scontrol failed or timed out): "
                             f"it may still be running; nothing was cancelled", hint=f"once Slurm answers, "
                             f"cancel it with `scancel {job_id}` (or `verlctl stop`)")
    if not current.live:
        return False
    if current.name != job_name:
        raise RuntimeFailure(f"Slurm job {job_id} is named {current.name!r}, not {job_name!r}: not this run's "
                             "job; nothing was cancelled")
    res = _tool(["scancel", "--", job_id])
    if res.returncode != 0:
        raise RuntimeFailure(f"scancel {job_id} failed: {_one_line(res.stderr or res.stdout)}")
    return True


def read_output(path: str, offset: int = 0, max_bytes: int = 4 * 1024 * 1024) -> bytes:
    """Bytes of the job's output file from ``offset`` (b"" while it does not exist yet); never a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, max_bytes)
    finally:
        os.close(fd)


def output_size(path: str) -> int | None:
    try:
        return os.lstat(path).st_size
    except OSError:
        return None
