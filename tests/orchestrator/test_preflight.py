"""The in-container preflight (orchestrator/preflight.py), run here with the real verl config trees of .cache/verl.

It must compose exactly the command run_training.sh runs, from the script's work dir, so that it can never say
OK for a command that fails (F4), say how to get recipe/ (M1), probe the imports an entry point needs (M2), and
report verl's own validate_config as run or "skipped: <why>".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verlctl.orchestrator import preflight
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec

import verlcompose
from conftest import BASE_PATHS


def _plan(**flags):
    p = make_plan(load_spec(None, flags={**BASE_PATHS, **flags}, environ={}))
    assert p.ok, [f.line() for f in p.findings]
    return p


def run_preflight(tmp_path: Path, command, workdir: Path, pythonpath: str | None, payload: dict | None = None):
    """Run the preflight script as launch does (python3 SCRIPT PAYLOAD), from a directory that is not the
    work dir; returns the interpreted outcome and the raw output."""
    doc = payload if payload is not None else json.loads(preflight.payload(command, str(workdir)))
    (tmp_path / preflight.PAYLOAD).write_text(json.dumps(doc))
    (tmp_path / preflight.SCRIPT).write_text(preflight.SOURCE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    res = subprocess.run(
        [sys.executable, str(tmp_path / preflight.SCRIPT), str(tmp_path / preflight.PAYLOAD)],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
    )
    out = res.stdout + res.stderr
    return preflight.interpret(res.returncode, out, command.override_texts()), out


def _need(version: str) -> str:
    if not verlcompose.available(version):
        if os.environ.get("CI"):
            pytest.fail(f"verl {version} missing under {verlcompose.CACHE}")
        pytest.skip(f"verl {version} not under {verlcompose.CACHE}")
    return str(verlcompose.verl_root(version))


def test_0_9_1_one_step_off_composes_from_a_work_dir_without_verl_and_fails_without_the_searchpath(
    tmp_path: Path,
) -> None:
    root = _need("0.9.1")
    workdir = tmp_path / "work"
    workdir.mkdir()
    cmd = _plan(verl_version="0.9.1", mode="one_step_off_policy", **{"train.tensor_parallel": 2}).command
    outcome, out = run_preflight(tmp_path, cmd, workdir, root)
    assert outcome.ok and not outcome.skipped, out
    assert outcome.validation.startswith("skipped: verl.experimental.one_step_off_policy.main_ppo does not call")
    # The command the old script ran (no search path): the preflight now reports the failure it would hit.
    doc = json.loads(preflight.payload(cmd, str(workdir)))
    doc["core_searchpath"] = False
    outcome, out = run_preflight(tmp_path, cmd, workdir, root, doc)
    assert not outcome.ok and "MissingConfigException" in outcome.message, out


def test_0_7_0_recipe_entry_without_recipe_says_how_to_get_it(tmp_path: Path) -> None:
    root = _need("0.7.0")
    workdir = tmp_path / "work"
    workdir.mkdir()
    outcome, out = run_preflight(tmp_path, _plan(verl_version="0.7.0").command, workdir, root)
    assert not outcome.ok, out
    assert "no recipe/dapo/main_dapo.py in" in outcome.message
    assert "git clone --branch v0.7.0" in outcome.message


def test_0_9_1_main_ppo_needs_transfer_queue(tmp_path: Path) -> None:
    root = _need("0.9.1")
    workdir = tmp_path / "work"
    workdir.mkdir()
    try:
        import transfer_queue  # noqa: F401

        pytest.skip("transfer_queue is installed here")
    except ImportError:
        pass
    cmd = _plan(verl_version="0.9.1", algorithm="grpo").command
    outcome, out = run_preflight(tmp_path, cmd, workdir, root)
    assert not outcome.ok, out
    assert outcome.message.startswith("transfer_queue does not import")
    assert "TransferQueue>=0.1.10" in outcome.message


def test_0_7_0_main_ppo_composes_and_reports_why_validate_config_was_skipped(tmp_path: Path) -> None:
    root = _need("0.7.0")
    workdir = tmp_path / "work"
    workdir.mkdir()
    cmd = _plan(verl_version="0.7.0", algorithm="grpo").command
    outcome, out = run_preflight(tmp_path, cmd, workdir, root)
    assert outcome.ok and not outcome.skipped, out
    # verl's __init__ needs torch, which this machine lacks: the validator is reported as skipped, with why.
    assert outcome.validation.startswith("skipped: verl does not import here ("), out
    # A bad key still fails: the preflight composes the real list.
    bad = _plan(verl_version="0.7.0", algorithm="grpo", extra_overrides=["actor_rollout_ref.actor.nope=1"]).command
    outcome, out = run_preflight(tmp_path, bad, workdir, root)
    assert not outcome.ok and outcome.override == "actor_rollout_ref.actor.nope=1", out


def _gpu_grpo(**flags):
    return _plan(verl_version="0.7.0", algorithm="grpo", device="gpu", strategy="fsdp", **flags).command


def test_flash_attn_without_the_flash_attn_package_fails_in_the_preflight_with_the_fix(tmp_path: Path) -> None:
    """Real verl 0.9.1 on an image without flash-attn failed at model init after 235 s (realverl.md, v1), and
    real verl 0.7.0's FSDP actor at its first compute_log_prob (it unpads with flash_attn.bert_padding off an NPU,
    verl/utils/attention_utils.py:27-30): the preflight looks the module up in the target's python3 before
    training starts, naming every line that needs it."""
    import importlib.util

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn is installed here")
    root = _need("0.7.0")
    workdir = tmp_path / "work"
    workdir.mkdir()
    cmd = _gpu_grpo()
    assert "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2" in cmd.override_texts()
    outcome, out = run_preflight(tmp_path, cmd, workdir, root)
    assert not outcome.ok, out
    assert outcome.field == "features"
    assert "flash-attn" in outcome.message and "module flash_attn" in outcome.message
    assert "attention_utils.py:27-30" in outcome.message and "FlashAttention2 has been toggled on" in outcome.message
    assert "`--disable remove_padding --disable flash_attn`" in (outcome.hint or ""), outcome.hint
    # verl 0.7.0 still unpads with flash_attn when only the attention feature is off
    off = _gpu_grpo(**{"features.disable": ["flash_attn"]})
    assert "+actor_rollout_ref.model.override_config.attn_implementation=sdpa" in off.override_texts()
    outcome, out = run_preflight(tmp_path, off, workdir, root)
    assert not outcome.ok and "`--disable remove_padding`" in (outcome.hint or ""), out
    # No trigger: with both off the command needs no package, and composes.
    off = _gpu_grpo(**{"features.disable": ["flash_attn", "remove_padding"]})
    assert "actor_rollout_ref.model.use_remove_padding=False" in off.override_texts()
    outcome, out = run_preflight(tmp_path, off, workdir, root)
    assert outcome.ok and not outcome.skipped, out


def test_the_unpadding_need_cites_verls_lines() -> None:
    """verl 0.7.0 imports flash_attn's unpadding unless on an NPU, at the lines the need cites, from the FSDP actor
    and critic; verl 0.9.1 has a pure-torch fallback (so no 0.9.1 plan needs it)."""
    v070 = Path(_need("0.7.0")) / "verl"
    lines = (v070 / "utils" / "attention_utils.py").read_text().splitlines()
    assert lines[27 - 1].strip() == "if is_npu_available:"
    assert lines[30 - 1].strip() == "from flash_attn.bert_padding import index_first_axis, pad_input, rearrange, unpad_input"
    for rel, line in (("workers/actor/dp_actor.py", 31), ("workers/critic/dp_critic.py", 28)):
        assert "from verl.utils.attention_utils import" in (v070 / rel).read_text().splitlines()[line - 1], rel
    v091 = Path(_need("0.9.1")) / "verl" / "utils" / "attention_utils.py"
    assert "def _fallback_unpad_input(" in v091.read_text()


@pytest.mark.parametrize(("version", "device", "strategy", "disabled", "needed_by"), [
    ("0.9.1", "gpu", "fsdp2", [], ["attn_implementation"]),
    ("0.9.1", "gpu", "fsdp2", ["flash_attn"], []),  # verl 0.9.1 unpads without flash_attn
    ("0.7.0", "gpu", "fsdp2", ["flash_attn"], ["use_remove_padding"]),
    ("0.7.0", "gpu", "fsdp", [], ["use_remove_padding", "attn_implementation"]),
    ("0.7.0", "gpu", "megatron", [], []),  # the Megatron actor does not unpad with attention_utils
    ("0.7.0", "npu", "fsdp2", [], []),  # is_npu_available: verl's own NPU unpadding
    ("0.7.0", "gpu", "fsdp2", ["flash_attn", "remove_padding"], []),
])
def test_the_lines_that_need_flash_attn_follow_verl(version: str, device: str, strategy: str, disabled: list[str],
                                                    needed_by: list[str]) -> None:
    from verlctl.verl.packages import package_checks

    cmd = _plan(verl_version=version, algorithm="grpo", device=device, strategy=strategy,
                **{"features.disable": disabled}).command
    checks = package_checks(cmd)
    assert [c.module for c in checks] == (["flash_attn"] if needed_by else [])
    for key in needed_by:
        assert key in checks[0].message, checks[0].message
    if needed_by:  # one line needs it, or both do (and both features are the fix)
        said = "` needs the Python package" if len(needed_by) == 1 else "` need the Python package"
        assert said in checks[0].message, checks[0].message
        features = "the features off" if len(needed_by) == 2 else "the feature off"
        assert checks[0].hint.startswith(f"turn {features} (`--disable "), checks[0].hint


def test_flash_attention_2_from_extra_overrides_names_extra_overrides(tmp_path: Path) -> None:
    from verlctl.verl.packages import package_checks

    raw = "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2"
    disabled = {"features.disable": ["flash_attn", "remove_padding"]}
    checks = package_checks(_gpu_grpo(**disabled, extra_overrides=[raw]))
    assert [(c.module, c.field) for c in checks] == [("flash_attn", "extra_overrides")]
    assert checks[0].hint == f"change `{raw}` in extra_overrides, or install it in the image (pip install flash-attn)"
    # a feature and an extra line: both named, the field is the feature's
    checks = package_checks(_gpu_grpo(**{"features.disable": ["flash_attn"]}, extra_overrides=[raw]))
    assert [(c.module, c.field) for c in checks] == [("flash_attn", "features")]
    assert checks[0].hint.startswith("turn the feature off (`--disable remove_padding`, or features.disable: "
                                      f"[remove_padding]: verl then trains on padded batches) and change `{raw}`")
    # NPU: the feature goes through transformers' NPU integration (no attn_implementation): nothing is needed.
    npu = _plan(verl_version="0.7.0", algorithm="grpo", device="npu").command
    assert package_checks(npu) == []


def test_interpret_reads_a_missing_package_line() -> None:
    line = 'VERLCTL_PREFLIGHT_MISSING {"module": "m", "message": "msg", "hint": "fix it", "field": "features"}'
    outcome = preflight.interpret(3, "noise\n" + line + "\n", [])
    assert (outcome.ok, outcome.message, outcome.hint, outcome.field) == (False, "msg", "fix it", "features")
