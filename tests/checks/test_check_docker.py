"""`verlctl check` against the real Docker engine and the locally built test image: the image, the container's
state and mounts, and the checks run inside the container (parquet schemas without pyarrow on the host,
checkpoints under the container work dir)."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from test_check_cli import NO_PYARROW, run_check_cli
from test_check_machine import write_parquet_without_prompt
from verlctl.checks.findings import Finding, Severity
from verlctl.checks.machine_checks import machine_findings
from verlctl.orchestrator.machine_facts import collect_facts
from verlctl.spec.resolve import load_spec

from conftest import clean_env
from launch_support import write_run_files

pytestmark = pytest.mark.docker


def files(tmp_path: Path) -> dict[str, Any]:
    return {
        **write_run_files(tmp_path),
        "train.tensor_parallel": 2,
        "train.pipeline_parallel": 1,
    }


def check(**flags: Any) -> list[Finding]:
    resolved = load_spec(None, flags=flags, environ={})
    return machine_findings(resolved, collect_facts(resolved, budget_s=20))


def docker_findings(findings: list[Finding]) -> list[tuple[str, Severity, str | None]]:
    fields = ("container.", "paths.")
    return sorted((f.code, f.severity, f.field) for f in findings if (f.field or "").startswith(fields))


def absent_name() -> str:
    return f"verlctl-test-check-absent-{secrets.token_hex(4)}"


def test_missing_image_is_an_error_unless_pulling_is_configured(tmp_path: Path, docker_engine: Any) -> None:
    base = {**files(tmp_path), "paths.checkpoints": str(tmp_path / "ckpt"), "container.name": absent_name(),
            "container.image": "verlctl-test-absent-image:none"}
    findings = check(**base)
    image = [f for f in findings if f.code == "image_missing"]
    assert len(image) == 1 and (image[0].severity, image[0].field) == (Severity.ERROR, "container.image")
    assert image[0].message == "image verlctl-test-absent-image:none is not present locally and pulling is not configured"
    assert "container.pull: true" in (image[0].hint or "")
    assert ("container_absent", Severity.INFO, "container.name") in docker_findings(findings)
    pulled = check(**base, **{"container.pull": True})
    assert [(f.code, f.severity) for f in pulled if f.field == "container.image"] == [("image_pull", Severity.INFO)]


def test_present_image_and_absent_container(tmp_path: Path, docker_engine: Any, test_image: str) -> None:
    findings = check(**files(tmp_path), **{"container.name": absent_name(), "container.image": test_image,
                                           "paths.checkpoints": "/verl/checkpoints/exp"})
    # Checkpoints under the container work dir, inside a container that does not exist yet.
    assert docker_findings(findings) == [
        ("checkpoint_unchecked", Severity.WARNING, "paths.checkpoints"),
        ("container_absent", Severity.INFO, "container.name"),
    ]
    unchecked = next(f for f in findings if f.code == "checkpoint_unchecked")
    assert "set paths.checkpoints to a host directory" in (unchecked.hint or "")


def test_existing_container_state_and_the_mounts_it_lacks(
    tmp_path: Path, container_factory: Any, test_image: str
) -> None:
    flags = {**files(tmp_path), "paths.checkpoints": str(tmp_path / "ckpt")}
    data = str(tmp_path / "data")
    container = container_factory(test_image, volumes={data: {"bind": data, "mode": "ro"}})
    findings = check(**flags, **{"container.name": container.name, "container.image": test_image})
    assert docker_findings(findings) == [
        ("container_mount_missing", Severity.ERROR, "paths.checkpoints"),
        ("container_mount_missing", Severity.ERROR, "paths.logs"),  # a host directory by default
        ("container_mount_missing", Severity.ERROR, "paths.model"),
        ("container_state", Severity.INFO, "container.name"),
    ]
    state = next(f for f in findings if f.code == "container_state")
    assert state.message == f"container {container.name} exists (running, image {test_image}): launch reuses it"
    mount = next(f for f in findings if f.code == "container_mount_missing" and f.field == "paths.model")
    assert mount.message == (
        f"container {container.name} does not mount {flags['paths.model']}, so training in it cannot see paths.model"
    )
    # The spec names another image explicitly: launch refuses to reuse the container.
    other = check(**flags, **{"container.name": container.name, "container.image": "verlctl-test-absent-image:none"})
    assert [(f.code, f.severity) for f in other if f.field == "container.image"] == [("container_image", Severity.ERROR)]


def wait_for_state(container: Any, state: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        container.reload()
        if container.status == state:
            return
        time.sleep(0.2)
    raise AssertionError(f"container {container.name} is {container.status}, not {state}")


def write_spec_file(tmp_path: Path, flags: dict[str, Any]) -> Path:
    spec: dict[str, Any] = {}
    for key, value in flags.items():
        section, _, leaf = key.rpartition(".")
        node = spec
        for part in section.split(".") if section else []:
            node = node.setdefault(part, {})
        node[leaf] = value
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_without_pyarrow_on_the_host_the_schema_is_checked_in_the_running_container(
    tmp_path: Path, container_factory: Any, test_image: str
) -> None:
    flags = files(tmp_path)
    write_parquet_without_prompt(Path(flags["paths.train_files"]))
    data = str(tmp_path / "data")
    container = container_factory(test_image, volumes={data: {"bind": data, "mode": "ro"}})
    spec = write_spec_file(tmp_path, {**flags, "container.name": container.name, "container.image": test_image,
                                      "paths.checkpoints": "/verl/checkpoints/exp", "paths.logs": "/verl/logs"})
    res = run_check_cli("-c", str(spec), "--json", env=clean_env(), block=NO_PYARROW)
    doc = res.json()
    prompt = [f for f in doc["findings"] if f["code"] == "dataset.prompt_missing"]
    assert len(prompt) == 1, res.out + res.err
    assert prompt[0]["field"] == "paths.train_files"
    assert prompt[0]["message"].endswith(f"(checked in container {container.name})")
    assert not [f for f in doc["findings"] if f["code"] == "dataset_schema_skipped"]
    datasets = doc["machine"]["datasets"]
    assert [(d["checked_in"], d["verl_ok"]) for d in datasets] == [("container", False), ("container", True)]
    # A checkpoint dir under the container work dir is probed in the container, for real.
    ckpt = doc["machine"]["checkpoints"]
    assert (ckpt["checked_in"], ckpt["writable"]) == (f"container {container.name}", True)
    assert ckpt["path"].startswith("/verl/checkpoints/")


def test_a_stopped_container_cannot_stand_in_for_pyarrow(tmp_path: Path, container_factory: Any, test_image: str) -> None:
    flags = files(tmp_path)
    data = str(tmp_path / "data")
    container = container_factory(test_image, ["true"], volumes={data: {"bind": data, "mode": "ro"}})
    wait_for_state(container, "exited")
    spec = write_spec_file(tmp_path, {**flags, "container.name": container.name, "container.image": test_image})
    res = run_check_cli("-c", str(spec), "--json", env=clean_env(), block=NO_PYARROW)
    findings = {f["code"]: f for f in res.json()["findings"]}
    assert findings["container_state"]["message"].endswith("launch reuses it and starts it")
    skipped = findings["dataset_schema_skipped"]
    assert f"container {container.name} is not running (exited)" in skipped["message"]


def test_files_the_running_container_does_not_mount_are_not_checked_in_it(
    tmp_path: Path, container_factory: Any, test_image: str
) -> None:
    flags = files(tmp_path)
    container = container_factory(test_image)
    spec = write_spec_file(tmp_path, {**flags, "container.name": container.name, "container.image": test_image})
    res = run_check_cli("-c", str(spec), "--json", env=clean_env(), block=NO_PYARROW)
    found = [(f["code"], f["field"]) for f in res.json()["findings"] if f["field"] in ("paths.train_files", "paths.val_files")]
    assert sorted(found) == [
        ("container_mount_missing", "paths.train_files"),
        ("container_mount_missing", "paths.val_files"),
        ("dataset_schema_unchecked", "paths.train_files"),
        ("dataset_schema_unchecked", "paths.val_files"),
    ]
    unchecked = next(f for f in res.json()["findings"] if f["code"] == "dataset_schema_unchecked")
    assert unchecked["message"].endswith(f"no pyarrow here, and container {container.name} does not mount it")


def test_the_python_and_ray_of_the_running_container_are_checked_against_verl(
    tmp_path: Path, container_factory: Any, test_image: str
) -> None:
    """Issue 13: the Python and Ray that python3 finds in the spec's running container are read there and held
    to what the targeted verl requires (its wheel's Requires-Python and ray[default]>=2.41.0)."""
    container = container_factory(test_image)
    resolved = load_spec(None, flags={**files(tmp_path), "container.name": container.name,
                                      "container.image": test_image, "verl_version": "0.7.0"}, environ={})
    facts = collect_facts(resolved, budget_s=20)
    real = container_factory.exec(container, ["python3", "-c", "import sys, ray; print('%d.%d.%d' % "
                                              "sys.version_info[:3], ray.__version__)"]).stdout.split()
    assert facts.image_versions is not None
    assert (facts.image_versions.python, facts.image_versions.ray) == tuple(real)
    assert facts.image_versions.where == f"container {container.name}"
    assert [f.code for f in machine_findings(resolved, facts) if f.code.startswith("image_")] == []
    # The same container once its Ray distribution is gone (its metadata moved aside): an error naming the fix.
    hide = "d=$(python3 -c 'import importlib.metadata as m; print(m.distribution(\"ray\")._path)'); mv \"$d\" \"$d.x\""
    assert container_factory.exec(container, ["bash", "-c", hide]).exit_code == 0
    facts = collect_facts(resolved, budget_s=20)
    assert facts.image_versions is not None and facts.image_versions.ray is None
    (missing,) = [f for f in machine_findings(resolved, facts) if f.code.startswith("image_")]
    assert (missing.code, missing.severity, missing.field) == ("image_ray_missing", Severity.ERROR, "container.image")
    assert f"container {container.name}" in missing.message and "ray[default]>=2.41.0" in (missing.hint or "")
