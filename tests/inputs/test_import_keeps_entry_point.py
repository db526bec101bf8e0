"""``verlctl import`` keeps the script's entry point: a verl 0.7.0 script that runs DAPO's reward manager on
``verl.trainer.main_ppo`` (verl's own ``recipe/dapo/test_dapo_7b_math*.sh``; 15 scripts of the v0.7.0 tree do)
stays on ``main_ppo`` with its ``ppo_trainer`` config. It used to be planned on ``recipe.dapo.main_dapo``: another
entry point with another config (``filter_groups``, ``gen_batch_size``, the overlong buffer) and a verl source
checkout as work dir, and nothing said so.

The effective config is decided by verl: the script's own override list and verlctl's command are composed with
verl's Hydra tree and compared (bench/bench_import_parity.py, the same measure as tests/inputs/test_import_parity.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from verlctl.importer import import_script, spec_text
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec
from verlctl.verl.compose import build_command

import verlcompose
from conftest import ROOT

OFFICIAL = ROOT / "tests" / "fixtures" / "official-scripts"
ENVIRON = {"HOME": "/home/verl", "PWD": "/verl"}
DAPO_ON_MAIN_PPO = {
    "0.7.0/recipe/dapo/test_dapo_7b_math.sh": "ppo_trainer",
    "0.7.0/recipe/dapo/test_dapo_7b_math_megatron.sh": "ppo_megatron_trainer",
}


def _parity():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_import_parity", ROOT / "bench" / "bench_import_parity.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_import_parity", mod)
    spec.loader.exec_module(mod)
    return sys.modules["bench_import_parity"]


@pytest.mark.parametrize("version", ["0.7.0", None])
@pytest.mark.parametrize("rel", sorted(DAPO_ON_MAIN_PPO))
def test_dapo_on_main_ppo_stays_on_main_ppo_with_its_own_config(rel: str, version: str | None) -> None:
    r = import_script(OFFICIAL / rel, version, dict(ENVIRON), "gpu")
    assert r.command_argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"], r.command_argv[:5]
    assert r.command_argv[r.command_argv.index("--config-name") + 1] == DAPO_ON_MAIN_PPO[rel]
    assert r.config_dir == "verl/trainer/config"
    assert r.document["algorithm"] == "grpo"
    # the script's DAPO settings stay its own overrides; nothing of the recipe's trainer is added
    assert "reward_model.reward_manager=dapo" in r.extras
    assert not any(a.startswith(("algorithm.filter_groups", "data.gen_batch_size", "reward_model.overlong_buffer"))
                   for a in r.command_argv), r.command_argv
    note = next(n for n in r.notes if n.startswith("the script runs DAPO's reward manager on verl.trainer.main_ppo"))
    assert "recipe.dapo.main_dapo" in note and "imported as algorithm grpo" in note


def test_on_every_verl_an_auto_spec_may_run_on_the_entry_point_is_main_ppo(tmp_path: Path) -> None:
    rel = "0.7.0/recipe/dapo/test_dapo_7b_math.sh"
    r = import_script(OFFICIAL / rel, None, dict(ENVIRON), "gpu")
    assert r.document["verl_version"] == "auto"
    spec = tmp_path / "run.yaml"
    spec.write_text(spec_text(r, rel), encoding="utf-8")
    resolved = load_spec(str(spec), environ={})
    for v in ("0.7.0", "0.9.1"):
        cmd = build_command(resolved, v)
        assert (cmd.version, cmd.entry.module) == (v, "verl.trainer.main_ppo")
        assert not cmd.entry.needs_source_checkout
    plan = make_plan(resolved)
    assert plan.command is not None and plan.command.entry.module == "verl.trainer.main_ppo"


@pytest.mark.parametrize("rel", sorted(DAPO_ON_MAIN_PPO))
def test_the_effective_config_is_the_scripts(rel: str) -> None:
    """verl composes the script's overrides and verlctl's command to the same values on every key the script
    sets, and every key verlctl adds is one verl uses for the script anyway (or a declared setting)."""
    if not verlcompose.available("0.7.0"):
        pytest.skip("verl 0.7.0 config tree not installed")
    out = _parity().run_one(rel)
    assert out.status == "equivalent", (out.status, out.reason, out.differing)
    assert out.compared >= 60 and not out.unmarked, out.unmarked
