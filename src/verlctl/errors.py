"""Errors that end a command with one clear line and a non-zero exit code.

Anything a user can cause (bad input, a missing engine, a path that is not there) is raised as a
:class:`VerlctlError`; the CLI prints ``error: <message>`` and exits with its code, never a traceback.
"""

from __future__ import annotations

# Exit codes used across the CLI.
EXIT_OK = 0
EXIT_FAILURE = 1  # the thing ran and failed (training died, diagnose found an error)
EXIT_USAGE = 2  # bad input / invalid spec / findings with errors


class VerlctlError(Exception):
    """A user-facing failure: printed as one line, exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_USAGE, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint

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
