"""inputs/shell_script.py's survivors of a fresh mutation sample (seed 9090): expansions a real launch script
uses, read the way bash reads them."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from verlctl.inputs.shell_script import UNRESOLVED, parse_script

ENTRY = "python3 -m verl.trainer.main_ppo"


def overrides(text: str) -> list[str]:
    return parse_script(textwrap.dedent(text), "t.sh", None).command.overrides


def bash_echo(text: str, expr: str) -> str:
    """What bash itself prints for ``expr`` after the script's assignments (the reference)."""
    return subprocess.run(["bash", "-c", text + f"\nprintf '%s' {expr}"], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        ("M=/models/Qwen3-8B", "`basename $M`"),  # the model name from its path, backquote form
        ("M=/models/Qwen3-8B/", "`dirname $M`"),
        ("X=ABC", "${X,}"),
        ("X=abc", "${X^}"),
        ("X=AbC", "${X,,}"),
        ("X=1", '"x$/y"'),  # a lone $ is a literal character
        ("X=1", '"cost$"'),
    ],
)
def test_expansions_read_as_bash_reads_them(setup: str, expr: str) -> None:
    want = bash_echo(setup, expr)
    assert overrides(f"{setup}\n{ENTRY} trainer.experiment_name={expr}\n") == [f"trainer.experiment_name={want}"]


def test_a_case_change_with_a_pattern_is_reported_unresolved() -> None:
    p = parse_script(f"X=abc\n{ENTRY} trainer.experiment_name=${{X^^a}}\n", "t.sh", None)
    [o] = p.command.overrides
    assert o == f"trainer.experiment_name={UNRESOLVED}${{X^^a}}{UNRESOLVED}"
    assert any("case change with a pattern" in n for n in p.notes)


def test_a_long_command_substitution_is_quoted_to_120_characters() -> None:
    body = "python3 -c 'print(1)' " + "x" * 200
    p = parse_script(f"{ENTRY} trainer.experiment_name=$({body})\n", "t.sh", None)
    [o] = p.command.overrides
    assert o == f"trainer.experiment_name={UNRESOLVED}$({body[:120]}){UNRESOLVED}"
