"""How a new container is created (real engine; created, inspected, removed — GPU containers are never
started: there is no GPU driver here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from verlctl.runtime import containers
from verlctl.spec.resolve import load_spec

from launch_support import ensure_npu_device_nodes, remove_container, write_model, write_parquet

pytestmark = pytest.mark.docker


def _spec(tmp_path: Path, image: str, **extra: object):  # type: ignore[no-untyped-def]
    write_model(tmp_path / "m")
    (tmp_path / "d").mkdir(exist_ok=True)
    write_parquet(tmp_path / "d" / "t.parquet")
    flags = {
        "paths.model": str(tmp_path / "m"),
        "paths.train_files": str(tmp_path / "d" / "t.parquet"),
        "paths.val_files": str(tmp_path / "d" / "t.parquet"),
        "paths.checkpoints": str(tmp_path / "ck"),
        "paths.logs": str(tmp_path / "logs"),
        "container.name": f"verlctl-test-create-{tmp_path.name[-12:]}".replace("_", "-"),
        "container.image": image,
        "container.proxy.http": "http://proxy.example:3128",
        "container.mounts": [f"{tmp_path}:/extra:ro"],
        **extra,
    }
    return load_spec(None, flags=flags, environ={}).spec


def test_gpu_container_gets_a_device_request_for_the_chosen_gpus(tmp_path: Path, docker_engine, test_image) -> None:  # type: ignore[no-untyped-def]
    spec = _spec(tmp_path, test_image, device="gpu", **{"cluster.devices": [1, 3]})
    plan = containers.plan_container(docker_engine, spec, allow_pull=False)
    try:
        c = containers.create_container(docker_engine, spec, plan, containers.labels_for("run-x", "exp"),
                                        {"http_proxy": "http://proxy.example:3128"})
        hc = c.attrs["HostConfig"]
        [req] = hc["DeviceRequests"]
        assert req["DeviceIDs"] == ["1", "3"] and req["Capabilities"] == [["gpu"]]
        assert not hc.get("Devices")
        assert c.attrs["Config"]["Labels"]["io.verlctl.run"] == "run-x"
        assert "http_proxy=http://proxy.example:3128" in c.attrs["Config"]["Env"]
        binds = {m["Destination"]: m for m in c.attrs["Mounts"]}
        assert binds["/extra"]["RW"] is False
        assert str(tmp_path / "m") in binds and str(tmp_path / "ck") in binds
    finally:
        remove_container(docker_engine, spec.container.name)


def test_npu_container_maps_only_the_chosen_devices_or_runs_privileged(tmp_path: Path, docker_engine, test_image) -> None:  # type: ignore[no-untyped-def]
    ensure_npu_device_nodes()
    spec = _spec(tmp_path, test_image, **{"cluster.devices": [2, 5]})
    plan = containers.plan_container(docker_engine, spec, allow_pull=False)
    try:
        c = containers.create_container(docker_engine, spec, plan, {}, {})
        devices = {d["PathOnHost"] for d in c.attrs["HostConfig"]["Devices"]}
        assert {"/dev/davinci2", "/dev/davinci5", "/dev/davinci_manager"} <= devices
        assert "/dev/davinci0" not in devices
        assert c.attrs["HostConfig"]["Privileged"] is False
        assert c.attrs["HostConfig"]["ShmSize"] == 64 * 1024**3
    finally:
        remove_container(docker_engine, spec.container.name)
    spec = _spec(tmp_path, test_image, **{"container.privileged": True})
    plan = containers.plan_container(docker_engine, spec, allow_pull=False)
    try:
        c = containers.create_container(docker_engine, spec, plan, {}, {})
        assert c.attrs["HostConfig"]["Privileged"] is True
    finally:
        remove_container(docker_engine, spec.container.name)


def test_a_container_under_the_default_name_is_reused_only_if_it_is_this_users(tmp_path: Path, docker_engine, test_image,  # type: ignore[no-untyped-def]
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """On a shared server the default container name may be a colleague's: without an explicit
    container.name, verlctl reuses only a container it created for this user on this host."""
    from verlctl.errors import VerlctlError

    spec = _spec(tmp_path, test_image, device="gpu")
    name = spec.container.name
    try:
        # someone else's container (no verlctl labels), under the name the spec would use by default
        docker_engine.containers.create(test_image, ["sleep", "60"], name=name)
        with pytest.raises(VerlctlError) as err:
            containers.plan_container(docker_engine, spec, allow_pull=False, name_explicit=False)
        assert "was not created by verlctl" in err.value.message and "container.name" in (err.value.hint or "")
        assert containers.plan_container(docker_engine, spec, allow_pull=False, name_explicit=True).exists
        remove_container(docker_engine, name)
        # one verlctl created for another user
        docker_engine.containers.create(test_image, ["sleep", "60"], name=name,
                                        labels={"io.verlctl.created-by": "colleague@" + containers.creator().split("@")[1]})
        with pytest.raises(VerlctlError, match="was created by colleague@"):
            containers.plan_container(docker_engine, spec, allow_pull=False, name_explicit=False)
        remove_container(docker_engine, name)
        # labelled this user@host, by a run this state dir does not record (A13: on a shared account, a
        # colleague's): refused, saying whose it is
        monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
        docker_engine.containers.create(test_image, ["sleep", "60"], name=name, labels=containers.labels_for("r1", "e"))
        with pytest.raises(VerlctlError, match=r"was created by run r1 of .*, which is not recorded in"):
            containers.plan_container(docker_engine, spec, allow_pull=False, name_explicit=False)
        assert containers.plan_container(docker_engine, spec, allow_pull=False, name_explicit=True).exists
        # this user's own: a run recorded here created it
        from verlctl.runtime.records import RunRecord

        RunRecord(run_id="r1", created_at=1.0, runtime="docker", workdir="/w", scripts_dir="/w/s", run_log="/w/l.log",
                  train_log="", checkpoints="", experiment="e", verl_version="0.7.0").save()
        assert containers.plan_container(docker_engine, spec, allow_pull=False, name_explicit=False).exists
    finally:
        remove_container(docker_engine, name)
