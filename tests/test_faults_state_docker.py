"""Faults of the state dir and the log dir on the real engine (issue 22, A16; the fault matrix of
tests/test_faults_docker.py, same style): a state dir that fills up during `launch` is one error line, and
the launch is undone: the container it created removed, the 0600 env file gone, no torn script copy in the
record. The training is the stand-in trainer (tests/standin, a TEST DOUBLE for verl's training step); Docker,
Ray, the mounts and the record are real."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from launch_support import LaunchEnv, remove_container

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("ray")]


def mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {res.stderr.strip()}")


def test_state_dir_full_during_launch_undoes_the_launch(launch_env: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    mount_tmpfs(launch_env.state, "12k")  # room for run.json and the first events, not for the record's copies
    try:
        res = launch_env.cli("launch", "-c", str(launch_env.spec_file), "--yes")
        text = res.out + res.err
        assert res.code != 0, text
        assert "Traceback" not in text, text
        errors = [ln for ln in res.err.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1 and "No space left on device" in errors[0], res.err
        assert "the launch is undone" in errors[0] and "removed container" in res.out, text
        # Nothing of the launch is left running or holding the key.
        left = docker_engine.containers.list(all=True, filters={"name": launch_env.name})
        assert not [c for c in left if c.name == launch_env.name], [c.status for c in left]
        runs = list((launch_env.state / "runs").iterdir()) if (launch_env.state / "runs").exists() else []
        for d in runs:
            for name in ("start_verl.sh", "run_training.sh", "spec.resolved.yaml"):
                p = d / name
                assert not p.exists() or p.stat().st_size > 0, name  # written whole or not at all
            for p in d.iterdir():
                assert not p.name.startswith("."), p  # no temporary file left
            doc = json.loads((d / "run.json").read_text())
            assert doc["run_id"] == d.name
    finally:
        remove_container(docker_engine, launch_env.name)
        subprocess.run(["umount", "-l", str(launch_env.state)], check=False)
