"""verl/effects.py, turn 6 of the mutation benchmark (docs/development/mutation.md): seed 8742 (all 18 sites) left
only ``Reader``'s ``frozen=True``, which no test held."""

from __future__ import annotations

import dataclasses

import pytest

from verlctl.verl.effects import AR, readers


def test_the_effect_map_is_immutable() -> None:
    """The readers are module-level and shared by every plan and by the effect-map check: a change through one
    reference (a reader's regex or its strategies) would change what every later lookup reports."""
    (reader,) = readers(f"{AR}.actor.megatron.param_offload", "0.9.1", "megatron", "vllm")
    for attr in ("path", "reads", "strategies", "modes"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(reader, attr, None)
