"""What each non-local backend does with the operations it does not own: a Kubernetes run (KubeRay RayJob or
Volcano Job) leaves status, logs, stop, watch and relaunch to kubectl and says which kubectl command does each; a
Slurm run's status, logs and stop are its job's (by id), and a Slurm launch interrupted before its job was
submitted has nothing to clean up and says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from verlctl.backends.base import Change, NotOnBackend
from verlctl.orchestrator.runs import ManifestRun, SlurmRun

from conftest import ROOT, clean_env, run_cli

#: every operation of the backend interface that acts on a run once it exists, with its arguments
OPERATIONS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "status": ("status", ()),
    "logs": ("log", (True, 50)),
    "stop": ("stop", (False, 10.0, None)),
    "watch": ("watch", (None, print, None)),
    "relaunch": ("relaunch", (Change("device_oom", ("offload",)),)),
}
HINTS = {
    "kuberay": ("kubectl get rayjob job-1; kubectl logs -l ray.io/node-type=head -f; kubectl delete rayjob job-1"),
    "volcano": "kubectl get vcjob job-1; kubectl logs job-1-head-0 -f; kubectl delete vcjob job-1",
}


@pytest.mark.parametrize("fmt", ["kuberay", "volcano"])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_kubernetes_runs_operations_are_kubectls_with_the_commands_named(fmt: str, operation: str) -> None:
    what, args = OPERATIONS[operation]
    run = ManifestRun(fmt)
    with pytest.raises(NotOnBackend) as err:
        getattr(run, operation)("job-1", *args)
    assert err.value.message == f"a {run.backend.where} run's {what} is kubectl's: verlctl only writes the manifest"
    assert err.value.hint == HINTS[run.name]


def test_a_slurm_launch_interrupted_before_its_job_was_submitted_changes_nothing() -> None:
    """The launch guard's clean-up (Ctrl-C, a failed verification) of a Slurm launch that had submitted nothing:
    no job to cancel, no record to mark; the one line says so."""
    assert SlurmRun(Console()).abort("Ctrl-C") == "interrupted (Ctrl-C) before anything was started: nothing changed"


def test_a_slurm_backend_without_a_console_prints_to_one_and_keeps_a_given_one() -> None:
    """``verlctl status`` / ``stop`` / ``watch`` get the run's backend from its record without a console
    (``orchestrator.runs.run_for``): it prints to the terminal then; a given console (stderr under --json) is kept."""
    assert isinstance(SlurmRun().console, Console)
    mine = Console(stderr=True)
    assert SlurmRun(mine).console is mine


RUN = "20260101-000000-exp-abcd"


@pytest.fixture
def slurm_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A Slurm run's record (one job, its output file) and a controller that reports the job running:
    ``squeue`` here is a TEST DOUBLE (a real slurmctld runs in tests/backends/test_slurm_cluster.py, with Docker)."""
    from verlctl.runtime.records import RunRecord

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "squeue").write_text("#!/bin/sh\necho 'RUNNING|None|node1|verlctl-exp'\n")
    (bindir / "squeue").chmod(0o755)
    out = tmp_path / "job-4242.out"
    out.write_text("step:1 - actor/loss:0.5\nstep:2 - actor/loss:0.4\n")
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), PATH=f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("VERLCTL_STATE_DIR", env["VERLCTL_STATE_DIR"])  # where the record is saved
    RunRecord.model_validate({
        "run_id": RUN, "created_at": 4102444800.0, "runtime": "slurm", "workdir": str(tmp_path),
        "scripts_dir": str(tmp_path / "runs" / RUN), "run_log": str(out), "train_log": "",
        "checkpoints": str(tmp_path / "ckpt"), "experiment": "exp", "verl_version": "0.7.0", "pgid": None,
        "attempts": [], "slurm_jobs": [{"number": 1, "job_id": "4242", "job_name": "verlctl-exp",
                                        "submitted_at": 4102444800.0, "output": str(out)}],
    }).save()
    return env


def test_a_slurm_runs_status_and_logs_are_its_jobs(slurm_run: dict[str, str]) -> None:
    res = run_cli("status", RUN, "--json", env=slurm_run)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert (doc["state"], doc["alive"], doc["slurm"]["job_id"]) == ("running", True, "4242")
    res = run_cli("logs", RUN, env=slurm_run)
    assert (res.code, res.out) == (0, "step:1 - actor/loss:0.5\nstep:2 - actor/loss:0.4\n"), res.err


def test_stopping_a_slurm_run_cancels_its_job_by_id_and_reports_it(slurm_run: dict[str, str], tmp_path: Path) -> None:
    """``scancel`` (a TEST DOUBLE, as ``squeue`` and ``scontrol``) gets the job's id; the job then reads as
    cancelled, and ``stop --json`` reports the job it cancelled on stdout, the run as stopped."""
    bindir, cancelled = tmp_path / "bin", tmp_path / "scancelled"
    (bindir / "scancel").write_text(f"#!/bin/sh\necho \"$@\" >> {cancelled}\n")
    (bindir / "squeue").write_text(f"#!/bin/sh\n[ -e {cancelled} ] || echo 'RUNNING|None|node1|verlctl-exp'\n")
    (bindir / "scontrol").write_text(
        f"#!/bin/sh\n[ -e {cancelled} ] && echo 'JobId=4242 JobName=verlctl-exp JobState=CANCELLED Reason=None "
        "ExitCode=0:15 NodeList=node1'\n")
    for tool in ("scancel", "scontrol"):
        (bindir / tool).chmod(0o755)
    res = run_cli("stop", RUN, "--json", env=slurm_run)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["slurm_job"]["job_id"] == "4242" and doc["slurm_job"]["cancelled"] is True, doc
    assert "4242" in cancelled.read_text().split()
    assert json.loads(run_cli("status", RUN, "--json", env=slurm_run).out)["state"] == "stopped"


def test_ctrl_c_on_watching_a_slurm_run_exits_130_and_records_it(slurm_run: dict[str, str], tmp_path: Path) -> None:
    """``verlctl watch`` of a Slurm run, interrupted: exit 130 (the shell's code for SIGINT) and the run's
    events say the watch was interrupted, so ``status`` does not take the watcher for one that died."""
    state = Path(slurm_run["VERLCTL_STATE_DIR"])
    [run_dir] = [p for p in state.rglob(RUN) if p.is_dir()]
    (run_dir / "spec.resolved.yaml").write_text(f"container:\n  runtime: host\n  workdir: {tmp_path}\n")
    proc = subprocess.Popen([sys.executable, "-m", "verlctl", "watch", RUN], env=slurm_run, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the watcher's first line: it is watching now
        assert first.startswith(f"verlctl watch: watching run {RUN}: Slurm job 4242"), first + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    events = [json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert events[-1] == "watch_interrupted", events


def test_a_slurm_launch_interrupted_after_submitting_cancels_that_job(slurm_run: dict[str, str], tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch guard's clean-up once the run's record exists (the job submitted, not yet verified): the job is
    cancelled by id (``scancel``: a TEST DOUBLE), the run marked stopped, and the one line names the job."""
    from verlctl.runtime.records import load_run

    bindir, cancelled = tmp_path / "bin", tmp_path / "scancelled"
    (bindir / "scancel").write_text(f"#!/bin/sh\necho \"$@\" >> {cancelled}\n")
    (bindir / "scancel").chmod(0o755)
    monkeypatch.setenv("PATH", slurm_run["PATH"])
    backend = SlurmRun(Console())
    backend.started.append(load_run(RUN))  # what launch_slurm appends as soon as the record is made
    line = backend.abort("Ctrl-C")
    assert line == (f"interrupted (Ctrl-C) during launch of run {RUN}: Slurm job 4242 cancelled; "
                    "the run is marked stopped")
    assert "4242" in cancelled.read_text().split() and load_run(RUN).stopped


def test_the_watchers_relaunch_of_a_slurm_run_submits_a_job_with_the_recovery_feature(
        slurm_run: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The OOM ladder's resubmission (``SlurmWatcher._resubmit`` -> ``relaunch``): a second job of the run, with
    the feature recovery adds, recorded as the run's current job (``sbatch``: a TEST DOUBLE printing its id)."""
    from verlctl.runtime.records import load_run

    bindir = tmp_path / "bin"
    (bindir / "sbatch").write_text("#!/bin/sh\necho 4243\n")
    (bindir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", slurm_run["PATH"])
    rec = load_run(RUN)
    (rec.dir / "spec.resolved.yaml").write_text((ROOT / "examples" / "run.yaml").read_text())
    ref = SlurmRun(Console()).relaunch(rec, Change("device_oom", ("offload",), resumed_from="global_step_10"))
    assert (ref.job_id, ref.number, ref.reason, ref.resumed_from) == ("4243", 2, "device_oom", "global_step_10")
    assert "offload" in ref.features
    assert [j.job_id for j in load_run(RUN).slurm_jobs] == ["4242", "4243"]
