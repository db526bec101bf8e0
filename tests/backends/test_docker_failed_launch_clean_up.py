"""The failed-launch clean-up of the local backend, on the real engine. A launch interrupted inside the engine's
create call (the container exists, its id was never recorded) finds the container by the run's label, so that the
clean-up can remove it: only a single container of exactly this run is adopted (none, two, or another run's label
leave the record as it was). The clean-up removes the containers the launch created (the head's, a worker's) and the
key file, keeps a container it reused, and holds no executor into a container it removed, so a second clean-up (an
interrupt during the first) still reaches the head and warns about nothing."""

from __future__ import annotations

import contextlib
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
        with contextlib.suppress(Exception):  # the clean-up under test may have removed it
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


# ---- the failed-launch clean-up: what it removes, and whether a second clean-up still reaches the head -------------
def started(client: Any, test_image: str, run_id: str) -> Any:
    c = labelled(client, test_image, run_id)
    c.start()
    c.reload()
    return c


def plant_key_file(ex: Any, scripts_dir: str) -> None:
    from verlctl.render.render import ENV_FILE

    res = ex.run(["sh", "-c", 'mkdir -p -- "$1" && echo SECRET=x > "$1/$2"', "sh", scripts_dir, ENV_FILE], timeout=30)
    assert res.code == 0, res.err


def key_file_there(ex: Any, scripts_dir: str) -> bool:
    from verlctl.render.render import ENV_FILE

    return ex.run(["test", "-e", f"{scripts_dir}/{ENV_FILE}"], timeout=30).code == 0


def test_a_failed_launch_removes_the_worker_container_it_created_and_a_second_clean_up_still_reaches_the_head(
        tmp_path: Path, docker_engine: Any, created: list[Any], test_image: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A head container the launch reused and a worker's container it created (a multi-node launch that failed):
    the clean-up removes the worker's container and the key file in the head, keeps the head's container, and
    the head's executor stays, so that a second clean-up (an interrupt during the first) still removes a key file
    from the head. Nothing is printed as a warning."""
    from io import StringIO

    from rich.console import Console

    from verlctl.backends.docker import NodeTarget
    from verlctl.orchestrator.launch import Reporter
    from verlctl.runtime.executor import DockerExecutor
    from verlctl.runtime.records import NodeHandle

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    run_id = f"clean-{secrets.token_hex(4)}"
    head, worker = started(docker_engine, test_image, run_id), started(docker_engine, test_image, run_id)
    created += [head, worker]
    out = StringIO()
    b = DockerBackend(console=None, report=Reporter(Console(file=out, width=200), quiet=True))
    b.client = docker_engine
    b.executor = head_ex = DockerExecutor(docker_engine, head.id, head.name)
    worker_ex = DockerExecutor(docker_engine, worker.id, worker.name)
    b.workers = [NodeTarget("10.0.0.2", docker_engine, None, worker_ex)]
    rec = record(tmp_path, run_id)
    rec.scripts_dir = "/tmp/verlctl-scripts"
    rec.container_id, rec.container_created = head.id, False
    rec.workers = [NodeHandle(address="10.0.0.2", container_id=worker.id, container_name=worker.name,
                              container_created=True)]
    plant_key_file(head_ex, rec.scripts_dir)

    done = b.clean_up_failed(rec)

    assert done == {"removed_containers": [worker.name]}
    assert containers.find_container(docker_engine, worker.id) is None
    assert containers.find_container(docker_engine, head.id) is not None
    assert not key_file_there(head_ex, rec.scripts_dir)
    assert b.executor is head_ex  # the head's container is still there: later steps reach it
    plant_key_file(head_ex, rec.scripts_dir)
    assert b.clean_up_failed(rec) == {}
    assert not key_file_there(head_ex, rec.scripts_dir)
    assert "warning" not in out.getvalue(), out.getvalue()


def test_a_failed_launch_removes_the_head_container_it_created_and_a_second_clean_up_is_quiet(
        tmp_path: Path, docker_engine: Any, created: list[Any], test_image: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The head's container created by the failed launch is removed; the backend holds no executor into it any more,
    so a second clean-up (an interrupt during the first) neither acts on it nor warns about a missing container."""
    from io import StringIO

    from rich.console import Console

    from verlctl.orchestrator.launch import Reporter
    from verlctl.runtime.executor import DockerExecutor

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    run_id = f"clean-{secrets.token_hex(4)}"
    head = started(docker_engine, test_image, run_id)
    created.append(head)
    out = StringIO()
    b = DockerBackend(console=None, report=Reporter(Console(file=out, width=200), quiet=True))
    b.client = docker_engine
    b.executor = DockerExecutor(docker_engine, head.id, head.name)
    rec = record(tmp_path, run_id)
    rec.container_id, rec.container_created = head.id, True

    assert b.clean_up_failed(rec) == {"removed_containers": [head.name]}
    assert containers.find_container(docker_engine, head.id) is None and b.executor is None
    assert b.clean_up_failed(rec) == {}
    assert "warning" not in out.getvalue(), out.getvalue()
