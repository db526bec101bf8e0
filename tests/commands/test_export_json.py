"""``export slurm --json`` and ``export rayjob --json``: one JSON object on stdout, as every reporting command
prints, for a written job, a printed one, a dry run and a refused spec."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli_many

BASE = ["--set", "paths.model=/m/Qwen3-8B", "--set", "paths.train_files=/d/t.parquet",
        "--set", "paths.val_files=/d/v.parquet"]


def test_export_json_objects(tmp_path: Path) -> None:
    job, manifest = tmp_path / "job.sbatch", tmp_path / "rj.yaml"
    printed, written, bad, rj, rj_dry, rj_bad = run_cli_many([
        ["export", "slurm", *BASE, "--json"],
        ["export", "slurm", *BASE, "--nodes", "2", "-o", str(job), "--json"],
        ["export", "slurm", *BASE, "--set", "train.tensor_parallel=3", "-o", str(tmp_path / "no"), "--json"],
        ["export", "rayjob", *BASE, "--pvc", "ckpt", "-o", str(manifest), "--json"],
        ["export", "rayjob", *BASE, "--pvc", "ckpt", "-o", str(tmp_path / "dry.yaml"), "--dry-run", "--json"],
        ["export", "rayjob", *BASE, "--set", "train.tensor_parallel=3", "--pvc", "c", "-o", str(tmp_path / "x"),
         "--json"],
    ])
    doc = json.loads(printed.out)
    assert printed.code == 0 and doc["written"] is None and doc["script"].startswith("#!/usr/bin/env bash")
    assert {f["code"] for f in doc["findings"]} >= {"checkpoints_after_last_step"}

    doc = json.loads(written.out)
    assert written.code == 0 and doc["written"] == str(job) and doc["script"] is None and doc["nodes"] == 2
    assert job.read_text().startswith("#!/usr/bin/env bash")

    doc = json.loads(bad.out)
    assert bad.code == 2 and doc["written"] is None and doc["error"]["exit_code"] == 2
    assert "parallel_divisibility" in {f["code"] for f in doc["findings"]}
    assert not (tmp_path / "no").exists()

    doc = json.loads(rj.out)
    assert rj.code == 0 and doc["written"] == str(manifest) and manifest.is_file()
    assert doc["apply"] == f"kubectl apply --filename={manifest}" and "RayJob" in doc["kinds"]
    assert "wrote" in rj.err  # the human lines go to stderr, stdout is the one object

    doc = json.loads(rj_dry.out)
    assert rj_dry.code == 0 and doc["dry_run"] is True and doc["written"] is None
    assert not (tmp_path / "dry.yaml").exists()

    doc = json.loads(rj_bad.out)
    assert rj_bad.code == 2 and "parallel_divisibility" in {f["code"] for f in doc["findings"]}
