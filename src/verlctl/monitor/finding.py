"""A classified failure in a log (:class:`Finding`): the record the catalogue produces and the events carry.

A leaf module, so that :mod:`verlctl.monitor.events` (whose ``ErrorFound`` holds one) and
:mod:`verlctl.monitor.catalogue` (which makes them) do not import each other. Importable from the catalogue too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verlctl.checks.findings import Finding as CheckFinding


@dataclass
class Finding:
    """A classified failure in a log: the first line it was seen on, and how often it recurred."""

    category: str
    line: int
    excerpt: str
    message: str
    hint: str
    count: int = 1

    def to_dict(self) -> dict[str, object]:
        return {
            "category": self.category,
            "line": self.line,
            "excerpt": self.excerpt,
            "message": self.message,
            "hint": self.hint,
            "count": self.count,
        }

    def to_check_finding(self) -> CheckFinding:
        """As the project-wide :class:`verlctl.checks.findings.Finding` (code = category)."""
        from verlctl.checks.findings import error

        return error(self.category, self.message, field=f"line {self.line}", hint=self.hint)
