"""Gaps of the turn-5 mutation sample of monitor/events.py (seed 9411): what a real verl log holds."""

from __future__ import annotations

from verlctl.monitor.catalogue import Classifier
from verlctl.monitor.events import LogParser, ValidationMetrics


def test_validation_values_printed_as_numpy_scalars_or_tensors_are_read() -> None:
    """verl's validation dict holds ``np.float64(...)`` reprs (numpy 2) and, from some reward functions, torch
    tensors with their dtype/device (``tensor(0.7500, dtype=torch.float64)``): the values are numbers, not
    dropped for the parentheses and commas around them."""
    text = ("(TaskRunner pid=7) Initial validation metrics: {'val-core/openai/gsm8k/acc/mean@1': np.float64(0.25), "
            "'val-aux/num_turns/min': np.int64(2), 'val-core/openai/gsm8k/reward/mean@1': tensor(0.5000, dtype=torch.float64), "
            "'val-aux/openai/gsm8k/score/std@1': tensor(0.1250, device='npu:0')}\n")
    events = LogParser(Classifier()).feed(text)
    vals = [e for e in events if isinstance(e, ValidationMetrics)]
    assert len(vals) == 1, events
    assert vals[0].metrics == {"val-core/openai/gsm8k/acc/mean@1": 0.25, "val-aux/num_turns/min": 2,
                               "val-core/openai/gsm8k/reward/mean@1": 0.5,
                               "val-aux/openai/gsm8k/score/std@1": 0.125}, vals[0]
