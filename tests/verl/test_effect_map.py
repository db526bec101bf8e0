"""The effect map (src/verlctl/verl/effects.py): every key verlctl emits has a reader in that verl version's code,
and every cited reader is really there (.cache/verl/<version>; the 0.7.0 recipe sources are fixtures).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from functools import cache

import pytest

from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec
from verlctl.verl.effects import AR, EFFECTS, VERSIONS, readers

import verlcompose
from conftest import BASE_PATHS


def _need(version: str) -> None:
    if not verlcompose.available(version):
        if os.environ.get("CI"):
            pytest.fail(f"verl {version} missing under {verlcompose.CACHE} (.ci/run installs it)")
        pytest.skip(f"verl {version} not under {verlcompose.CACHE}")


source_lines = cache(verlcompose.source_lines)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_cited_reader_is_in_the_verl_source(version: str) -> None:
    _need(version)
    bad = []
    for key, per_version in EFFECTS.items():
        for reader in per_version.get(version, ()):
            lines = source_lines(version, reader.path)
            if lines is None:
                bad.append(f"{key}: {reader.path} does not exist in verl {version}")
            elif not any(re.search(reader.reads, line) for line in lines):
                bad.append(f"{key}: no line of {reader.path} matches {reader.reads!r}")
    assert not bad, "\n".join(bad)


def _combinations():
    masks = ("0000000", "1111111", "1111100", "1111101", "0010100", "1100001")
    extras = (
        {},
        {"features.disable": ["chunked_prefill", "prefix_cache", "flash_attn", "gradient_checkpointing"]},
        {"features.enable": ["prefix_cache", "chunked_prefill"], "train.gen_batch_size": 64, "train.warmup_steps": 5},
    )
    for version, algorithm, mode, strategy, device, mask, engine, extra in itertools.product(
        VERSIONS, ("dapo", "grpo"), ("sync", "one_step_off_policy"), ("megatron", "fsdp", "fsdp2"), ("npu", "gpu"),
        masks, ("vllm", "sglang"), extras,
    ):
        flags = {**BASE_PATHS, "verl_version": version, "algorithm": algorithm, "mode": mode, "strategy": strategy,
                 "device": device, "features.mask": mask, "train.rollout_engine": engine, **extra}
        if mode == "one_step_off_policy":
            flags["train.tensor_parallel"] = 2
        yield flags


def test_every_emitted_key_has_a_reader_in_its_version() -> None:
    """`plan` over versions x algorithms x modes x strategies x devices x masks x rollout engines x explicit
    feature states: no key without a reader on that code path."""
    missing: dict[str, set[str]] = {}
    planned = 0
    for flags in _combinations():
        plan = make_plan(load_spec(None, flags=flags, environ={}))
        if not plan.ok:
            continue
        planned += 1
        for line in plan.command.overrides:
            if line.section == "extra":
                continue  # the user's own overrides, passed as written
            if not readers(line.key, plan.command.version, flags["strategy"], flags["train.rollout_engine"]):
                where = f"{plan.command.version} {flags['strategy']} {flags['train.rollout_engine']}"
                missing.setdefault(line.key, set()).add(where)
    assert planned > 500
    assert not missing, "\n".join(f"{k}: no reader on {sorted(v)}" for k, v in sorted(missing.items()))


def test_the_map_has_no_reader_for_what_the_audit_found_ineffective() -> None:
    """What verlctl used to emit and verl did not read (audit S2, S3, F1, the seed's grad_offload) has no reader:
    emitting it again would fail the test above."""
    ar = "actor_rollout_ref"
    assert not readers(f"{ar}.actor.use_torch_compile", "0.9.1", "fsdp", "vllm")
    assert not readers(f"{ar}.actor.use_torch_compile", "0.7.0", "megatron", "vllm")
    assert not readers("algorithm.filter_groups.max_num_gen_batches", "0.9.1", "megatron", "vllm")
    assert not readers("data.gen_batch_size", "0.9.1", "megatron", "vllm")
    assert not readers(f"{ar}.actor.megatron.grad_offload", "0.9.1", "megatron", "vllm")
    assert not readers(f"{ar}.rollout.enable_prefix_caching", "0.9.1", "fsdp", "sglang")
    assert not readers(f"{ar}.rollout.max_num_batched_tokens", "0.7.0", "fsdp", "sglang")


def test_the_effect_map_is_immutable() -> None:
    """The readers are module-level and shared by every plan and by the effect-map check: a change through one
    reference (a reader's regex or its strategies) would change what every later lookup reports."""
    (reader,) = readers(f"{AR}.actor.megatron.param_offload", "0.9.1", "megatron", "vllm")
    for attr in ("path", "reads", "strategies", "modes"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(reader, attr, None)
