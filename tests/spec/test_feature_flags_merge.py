"""``--features``/``--disable`` add to the spec's ``features.enable``/``features.disable`` (they do not replace
them): a feature that the spec file, or the wizard's fix saved in it, turned on stays on; a flag moves a name
out of the other list; each feature's reason names where its name came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verlctl.commands.options import spec_flags
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec

from conftest import run_cli

SPEC = """\
paths: {model: /m/Qwen3-8B, train_files: /d/t.parquet, val_files: /d/v.parquet}
features:
  mask: '1100000'
  enable: [offload]
  disable: [swap_optimizer]
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    p = tmp_path / "run.yaml"
    p.write_text(SPEC)
    return p


def states(spec_file: Path, **given: str) -> dict[str, tuple[bool, str]]:
    flags, names = spec_flags(**given)  # type: ignore[arg-type]
    resolved = load_spec(spec_file, flags=flags, flag_names=names, environ={})
    return {n: (s.on, s.reason) for n, s in make_plan(resolved).command.features.items()}


def test_features_flag_keeps_what_the_spec_enabled(spec_file: Path) -> None:
    st = states(spec_file, features="recompute")
    assert st["offload"][0] is True and "run.yaml" in st["offload"][1]            # the spec's, kept
    assert st["recompute"] == (True, "enabled (flag (--features))")                # the flag's, added
    assert st["swap_optimizer"][0] is False and "run.yaml" in st["swap_optimizer"][1]


def test_a_flag_moves_a_name_out_of_the_other_list(spec_file: Path) -> None:
    st = states(spec_file, features="swap_optimizer", disable="offload")
    assert st["swap_optimizer"] == (True, "enabled (flag (--features))")
    assert st["offload"] == (False, "disabled (flag (--disable))")
    flags, names = spec_flags(features="swap_optimizer", disable="offload")
    plan = make_plan(load_spec(spec_file, flags=flags, flag_names=names, environ={}))
    assert not [f for f in plan.findings if f.code == "feature_enable_disable"]


def test_without_a_spec_the_flag_alone_decides(tmp_path: Path) -> None:
    flags, names = spec_flags(features="offload,recompute",
                              set_values=["paths.model=/m/Qwen3-8B", "paths.train_files=/d/t.parquet",
                                          "paths.val_files=/d/v.parquet"])
    resolved = load_spec(None, flags=flags, flag_names=names, environ={})
    assert resolved.spec.features.enable == ["offload", "recompute"]
    assert resolved.origin("features.enable.offload").detail == "--features"


def test_plan_json_shows_the_merged_list_and_each_reason(spec_file: Path) -> None:
    res = run_cli("plan", "-c", str(spec_file), "--features", "recompute", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["values"]["features.enable"]["value"] == ["offload", "recompute"]
    assert doc["features"]["offload"]["on"] is True and "run.yaml" in doc["features"]["offload"]["reason"]
    assert doc["features"]["recompute"]["reason"] == "enabled (flag (--features))"


def test_both_flags_naming_one_feature_is_still_refused(spec_file: Path) -> None:
    flags, names = spec_flags(features="recompute", disable="recompute")
    plan = make_plan(load_spec(spec_file, flags=flags, flag_names=names, environ={}))
    assert "feature_enable_disable" in {f.code for f in plan.findings}


def test_flags_without_feature_lists_leave_the_origins_alone(spec_file: Path) -> None:
    flags, names = spec_flags(set_values=["train.steps=7"])
    resolved = load_spec(spec_file, flags=flags, flag_names=names, environ={})
    assert resolved.item_origins == {}
    assert resolved.origin("features.enable").source.value == "file"
    assert str(resolved.origin("train.steps")) == "flag (--set train.steps)"


def test_a_list_the_flag_took_a_name_from_names_the_flag(spec_file: Path) -> None:
    flags, names = spec_flags(features="swap_optimizer")  # the file disables it: it leaves that list
    resolved = load_spec(spec_file, flags=flags, flag_names=names, environ={})
    assert resolved.spec.features.disable == [] and resolved.spec.features.enable == ["offload", "swap_optimizer"]
    assert str(resolved.origin("features.disable")) == "flag (--features)"
