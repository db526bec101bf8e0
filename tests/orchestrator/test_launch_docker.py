"""`verlctl launch` / status / stop on a real Docker engine with the locally built test image.

The image holds real Ray, real Hydra, the real verl 0.7.0 config and swanlab; the training step is the
stand-in trainer (tests/standin, a test double) and `npu-smi` is a test double printing a real capture.
All Ray-starting tests share one xdist group: Ray heads on the host network must not run side by side.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from docker_support import ps_in
from launch_support import LaunchEnv

pytestmark = pytest.mark.docker


@pytest.fixture
def lenv(launch_env: LaunchEnv) -> LaunchEnv:
    return launch_env


def wait_for(pred, timeout: float = 120, every: float = 1.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")


def status(env: LaunchEnv) -> dict:
    res = env.cli("status", "--json")
    assert res.code == 0, res.err
    return json.loads(res.out)


def test_launch_new_container_run_status_stop_then_reuse(lenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    lenv.spec["train"]["steps"] = 40
    lenv.spec["env"]["VERLCTL_STANDIN_STEP_SECONDS"] = "1"
    res = lenv.cli("launch", "-c", str(lenv.spec_file), "--yes", "--verify-timeout", "180")
    assert res.code == 0, res.out + res.err
    assert "create container" in res.out and "training is running" in res.out
    # the verdict looked into the image (a throw-away container) for this very command: not a second time
    out = " ".join(res.out.split())
    assert f"preflight: looked up before launch in image {lenv.image} (a throw-away container)" in out, out
    assert "preflight: compose" not in out

    container = docker_engine.containers.get(lenv.name)
    assert container.attrs["HostConfig"]["NetworkMode"] == "host"
    assert container.attrs["HostConfig"]["IpcMode"] == "host"
    assert container.attrs["HostConfig"]["Init"] is True
    devices = {d["PathOnHost"] for d in container.attrs["HostConfig"]["Devices"]}
    assert {f"/dev/davinci{i}" for i in range(8)} | {"/dev/davinci_manager"} <= devices
    mounts = {m["Destination"] for m in container.attrs["Mounts"]}
    assert {lenv.spec["paths"]["model"], str(lenv.root / "data"), lenv.spec["paths"]["checkpoints"]} <= mounts
    run_label = container.labels.get("io.verlctl.run")
    assert run_label

    # Ray head is up inside, the stand-in joined it and writes checkpoints.
    ckpt = Path(lenv.spec["paths"]["checkpoints"])
    wait_for(lambda: (ckpt / "latest_checkpointed_iteration.txt").exists(), 120)
    st = wait_for(lambda: (lambda s: s if s["last_step"] else None)(status(lenv)), 60)
    assert st["alive"] is True and st["state"] == "running"
    assert st["container"]["state"] == "running"
    assert st["last_step"]["step"] >= 1
    assert "critic/score/mean" in st["last_step"]["metrics"]
    assert st["progress"]["total"] == 40
    ps = ps_in(container, "args")
    assert "gcs_server" in ps and "raylet" in ps

    res = lenv.cli("stop")
    assert res.code == 0, res.err
    st = status(lenv)
    assert st["alive"] is False and st["state"] == "stopped"
    ps = ps_in(container, "args")
    assert "standin" not in ps and "raylet" not in ps  # the whole group (Ray included) is gone

    # A second launch reuses the running container; then a stopped container is started.
    lenv.spec["train"]["steps"] = 42
    res = lenv.cli("launch", "-c", str(lenv.spec_file), "--yes", "--verify-timeout", "180")
    assert res.code == 0, res.out + res.err
    assert "reuse container" in res.out and "create container" not in res.out
    assert lenv.cli("stop").code == 0
    container.stop(timeout=5)
    res = lenv.cli("launch", "-c", str(lenv.spec_file), "--yes", "--verify-timeout", "180")
    assert res.code == 0, res.out + res.err
    assert f"start container {lenv.name}" in res.out
    container.reload()
    assert container.status == "running"
    # The trainer resumed from the checkpoints of the first run (its step count continues).
    assert len(lenv.argv_log) == 3
    train_log = (lenv.root / "logs" / "dapo_Qwen3-0.6B_megatron.log").read_text()
    assert "Load from checkpoint folder" in train_log
    assert lenv.cli("stop", "--remove-container").code == 0
    # This container was created by the first run, not this one: it stays.
    assert docker_engine.containers.get(lenv.name)


def test_stop_kills_only_the_run_process_group(lenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    lenv.spec["train"]["steps"] = 100
    lenv.spec["verl_version"] = "auto"  # taken from the container's installed verl
    res = lenv.cli("launch", "-c", str(lenv.spec_file), "--yes", "--verify-timeout", "180")
    assert res.code == 0, res.out + res.err
    assert "verl_version auto -> 0.7.0" in res.out
    container = docker_engine.containers.get(lenv.name)
    container.exec_run(["python3", "-c", "import time; time.sleep(3600)  # unrelated"], detach=True)
    wait_for(lambda: "unrelated" in ps_in(container, "args"), 20)
    res = lenv.cli("stop")
    assert res.code == 0, res.err
    ps = ps_in(container, "args")
    assert "# unrelated" in ps
    assert "standin" not in ps and "raylet" not in ps and "start_verl.sh" not in ps
    # created by this run, but the unrelated process still lives in it: kept, saying why (A6)
    res = lenv.cli("stop", "--remove-container")
    assert res.code == 0, res.err
    assert "in use (1 other process live in it" in res.out and "left in place" in res.out, res.out
    # once it has ended, --remove-container removes it
    for line in ps_in(container, "pid=,args=").splitlines():
        if line.strip().endswith("# unrelated"):  # the process this test started, by its pid
            container.exec_run(["kill", "--", line.split()[0]])
    wait_for(lambda: "unrelated" not in ps_in(container, "args"), 20)
    res = lenv.cli("stop", "--remove-container")
    assert res.code == 0, res.err
    import docker

    with pytest.raises(docker.errors.NotFound):
        docker_engine.containers.get(lenv.name)


def test_misspelled_override_is_stopped_by_the_preflight(lenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    """The verdict looks into the image before anything is created (a throw-away container of it): the key that
    its verl does not define is refused with the overrides composed there, and nothing starts."""
    bad = "actor_rollout_ref.actor.megatron.virtual_pipeline_parallel_size=2"
    lenv.spec["extra_overrides"] = [bad]
    res = lenv.cli("launch", "-c", str(lenv.spec_file), "--yes")
    assert res.code != 0
    assert "Traceback" not in res.err
    assert res.err.strip().splitlines() == ["error: the spec has errors (listed above): nothing was changed"]
    out = " ".join(res.out.split())
    assert f"error target_preflight_failed extra_overrides: preflight compose failed in image {lenv.image}" in out
    assert "Could not override 'actor_rollout_ref.actor.megatron.virtual_pipeline_parallel_size'" in out
    assert f"(override: {bad})" in out
    # Nothing was created or started: no container, no run record, no training process, no log.
    import docker

    with pytest.raises(docker.errors.NotFound):
        docker_engine.containers.get(lenv.name)
    assert lenv.argv_log == []
    assert not (lenv.state / "runs").exists() or not any((lenv.state / "runs").iterdir())
    assert not (lenv.root / "logs").exists() or not list((lenv.root / "logs").glob("*.log"))


def test_dry_run_changes_nothing(lenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    import docker

    out = lenv.root / "dry"
    def ours() -> list[str]:
        # sparse: no per-container inspect, which races with other tests removing their containers (a 404);
        # only this run's names count, since other tests create containers on the shared engine meanwhile
        names = [(c.attrs.get("Names") or [""])[0].lstrip("/") for c in docker_engine.containers.list(all=True, sparse=True)]
        return [n for n in names if n == lenv.name or n.startswith(f"{lenv.name}-")]

    assert ours() == []
    res = lenv.cli("launch", "-c", str(lenv.spec_file), "--dry-run", "-o", str(out))
    assert res.code == 0, res.err
    assert "create container" in res.out and "preflight" in res.out and "start `bash" in res.out
    assert ours() == []
    with pytest.raises(docker.errors.NotFound):
        docker_engine.containers.get(lenv.name)
    assert not lenv.state.exists()
    assert not Path(lenv.spec["paths"]["checkpoints"]).exists() and not Path(lenv.spec["paths"]["logs"]).exists()
    assert sorted(p.name for p in out.iterdir()) == ["run_training.sh", "spec.resolved.yaml", "start_verl.sh"]


def test_training_dying_during_verification_is_reported(lenv: LaunchEnv) -> None:
    # The stand-in trainer gives up on its Ray worker at once, before any progress (an override of
    # trainer.n_gpus_per_node, which used to make its resource check fail, is refused by plan: managed_override).
    lenv.spec.setdefault("env", {})["VERLCTL_STANDIN_RAY_TIMEOUT"] = "0"
    res = lenv.cli("launch", "-c", str(lenv.spec_file), "--yes", "--verify-timeout", "180")
    assert res.code == 1
    assert "Traceback (most recent call last)" not in res.err
    assert res.err.startswith("error: the training process exited during start-up")
    events = [json.loads(x) for x in next((lenv.state / "runs").iterdir()).joinpath("events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events][-2:] == ["failure", "launch_failed"]
    assert events[-1]["removed_containers"] == [lenv.name]  # the container this launch created
    st = status(lenv)
    assert st["container"]["state"] == "removed"
    # the container is gone, its log is a host file: status reads it (issue 24, U3) and says why it failed
    assert st["log_read_from"] == "host" and st["last_error"]["category"], st["last_error"]
    assert st["state"] == "failed" and st["state_why"].startswith("the training process exited during start-up")


@pytest.mark.parametrize("fault", ["engine", "image", "name_taken", "unmountable"])
def test_faults_are_one_line_and_non_zero(lenv: LaunchEnv, docker_engine, fault: str) -> None:  # type: ignore[no-untyped-def]
    env: dict[str, str] = {}
    expect = ""
    if fault == "engine":
        env["DOCKER_HOST"] = f"unix://{lenv.root}/no-engine.sock"
        expect = "the Docker engine is not reachable"
    elif fault == "image":
        lenv.spec["container"]["image"] = "verlctl-test-missing:nope"
        expect = "image verlctl-test-missing:nope is not present locally and pulling is not allowed"
    elif fault == "name_taken":
        base = docker_engine.images.list(name="verlctl-test-base")[0]
        docker_engine.containers.run(base.id, ["sleep", "infinity"], name=lenv.name, detach=True, init=True)
        expect = f"container name {lenv.name} is taken by a container of image"
    else:
        lenv.spec["paths"]["model"] = str(lenv.root / "no" / "such" / "model")
        expect = "does not exist on this host, so it cannot be mounted"
    before = {c.id for c in docker_engine.containers.list(all=True, filters={"name": lenv.name})}
    res = lenv.cli("launch", "-c", str(lenv.spec_file), "--yes", **env)
    assert res.code != 0
    assert "Traceback" not in res.out + res.err
    lines = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and expect in lines[0], res.err
    # this run's containers only: the engine is shared, other sessions' containers come and go meanwhile
    assert {c.id for c in docker_engine.containers.list(all=True, filters={"name": lenv.name})} == before


def test_quickstart_is_driven_by_the_seed_environment(lenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    paths = lenv.spec["paths"]
    env = {
        "CONTAINER": lenv.name,
        "TRAIN_STEPS": "7",
        "MODEL_PATH": paths["model"],
        "TRAIN_FILE": paths["train_files"],
        "VAL_FILE": paths["val_files"],
        "CKPTS_DIR": paths["checkpoints"],
        "SWANLAB_HOST": "http://10.0.0.1:8000",
        "SWANLAB_API_KEY": "qs-SECRET-123",
        "VERLCTL_CONTAINER__IMAGE": lenv.image,
        "VERLCTL_TRAIN__TENSOR_PARALLEL": "2",
        "VERLCTL_TRAIN__PIPELINE_PARALLEL": "1",
    }
    out = lenv.root / "qs"
    res = lenv.cli("quickstart", "--dry-run", **env)
    assert res.code == 0, res.out + res.err
    assert f"create container {lenv.name}" in res.out
    assert "SwanLab: check the login to http://10.0.0.1:8000" in res.out
    assert "qs-SECRET-123" not in res.out + res.err
    import docker

    with pytest.raises(docker.errors.NotFound):
        docker_engine.containers.get(lenv.name)
    assert not out.exists() and not lenv.state.exists()
