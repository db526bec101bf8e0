"""F4-8: a script that does not show its verl version imports as ``verl_version: auto``, not a silent 0.7.0.
``plan`` (no image known) warns that the image decides; ``check`` builds the command for the verl it reads in the
image; ``launch`` retargets to the installed verl (orchestrator/launch.py). On a 0.9.1 image the command of such an
imported v0.9.0 script composes, with verl 0.9.1's own config tree, to the script's values."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from verlctl.checks.findings import Severity
from verlctl.checks.verdict import decide, image_verl, spec_facts
from verlctl.detect.check_probes import ImageVersions
from verlctl.importer import import_script, spec_text
from verlctl.inputs.verl_script import split_override
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec
from verlctl.verl.compose import build_command

import verlcompose
from conftest import ROOT

OFFICIAL = ROOT / "tests" / "fixtures" / "official-scripts"
ENVIRON = {"HOME": "/home/verl", "PWD": "/verl"}
#: verl's v0.9.0 scripts with nothing 0.9-only in them (F4-8: they used to import as verl 0.7.0).
UNMARKED_V09 = [
    "0.9.0/examples/ascend_extras/grpo_trainer/run_qwen3_235b_256k_megatron.sh",
    "0.9.0/examples/ascend_extras/grpo_trainer/run_qwen3_30b_a3b_megatron.sh",
    "0.9.0/examples/ascend_extras/grpo_trainer/run_qwen3_next_80b_fsdp.sh",
    "0.9.0/tests/special_npu/nightly_ci_ascend/run_grpo_qwen3_30b_megatron_sglang_npu.sh",
    "0.9.0/tests/special_npu/quick_start/run_qwen3_0_6b_fsdp2_sglang_ascend.sh",
    "0.9.0/tests/special_npu/quick_start/run_qwen3_0_6b_fsdp2_vllm_ascend.sh",
    "0.9.0/tests/special_npu/quick_start/run_qwen3_0_6b_megatron_sglang_ascend.sh",
    "0.9.0/tests/special_npu/quick_start/run_qwen3_0_6b_megatron_vllm_ascend.sh",
    "0.9.0/tests/special_npu/run_qwen3_06b_grpo_mindspeed.sh",
    "0.9.0/tests/special_npu/run_qwen3_vl_8b_Instruct_fsdp2_npu.sh",
]
QUICK = "0.9.0/tests/special_npu/quick_start/run_qwen3_0_6b_fsdp2_vllm_ascend.sh"


def _imported(rel: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    r = import_script(OFFICIAL / rel, None, dict(ENVIRON))
    spec = tmp_path / "run.yaml"
    spec.write_text(spec_text(r, rel), encoding="utf-8")
    return r, load_spec(str(spec), environ={})


@pytest.mark.parametrize("rel", UNMARKED_V09)
def test_a_script_that_does_not_show_its_version_imports_as_auto(rel: str, tmp_path: Path) -> None:
    r, resolved = _imported(rel, tmp_path)
    assert r.document["verl_version"] == "auto" and resolved.spec.verl_version == "auto"
    assert any(n.startswith("verl version not evident from the script: verl_version is auto") for n in r.notes)
    assert not any("0.7.0 assumed" in n for n in r.notes)


def test_plan_without_the_image_warns_and_check_takes_the_images_verl(tmp_path: Path) -> None:
    _, resolved = _imported(QUICK, tmp_path)
    plan = make_plan(resolved)
    [auto] = [f for f in plan.findings if f.code == "verl_version_auto"]
    assert auto.severity is Severity.WARNING and "the image's verl is not known here" in auto.message
    facts = spec_facts(resolved, look=False)
    for installed, version in (("0.9.1", "0.9.1"), ("0.7.0.post1", "0.7.0")):
        facts.image_versions = ImageVersions(where="container c", python="3.11.9", ray="2.49.0",
                                             stack={"verl": installed})
        assert image_verl(resolved, facts) == version
        verdict = decide(resolved, facts)
        assert not [f for f in verdict.findings if f.code == "verl_version_auto"], installed
    facts.image_versions = ImageVersions(where="container c", python="3.11.9", ray="2.49.0", stack={"verl": None})
    assert image_verl(resolved, facts) is None
    assert [f for f in decide(resolved, facts).findings if f.code == "verl_version_auto"]


def test_on_a_091_image_the_command_composes_to_the_scripts_values(tmp_path: Path) -> None:
    if not verlcompose.available("0.9.1"):
        pytest.skip("verl 0.9.1 config tree not installed")
    spec = importlib.util.spec_from_file_location("bench_import_parity", ROOT / "bench" / "bench_import_parity.py")
    assert spec is not None and spec.loader is not None
    parity = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_import_parity", parity)
    spec.loader.exec_module(parity)
    r, resolved = _imported(QUICK, tmp_path)
    command = build_command(resolved, "0.9.1")  # what check / launch build once the image shows verl 0.9.1
    name, ours = parity._split_argv(command.argv())
    original = [o for o in r.parsed.command.overrides if "\ue000" not in o]
    theirs, failing = parity._compose_dropping("0.9.1", "verl/trainer/config", "ppo_trainer", original)
    mine = verlcompose.compose("0.9.1", command.entry.config_dir, name, ours)
    assert not failing
    compared = 0
    for raw in original:
        ov = split_override(raw)
        assert ov is not None
        a, b = parity._get(theirs, ov.key), parity._get(mine, ov.key)
        if a is parity._MISSING and b is parity._MISSING:
            continue
        compared += 1
        assert parity._same(a, b), (ov.key, a, b)
    assert compared >= 30


def test_an_auto_spec_keeps_every_override_that_either_verls_command_does_not_reproduce() -> None:
    """The image picks the verl: a script override counts as reproduced only where both versions' commands emit
    it, else it stays an extra override. verl 0.7.0's command writes actor.use_torch_compile=False on NPU, 0.9.1's
    writes fsdp_config.use_torch_compile instead (its engine reads that one): the script's key stays."""
    rel = OFFICIAL / "0.7.0/examples/grpo_trainer/run_qwen3-8b_npu.sh"
    auto = import_script(rel, None, dict(ENVIRON))
    assert auto.document["verl_version"] == "auto"
    each = [set(import_script(rel, v, dict(ENVIRON)).extras) for v in ("0.7.0", "0.9.1")]
    assert "actor_rollout_ref.actor.use_torch_compile=False" in each[1] - each[0]
    assert each[0] | each[1] <= set(auto.extras)
    assert "actor_rollout_ref.actor.use_torch_compile=False" in auto.extras
