"""The in-target look-up on the real Docker engine with the locally built test image (verl 0.7.0 and Hydra,
no flash-attn, no torch): `check`, `launch --dry-run` and `launch` look into the same target and give the same
verdict (RV4-3), whether the target is the spec's running container or, before the container exists, a
throw-away container of the local image; where there is nothing to look into yet (a stopped container) the
verdict says so under "not checked" and `launch` looks in its preflight stage, with the same finding.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from launch_support import LaunchEnv

pytestmark = pytest.mark.docker

FLASH = "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2"


def _errors(doc: dict[str, Any]) -> list[tuple[str, str | None, str, str | None]]:
    return sorted((f["code"], f["field"], f["message"], f["hint"]) for f in doc["findings"]
                  if f["severity"] == "error")


def _three(env: LaunchEnv) -> list[Any]:
    spec = str(env.spec_file)
    return [env.cli("check", "-c", spec, "--json", timeout=300),
            env.cli("launch", "-c", spec, "--dry-run", "--json", timeout=300),
            env.cli("launch", "-c", spec, "--yes", "--json", timeout=300)]


def _flash_attn_spec(env: LaunchEnv) -> None:
    env.spec.update({"device": "gpu", "strategy": "fsdp", "verl_version": "0.7.0", "algorithm": "grpo"})
    env.spec["cluster"]["devices"] = [0]
    env.spec["train"]["tensor_parallel"] = 1


def _same_refusal(results: list[Any], where: str) -> dict[str, Any]:
    assert [r.code for r in results] == [2, 2, 2], [r.out[-2000:] + r.err[-2000:] for r in results]
    docs = [json.loads(r.out) for r in results]
    assert _errors(docs[0]) == _errors(docs[1]) == _errors(docs[2]), [_errors(d) for d in docs]
    (missing,) = [f for f in docs[0]["findings"] if f["code"] == "target_package_missing"]
    # verl 0.7.0 FSDP off an NPU needs flash_attn for the attention and for unpadding (attention_utils.py:27-30)
    assert missing["field"] == "features" and (f"`actor_rollout_ref.model.use_remove_padding=True` and `{FLASH}` need "
                                               "the Python package flash-attn") in missing["message"], missing
    assert f"(looked up in {where})" in missing["message"], missing
    assert "`--disable remove_padding --disable flash_attn`" in missing["hint"], missing
    assert all("Traceback" not in r.err for r in results)
    return missing


def test_flash_attn_missing_from_the_image_same_verdict_before_the_container_exists(
        launch_env: LaunchEnv, docker_engine: Any) -> None:
    import docker

    env = launch_env
    _flash_attn_spec(env)
    _same_refusal(_three(env), f"image {env.image} (a throw-away container)")
    with pytest.raises(docker.errors.NotFound):  # launch refused before creating its container
        docker_engine.containers.get(env.name)
    assert not (env.state / "runs").exists() or not any((env.state / "runs").iterdir())


def test_flash_attn_missing_from_the_running_container_same_verdict(
        launch_env: LaunchEnv, container_factory: Any) -> None:
    env = launch_env
    _flash_attn_spec(env)
    for d in ("ckpt", "logs"):
        (env.root / d).mkdir(exist_ok=True)
    vols = {str(env.root / d): {"bind": str(env.root / d), "mode": "rw"} for d in ("models", "data", "ckpt", "logs")}
    container = container_factory(env.image, volumes=vols, working_dir="/verl")
    env.spec["container"]["name"] = container.name
    _same_refusal(_three(env), f"container {container.name}")
    # nothing was written into the container by any of the three (the look-up's temp dir is gone too)
    res = container.exec_run(["bash", "-c", "ls -d /verl/.verlctl /tmp/verlctl-lookup-* 2>/dev/null; true"])
    assert res.output.decode().strip() == ""


def test_a_stopped_container_is_not_checked_before_and_looked_into_by_launch_with_the_same_finding(
        launch_env: LaunchEnv, container_factory: Any) -> None:
    env = launch_env
    bad = "actor_rollout_ref.actor.nope=1"
    env.spec["extra_overrides"] = [bad]
    vols = {str(env.root / d): {"bind": str(env.root / d), "mode": "rw"} for d in ("models", "data", "ckpt", "logs")}
    for d in ("ckpt", "logs"):
        (env.root / d).mkdir(exist_ok=True)
    container = container_factory(env.image, volumes=vols, working_dir="/verl")
    env.spec["container"]["name"] = container.name
    # the same finding where the container runs: check's
    running = json.loads(env.cli("check", "-c", str(env.spec_file), "--json", timeout=300).out)
    (f,) = [f for f in running["findings"] if f["code"] == "target_preflight_failed"]
    assert f["field"] == "extra_overrides" and bad in f["message"]
    container.stop(timeout=1)
    stopped = json.loads(env.cli("check", "-c", str(env.spec_file), "--json", timeout=300).out)
    assert not [x for x in stopped["findings"] if x["code"].startswith("target_")]
    (nc,) = [n for n in stopped["not_checked"] if n["rule"] == "target_preflight"]
    assert f"docker start {container.name}" in nc["reason"] and "launch starts it and looks inside" in nc["reason"]
    res = env.cli("launch", "-c", str(env.spec_file), "--yes", timeout=600)
    assert res.code != 0, res.out + res.err
    err = " ".join(res.err.split())
    assert err.startswith("error: extra_overrides: preflight compose failed in container "), err
    assert f["message"].split(": ", 1)[1] in err  # the same words as check's finding (after "in container X")
    assert "Traceback" not in res.err
    assert env.argv_log == []  # no training process ever started
