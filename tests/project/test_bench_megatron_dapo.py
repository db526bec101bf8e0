"""bench/megatron_dapo_gpu.sh (run by hand on a GPU machine, not in CI) stays runnable: its spec is one that
verlctl accepts and renders as verl 0.9.1's Megatron DAPO command, and a machine that lacks a requirement is told
which, in one line, before anything is written or started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from docker_support import REPO_ROOT
from launch_support import write_model, write_parquet

SCRIPT = REPO_ROOT / "bench" / "megatron_dapo_gpu.sh"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), "--python", sys.executable, *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_plan_only_writes_a_spec_verlctl_renders_as_megatron_dapo(tmp_path: Path) -> None:
    write_model(tmp_path / "model")
    write_parquet(tmp_path / "train.parquet")
    write_parquet(tmp_path / "val.parquet")
    out = tmp_path / "out"
    proc = run("--plan-only", "--out", str(out), "--device", "3", "--model", str(tmp_path / "model"),
               "--train", str(tmp_path / "train.parquet"), "--val", str(tmp_path / "val.parquet"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    script = (out / "plan" / "run_training.sh").read_text()
    assert "dapo / sync / megatron / gpu on verl 0.9.1" in script, script[:500]
    for line in ("model_engine=megatron", "reward.reward_manager.name=dapo",
                 f"reward.custom_reward_function.path={out}/reward.py",
                 "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1"):
        assert line in script, line
    resolved = yaml.safe_load((out / "plan" / "spec.resolved.yaml").read_text())
    assert resolved["container"]["runtime"] == "host" and resolved["cluster"]["devices"] == [3], resolved
    assert (resolved["algorithm"], resolved["strategy"], resolved["device"]) == ("dapo", "megatron", "gpu")
    assert (out / "reward.py").read_text() == (REPO_ROOT / "src/verlctl/demo/reward.py").read_text()


def test_a_missing_requirement_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run("--out", str(out), cwd=tmp_path)
    # this test environment has verlctl but not verl's megatron extra (nor, usually, a GPU)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    refusals = [ln for ln in proc.stderr.splitlines() if ln.startswith("megatron_dapo_gpu: ")]
    assert len(refusals) == 1 and proc.stderr.rstrip().endswith(refusals[0]), proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
    proc = run("--device", "x", cwd=tmp_path)
    assert proc.returncode == 2 and "--device: a GPU index" in proc.stderr, proc.stderr
    proc = run("--model", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "--model, --train and --val go together" in proc.stderr, proc.stderr
