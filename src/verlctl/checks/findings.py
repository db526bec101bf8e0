"""The findings model shared by spec checks, machine checks, launch and diagnosis."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from pydantic import BaseModel, ConfigDict


class Severity(str, Enum):
    ERROR = "error"  # blocks the run
    WARNING = "warning"  # runs, but probably not what the user wants
    INFO = "info"  # an explanation (e.g. a seed rule verl does not enforce)


class Finding(BaseModel):
    """One result of a check: stable ``code``, ``severity``, the spec path in ``field``."""

    model_config = ConfigDict(frozen=True)

    code: str
    severity: Severity
    field: str | None = None
    message: str
    hint: str | None = None

    def line(self) -> str:
        where = f" [{self.field}]" if self.field else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{self.severity.value}: {self.code}{where}: {self.message}{hint}"


def error(code: str, message: str, field: str | None = None, hint: str | None = None) -> Finding:
    return Finding(code=code, severity=Severity.ERROR, field=field, message=message, hint=hint)


def warning(code: str, message: str, field: str | None = None, hint: str | None = None) -> Finding:
    return Finding(code=code, severity=Severity.WARNING, field=field, message=message, hint=hint)


def info(code: str, message: str, field: str | None = None, hint: str | None = None) -> Finding:
    return Finding(code=code, severity=Severity.INFO, field=field, message=message, hint=hint)


#: Info findings that only say a value is fine although some launch scripts refuse it (verl does not): kept in
#: ``--json`` and the plan, left out of the printed list, so that what a check prints is what needs a look.
REASSURING = frozenset({"seed_rule_tp_pp_per_node", "seed_rule_gen_tp"})


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)


_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: _ORDER[f.severity])
