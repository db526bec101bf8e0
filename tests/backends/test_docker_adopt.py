"""A launch interrupted inside the engine's create call (the container exists, its id was never recorded) finds the
container by the run's label, so that the failed-launch clean-up can remove it; on the real engine. Only a single
container of exactly this run is adopted: none, two, or another run's label leave the record as it was."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from verlctl.backends.docker import DockerBackend
from verlctl.runtime import containers
from verlctl.runtime.records import RunRecord

import docker_support

pytestmark = [pytest.mark.docker]


def record(root: Path, run_id: str, runtime: str = "docker") -> RunRecord:
    return RunRecord(run_id=run_id, created_at=time.time(), runtime=runtime, workdir=str(root),
                     scripts_dir=str(root), run_log=str(root / "run.log"), train_log=str(root / "train.log"),
                     checkpoints=str(root / "ckpt"), experiment="exp", verl_version="0.9.1")


def backend(client: Any) -> DockerBackend:
    b = DockerBackend(console=None, report=None)
    b.client = client
    return b


def labelled(client: Any, test_image: str, run_id: str) -> Any:
    """A container as an interrupted create leaves it: created, never started (the harness's labels remove it at the
    session's end)."""
    return client.containers.create(test_image, ["sleep", "infinity"], name=f"verlctl-test-{secrets.token_hex(4)}",
                                    labels={docker_support.LABEL: "1", docker_support.SESSION_LABEL:
                                            docker_support.SESSION_ID, docker_support.OWNER_LABEL:
                                            docker_support.OWNER, **containers.labels_for(run_id, "exp")})


@pytest.fixture
def created(docker_engine: Any) -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for c in made:
        c.remove(force=True)


def test_the_one_container_with_the_runs_label_is_adopted(tmp_path: Path, docker_engine: Any, created: list[Any],
                                                          test_image: str) -> None:
    run_id = f"adopt-{secrets.token_hex(4)}"
    created.append(labelled(docker_engine, test_image, f"{run_id}-other"))  # another run's: never this one's
    mine = labelled(docker_engine, test_image, run_id)
    created.append(mine)
    assert docker_engine.api.inspect_container(mine.id)["State"]["Status"] == "created"
    rec = record(tmp_path, run_id)
    backend(docker_engine).adopt_created_container(rec)
    assert rec.container_id == mine.id and rec.container_created is True


@pytest.mark.parametrize("count", [0, 2])
def test_no_container_or_two_with_the_runs_label_adopt_nothing(tmp_path: Path, docker_engine: Any,
                                                              created: list[Any], test_image: str,
                                                              count: int) -> None:
    run_id = f"adopt-{secrets.token_hex(4)}"
    for _ in range(count):
        created.append(labelled(docker_engine, test_image, run_id))
    rec = record(tmp_path, run_id)
    backend(docker_engine).adopt_created_container(rec)
    assert rec.container_id is None and rec.container_created is False


def test_a_recorded_container_or_a_host_run_is_left_as_it_is(tmp_path: Path, docker_engine: Any,
                                                             created: list[Any], test_image: str) -> None:
    run_id = f"adopt-{secrets.token_hex(4)}"
    created.append(labelled(docker_engine, test_image, run_id))
    rec = record(tmp_path, run_id)
    rec.container_id = "recorded-id"
    backend(docker_engine).adopt_created_container(rec)
    assert rec.container_id == "recorded-id" and rec.container_created is False
    host = record(tmp_path, run_id, runtime="host")
    backend(docker_engine).adopt_created_container(host)
    assert host.container_id is None and host.container_created is False
    unconnected = record(tmp_path, run_id)
    backend(None).adopt_created_container(unconnected)
    assert unconnected.container_id is None
