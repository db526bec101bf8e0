"""The remaining real gaps of the turn-3 mutation sample (reference/mutation-turn3.md): checks/rules.py [7],
spec/resolve.py [13]/[14], verl/compose.py [5]; each as a user meets it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from verlctl.commands.check import spec_findings
from verlctl.errors import SpecError
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS, clean_env, run_cli

KEY = "SECRETKEY-turn3-5b1d"


def test_a_layout_that_does_not_divide_is_the_only_batch_error_without_dynamic_batching() -> None:
    """TP 3 on 8 devices leaves no data-parallel size: the layout errors are reported, and the rules that divide
    by DP (which dynamic batching would silence) do not add errors computed with a made-up DP."""
    flags = {**BASE_PATHS, "train.tensor_parallel": 3, "train.pipeline_parallel": 1,
             "features.disable": ["dynamic_batch"], "train.micro_batch_size_per_device": 3}
    errors = {f.code for f in spec_findings(load_spec(None, flags=flags, environ={}))[0]
              if f.severity.value == "error"}
    assert errors == {"parallel_divisibility", "rollout_divisibility"}


@pytest.mark.parametrize("value", [[KEY], {"api_key": [KEY]}, {"swanlab": [KEY]}])
def test_a_key_in_a_list_at_a_secret_path_is_refused_without_echoing_it(value: object) -> None:
    """``--set 'logging.swanlab=[KEY]'`` and the like: one clear error, the value not shown, no traceback."""
    path = "logging" if isinstance(value, dict) and "swanlab" in value else "logging.swanlab"
    with pytest.raises(SpecError) as err:
        load_spec(None, flags={**BASE_PATHS, path: value}, environ={})
    assert KEY not in str(err.value) and "value not shown" in str(err.value)


def test_a_key_list_through_the_cli_is_exit_2_without_the_key(tmp_path: Path) -> None:
    res = run_cli("plan", "--set", f"paths.model={tmp_path}", "--set", "paths.train_files=/d/t.parquet",
                  "--set", "paths.val_files=/d/v.parquet", "--set", f"logging.swanlab=[{KEY}]", env=clean_env())
    assert res.code == 2, res.out + res.err
    assert KEY not in res.out + res.err and "Traceback" not in res.err
    assert "value not shown" in res.err


def test_an_empty_api_key_in_the_spec_file_is_no_secret(tmp_path: Path) -> None:
    """A spec file saved with ``api_key: ''`` (the wizard's template, the key left out) holds no secret: it
    loads; a non-empty one is refused."""
    spec = {"paths": {"model": "/m", "train_files": "/d/t.parquet", "val_files": "/d/v.parquet"},
            "logging": {"swanlab": {"api_key": ""}}}
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump(spec), encoding="utf-8")
    assert load_spec(f, flags={}, environ={}).spec.logging.swanlab is not None
    spec["logging"]["swanlab"]["api_key"] = KEY  # type: ignore[index]
    f.write_text(yaml.safe_dump(spec), encoding="utf-8")
    with pytest.raises(SpecError) as err:
        load_spec(f, flags={}, environ={})
    assert KEY not in str(err.value)


def test_plan_json_gives_the_training_command_as_it_is_run(tmp_path: Path) -> None:
    """``verlctl plan --json``'s ``command`` is the argv run_training.sh runs: python3 -m the entry module with
    its config name, then the overrides, in order."""
    res = run_cli("plan", "--json", "--set", f"paths.model={tmp_path}", "--set", "paths.train_files=/d/t.parquet",
                  "--set", "paths.val_files=/d/v.parquet", env=clean_env())
    assert res.code == 0, res.out + res.err
    out = json.loads(res.out)
    assert out["command"][:5] == ["python3", "-m", out["entrypoint"], "--config-name", out["config_name"]]
    assert out["command"][5:] == out["overrides"] and len(out["overrides"]) > 20
