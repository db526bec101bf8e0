"""inputs/shell_script.py read against bash itself: glob patterns with an escaped character or two stars, a
tilde after a colon in an assignment, and a sourced file that the import cannot follow (it says so)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from verlctl.inputs.shell_script import UNRESOLVED, parse_script

ENTRY = "python3 -m verl.trainer.main_ppo"
HOME = "/h"


def bash_words(setup: str, expr: str, cwd: Path | None = None) -> list[str]:
    """The words bash passes for ``expr`` after the script's lines (the reference), one per line."""
    out = subprocess.run(["bash", "-c", setup + f"\nprintf '%s\\n' {expr}"], capture_output=True, text=True,
                         check=True, cwd=cwd, env={"HOME": HOME, "PATH": "/usr/bin:/bin"}).stdout
    return out.split("\n")[:-1]


def imported(setup: str, expr: str) -> tuple[list[str], list[str]]:
    p = parse_script(f"{setup}\n{ENTRY} {expr}\n", "t.sh", {"HOME": HOME})
    return p.command.argv[3:], p.notes


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        # an escaped glob character matches itself, and the pattern goes on after it
        ('Y="*abc"', "a=${Y#\\*a}"),
        ('Y="*abc"', "a=${Y#\\*ab}"),
        ('Y="?xyz"', "a=${Y%\\?xyz}${Y#\\?x}"),
        ('Y="a*b*c"', "a=${Y//\\*b/-}"),
        # two stars with a literal between them: the literal must be there for the pattern to match
        ("X=b", "a=${X#*a*b}"),
        ("X=b", "a=${X##*a*b}${X%*a*b}${X%%*a*b}"),
        ("X=xab", "a=${X#*a*b}"),
        ("X=bab", "a=${X#*a*b}/${X%b*a*}"),
        ("X=ba", "a=${X/*a*b/Z}"),
        # a lone tilde after a colon, second to last in an assignment that goes on after it
        ("X=z\nP=~:~:$X", "$P"),
        ("X=z\nP=~:~:~:$X", "$P"),
        ("X=z\nP=a:~:$X:~", "$P"),
        ("X=z\nexport P=~:~:$X", "$P"),
    ],
)
def test_patterns_and_tildes_read_as_bash_reads_them(setup: str, expr: str) -> None:
    words, notes = imported(setup, expr)
    assert words == bash_words(setup, expr)
    assert not notes


@pytest.mark.parametrize("how", ["source", "."])
def test_a_sourced_file_is_named_as_not_followed(tmp_path: Path, how: str) -> None:
    """bash reads the sourced file's variables into the command; the import does not follow it, so it must say
    so, naming the line and the file: otherwise the user takes the (different) imported values for bash's."""
    (tmp_path / "env.sh").write_text("LR=3e-6\n")
    setup = f"A=1\n{how} ./env.sh"
    expr = "actor_rollout_ref.actor.optim.lr=$LR"
    assert bash_words(setup, expr, cwd=tmp_path) == ["actor_rollout_ref.actor.optim.lr=3e-6"]
    p = parse_script(f"{setup}\n{ENTRY} {expr}\n", "t.sh", {"HOME": HOME})
    assert p.command.argv[3:] != ["actor_rollout_ref.actor.optim.lr=3e-6"]  # what bash reads there, the import cannot
    assert f"line 2: `{how} ./env.sh` not followed" in p.notes
    assert p.sourced == ["./env.sh"]


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
