"""Found by the real-verl runs (tests/realverl_runs/test_realverl.py): verl's entry point calls ``ray.init()`` with no
address, and start_verl.sh's Ray head keeps its files in its own temp dir, so without ``RAY_ADDRESS`` real verl
started a private local Ray beside the head (``ValueError: Total available GPUs 0 is less than total desired
GPUs 1`` on the CPU image; on an NPU host a cluster with no NPU resource). The stand-in trainer joined with
``ray.init(address="auto")`` and never showed it. The training step must be pointed at the head."""

from __future__ import annotations

from pathlib import Path

from conftest import BASE_PATHS
from scripts_harness import render_from, run_start_script


def test_the_training_step_is_pointed_at_the_ray_head_that_start_verl_started(tmp_path: Path) -> None:
    workdir = tmp_path / "verl"
    (workdir / "recipe" / "dapo").mkdir(parents=True)
    (workdir / "recipe" / "dapo" / "main_dapo.py").write_text("# recipe entry of a verl v0.7.0 checkout\n")
    rendered = render_from({**BASE_PATHS, "container.workdir": str(workdir), "paths.logs": str(tmp_path / "l"),
                            "cluster.ray_port": 26399})
    rendered.write(tmp_path / "s")
    rec = run_start_script(tmp_path / "s", tmp_path / "rec", ["RAY_ADDRESS"])
    assert rec.proc.returncode == 0, rec.proc.stdout + rec.proc.stderr
    addr = rec.env["RAY_ADDRESS"]
    host, _, port = addr.rpartition(":")
    assert port == "26399" and host and host != "<unset>", addr
    # the same address the head was started on and waited for
    assert f"Ray head at {addr}," in rec.proc.stdout
