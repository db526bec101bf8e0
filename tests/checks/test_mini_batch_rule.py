"""The mini batch against the batch, as verl's first actor update takes it (the ``mini_batch_size`` rule).

verl 0.9.1's engine workers (every mode) and 0.7.0's Megatron actor cut each data-parallel rank's share of the
batch with ``make_iterator``, which asserts the share is a whole number of per-rank mini batches (0.9.1
``utils/tensordict_utils.py:588``, 0.7.0 ``protocol.py:827`` from ``megatron_actor.py:369``): a mini batch that
does not divide the batch, or exceeds it, stops the first update. verl 0.7.0's FSDP actor splits the batch
(``dp_actor.py:430``): an uneven last mini batch runs, and a mini batch above the batch is one scaled update
(``dp_actor.py:465``) unless ``validate_config`` refuses it first (main_ppo and the one-step-off recipe, without
dynamic batching; the DAPO recipe's ``main_dapo`` never calls it). tests/verl/test_verl_oracle_matrix.py runs these
cases' commands through verl's own code.
"""

from __future__ import annotations

from typing import Any

import pytest

from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS

UNEVEN = {"train.train_batch_size": 48, "train.mini_batch_size": 32}
OVER = {"train.mini_batch_size": 64}  # train_batch_size 32
NO_DYN = {"features.disable": ["dynamic_batch"]}


def _codes(**flags: Any) -> tuple[bool, dict[str, str]]:
    plan = make_plan(load_spec(None, flags={**BASE_PATHS, "cluster.devices": list(range(8)), **flags}, environ={}))
    return plan.ok, {f.code: f.severity.value for f in plan.findings if f.code.startswith("mini_batch")}


@pytest.mark.parametrize(("flags", "ok", "codes"), [
    # the iterator's assert: 0.9.1 every strategy, 0.7.0 Megatron
    ({"verl_version": "0.9.1", "strategy": "fsdp", **UNEVEN}, False, {"mini_batch_iterator": "error"}),
    ({"verl_version": "0.9.1", "strategy": "megatron", "mode": "colocate_async", **UNEVEN}, False,
     {"mini_batch_iterator": "error"}),
    ({"verl_version": "0.7.0", "strategy": "megatron", **UNEVEN}, False, {"mini_batch_iterator": "error"}),
    ({"verl_version": "0.7.0", "strategy": "megatron", **OVER}, False, {"mini_batch_size": "error"}),
    ({"verl_version": "0.9.1", "strategy": "fsdp2", **OVER}, False, {"mini_batch_size": "error"}),
    # 0.7.0 FSDP splits: uneven runs; over the batch runs where validate_config does not refuse it
    ({"verl_version": "0.7.0", "strategy": "fsdp", **UNEVEN}, True, {"mini_batch_uneven": "warning"}),
    ({"verl_version": "0.7.0", "strategy": "fsdp", "algorithm": "grpo", **OVER}, True,
     {"mini_batch_over_batch": "warning"}),
    ({"verl_version": "0.7.0", "strategy": "fsdp2", "algorithm": "dapo", **OVER, **NO_DYN}, True,
     {"mini_batch_over_batch": "warning"}),  # main_dapo: no validate_config
    ({"verl_version": "0.7.0", "strategy": "fsdp", "algorithm": "grpo", **OVER, **NO_DYN}, False,
     {"mini_batch_size": "error"}),  # main_ppo validate_config
    ({"verl_version": "0.7.0", "strategy": "fsdp", "algorithm": "dapo", "mode": "one_step_off_policy",
      "train.tensor_parallel": 2, **OVER, **NO_DYN}, False, {"mini_batch_size": "error"}),  # the recipe validates
    # separate/fully async: their own batch rule (train == parameter_sync_step * mini) speaks for uneven ones
    ({"verl_version": "0.9.1", "strategy": "fsdp", "mode": "separate_async", "train.tensor_parallel": 2, **UNEVEN},
     False, {}),
    # a mini batch dividing the batch: nothing
    ({"verl_version": "0.9.1", "strategy": "fsdp", "train.train_batch_size": 64, "train.mini_batch_size": 32}, True, {}),
])
def test_the_mini_batch_verdict_is_verls(flags: dict[str, Any], ok: bool, codes: dict[str, str]) -> None:
    assert _codes(**flags) == (ok, codes)


def test_the_iterator_finding_names_the_share_and_the_fix() -> None:
    plan = make_plan(load_spec(None, flags={**BASE_PATHS, "verl_version": "0.9.1", "strategy": "fsdp",
                                            "cluster.devices": list(range(8)), **UNEVEN}, environ={}))
    f = next(f for f in plan.findings if f.code == "mini_batch_iterator")
    assert "each of the 8 data-parallel ranks gets 48 sequences, not a whole number of mini batches of 32" in f.message
    assert "tensordict_utils.py:588" in f.message and f.field == "train.mini_batch_size"
    assert f.hint is not None and "1, 2, 3, 4, 6, 8, 12, 16, 24, 48" in f.hint


@pytest.mark.parametrize(("flags", "says"), [
    ({"verl_version": "0.7.0", "strategy": "megatron", **UNEVEN},
     ("verl 0.7.0's Megatron actor asserts it", "protocol.py:827")),
    ({"verl_version": "0.7.0", "strategy": "megatron", **OVER},
     ("verl 0.7.0's Megatron actor asserts it", "'make_iterator ... % mini_batch_size == 0'")),
    ({"verl_version": "0.9.1", "strategy": "fsdp", **OVER},
     ("verl 0.9.1's engine workers assert it", "'make_iterator ... % mini_batch_size == 0'")),
    ({"verl_version": "0.7.0", "strategy": "fsdp", "algorithm": "grpo", **OVER, **NO_DYN},
     ("verl validate_config: 'train_batch_size ... must be >= actor.ppo_mini_batch_size'",)),
    ({"verl_version": "0.7.0", "strategy": "fsdp", "algorithm": "grpo", **OVER},
     ("updates once per step on the whole batch", "each update is 32/64 of a full one", "dp_actor.py:465")),
])
def test_each_verdict_names_the_verl_code_that_decides_it(flags: dict[str, Any], says: tuple[str, ...]) -> None:
    plan = make_plan(load_spec(None, flags={**BASE_PATHS, "cluster.devices": list(range(8)), **flags}, environ={}))
    f = next(f for f in plan.findings if f.code.startswith("mini_batch"))
    for text in says:
        assert text in f.message, (text, f.message)
    other = "verl 0.9.1's engine workers" if "0.7.0" in flags["verl_version"] else "Megatron actor"
    assert other not in f.message
