"""Reading verl training logs: typed events, the error catalogue, and ``verlctl diagnose``'s engine.

* :mod:`verlctl.monitor.events` -- :class:`LogParser` (incremental: ``feed(text) -> list[Event]``, ``close()``)
  and the events ``Progress``, ``StepMetrics``, ``ValidationMetrics``, ``TotalSteps``, ``Phase``, ``ErrorFound``;
* :mod:`verlctl.monitor.categories` -- the failure categories as data (``CATALOGUE``: signatures, hints,
  recovery), importing nothing of verlctl;
* :mod:`verlctl.monitor.catalogue` -- the matcher that applies them: :class:`Classifier`
  (``feed_line(lineno, line) -> Finding | None``, ``findings()`` root cause first), ``ere_patterns()`` for grep;
* :mod:`verlctl.monitor.diagnose` -- the streaming scanner behind ``verlctl diagnose``.

A live-log watcher needs one object: ``LogParser(Classifier())``; its ``feed`` returns the new events, new
failures included as ``ErrorFound``. The names below are importable from this package (loaded on first use).
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "LogParser": "events",
    "Event": "events",
    "Progress": "events",
    "StepMetrics": "events",
    "ValidationMetrics": "events",
    "TotalSteps": "events",
    "Phase": "events",
    "PhaseKind": "events",
    "ErrorFound": "events",
    "parse_text": "events",
    "parse_file": "events",
    "iter_file_events": "events",
    "Classifier": "catalogue",
    "Finding": "catalogue",
    "CATALOGUE": "categories",
    "classify_lines": "catalogue",
    "ere_patterns": "catalogue",
    "diagnose_stream": "diagnose",
    "diagnose_bytes": "diagnose",
    "Diagnosis": "diagnose",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)
