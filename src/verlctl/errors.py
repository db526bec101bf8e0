"""Errors that end a command with one clear line and a non-zero exit code.

Anything a user can cause (bad input, a missing engine, a path that is not there) is raised as a
:class:`VerlctlError`; the CLI prints ``error: <message>`` and exits with its code, never a traceback.
"""

from __future__ import annotations

import enum
from typing import Any


class ExitCode(enum.IntEnum):
    """Every exit status of ``verlctl`` (the one table: ``docs/scripting.md``, ``verlctl --help`` and
    ``docs/operations.md`` show :data:`EXIT_CODE_MEANINGS`; the commands return or raise these)."""

    OK = 0
    FAILURE = 1
    USAGE = 2
    DECLINED = 3
    TIMEOUT = 4
    INTERRUPTED = 130


#: What each exit status means, in the user's words (documented as is).
EXIT_CODE_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "done: the command did what was asked (`check`/`plan`: no error findings; `diagnose`: no failure "
                 "in the log)",
    ExitCode.FAILURE: "it ran and failed: the training died or did not start, a Docker/ssh/container step failed, "
                      "`diagnose` found a failure, the checkpoint conversion failed",
    ExitCode.USAGE: "bad input, nothing changed: a wrong flag or spec value, a spec with error findings, no such run, "
                    "step or checkpoint, a question that cannot be asked (stdin is not a terminal)",
    ExitCode.DECLINED: "you answered no (\"Launch with these settings?\", \"Write the spec?\"): nothing changed",
    ExitCode.TIMEOUT: "a bounded wait ran out (`export-hf --timeout`): what was started is stopped",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C): nothing changed, or what was started is stopped",
}


def exit_code_table() -> str:
    """The exit-code table as Markdown (docs/scripting.md, docs/operations.md)."""
    rows = ["| exit status | meaning |", "|---|---|"]
    rows += [f"| {int(code)} | {text} |" for code, text in EXIT_CODE_MEANINGS.items()]
    return "\n".join(rows) + "\n"


def exit_code_lines() -> str:
    """The exit-code table as plain lines (the epilog of ``verlctl --help``)."""
    return "\n".join(f"{int(code):>3}  {text}" for code, text in EXIT_CODE_MEANINGS.items())


# The names used across the CLI (aliases of ExitCode).
EXIT_OK = ExitCode.OK
EXIT_FAILURE = ExitCode.FAILURE
EXIT_USAGE = ExitCode.USAGE


class VerlctlError(Exception):
    """A user-facing failure: printed as one line, exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_USAGE, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = int(code)
        self.hint = hint
        self.details: dict[str, Any] | None = None  # with --json: more of the outcome (findings, actions)

    def __str__(self) -> str:
        return self.message


class SpecError(VerlctlError):
    """The run spec (file, env, flags) is malformed or invalid. ``field`` is the spec path."""

    def __init__(self, message: str, field: str | None = None, hint: str | None = None) -> None:
        text = f"{field}: {message}" if field else message
        super().__init__(text, EXIT_USAGE, hint)
        self.field = field


class RuntimeFailure(VerlctlError):
    """Something outside verlctl failed (engine, container, process)."""

    def __init__(self, message: str, hint: str | None = None, code: int = EXIT_FAILURE) -> None:
        super().__init__(message, code, hint)
