"""The data-parallel size the batch rules divide by is verl's: world / (TP*PP*CP) for Megatron, world / the
Ulysses sequence-parallel size for FSDP (verl 0.7.0 ``fsdp_workers.py:172,243``, 0.9.1
``engine/fsdp/transformer_impl.py:652``). One divisor (``RuleCtx.dp``), every rule that divides by DP uses it,
and the official scripts verl runs with SP are planned."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from verlctl.checks.rules import RULES, SP_ENGINE_KEY, SP_KEY, RuleCtx
from verlctl.checks.spec_checks import check_spec
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec
from verlctl.verl.compose import build_command

import verlcompose
from conftest import BASE_PATHS, FIXTURES

FIXTURES = FIXTURES / "official-scripts"

#: The rules whose verdict divides by the trainer's data-parallel size (read from their source below: a new
#: one must be added here, and so be looked at).
DP_RULES = {"batch_dp_divisibility", "mini_batch_dp", "mini_batch_normalized", "micro_batch_divisibility", "mini_batch_size",
            "batch_micro_divisibility"}


def _resolved(version: str, **flags: Any) -> Any:
    return load_spec(None, flags={**BASE_PATHS, "verl_version": version, "cluster.devices": list(range(8)), **flags},
                     environ={})


def _ctx(version: str, **flags: Any) -> RuleCtx:
    r = _resolved(version, **flags)
    return RuleCtx(r, build_command(r).features, version)


def test_every_rule_that_divides_by_dp_uses_the_one_divisor() -> None:
    """No rule computes a data-parallel size of its own: those that divide by DP read ``ctx.dp``."""
    using = {r.name for r in RULES if "ctx.dp" in inspect.getsource(r.check)}
    assert using == DP_RULES
    for r in RULES:
        src = inspect.getsource(r.check)
        assert "total //" not in src and "// ctx.model_parallel" not in src, r.name  # a DP of its own
    dp_src = inspect.getsource(RuleCtx.dp.func)  # type: ignore[attr-defined]
    assert "dp_divisor" in dp_src


@pytest.mark.parametrize(("strategy", "extra", "version", "dp"), [
    ("fsdp", [], "0.7.0", 8),
    ("fsdp", [f"{SP_KEY}=2"], "0.7.0", 4),
    ("fsdp2", [f"+{SP_KEY}=4"], "0.9.1", 2),
    ("fsdp", [f"{SP_ENGINE_KEY}=2"], "0.9.1", 4),  # 0.9.1's engine key
    ("fsdp", [f"{SP_ENGINE_KEY}=2"], "0.7.0", 8),  # not read by 0.7.0's workers
    ("megatron", [f"{SP_KEY}=2"], "0.9.1", 1),  # Megatron: TP4*PP2 decide, Ulysses is FSDP's
    ("fsdp", [f"{SP_KEY}=3"], "0.7.0", 0),  # 8 devices do not split into SP 3
])
def test_dp_is_verls(strategy: str, extra: list[str], version: str, dp: int) -> None:
    assert _ctx(version, strategy=strategy, extra_overrides=extra).dp == dp


def _verl_070_fsdp_normalised(mini: int, n: int, world: int, sp: int) -> int:
    """verl 0.7.0 fsdp_workers.py:242-243: ppo_mini_batch_size *= n; //= world // sp."""
    return mini * n // (world // sp)


#: (rule code, version, flags, SP): the verdict with and without SP must follow verl's divisor both ways.
CASES = [
    # refused SP-blind although verl accepts: mini 1 * n 4 / DP 8 = 0; with SP 4 verl divides by DP 2: 2
    ("mini_batch_normalized", "0.7.0",
     {"train.mini_batch_size": 1, "train.responses_per_prompt": 4, "train.train_batch_size": 8}, 4),
    # 12 sequences over 8 ranks: uneven; over 4 (SP 2): even
    ("batch_dp_divisibility", "0.7.0", {"train.train_batch_size": 6, "train.responses_per_prompt": 2,
                                        "train.mini_batch_size": 6}, 2),
    ("mini_batch_dp", "0.9.1", {"train.train_batch_size": 12, "train.mini_batch_size": 6,
                                "train.responses_per_prompt": 2}, 2),
]


@pytest.mark.parametrize(("code", "version", "flags", "sp"), CASES, ids=[c[0] for c in CASES])
def test_sp_lifts_a_refusal_verl_does_not_make(code: str, version: str, flags: dict[str, Any], sp: int) -> None:
    base = {"strategy": "fsdp", **flags}
    blind = [f.code for f in check_spec(_resolved(version, **base), build_command(_resolved(version, **base)).features,
                                        version)]
    assert code in blind  # without SP, DP is 8 and the rule fires
    r = _resolved(version, **base, extra_overrides=[f"{SP_KEY}={sp}"])
    assert code not in [f.code for f in check_spec(r, build_command(r).features, version)]


def test_sp_catches_a_micro_batch_verl_refuses() -> None:
    """The other direction: mini*n = 20 over DP 8 normalises to 2 (micro 2 divides it), but with SP 2 verl
    divides by DP 4: 5, and fsdp_workers.py:256 asserts 5 % 2 == 0."""
    flags = {"strategy": "fsdp", "train.train_batch_size": 10, "train.mini_batch_size": 10,
             "train.responses_per_prompt": 2, "train.micro_batch_size_per_device": 2}
    assert _verl_070_fsdp_normalised(10, 2, 8, 1) % 2 == 0 and _verl_070_fsdp_normalised(10, 2, 8, 2) % 2 == 1
    plain = _resolved("0.7.0", **flags)
    assert "micro_batch_divisibility" not in [f.code for f in check_spec(plain, build_command(plain).features, "0.7.0")]
    sp = _resolved("0.7.0", **flags, extra_overrides=[f"{SP_KEY}=2"])
    found = {f.code: f for f in check_spec(sp, build_command(sp).features, "0.7.0")}
    assert "micro_batch_divisibility" in found and "normalized mini batch 5" in found["micro_batch_divisibility"].message


def test_sp_that_does_not_divide_the_devices_is_refused() -> None:
    r = _resolved("0.7.0", strategy="fsdp", extra_overrides=[f"{SP_KEY}=3"])
    found = [f for f in check_spec(r, build_command(r).features, "0.7.0") if f.code == "parallel_divisibility"]
    assert len(found) == 1 and "Ulysses" in found[0].message and found[0].field == "extra_overrides"


@pytest.mark.parametrize(("rel", "version", "warned"), [
    # F4-2: SP 2 on 2 x 16 NPUs: mini 1 * n 16 / DP 16 = 1 (verl's own run reaches init_workers)
    ("0.7.0/recipe/dapo/run_dapo_qwen3_14b_base_npu.sh", "0.7.0", None),
    # F4-9: verl's NPU profiling CI runs GRPO with verl's default rollout.n = 1
    ("0.9.0/tests/special_npu/run_qwen3_8b_grpo_profiling.sh", "0.9.1", "rollout_n"),
])
def test_official_scripts_verl_runs_are_planned(rel: str, version: str, warned: str | None, tmp_path: Path) -> None:
    if not verlcompose.available(version):
        pytest.skip(f"verl {version} not installed")
    from verlctl.importer import import_script, spec_text

    result = import_script(FIXTURES / rel, version, {"HOME": "/home/verl", "PWD": "/verl"})
    path = tmp_path / "run.yaml"
    path.write_text(spec_text(result, rel), encoding="utf-8")
    plan = make_plan(load_spec(path, environ={}))
    assert plan.ok, [f.line() for f in plan.findings if f.severity.value == "error"]
    if warned:
        assert warned in {f.code for f in plan.findings}
