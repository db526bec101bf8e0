"""A reward with variance for the tiny random model (verl's gsm8k reward scores it 0 everywhere, so every GRPO
advantage is 0): the share of digits in the response, plus verl's own gsm8k score. Used through verl's
``reward.custom_reward_function.path`` / ``.name=compute_score``."""

from __future__ import annotations

from typing import Any


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any) -> float:
    from verl.utils.reward_score import default_compute_score

    digits = sum(ch.isdigit() for ch in solution_str)
    share = digits / max(1, len(solution_str))
    return float(default_compute_score(data_source, solution_str, ground_truth, extra_info)) + share
