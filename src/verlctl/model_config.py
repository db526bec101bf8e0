"""Reading a Hugging Face ``config.json`` (a leaf module: no imports of its own, so that both detection and the
memory estimate read the model's shape the same way without pulling in the detection package)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multimodal configs keep the language model's shape under a nested key."""
    if any(k in config for k in ("num_hidden_layers", "n_layer", "num_layers")):
        return config
    for key in ("text_config", "llm_config", "language_config", "thinker_config"):
        nested = config.get(key)
        if isinstance(nested, Mapping):
            inner = text_config(nested)
            if any(k in inner for k in ("num_hidden_layers", "n_layer", "num_layers")):
                return inner
    return config


def config_int(cfg: Mapping[str, Any], *keys: str) -> int | None:
    """The first of ``keys`` whose value is an int (not a bool)."""
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
