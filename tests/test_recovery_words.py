"""Recovery in words that match what happened: the OOM give-up's advice and reason, the words for an attempt
that failed again, the failing step, and the hint after the ladder was climbed."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from verlctl.monitor.recovery import History, decide, oom_advice, rollout_oom_advice
from verlctl.spec.model import RunSpec
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS

_MOVE = re.compile(r"^(lower|shorten|raise) (\S+) from (\S+) to (\S+)")


def _moves(advice: list[str]) -> list[tuple[str, str, float, float]]:
    out = []
    for line in advice:
        m = _MOVE.match(line)
        assert m is not None, line
        out.append((m.group(1), m.group(2), float(m.group(3)), float(m.group(4))))
    return out


@pytest.mark.parametrize("length", [16, 32, 255, 256, 300, 384, 512, 1024, 8192])
def test_oom_advice_never_moves_a_value_the_wrong_way_or_to_the_value_it_has(length: int) -> None:
    for util, micro, n in itertools.product([0.3, 0.35, 0.36, 0.6, 0.9], [1, 2, 3], [1, 4, 5, 8]):
        spec = RunSpec.model_validate({"train": {
            "max_response_length": length, "rollout_memory_utilization": util,
            "micro_batch_size_per_device": micro, "responses_per_prompt": n}})
        for advice in (oom_advice(spec), rollout_oom_advice(spec)):
            for verb, key, old, new in _moves(advice):
                assert (new < old) if verb in ("lower", "shorten") else (new > old), (verb, key, old, new)
    spec = RunSpec.model_validate({"train": {"max_response_length": length}})
    shorten = [a for a in oom_advice(spec) if "max_response_length" in a]
    # RV4-1: 32 -> 256 lengthened it; 256 -> 256 changed nothing
    assert bool(shorten) == (length > 256), shorten
    if length == 1024:
        assert shorten == ["shorten train.max_response_length from 1024 to 512"]


def test_the_give_up_reason_names_each_rung_and_why_it_was_not_climbed(tmp_path: Path) -> None:
    # RV4-2a: offload added by the ladder, recompute skipped by the estimate (FSDP checkpoints activations
    # already): "every memory feature is already on (or disabled)" was false
    from test_memory_fit import model_dir

    flags = {"algorithm": "dapo", "strategy": "fsdp", "device": "npu", "cluster.device_memory_gib": 64.0,
             "cluster.host_memory_gib": 2048.0, "paths.model": model_dir(tmp_path, "Qwen3-14B"),
             "train.tensor_parallel": 2, "train.pipeline_parallel": 1}
    spec = load_spec(None, flags={**BASE_PATHS, **flags}, environ={}).spec
    on = {"remove_padding": True, "dynamic_batch": True, "gradient_checkpointing": True, "offload": True}
    d = decide("device_oom", spec, on, History(oom_retries=1, added=["offload"]))
    assert not d.restart
    assert "already on (or disabled)" not in d.reason, d.reason
    assert "offload is on (added by the ladder)" in d.reason, d.reason
    assert "recompute was skipped: the memory estimate says it cannot help" in d.reason, d.reason
    # a rung the user disabled is said as such
    spec2 = load_spec(None, flags={**BASE_PATHS, **flags, "features.disable": ["recompute"]}, environ={}).spec
    d2 = decide("device_oom", spec2, on, History(oom_retries=1, added=["offload"]))
    assert "recompute is disabled (features.disable)" in d2.reason, d2.reason
