"""The spec checks' numbers as the user reads them (issue 16, ``reference/mutation.md``): which device count
a one-step-off rule was checked against, the valid choices a hint lists, and why checkpoints are missing.
Asserted on the findings of `verlctl plan` / `check`, not on the rules' internals, so that they hold
however the rules module is organised."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from verlctl.checks.findings import Finding
from verlctl.checks.rules import RULES
from verlctl.commands.check import spec_findings
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS

OSO = {"mode": "one_step_off_policy", "cluster.devices": list(range(8)), "train.trainer_devices": 4,
       "train.rollout_devices": 4}  # fmt: skip


def only(code: str, **flags: Any) -> Finding:
    found = [f for f in spec_findings(load_spec(None, flags={**BASE_PATHS, **flags}, environ={}))[0] if f.code == code]
    assert len(found) == 1, found
    return found[0]


def test_one_step_off_training_layout_is_checked_against_the_trainer_devices() -> None:
    f = only("parallel_divisibility", **OSO, **{"train.tensor_parallel": 4, "train.pipeline_parallel": 2})
    assert f.message.startswith("4 training devices are not divisible by TP*PP*CP = 4*2*1 = 8")
    assert f.hint is not None and f.hint.endswith("dividing 4: 1, 2, 4")


def test_one_step_off_rollout_layout_is_checked_against_the_rollout_devices() -> None:
    f = only("rollout_divisibility", **OSO, strategy="fsdp", **{"train.rollout_tensor_parallel": 8})
    assert f.message.startswith("rollout world size 4 is not divisible by the rollout TP 8")
    assert f.hint is not None and f.hint.endswith("dividing 4: 1, 2, 4")
    r = only("rollout_replica_nodes", **{**OSO, "train.rollout_devices": 3}, strategy="fsdp",
             **{"train.rollout_tensor_parallel": 4})  # fmt: skip
    assert "not a multiple of the 3 devices per node" in r.message
    assert r.hint == "use a rollout TP <= 3 or a multiple of it"


def test_a_single_node_counts_as_one_node() -> None:
    f = only("parallel_divisibility", **{"train.tensor_parallel": 4, "train.pipeline_parallel": 4})
    assert f.message.startswith("8 training devices are not divisible by TP*PP*CP = 4*4*1 = 16")
    assert f.hint is not None and f.hint.endswith("dividing 8: 1, 2, 4, 8")


def test_hints_list_every_divisor() -> None:
    f = only("micro_batch_divisibility", strategy="fsdp", **{"train.micro_batch_size_per_device": 3,
                                                                "features.disable": ["dynamic_batch"]})  # fmt: skip
    assert "normalized mini batch 32" in f.message
    assert f.hint is not None and f.hint.endswith("dividing 32: 1, 2, 4, 8, 16, 32")
    one = only("micro_batch_divisibility", strategy="fsdp", **{"train.micro_batch_size_per_device": 2,
               "train.train_batch_size": 1, "train.responses_per_prompt": 8, "features.disable": ["dynamic_batch"]})  # fmt: skip
    assert one.hint is not None and one.hint.endswith("dividing 1: 1")


def test_batch_numbers_in_the_messages() -> None:
    dp = only("batch_dp_divisibility", strategy="fsdp", **{"train.train_batch_size": 5, "train.responses_per_prompt": 4})
    assert "= 20 sequences cannot be split evenly over 8 data-parallel ranks" in dp.message
    norm = only("mini_batch_normalized", strategy="fsdp", **{"train.mini_batch_size": 1, "train.responses_per_prompt": 2})
    assert "= 1*2/8 is 0" in norm.message
    mega = only("batch_micro_divisibility", **{"train.tensor_parallel": 1, "train.pipeline_parallel": 1,
                "features.disable": ["dynamic_batch"], "train.train_batch_size": 12, "train.mini_batch_size": 8,
                "train.responses_per_prompt": 2, "train.micro_batch_size_per_device": 2})  # fmt: skip
    assert mega.message.startswith("24 sequences are not divisible by DP*micro = 8*2")


def test_no_checkpoints_says_they_are_never_saved() -> None:
    f = only("no_checkpoints", **{"train.save_freq": -1})
    assert "never" in f.message and "starts again from step 0" in f.message


def test_an_unknown_restart_category_lists_the_known_ones() -> None:
    from verlctl.failures import CATEGORIES

    f = only("restart_category", **{"recovery.restart_on": ["device_oom", "hccl_timout"]})
    assert "'hccl_timout'" in f.message
    assert f.hint == f"known: {', '.join(CATEGORIES)}"


TWO_NODES = {"mode": "one_step_off_policy", "cluster.devices": list(range(8)), "strategy": "fsdp",
             "cluster.nodes": ["192.0.2.1", "192.0.2.2"], "train.train_batch_size": 10,
             "train.responses_per_prompt": 2}  # fmt: skip


def test_a_node_split_trains_on_the_nodes_the_rollout_leaves() -> None:
    # rollout_nodes 1 of 2: the trainer has one node's 8 devices (not 16)
    split = only("oso_batch_rule", **TWO_NODES, **{"train.rollout_nodes": 1})
    assert "divisible by the training devices (8)" in split.message
    assert "over 8 data-parallel ranks" in only("batch_dp_divisibility", **TWO_NODES, **{"train.rollout_nodes": 1}).message
    # no node split: both share every node, the trainer has trainer_devices (4) on each of the 2 nodes
    assert "divisible by the training devices (8)" in only("oso_batch_rule", **TWO_NODES).message
    three = {**TWO_NODES, "cluster.nodes": ["192.0.2.1", "192.0.2.2", "192.0.2.3"], "train.train_batch_size": 12}
    assert "divisible by the training devices (16)" in only("oso_batch_rule", **three, **{"train.rollout_nodes": 1}).message
    f = only("node_split", **TWO_NODES, **{"train.rollout_nodes": 2})
    assert f.message.startswith("rollout_nodes (2) must leave at least one of the 2 nodes")
    assert f.hint == "use rollout_nodes <= 1, or list more nodes"


def test_rules_that_divide_by_the_data_parallel_size_survive_a_layout_that_does_not_divide() -> None:
    # TP 3 does not divide 8 devices (DP is then 0): the layout error is reported, nothing divides by 0
    for version in ("0.7.0", "0.9.1"):
        f = only("parallel_divisibility", verl_version=version, **{"train.tensor_parallel": 3,
                 "train.pipeline_parallel": 1})  # fmt: skip
        assert f.message.startswith("8 training devices are not divisible by TP*PP*CP = 3*1*1 = 3")


def test_zero_agent_loop_workers_do_not_break_the_check() -> None:
    found = spec_findings(load_spec(None, flags={**BASE_PATHS, "extra_overrides": [
        "actor_rollout_ref.rollout.agent.num_workers=0"]}, environ={}))[0]  # fmt: skip
    assert not [f for f in found if f.code == "agent_loop_chunks"]


def test_the_rule_table_is_immutable() -> None:
    """RULES is module-level and shared by every check: a rule changed through one reference changes them all."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        attr = "versions"  # (an assignment would not type-check: the fields are read-only)
        setattr(RULES[0], attr, None)
