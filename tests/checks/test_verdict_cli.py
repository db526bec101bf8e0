"""Issue 21 at the command line, with nothing replaced: each finding, reproduced as the reviews did, through
the real commands (a subprocess each) on real files and, where marked, the real Docker engine.

* G4: `plan` reports PP over the model's layers and uniform recompute per stage (it has the config.json);
* N5: `launch --dry-run` lists every blocking problem, then the actions;
* N1: `check` reports the missing /dev/davinciN that `launch` refuses;
* U2: `launch --dry-run` refuses a dataset smaller than one batch;
* U4: `quickstart --dry-run` refuses a colleague's container (no mounts) as the real run does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from conftest import ROOT, clean_env
from launch_support import write_model, write_parquet


def verlctl(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "verlctl", *args], capture_output=True, text=True, timeout=300,
                          env=env or clean_env(), cwd=str(cwd or ROOT))
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"rc {proc.returncode}, no JSON: {proc.stdout[-2000:]} {proc.stderr[-2000:]}") from None
    return proc.returncode, doc


def errors(doc: dict[str, Any]) -> set[str]:
    return {f["code"] for f in doc.get("findings", []) if f["severity"] == "error"}


def model_dir(root: Path, **config: Any) -> Path:
    d = root / "models" / "Qwen3-8B-shape"
    write_model(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update({"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, **config})
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def spec_file(tmp: Path, **values: Any) -> Path:
    nested: dict[str, Any] = {}
    for path, value in values.items():
        node = nested
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    f = tmp / "spec.yaml"
    f.write_text(yaml.safe_dump(nested))
    return f


def run_files(tmp: Path, rows: int = 64) -> dict[str, Any]:
    (tmp / "data").mkdir(exist_ok=True)
    write_parquet(tmp / "data" / "train.parquet", rows=rows)
    write_parquet(tmp / "data" / "val.parquet")
    return {"paths.model": str(model_dir(tmp)), "paths.train_files": [str(tmp / "data" / "train.parquet")],
            "paths.val_files": [str(tmp / "data" / "val.parquet")], "paths.checkpoints": str(tmp / "ckpt"),
            "paths.logs": str(tmp / "logs"), "logging.swanlab.enabled": False}


def test_plan_reports_pp_over_layers_and_uniform_recompute_per_stage(tmp_path: Path) -> None:
    """G4 (fidelity-turn3): 36 layers over PP 8, and 18 layers per stage with recompute_num_layers 7."""
    files = run_files(tmp_path)
    rc, doc = verlctl("plan", "-c", str(spec_file(tmp_path, **files)), "--json",
                      "--set", "train.tensor_parallel=1", "--set", "train.pipeline_parallel=8")
    assert rc == 2 and "model_layers_pp" in errors(doc), doc["findings"]
    rc, doc = verlctl("plan", "-c", str(spec_file(tmp_path, **files)), "--json", "--mask", "1100100",
                      "--set", "train.tensor_parallel=1", "--set", "train.pipeline_parallel=2",
                      "--set", "features.recompute_method=uniform", "--set", "features.recompute_num_layers=7")
    assert rc == 2 and "model_recompute_layers" in errors(doc), doc["findings"]
    rc, doc = verlctl("plan", "-c", str(spec_file(tmp_path, **files)), "--json", "--mask", "1100100",
                      "--set", "train.tensor_parallel=1", "--set", "train.pipeline_parallel=2",
                      "--set", "features.recompute_method=uniform", "--set", "features.recompute_num_layers=6")
    assert not {"model_layers_pp", "model_recompute_layers"} & errors(doc), doc["findings"]
    assert doc["not_checked"], "plan says which rules it could not run"
    assert any(n["need"] == "datasets" for n in doc["not_checked"])


def test_plan_says_what_it_did_not_check_without_the_model(tmp_path: Path) -> None:
    files = {**run_files(tmp_path), "paths.model": str(tmp_path / "elsewhere")}
    rc, doc = verlctl("plan", "-c", str(spec_file(tmp_path, **files)), "--json",
                      "--set", "train.tensor_parallel=1", "--set", "train.pipeline_parallel=8")
    assert rc == 0, doc["findings"]  # the model is not here: plan cannot know its layers, and says so
    rules = {n["rule"] for n in doc["not_checked"] if n["need"] == "model"}
    assert {"model_fit", "memory_fit", "max_model_len"} <= rules


def test_launch_dry_run_lists_every_blocking_problem_then_the_actions(tmp_path: Path) -> None:
    """N5: the dry run is check plus the action list (here: the model, both datasets, and the batch)."""
    spec = spec_file(tmp_path, **{"paths.model": str(tmp_path / "no-model"),
                                  "paths.train_files": [str(tmp_path / "no-train.parquet")],
                                  "paths.val_files": [str(tmp_path / "no-val.parquet")],
                                  "paths.checkpoints": str(tmp_path / "ckpt"), "paths.logs": str(tmp_path / "logs"),
                                  "container.runtime": "host", "logging.swanlab.enabled": False})
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"))
    rc, doc = verlctl("launch", "-c", str(spec), "--dry-run", "--json", env=env)
    assert rc == 2
    assert {"model_missing", "dataset_missing"} <= errors(doc), doc["findings"]
    assert sum(f["code"] == "dataset_missing" for f in doc["findings"]) == 2
    assert doc["actions"] and any("verify within" in a for a in doc["actions"])
    _, check = verlctl("check", "-c", str(spec), "--json", env=env)
    assert errors(check) == errors(doc)


def test_launch_dry_run_refuses_a_dataset_smaller_than_one_batch(tmp_path: Path) -> None:
    """U2: 30 rows, batch 64 ('Train dataloader is empty!'), as check does."""
    files = {**run_files(tmp_path, rows=30), "container.runtime": "host", "train.train_batch_size": 64}
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"))
    rc, doc = verlctl("launch", "-c", str(spec_file(tmp_path, **files)), "--dry-run", "--json", env=env)
    assert rc == 2 and "dataset_smaller_than_batch" in errors(doc), doc["findings"]
    files["train.train_batch_size"] = 30
    files["train.mini_batch_size"] = 30
    rc, doc = verlctl("launch", "-c", str(spec_file(tmp_path, **files)), "--dry-run", "--json", env=env)
    assert "dataset_smaller_than_batch" not in errors(doc), doc["findings"]


def test_check_reports_missing_device_nodes_that_launch_refuses(tmp_path: Path) -> None:
    """N1: /dev/davinci4095 exists on no host; check says so as launch does (an error)."""
    files = {**run_files(tmp_path), "cluster.devices": [4095], "device": "npu", "container.runtime": "docker"}
    rc, doc = verlctl("check", "-c", str(spec_file(tmp_path, **files)), "--json", "--budget", "5",
                      env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state")))
    assert rc == 2 and "device_nodes_missing" in errors(doc), doc["findings"]
    nodes = next(f for f in doc["findings"] if f["code"] == "device_nodes_missing")
    assert "/dev/davinci4095" in nodes["message"] and nodes["field"] == "cluster.devices"
    files["container.privileged"] = True
    rc, doc = verlctl("check", "-c", str(spec_file(tmp_path, **files)), "--json", "--budget", "5",
                      env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state")))
    assert "device_nodes_missing" not in errors(doc)


def test_quickstart_dry_run_refuses_a_colleagues_container_as_the_real_run_does(
        tmp_path: Path, container_factory: Any, test_image: str) -> None:  # fmt: skip
    """U4: CONTAINER names a stopped container of another image with none of the mounts: the dry run lists the
    missing mounts (errors), not 'reuse container … start container …' with exit 0."""
    colleague = container_factory(test_image, ["true"], name="colleague")
    colleague.stop(timeout=5)
    files = run_files(tmp_path)
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), CONTAINER=colleague.name,
                    MODEL_PATH=files["paths.model"], TRAIN_FILE=files["paths.train_files"][0],
                    VAL_FILE=files["paths.val_files"][0], VERLCTL_PATHS__CHECKPOINTS=files["paths.checkpoints"],
                    VERLCTL_PATHS__LOGS=files["paths.logs"], VERLCTL_CLUSTER__DEVICES="0",
                    VERLCTL_CONTAINER__PRIVILEGED="true")
    rc, doc = verlctl("quickstart", "--dry-run", "--json", "--no-watch", env=env, cwd=tmp_path)
    assert rc == 2, doc
    assert "container_mount_missing" in errors(doc), doc
    assert any(f"reuse container {colleague.name}" in a for a in doc["actions"])
