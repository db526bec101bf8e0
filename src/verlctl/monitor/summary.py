"""A small log summary for status / launch verification: root-cause findings, progress, recent steps."""

from __future__ import annotations

from dataclasses import dataclass, field

from verlctl.monitor.catalogue import Finding
from verlctl.monitor.diagnose import diagnose_bytes
from verlctl.monitor.events import Number, StepMetrics, split_metrics


@dataclass
class Step:
    step: int
    metrics: dict[str, Number]


class _RecentSteps:
    """A step sink keeping the last ``keep`` steps (parsed)."""

    def __init__(self, keep: int = 20) -> None:
        self.keep = keep
        self.steps: list[Step] = []

    def fast(self, step: int, body: bytes) -> None:
        self._add(Step(step, split_metrics(body.decode(errors="replace")).metrics))

    def event(self, event: StepMetrics) -> None:
        self._add(Step(event.step, dict(event.metrics)))

    def flush(self) -> None:
        pass

    def _add(self, s: Step) -> None:
        self.steps.append(s)
        if len(self.steps) > self.keep:
            del self.steps[0]


@dataclass
class Summary:
    findings: list[Finding]
    progress: dict[str, int | None] | None
    steps: list[Step] = field(default_factory=list)


def diagnose_text(text: str, keep_steps: int = 20) -> Summary:
    sink = _RecentSteps(keep_steps)
    d = diagnose_bytes(text.encode("utf-8", errors="replace"), sink)
    return Summary(d.findings, d.progress, sink.steps)
