"""A thin layer over questionary: every question of the wizard goes through a :class:`Prompter`.

The prompt_toolkit ``input`` and ``output`` are injectable: the terminal when left ``None``; in tests a
pipe input (``prompt_toolkit.input.create_pipe_input()``, fed with real keystrokes) and a dummy or
string output. Nothing here is mocked: the questions are questionary's own.

Checks are plain functions ``str -> str | None`` (``None``: accepted; a string: the reason it is refused).
They run as the user types (prompt_toolkit's validate-while-typing) and again on Enter; a refused answer
cannot be submitted, the reason stays on screen and the same question is asked again. Every distinct
answer that was refused is kept in :attr:`Prompter.refusals` (secrets masked).

Ctrl-C at any question raises :class:`WizardInterrupted` (exit 130, one line); an input that ends
before the questions do raises :class:`InputEnded`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verlctl.errors import EXIT_USAGE, VerlctlError


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):
        return False

Check = Callable[[str], str | None]
ListCheck = Callable[[list[Any]], str | None]

INTERRUPTED_CODE = 130


class WizardInterrupted(VerlctlError):
    """Ctrl-C at a question: nothing was changed (the answers so far may be kept: see the message)."""

    def __init__(self, message: str = "interrupted: nothing was changed") -> None:
        super().__init__(message, code=INTERRUPTED_CODE)


class InputEnded(VerlctlError):
    """The input closed before every question was answered."""

    def __init__(self) -> None:
        super().__init__("the input ended before every question was answered: nothing was changed", code=EXIT_USAGE)


@dataclass
class Option:
    """One entry of a list question. ``value`` must be a non-empty string (questionary compares values)."""

    title: str
    value: str
    description: str | None = None
    disabled: str | None = None  # why it cannot be chosen (shown next to it)
    checked: bool = False  # checkbox: pre-selected


@dataclass
class Heading:
    """A separator line between groups of options."""

    title: str


@dataclass
class Refusal:
    question: str
    answer: str  # "******" for secrets
    reason: str


@dataclass
class Prompter:
    input: Any = None  # prompt_toolkit Input; None: the terminal
    output: Any = None  # prompt_toolkit Output; None: the terminal
    refusals: list[Refusal] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)  # every question asked, in order

    # ------------------------------------------------------------------------------ questions

    def text(self, message: str, default: str = "", check: Check | None = None,
             instruction: str | None = None) -> str:
        import questionary

        q = questionary.text(
            message, default=default, validate=self._validator(message, check, secret=False),
            instruction=instruction, **self._io(),
        )
        return str(self._ask(message, q))

    def secret(self, message: str, check: Check | None = None, instruction: str | None = None) -> str:
        """Masked input: the terminal shows one ``*`` per character; the value is never recorded."""
        import questionary

        q = questionary.password(
            message, validate=self._validator(message, check, secret=True), instruction=instruction, **self._io()
        )
        return str(self._ask(message, q))

    def select(self, message: str, options: Sequence[Option | Heading], default: str | None = None,
               instruction: str | None = None) -> str:
        import questionary

        choices = self._choices(options)
        values = [o.value for o in options if isinstance(o, Option) and not o.disabled]
        if not values:
            raise VerlctlError(f"{message}: nothing can be chosen")
        if default not in values:
            default = values[0]
        q = questionary.select(message, choices=choices, default=default, instruction=instruction, **self._io())
        return str(self._ask(message, q))

    def checkbox(self, message: str, options: Sequence[Option | Heading], check: ListCheck | None = None,
                 instruction: str | None = None) -> list[str]:
        import questionary

        def validate(selected: list[Any]) -> bool | str:
            if check is None:
                return True
            reason = check(list(selected))
            if reason is None:
                return True
            self._refused(message, ",".join(str(s) for s in selected), reason)
            return reason

        q = questionary.checkbox(message, choices=self._choices(options), validate=validate,
                                 instruction=instruction, **self._io())
        return [str(v) for v in self._ask(message, q)]

    def confirm(self, message: str, default: bool = False) -> bool:
        import questionary

        q = questionary.confirm(message, default=default, **self._io())
        return bool(self._ask(message, q))

    # ------------------------------------------------------------------------------ plumbing

    def _io(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.input is not None:
            out["input"] = self.input
        if self.output is not None:
            out["output"] = self.output
        elif not _isatty(sys.stdout):
            # `verlctl init | tee log`: the questions are drawn on the terminal (stderr), never into the pipe.
            from prompt_toolkit.output import create_output

            out["output"] = create_output(always_prefer_tty=True)
        return out

    def _ask(self, message: str, question: Any) -> Any:
        self.asked.append(message)
        _wrap_refusals(question)
        try:
            answer = question.unsafe_ask()
        except KeyboardInterrupt:
            raise WizardInterrupted() from None
        except EOFError:
            raise InputEnded() from None
        if answer is None:  # questionary's own interrupt handling
            raise WizardInterrupted()
        return answer

    def _refused(self, message: str, answer: str, reason: str) -> None:
        last = self.refusals[-1] if self.refusals else None
        if last is None or (last.question, last.answer, last.reason) != (message, answer, reason):
            self.refusals.append(Refusal(message, answer, reason))

    def _validator(self, message: str, check: Check | None, secret: bool) -> Any:
        if check is None:
            return None
        from prompt_toolkit.validation import ValidationError, Validator

        prompter = self
        run = check

        class _Check(Validator):
            def validate(self, document: Any) -> None:
                reason = run(document.text)
                if reason is not None:
                    prompter._refused(message, "******" if secret else document.text, reason)
                    raise ValidationError(message=reason, cursor_position=len(document.text))

        return _Check()

    @staticmethod
    def _choices(options: Sequence[Option | Heading]) -> list[Any]:
        import questionary

        out: list[Any] = []
        for o in options:
            if isinstance(o, Heading):
                out.append(questionary.Separator(f"── {o.title} ──"))
            else:
                out.append(
                    questionary.Choice(o.title, value=o.value, disabled=o.disabled, checked=o.checked,
                                       description=o.description)
                )
        return out


def _wrap_refusals(question: Any) -> None:
    """Let prompt_toolkit's validation line (where a refusal is shown) wrap over as many lines as the message
    needs instead of being cut at the terminal's edge (its Window is one line high)."""
    try:
        from prompt_toolkit.filters import to_filter
        from prompt_toolkit.layout.containers import Window
        from prompt_toolkit.layout.controls import FormattedTextControl
        from prompt_toolkit.layout.dimension import Dimension

        for c in question.application.layout.walk():
            if isinstance(c, Window) and isinstance(c.content, FormattedTextControl):
                text = c.content.text
                if "ValidationToolbar" in getattr(text, "__qualname__", ""):
                    c.height = Dimension(min=1)
                    c.wrap_lines = to_filter(True)
    except Exception:  # noqa: BLE001 - a layout this code does not know: keep prompt_toolkit's own
        return
