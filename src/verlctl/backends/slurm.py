"""The Slurm backend: the target is a Slurm cluster reached through sbatch / squeue / scancel
(``runtime/slurm.py``). The orchestrator (``orchestrator/slurm_run.py``) renders the job (verl's part) and hands the
text down; this module writes the job's files (the sbatch script, the 0600 env file), submits it, reads its
state and its output file, and cancels it. It knows nothing of verl.

The job's directory ``<paths.logs>/verlctl-slurm/<run id>`` (storage the nodes share, like the checkpoints) holds
the 0600 env file and the job's output files ``slurm-<job id>.out``."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from verlctl.errors import RuntimeFailure, VerlctlError
from verlctl.runtime import slurm
from verlctl.runtime.follow import write_whole
from verlctl.runtime.records import RunRecord, SlurmJobRef
from verlctl.runtime.slurm import JobState

JOB_SCRIPT = "job.sbatch"
#: The job's 0600 env file (the secrets), in the job's directory.
ENV_FILE = "verlctl.env"
#: How long a cancelled job may take to end (Slurm's KillWait, then its epilog) before a resubmission gives up.
CANCEL_END_S = 90.0
#: How much of the end of a job's output ``verlctl logs -n N`` reads for its last N lines.
TAIL_BYTES = 256 * 1024


class SlurmBackend:
    name = "slurm"

    def __init__(self, console: Any = None) -> None:
        if console is None:
            from rich.console import Console

            console = Console()
        self.console = console


def job_dir_for(logs: str, run_id: str) -> Path:
    """The job's directory under ``paths.logs`` (``logs``), which every node mounts."""
    if not logs.startswith("/"):
        raise VerlctlError(f"paths.logs {logs!r}: a Slurm run keeps its job files there and needs an absolute "
                           "path on storage every node mounts; set paths.logs to one")
    return Path(logs) / "verlctl-slurm" / run_id


def job_name_of(script: str) -> str:
    for line in script.splitlines():
        if line.startswith("#SBATCH --job-name="):
            return line.split("=", 1)[1]
    raise RuntimeFailure("the rendered job has no --job-name")  # pragma: no cover - the template writes one


def write_job(record: RunRecord, script: str, env_file: str, files: Mapping[str, str]) -> tuple[int, Path]:
    """Write the next job of the run into its directory (the sbatch script; the 0600 env file with the first
    job only) and the rendered files into the run's record; (the job's number, the script's path)."""
    from verlctl.files import write_file

    job_dir = Path(record.scripts_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    n = len(record.slurm_jobs) + 1
    script_path = write_file(job_dir / f"job-{n}.sbatch", script.encode(), 0o755)
    if n == 1:  # a resubmission keeps it: the recorded spec has no secrets to render it again from
        write_file(job_dir / ENV_FILE, env_file.encode(), 0o600)  # secrets: 0600 from the start
    prefix = "" if n == 1 else f"attempt-{n}/"
    for name, text in {**files, JOB_SCRIPT: script}.items():
        record.write_file(prefix + name, text.encode("utf-8"))
    return n, script_path


def sbatch(record: RunRecord, script_path: Path, private: set[str] | frozenset[str]) -> str:
    """Submit the job; its id. sbatch hands the submitting environment to the job (and slurmctld keeps it in its
    state): the ``private`` variables (what the 0600 env file carries, the SwanLab key above all) are left out."""
    job_dir = Path(record.scripts_dir)
    env = {k: v for k, v in os.environ.items() if k not in private}
    return slurm.submit(script_path, job_dir, str(job_dir / "slurm-%j.out"), env=env)


def await_end(ref: SlurmJobRef, timeout: float = CANCEL_END_S) -> None:
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


def remove_env_file(record: RunRecord) -> None:
    with contextlib.suppress(OSError):
        os.unlink(Path(record.scripts_dir) / ENV_FILE)


def output_tail(ref: SlurmJobRef, max_bytes: int = 256 * 1024) -> str:
    """The end of the job's output file (its last ``max_bytes``)."""
    size = slurm.output_size(ref.output) or 0
    return slurm.read_output(ref.output, max(0, size - max_bytes)).decode(errors="replace")


def show_output(record: RunRecord, follow: bool, lines: int, watcher_running: Callable[[RunRecord], bool]) -> int:
    """``verlctl logs`` of a Slurm run: the current job's output file (its last ``lines``; ``follow``: then as it
    grows, onto a resubmitted job, until the job ended and ``watcher_running`` says no watcher follows it)."""
    from verlctl.runtime.records import load_run

    if not record.slurm_jobs:
        raise VerlctlError(f"run {record.run_id} has no Slurm job")
    ref = record.slurm_jobs[-1]
    found = slurm.output_size(ref.output)
    if found is None and not follow:
        raise VerlctlError(f"no output at {ref.output} yet (Slurm job {ref.job_id} is {slurm.state(ref.job_id).state})")
    size = found or 0
    if lines:  # the last lines within the file's last TAIL_BYTES
        start = max(0, size - TAIL_BYTES)
        out = slurm.read_output(ref.output, max(0, start - 1), max_bytes=TAIL_BYTES + 1)
        if start:
            out = out[out.find(b"\n") + 1:]  # a line the window cuts is not shown in part
        sys.stdout.write("".join(out.decode(errors="replace").splitlines(keepends=True)[-lines:]))
    else:  # the whole file, a piece at a time
        write_whole(lambda offset, n: slurm.read_output(ref.output, offset, n), size, sys.stdout.write)
    sys.stdout.flush()
    if not follow:
        return 0
    pos = size
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
                elif not slurm.state(ref.job_id).live and not watcher_running(current):
                    return 0
            time.sleep(1.0)
    except KeyboardInterrupt:
        return 0


def job_state(ref: SlurmJobRef) -> JobState:
    """The job's state as Slurm reports it (squeue, then scontrol / sacct: ``runtime.slurm.JobState``)."""
    return slurm.state(ref.job_id)


def cancel(ref: SlurmJobRef) -> bool:
    """``scancel`` of the job by its id, after Slurm still names it as the run's job (its name); whether it
    was sent (False: the job had already ended)."""
    return slurm.cancel(ref.job_id, ref.job_name)


def output_size(ref: SlurmJobRef) -> int | None:
    return slurm.output_size(ref.output)


def read_output(ref: SlurmJobRef, offset: int = 0, max_bytes: int = 4 * 1024 * 1024) -> bytes:
    """The job's output file from ``offset`` (a file that is not there yet: nothing)."""
    return slurm.read_output(ref.output, offset, max_bytes=max_bytes)
