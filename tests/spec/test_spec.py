"""The run spec: sources, priority, provenance, derived values, and bad input (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from verlctl.errors import SpecError
from verlctl.spec.resolve import load_spec
from verlctl.spec.sources import Source

from conftest import BASE_PATHS, ROOT, clean_env, run_cli

EXAMPLE = ROOT / "examples" / "run.yaml"


def write_spec(tmp_path: Path, data: dict, name: str = "run.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data), encoding="utf-8")
    return p


def minimal(**extra: object) -> dict:
    data: dict = {"paths": {"model": "/m/Qwen3-8B", "train_files": "/d/t.parquet", "val_files": "/d/v.parquet"}}
    data.update(extra)
    return data


# ---------------------------------------------------------------- priority and provenance


def test_flag_beats_env_beats_file_and_each_records_its_source(tmp_path: Path) -> None:
    spec_file = write_spec(tmp_path, minimal(train={"steps": 7}))
    env = {"TRAIN_STEPS": "11"}
    flags = {"train.steps": 13}

    r = load_spec(spec_file, environ={}, flags={})
    assert r.spec.train.steps == 7
    assert r.origin("train.steps").source is Source.FILE
    assert r.origin("train.steps").detail == str(spec_file)

    r = load_spec(spec_file, environ=env)
    assert r.spec.train.steps == 11
    assert r.origin("train.steps").source is Source.ENV
    assert r.origin("train.steps").detail == "TRAIN_STEPS"

    r = load_spec(spec_file, environ=env, flags=flags, flag_names={"train.steps": "--set train.steps"})
    assert r.spec.train.steps == 13
    assert str(r.origin("train.steps")) == "flag (--set train.steps)"

    r = load_spec(spec_file, environ=env, flags=flags, detected={"train.steps": 99})
    assert r.spec.train.steps == 13


def test_detected_beats_default_but_loses_to_file(tmp_path: Path) -> None:
    detected = {"cluster.socket_ifname": "eth7", "cluster.devices": [0, 1]}
    r = load_spec(None, environ={}, detected=detected, flags={f: v for f, v in BASE_PATHS.items()})
    assert r.spec.cluster.socket_ifname == "eth7"
    assert r.origin("cluster.socket_ifname").source is Source.DETECTED
    spec_file = write_spec(tmp_path, minimal(cluster={"devices": [4, 5, 6, 7]}))
    r = load_spec(spec_file, environ={}, detected=detected)
    assert r.spec.cluster.devices == [4, 5, 6, 7]
    assert r.origin("cluster.devices").source is Source.FILE
    assert r.origin("cluster.socket_ifname").source is Source.DETECTED
    assert r.origin("train.lr").source is Source.DEFAULT


def test_verlctl_env_names_beat_seed_names_and_nest_with_double_underscore() -> None:
    env = {"TRAIN_STEPS": "5", "VERLCTL_TRAIN__STEPS": "6", "VERLCTL_ALGORITHM": "grpo", "MODEL_PATH": "/x/M"}
    r = load_spec(None, environ=env, flags={"paths.train_files": "/a.parquet", "paths.val_files": "/b.parquet"})
    assert r.spec.train.steps == 6 and r.origin("train.steps").detail == "VERLCTL_TRAIN__STEPS"
    assert r.spec.algorithm == "grpo"
    assert r.spec.paths.model == "/x/M" and r.origin("paths.model").detail == "MODEL_PATH"


def test_seed_environment_names_map_to_the_spec() -> None:
    env = {
        "MODEL_PATH": "/m/Qwen3-8B",
        "TRAIN_FILE": "/d/dapo-math-17k.parquet",
        "VAL_FILE": "/d/aime-2024.parquet",
        "TRAIN_STEPS": "100",
        "FRAMEWORK": "fsdp",
        "TRAINER_GPUS": "6",
        "ROLLOUT_GPUS": "2",
        "USER_FEATURES": "prefix_cache,chunked_prefill",
        "ENABLE_OFFLOAD": "True",
        "MAX_OOM_RETRIES": "3",
        "SWANLAB_HOST": "http://10.143.2.129:8000",
        "SWANLAB_MODE": "local",
        "http_proxy": "http://proxy:8080",
        "https_proxy": "http://proxy:8443",
    }
    r = load_spec(None, environ=env)
    s = r.spec
    assert s.paths.train_files == ["/d/dapo-math-17k.parquet"]
    assert s.train.steps == 100 and s.strategy == "fsdp2"  # the second seed: FRAMEWORK=fsdp is FSDP2
    assert (s.train.trainer_devices, s.train.rollout_devices) == (6, 2)
    assert s.features.enable == ["prefix_cache", "chunked_prefill", "offload"]
    assert s.recovery.max_oom_retries == 3
    assert s.logging.swanlab.host == "http://10.143.2.129:8000" and s.logging.swanlab.mode == "local"
    assert s.logging.swanlab.enabled is True
    assert r.origin("logging.swanlab.enabled").source is Source.DERIVED
    assert s.container.proxy.http == "http://proxy:8080" and s.container.proxy.https == "http://proxy:8443"


def test_derived_values_are_marked_derived() -> None:
    r = load_spec(None, environ={}, flags=dict(BASE_PATHS))
    assert r.spec.train.mini_batch_size == r.spec.train.train_batch_size
    assert r.origin("train.mini_batch_size").source is Source.DERIVED
    assert r.spec.train.rollout_tensor_parallel == 4
    assert r.spec.logging.experiment == "dapo_Qwen3-8B_megatron"
    assert r.spec.paths.checkpoints.endswith("/checkpoints/verlctl/dapo_Qwen3-8B_megatron")
    assert r.origin("paths.checkpoints").source is Source.DERIVED
    r = load_spec(None, environ={}, flags={**BASE_PATHS, "mode": "one_step_off_policy"})
    assert (r.spec.train.trainer_devices, r.spec.train.rollout_devices) == (4, 4)
    assert r.origin("train.trainer_devices").source is Source.DERIVED


def test_cli_priority_and_source_in_json(tmp_path: Path) -> None:
    spec_file = write_spec(tmp_path, minimal(train={"lr": 2e-6, "steps": 3}))
    env = clean_env(VERLCTL_TRAIN__LR="3e-6")
    res = run_cli("plan", "-c", str(spec_file), "--json", "--set", "train.steps=9", env=env)
    assert res.code == 0, res.err
    values = res.json()["values"]
    assert values["train.lr"] == {"value": 3e-6, "source": "env (VERLCTL_TRAIN__LR)"}
    assert values["train.steps"] == {"value": 9, "source": "flag (--set train.steps)"}
    assert values["train.train_batch_size"]["source"] == "default"
    assert values["paths.model"]["source"] == f"file ({spec_file})"


def test_example_spec_plans_cleanly() -> None:
    res = run_cli("plan", "-c", str(EXAMPLE), "--json")
    assert res.code == 0, res.err
    doc = res.json()
    assert doc["entrypoint"] == "recipe.dapo.main_dapo"
    assert not [f for f in doc["findings"] if f["severity"] == "error"]


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        ("paths: [unclosed\n", "malformed YAML"),
        ("- a\n- b\n", "must hold a mapping"),
        ("trian:\n  steps: 3\n", "did you mean 'train'"),
        ("train:\n  step: 3\n", "unknown key 'step'"),
        ("features:\n  mask: '12'\n", "features.mask"),
        ("features:\n  mask: '00000001'\n", "features.mask"),
        ("features:\n  mask: abcdefg\n", "features.mask"),
        ("features:\n  mask: 1100000\n", "quote it"),
        ("train:\n  train_batch_size: -4\n", "train.train_batch_size"),
        ("algorithm: ppo\n", "algorithm"),
        ("container:\n  mounts: ['relative:/x']\n", "container.mounts"),
        ("logging:\n  swanlab:\n    host: not-a-url\n", "logging.swanlab.host"),
    ],
)
def test_bad_spec_file_is_one_line_exit_2_nothing_written(tmp_path: Path, content: str, expect: str) -> None:
    spec_file = tmp_path / "bad.yaml"
    if not content.startswith(("- ", "paths:")):
        content += "paths: {model: /m, train_files: /t.parquet, val_files: /v.parquet}\n"
    spec_file.write_text(content, encoding="utf-8")
    out = tmp_path / "out"
    res = run_cli("plan", "-c", str(spec_file), "-o", str(out))
    assert res.code == 2
    assert "Traceback" not in res.err + res.out
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error: ")
    assert len([x for x in lines if x.startswith("error:")]) == 1
    assert expect in lines[0], lines
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (("--mask", "12"), "features.mask"),
        (("--mask", "00000001"), "features.mask"),
        (("--mask", "abcdefg"), "features.mask"),
        (("--set", "train.train_batch_size=-1"), "train.train_batch_size"),
        (("--set", "train.micro_batch_size_per_device=0"), "train.micro_batch_size_per_device"),
        (("--strategy", "deepspeed"), "strategy"),
        (("--set", "nonsense"), "--set expects KEY=VALUE"),
    ],
)
def test_bad_flags_are_one_line_exit_2(tmp_path: Path, args: tuple[str, ...], expect: str) -> None:
    out = tmp_path / "out"
    res = run_cli("plan", "-c", str(EXAMPLE), "-o", str(out), *args)
    assert res.code == 2, res.out
    assert "Traceback" not in res.err
    assert res.err.startswith("error: ") and expect in res.err.splitlines()[0]
    assert not out.exists()


def test_missing_required_path_names_the_field(tmp_path: Path) -> None:
    spec_file = write_spec(tmp_path, {"paths": {"model": "/m", "val_files": "/v.parquet"}})
    out = tmp_path / "out"
    res = run_cli("plan", "-c", str(spec_file), "-o", str(out))
    assert res.code == 2
    assert res.err.splitlines()[0].startswith("error: paths.train_files: missing required path")
    assert not out.exists()


def test_missing_spec_file_and_bad_env(tmp_path: Path) -> None:
    res = run_cli("plan", "-c", str(tmp_path / "nope.yaml"))
    assert res.code == 2 and res.err.startswith("error: spec file not found")
    res = run_cli("plan", "-c", str(EXAMPLE), env=clean_env(TRAIN_STEPS="many"))
    assert res.code == 2 and "train.steps" in res.err and "TRAIN_STEPS" in res.err
    res = run_cli("plan", "-c", str(EXAMPLE), env=clean_env(VERLCTL_TRAN__STEPS="3"))
    assert res.code == 2 and "VERLCTL_TRAIN" in res.err


def test_unknown_key_error_has_did_you_mean() -> None:
    with pytest.raises(SpecError) as exc:
        load_spec(None, environ={}, flags={**BASE_PATHS, "train.tensor_paralel": 2})
    assert exc.value.field == "train.tensor_paralel"
    assert "did you mean 'tensor_parallel'" in exc.value.message


def test_schema_is_json_and_rejects_unknown_keys() -> None:
    res = run_cli("schema")
    assert res.code == 0
    schema = json.loads(res.out)
    assert schema["additionalProperties"] is False
    assert "train" in schema["properties"] and "features" in schema["properties"]
