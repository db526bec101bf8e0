"""``verlctl export slurm``: the sbatch script (shellcheck, the plan's two scripts embedded unchanged, quoting)
and its bad inputs (one line naming the field and the fix, non-zero exit, nothing written)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from test_scripts import shellcheck_bin

from conftest import run_cli

BASE = ["--set", "paths.model=/m/Qwen3-8B", "--set", "paths.train_files=/d/t.parquet",
        "--set", "paths.val_files=/d/v.parquet"]


def export(tmp_path: Path, *args: str, name: str = "job.sbatch"):  # type: ignore[no-untyped-def]
    out = tmp_path / name
    return run_cli("export", "slurm", *BASE, *args, "-o", str(out), cwd=tmp_path), out


def heredocs(script: str) -> dict[str, str]:
    """The files the job writes: name -> content of its quoted here-document."""
    found = {}
    for m in re.finditer(r"""cat >"\$JOB_DIR/([\w.]+)" <<'(\w+)'\n(.*?)\n\2\n""", script, re.S):
        found[m.group(1)] = m.group(3) + "\n"
    return found


VARIANTS = [
    [],
    ["--nodes", "2", "--partition", "gpu-a,gpu-b", "--time", "1-02:00:00", "--gres", "npu", "--cpus-per-task", "64"],
    ["--device", "gpu", "--strategy", "fsdp", "--algorithm", "grpo", "--nodes", "4", "--gres", "gpu:h100"],
    ["--set", "cluster.nodes=n1,n2", "--set", "container.runtime=host", "--exclusive", "--output", "/s/%j.out"],
    ["--set", "cluster.nodes=n1,n2", "--set", "cluster.master_addr=10.0.0.9", "--mode", "one_step_off_policy",
     "--verl-version", "0.9.1", "--set", "train.tensor_parallel=2"],
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: " ".join(v[:2]) or "defaults")
def test_sbatch_passes_bash_n_and_shellcheck(tmp_path: Path, variant: list[str]) -> None:
    res, out = export(tmp_path, *variant)
    assert res.code == 0, res.err
    subprocess.run(["bash", "-n", str(out)], check=True)
    sc = subprocess.run([shellcheck_bin(), "-S", "style", str(out)], capture_output=True, text=True)
    assert sc.returncode == 0, sc.stdout + sc.stderr
    text = out.read_text()
    code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    for forbidden in (r"\bpkill\b", r"\bkillall\b", r"ray stop", r"scancel"):
        assert not re.search(forbidden, code), forbidden
    for name, body in heredocs(text).items():  # the embedded scripts pass shellcheck on their own, too
        (tmp_path / name).write_text(body)
        sc = subprocess.run([shellcheck_bin(), "-S", "style", str(tmp_path / name)], capture_output=True, text=True)
        assert sc.returncode == 0, name + sc.stdout


def test_hostile_values_round_trip_literally(tmp_path: Path) -> None:
    import shlex

    ckpt = "/c/it's $(touch pwned) `id` dir"
    res, out = export(tmp_path, "--nodes", "2", "--set", f"paths.checkpoints={ckpt}",
                      "--set", 'container.mounts=["/h/a b:/c/a b:ro"]')
    assert res.code == 0, res.err
    lines = out.read_text().split("run_step() {", 1)[1].split("\n}\n", 1)[0]
    words = shlex.split(lines.replace("\\\n", " "))
    assert f"--volume={ckpt}:{ckpt}" in words and "--volume=/h/a b:/c/a b:ro" in words
    # Literal on purpose: shellcheck's only remark is "expressions don't expand in single quotes" (info).
    sc = subprocess.run([shellcheck_bin(), "-S", "warning", str(out)], capture_output=True, text=True)
    assert sc.returncode == 0, sc.stdout


def test_sbatch_header_and_steps(tmp_path: Path) -> None:
    res, out = export(tmp_path, "--device", "gpu", "--strategy", "fsdp", "--nodes", "2", "--partition", "p1",
                      "--time", "30", "--gres", "gpu:a100", "--set", "cluster.devices=0,1,2,3",
                      "--set", "cluster.ray_port=7100")
    assert res.code == 0, res.err
    text = out.read_text()
    header = [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]
    assert header[1:] == ["#SBATCH --nodes=2",
                      "#SBATCH --ntasks-per-node=1", "#SBATCH --gres=gpu:a100:4", "#SBATCH --partition=p1",
                      "#SBATCH --time=30"]
    assert header[0].startswith("#SBATCH --job-name=verlctl-")
    # Ray ports from the spec (and two derived ones), so that two jobs on one node do not collide.
    assert "RAY_PORT=7100" in text
    assert "RAY_START_ARGS=(--dashboard-agent-listen-port=7101)" in text
    # One srun step per node on an explicit node; in the named image with an init process (--init).
    assert 'srun --export=ALL --nodes=1 --ntasks=1 --nodelist="$node"' in text
    assert "docker run --rm --init" in text
    assert "'--gpus=\"device=0,1,2,3\"'" in text
    # NPU without a GRES: whole nodes.
    res, out = export(tmp_path, "--nodes", "2", name="npu.sbatch")
    assert res.code == 0 and "#SBATCH --exclusive" in out.read_text() and "--gres" not in out.read_text()
    assert "--exclusive" in res.err  # said, not silent


def test_embedded_scripts_are_the_plans_own(tmp_path: Path) -> None:
    """The job carries start_verl.sh and run_training.sh as `plan` renders them (no second copy of their
    logic): identical but for the Ray port arguments the job adds."""
    spec = ["--set", "cluster.nodes=n1,n2", "--device", "gpu", "--strategy", "fsdp"]
    res, out = export(tmp_path, *spec)
    assert res.code == 0, res.err
    plan_dir = tmp_path / "plan"
    res = run_cli("plan", *BASE, *spec, "-o", str(plan_dir), cwd=tmp_path)
    assert res.code == 0, res.err
    embedded = heredocs(out.read_text())
    assert set(embedded) == {"start_verl.sh", "run_training.sh"}
    assert embedded["run_training.sh"] == (plan_dir / "run_training.sh").read_text()
    planned = (plan_dir / "start_verl.sh").read_text().splitlines()
    diff = [(a, b) for a, b in zip(planned, embedded["start_verl.sh"].splitlines(), strict=True) if a != b]
    assert diff == [("RAY_START_ARGS=()", "RAY_START_ARGS=(--dashboard-agent-listen-port=6767)")]


def test_cluster_nnodes_sets_trainer_nnodes(tmp_path: Path) -> None:
    res, out = export(tmp_path, "--nodes", "4", "--device", "gpu", "--strategy", "fsdp")
    assert res.code == 0, res.err
    text = out.read_text()
    assert "  trainer.nnodes=4\n" in text and "NNODES=4" in text and "#SBATCH --nodes=4" in text
    # and the spec rules count them: 3 nodes x 8 GPUs = 24 ranks cannot split 256 sequences (verl asserts it)
    res, _ = export(tmp_path, "--nodes", "3", "--device", "gpu", "--strategy", "fsdp", name="three.sbatch")
    assert res.code == 2 and "batch_dp_divisibility" in res.err and "over 24 data-parallel ranks" in " ".join(res.err.split())


BAD = [
    (["--nodes", "0"], "--nodes 0", "give --nodes 1 or more"),
    (["--set", "cluster.nodes=a,b", "--nodes", "3"], "cluster.nnodes: 3 is more nodes than the 2 hosts", "list 3 hosts"),
    (["--set", "cluster.nodes=a,b,a"], "cluster.nodes: nodes repeat: 'a' is listed 2 times", "list each host once"),
    (["--device", "gpu", "--strategy", "fsdp", "--gres", "tpu:v4"], "unknown GPU resource 'tpu'", "give gpu or gpu:TYPE"),
    (["--gres", "npu:8 --x"], "--gres 'npu:8 --x': not a GRES name", "give NAME or NAME:TYPE"),
    (["--time", "1 hour"], "--time '1 hour'", "use MINUTES"),
    (["--partition", "a\nb"], "not a Slurm partition name", "use letters"),
    (["--set", "cluster.ray_port=65535"], "cluster.ray_port 65535", "choose a ray_port at most 65534"),
]


@pytest.mark.parametrize(("args", "what", "fix"), BAD, ids=lambda v: v[1] if isinstance(v, list) else None)
def test_bad_input_one_line_nothing_written(tmp_path: Path, args: list[str], what: str, fix: str) -> None:
    from fault_support import one_line_error

    out = tmp_path / "job.sbatch"
    out.write_text("before\n")
    res = run_cli("export", "slurm", *BASE, *args, "-o", str(out), cwd=tmp_path)
    line = one_line_error(res)
    assert what in line and fix in line, line
    assert out.read_text() == "before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.sbatch"]


def test_planted_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    link = tmp_path / "job.sbatch"
    link.symlink_to(victim)
    refused = run_cli("export", "slurm", *BASE, "-o", str(link), cwd=tmp_path)  # issue 22 A9: only with --force
    assert refused.code == 2 and "--force" in refused.err and link.is_symlink(), refused.err
    res = run_cli("export", "slurm", *BASE, "-o", str(link), "--force", cwd=tmp_path)
    assert res.code == 0, res.err
    assert victim.read_text() == "keep\n"
    assert not link.is_symlink() and link.read_text().startswith("#!/usr/bin/env bash\n#SBATCH")
    assert os.stat(link).st_mode & 0o777 == 0o755


def test_spec_errors_write_nothing(tmp_path: Path) -> None:
    out = tmp_path / "job.sbatch"
    # TP 3 does not divide 8 devices: a spec finding (error), listed, and no script.
    res = run_cli("export", "slurm", *BASE, "--set", "train.tensor_parallel=3", "-o", str(out), cwd=tmp_path)
    assert res.code == 2 and "nothing was written" in res.err and not out.exists()


LAUNCH_BAD = [
    (["--backend", "pbs"], "--backend 'pbs': give local, slurm, kuberay or volcano"),
    (["--partition", "p1"], "--partition is a Slurm option: add --backend slurm"),
    (["--nodes", "2", "--dry-run"], "cluster.nnodes is 2 but no hosts are listed in cluster.nodes"),
    (["--nodes", "0", "--backend", "slurm"], "--nodes 0: a run needs at least one node"),
    (["--backend", "slurm", "--gres", "x y", "--yes"], "--gres 'x y': not a GRES name"),
    (["--backend", "slurm", "--set", "paths.logs=rel/logs", "--yes"], "paths.logs: must be an absolute path"),
]


@pytest.mark.parametrize(("args", "what"), LAUNCH_BAD, ids=lambda v: v[1] if isinstance(v, list) else None)
def test_launch_backend_bad_input(tmp_path: Path, args: list[str], what: str) -> None:
    from conftest import clean_env
    from fault_support import one_line_error

    env_state = tmp_path / "state"
    res = run_cli("launch", *BASE, "--set", "container.runtime=host", *args, cwd=tmp_path,
                  env=clean_env(VERLCTL_STATE_DIR=str(env_state), PATH="/usr/bin:/bin"))
    line = one_line_error(res)
    assert what in line, line
    assert not env_state.exists() or not any(env_state.rglob("run.json"))


def test_launch_slurm_dry_run_submits_nothing(tmp_path: Path) -> None:
    from conftest import clean_env

    res = run_cli("launch", *BASE, "--set", "container.runtime=host", "--backend", "slurm", "--dry-run",
                  "--set", "cluster.nnodes=2", cwd=tmp_path,
                  env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), PATH="/nonexistent"))
    assert res.code == 0, res.err
    assert "sbatch --parsable it: 2 node(s)" in res.out and not (tmp_path / "state").exists()


def test_launch_slurm_dry_run_json_is_one_object_and_submits_nothing(tmp_path: Path) -> None:
    import json

    from conftest import clean_env

    res = run_cli("launch", *BASE, "--set", "container.runtime=host", "--backend", "slurm", "--dry-run", "--json",
                  "--set", "cluster.nnodes=2", cwd=tmp_path,
                  env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), PATH="/nonexistent"))
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["outcome"] == "dry_run" and doc["run_id"] is None and doc["slurm_job"] is None
    assert any(a.startswith("sbatch --parsable it: 2 node(s)") for a in doc["actions"])
    assert "dry run" in res.err and not (tmp_path / "state").exists()
    # --json asks nothing: without --yes or --dry-run it is one error object, and nothing is submitted
    res = run_cli("launch", *BASE, "--set", "container.runtime=host", "--backend", "slurm", "--json",
                  "--set", "cluster.nnodes=2", cwd=tmp_path,
                  env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), PATH="/nonexistent"))
    assert res.code == 2 and "add --yes" in json.loads(res.out)["error"]["message"]
