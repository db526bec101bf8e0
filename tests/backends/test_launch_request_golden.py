"""``launch --dry-run --json`` prints the chosen backend's LaunchRequest (``backends/base.py``), golden-tested per
backend; the human dry-run listing is rendered from the same request.

Regenerate after an intended change: ``VERLCTL_REGEN_GOLDEN=1 .venv/bin/python -m pytest
tests/backends/test_launch_request_golden.py`` and review the diff of ``tests/golden/launch/``. The run id is fixed by
``VERLCTL_RUN_ID`` (dry runs only); the test's temporary directory is written ``<tmp>``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import TESTS, clean_env, run_cli

GOLDEN = TESTS / "golden" / "launch"
SPEC = ["--set", "paths.model=/m/Qwen3-8B", "--set", "paths.train_files=/d/t.parquet",
        "--set", "paths.val_files=/d/v.parquet", "--set", "paths.checkpoints=/shared/ckpt",
        "--set", "paths.logs=/shared/logs", "--set", "device=gpu", "--set", "logging.experiment=golden"]


def dry_run(tmp_path: Path, *args: str, **env: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    res = run_cli("launch", *SPEC, *args, "--dry-run", "--json", cwd=tmp_path,
                  env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), VERLCTL_RUN_ID="golden-run",
                                PATH="/nonexistent", COLUMNS="1000", **env))
    doc = json.loads(res.out.replace(str(tmp_path), "<tmp>"))
    return res.code, doc, res.err.replace(str(tmp_path), "<tmp>")


def check_golden(name: str, request: dict) -> None:  # type: ignore[type-arg]
    path = GOLDEN / f"{name}.json"
    text = json.dumps(request, indent=2, sort_keys=True) + "\n"
    if os.environ.get("VERLCTL_REGEN_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing: regenerate with VERLCTL_REGEN_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), f"{name}: the request differs from {path} (see the module doc)"


def check_listing(doc: dict, err: str) -> None:  # type: ignore[type-arg]
    """The human listing (stderr with --json) is the request's plan, numbered; `actions` is the same list."""
    texts = [a["text"] for a in doc["request"]["plan"]]
    assert texts and doc["actions"] == texts
    import re

    numbers = [int(m.group(1)) for m in re.finditer(r"^\s+(\d+)\. ", err.split("dry run", 1)[1], re.M)]
    assert numbers == list(range(1, len(texts) + 1))
    flat = " ".join(err.split())
    assert all(" ".join(t.split()) in flat for t in texts)


def test_the_host_backend_request(tmp_path: Path) -> None:
    code, doc, err = dry_run(tmp_path, "--set", "container.runtime=host")
    assert code == 2 and doc["outcome"] == "error"  # /m, /d do not exist here: the findings say so, not the request
    req = doc["request"]
    assert req["backend"] == "host" and req["containers"] == [] and "start_verl.sh" in req["files"]
    assert req["stages"][0] == "prepare_target" and req["stages"][-1] == "record" and "canary" not in req["stages"]
    check_golden("host", req)
    check_listing(doc, err)
    assert not (tmp_path / "state").exists()


def test_a_run_id_fixed_for_a_real_launch_is_refused(tmp_path: Path) -> None:
    res = run_cli("launch", *SPEC, "--set", "container.runtime=host", "--yes", cwd=tmp_path,
                  env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), VERLCTL_RUN_ID="golden-run"))
    assert res.code != 0 and "VERLCTL_RUN_ID fixes the run id of a dry run only" in res.err
    assert "Traceback" not in res.err and not (tmp_path / "state").exists()
    res = run_cli("launch", *SPEC, "--set", "container.runtime=host", "--dry-run", cwd=tmp_path,
                  env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), VERLCTL_RUN_ID="../x"))
    assert res.code != 0 and "VERLCTL_RUN_ID '../x'" in res.err and "Traceback" not in res.err


def test_a_launch_without_a_fixed_run_id_gets_a_new_one_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from verlctl.backends.base import RUN_ID_ENV, run_id_for

    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    first, second = run_id_for("grpo_Qwen3-8B", False), run_id_for("grpo_Qwen3-8B", True)
    assert first != second and all("grpo_Qwen3-8B" in r for r in (first, second)), (first, second)
    monkeypatch.setenv(RUN_ID_ENV, "golden-run")
    assert run_id_for("grpo_Qwen3-8B", True) == "golden-run"


def test_a_request_cannot_be_changed_once_made() -> None:
    """What ``launch --dry-run`` prints is what the stages walk: a request and its parts are immutable data (a
    backend that changed the plan it was handed would run something the dry run did not show)."""
    import dataclasses

    from verlctl.backends.base import Action, Change, ContainerRequest, LaunchRequest, MountRequest, Stage

    mount = MountRequest("/h", "/c", "rw", "the model")
    parts = [mount, ContainerRequest("local", "c", "img", False, None, True, (mount,), (), (), ()),
             Action(Stage.COPY, "copy"), LaunchRequest("local", "r", "here", "/w", "/w/s", "/w/l"),
             Change("out of memory")]
    for part in parts:
        name = dataclasses.fields(part)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(part, name, "changed")


@pytest.mark.docker
def test_the_docker_backend_request(tmp_path: Path, docker_engine) -> None:  # type: ignore[no-untyped-def]
    """A container to create from an image to pull: its mounts, devices and proxy variable names (not values)."""
    (tmp_path / "m" / "Qwen3-8B").mkdir(parents=True)
    (tmp_path / "d").mkdir()
    here = ["--set", f"paths.model={tmp_path}/m/Qwen3-8B", "--set", f"paths.train_files={tmp_path}/d/t.parquet",
            "--set", f"paths.val_files={tmp_path}/d/v.parquet"]
    code, doc, err = dry_run(tmp_path, *here, "--set", "container.runtime=docker", "--set",
                             "container.name=verlctl-golden-absent", "--set", "container.image=verlctl-golden/absent:0",
                             "--set", "container.proxy.https=http://proxy.example:3128", "--pull")
    req = doc["request"]
    assert req["backend"] == "docker", (code, err)
    (c,) = req["containers"]
    assert c["name"] == "verlctl-golden-absent" and c["pull"] and not c["exists"]
    assert c["env_names"] == ["HTTPS_PROXY", "https_proxy"] and "proxy.example" not in json.dumps(req["containers"])
    check_golden("docker", req)
    check_listing(doc, err)


def test_the_slurm_backend_request(tmp_path: Path) -> None:
    """The sbatch text of ``export slurm``, the scripts it runs, the job directory on shared storage."""
    code, doc, err = dry_run(tmp_path, "--backend", "slurm", "--set", "container.runtime=host",
                             "--set", "cluster.nnodes=2", "--partition", "gpu")
    assert code == 0, err
    req = doc["request"]
    assert req["backend"] == "slurm" and req["sbatch"].startswith("#!") and "#SBATCH --partition=gpu" in req["sbatch"]
    assert req["scripts_dir"] == "/shared/logs/verlctl-slurm/golden-run" and "start_verl.sh" in req["files"]
    assert req["stages"] == ["write_job", "submit", "verify", "record"]
    check_golden("slurm", req)
    check_listing(doc, err)
    assert not (tmp_path / "state").exists()


def test_the_kuberay_backend_request(tmp_path: Path) -> None:
    """The RayJob manifest ``export rayjob`` writes; the dry run writes nothing, the launch writes the manifest
    and names the kubectl apply; status is kubectl's."""
    manifest = tmp_path / "rayjob.yaml"
    code, doc, err = dry_run(tmp_path, "--backend", "kuberay", "--nodes", "2", "-o", str(manifest),
                             "--set", "kubernetes.pvc=ckpt-pvc")
    assert code == 0, err
    req = doc["request"]
    assert req["backend"] == "kuberay" and "kind: RayJob" in req["manifest"] and "start_verl.sh" in req["files"]
    assert req["stages"] == ["write_manifest", "submit"] and not manifest.exists()
    check_golden("kuberay", req)
    check_listing(doc, err)
    res = run_cli("launch", *SPEC, "--backend", "kuberay", "--nodes", "2", "-o", str(manifest), "--set",
                  "kubernetes.pvc=ckpt-pvc", cwd=tmp_path, env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state")))
    assert res.code == 0, res.err
    assert manifest.read_text(encoding="utf-8") == req["manifest"].replace("<tmp>", str(tmp_path))
    assert f"kubectl apply --filename={manifest}" in res.out and not (tmp_path / "state").exists()


@pytest.mark.parametrize("device", ["gpu", "npu"])
def test_the_volcano_backend_request(tmp_path: Path, device: str) -> None:
    """The Volcano Job ``export volcano`` writes (on NPU with MindCluster's labels and rank-table ConfigMap); the
    dry run writes nothing, the launch writes the manifest and names the kubectl apply."""
    manifest = tmp_path / "volcano-job.yaml"
    code, doc, err = dry_run(tmp_path, "--backend", "volcano", "--nodes", "2", "-o", str(manifest),
                             "--set", "kubernetes.pvc=ckpt-pvc", "--set", f"device={device}")
    assert code == 0, err
    req = doc["request"]
    assert req["backend"] == "volcano" and "kind: Job" in req["manifest"] and "start_verl.sh" in req["files"]
    assert ("rings-config-golden" in req["manifest"]) == (device == "npu")
    assert req["stages"] == ["write_manifest", "submit"] and not manifest.exists()
    check_golden(f"volcano-{device}", req)
    check_listing(doc, err)
    res = run_cli("launch", *SPEC, "--backend", "volcano", "--nodes", "2", "-o", str(manifest), "--set",
                  "kubernetes.pvc=ckpt-pvc", "--set", f"device={device}", cwd=tmp_path,
                  env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state")))
    assert res.code == 0, res.err
    assert manifest.read_text(encoding="utf-8") == req["manifest"].replace("<tmp>", str(tmp_path))
    assert f"kubectl apply --filename={manifest}" in res.out and not (tmp_path / "state").exists()


def test_kuberay_status_and_stop_are_kubectls() -> None:
    from verlctl.backends.base import NotOnBackend
    from verlctl.orchestrator.runs import run_named

    with pytest.raises(NotOnBackend, match="kubectl's"):
        run_named("kuberay").status("golden")
    with pytest.raises(NotOnBackend, match="kubectl's"):
        run_named("kuberay").stop("golden", False, 10.0, None)


@pytest.mark.parametrize(("args", "expected"), [
    (["--backend", "kuberay"], "--backend kuberay: give -o, the manifest file to write"),
    (["--backend", "kuberay", "-o", "x.yaml", "--watch"], "--watch is for --backend local"),
    (["--backend", "nomad"], "--backend 'nomad': give local, slurm, kuberay or volcano"),
])
def test_kuberay_bad_input_is_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    res = run_cli("launch", *SPEC, *args, cwd=tmp_path, env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state")))
    assert res.code != 0 and expected in res.err and "Traceback" not in res.err
    assert list(tmp_path.iterdir()) == []
