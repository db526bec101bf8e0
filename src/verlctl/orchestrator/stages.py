"""The one loop of a launch (and, with fewer stages, of a relaunch): the orchestrator walks the stages
(``backends.base.Stage``) and each step calls down into the backend."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from verlctl.backends.base import Stage


def walk(stages: tuple[Stage, ...], steps: Mapping[Stage, Callable[[], None]]) -> None:
    """The one loop of a launch (and, with fewer stages, of a relaunch): each stage's step, in order. A stage
    without a step is a programming error (the backend planned a stage it cannot take)."""
    missing = [s.value for s in stages if s not in steps]
    if missing:
        raise ValueError(f"no step for the stages {missing}")
    for stage in stages:
        steps[stage]()
