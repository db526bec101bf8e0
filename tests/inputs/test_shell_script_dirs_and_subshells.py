"""inputs/shell_script.py against bash itself, for the gaps the turn-5 mutation sample left open
(docs/development/mutation.md): a script's own directory (``${BASH_SOURCE[0]}`` and ``$(cd DIR && pwd)``), the
environment a followed ``bash other.sh`` gets, ``**`` with a zero exponent, a ``( subshell )``, control
characters in the file, and an ``if`` that bash refuses to parse. Every expected value is what bash gives for the
same file, run with a TEST DOUBLE for ``python3`` (an exported shell function that records its arguments)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from verlctl.inputs.shell_script import UNRESOLVED, ScriptError, parse_file, parse_script, read_script

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

ENTRY = "python3 -m verl.trainer.main_ppo"


def bash_argv(tmp_path: Path, script: str) -> list[str]:
    """The words after ``-m verl.trainer.main_ppo`` that bash hands python3 when it runs ``bash SCRIPT`` in
    tmp_path (python3 is a TEST DOUBLE: an exported function that writes its arguments and runs nothing)."""
    out = tmp_path / "argv.bin"
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "ARGV_OUT": str(out),
           "BASH_FUNC_python3%%": "() { printf '%s\\0' \"$@\" > \"$ARGV_OUT\"; }"}
    proc = subprocess.run(["bash", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.exists(), proc.stderr[-2000:]
    return out.read_bytes().decode().split("\0")[2:-1]


def ours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> tuple[list[str], list[str]]:
    monkeypatch.chdir(tmp_path)
    p = parse_file(script, {"HOME": "/home/u"})
    assert p.command.argv[:3] == ENTRY.split()
    return p.command.argv[3:], p.notes


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_a_scripts_own_directory_is_what_bash_computes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)`` opens most launch scripts: BASH_SOURCE the
    script never sets is the script's path, and ``$(cd DIR && pwd)`` is DIR made absolute (computed, not run)."""
    (tmp_path / "data").mkdir()
    write(tmp_path / "launch" / "run.sh", (
        '#!/usr/bin/env bash\n'
        'SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
        'ROOT=$(cd "$SCRIPT_DIR/.." && pwd)\n'
        f'{ENTRY} trainer.default_local_dir="$SCRIPT_DIR/ckpt" data.train_files=$(cd data && pwd)/t.parquet \\\n'
        '  trainer.project_name="${BASH_SOURCE}" trainer.experiment_name="$ROOT" +x.abs="$(cd / && pwd)"\n'))
    want = bash_argv(tmp_path, "launch/run.sh")
    assert want[0] == f"trainer.default_local_dir={tmp_path}/launch/ckpt"  # the reference itself
    words, notes = ours(tmp_path, monkeypatch, "launch/run.sh")
    assert words == want
    assert not any("not evaluated" in n for n in notes), notes


def test_a_script_that_sets_bash_source_itself_keeps_its_value(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "run.sh", f"BASH_SOURCE=/elsewhere/x.sh\n{ENTRY} a=$(dirname \"$BASH_SOURCE\")\n")
    words, _ = ours(tmp_path, monkeypatch, "run.sh")
    assert words == ["a=/elsewhere"]


def test_a_cd_that_is_not_the_idiom_is_reported_not_guessed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only ``cd DIR && pwd`` is computed: ``pwd && cd DIR`` or ``cd DIR; pwd`` stay unresolved (reported)."""
    write(tmp_path / "run.sh", f"{ENTRY} a=$(pwd && cd /tmp) b=$(cd /tmp || pwd)\n")
    words, notes = ours(tmp_path, monkeypatch, "run.sh")
    assert all(UNRESOLVED in w for w in words), words
    assert sum("a command substitution: not run" in n for n in notes) == 2, notes


def test_a_followed_script_sees_only_the_exported_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``bash common.sh`` starts a new shell: it gets the exported variables (export, declare -x, export of a
    name set before) and not the plain ones, as bash gives them."""
    write(tmp_path / "common.sh", (
        f"{ENTRY} a=${{PLAIN:-unset}} b=${{EXP:-unset}} c=${{LATE:-unset}} d=${{DX:-unset}} e=${{ARR:-unset}}\n"))
    write(tmp_path / "run.sh", (
        "PLAIN=p\nexport EXP=e\nLATE=l\nexport LATE\ndeclare -x DX=x\nARR=(r s)\n"
        "bash common.sh\n"))
    want = bash_argv(tmp_path, "run.sh")
    assert want == ["a=unset", "b=e", "c=l", "d=x", "e=unset"]  # the reference itself
    words, notes = ours(tmp_path, monkeypatch, "run.sh")
    assert words == want
    assert any("followed `bash common.sh`" in n for n in notes), notes


@pytest.mark.parametrize("expr", ["$((3**0))", "$((0**0))", "$((2**1))", "$((-3**0))", "$((2**3**0))"])
def test_a_zero_exponent_is_one(expr: str) -> None:
    p = parse_script(f"{ENTRY} a={expr}\n", "t.sh", None)
    want = subprocess.run(["bash", "-c", f"printf '%s\\n' {expr}"], capture_output=True, text=True,
                          check=True).stdout.split("\n")[:-1]
    assert p.command.argv[3:] == [f"a={want[0]}"] and not p.notes


def test_a_negative_exponent_is_reported_as_bash_refuses_it() -> None:
    assert subprocess.run(["bash", "-c", "echo $((2**-1))"], capture_output=True).returncode != 0
    p = parse_script(f"{ENTRY} a=$((2**-1))\n", "t.sh", None)
    assert UNRESOLVED in p.command.argv[3] and any("exponent less than 0" in n for n in p.notes), p.notes


def test_a_subshell_changes_nothing_and_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a ``( ... )`` sets stays in the subshell (bash): the values after it are the script's own, and the
    import says that the subshell was not evaluated (it may have run something the run needs)."""
    write(tmp_path / "run.sh", (
        "A=0\nB=0\n( A=1; ( B=1 ); cd / )\n(B=2)\n"
        f"{ENTRY} a=$A b=$B\n"))
    want = bash_argv(tmp_path, "run.sh")
    assert want == ["a=0", "b=0"]
    words, notes = ours(tmp_path, monkeypatch, "run.sh")
    assert words == want
    assert [n for n in notes if "subshell" in n] == ["line 3: ( subshell ) not evaluated",
                                                     "line 4: ( subshell ) not evaluated"], notes


@pytest.mark.parametrize("ch", ["\x01", "\x1b", "\x1e", "\x1f"])
def test_a_file_with_control_characters_is_refused_in_one_line(tmp_path: Path, ch: str) -> None:
    """Up to 8 control characters (an escape sequence in an echo, say) are a script; more are binary data."""
    ok = write(tmp_path / "ok.sh", f"echo '{ch * 8}'\n{ENTRY} a=1\n")
    assert read_script(ok).count(ch) == 8
    bad = write(tmp_path / "bad.sh", f"echo '{ch * 9}'\n{ENTRY} a=1\n")
    with pytest.raises(ScriptError) as exc:
        read_script(bad)
    assert str(exc.value) == f"{bad}: contains control characters, not a shell script"


def test_tabs_and_form_feeds_are_text_not_control_characters(tmp_path: Path) -> None:
    p = write(tmp_path / "ok.sh", f"echo '{chr(9) * 20}{chr(12) * 20}{chr(11) * 20}'\r\n{ENTRY} a=1\n")
    assert "\t" * 20 in read_script(p)


@pytest.mark.parametrize(
    "block",
    [
        "if [ 1 = 1 ]; then Y=a; then Y=b; fi",  # two `then`
        "if [ 1 = 1 ]; elif [ 1 = 1 ]; then Y=a; fi",  # an `elif` before any `then`
        "if [ 1 = 1 ]; else Y=a; fi",  # an `else` before any `then`
    ],
)
def test_an_if_bash_refuses_to_parse_takes_no_branch(block: str) -> None:
    """bash runs nothing of a script it cannot parse: the import takes no branch of such an ``if`` either (it
    reports the block, where it used to be one mistake away from reading a branch or a traceback)."""
    assert subprocess.run(["bash", "-n", "-c", block], capture_output=True).returncode != 0
    with pytest.raises(ScriptError, match="uses Y, which the `if` block at lines 1-1 may set"):
        parse_script(f"{block}\n{ENTRY} a=${{Y:-unread}}\n", "t.sh", None)
    p = parse_script(f"{block}\n{ENTRY} a=kept\n", "t.sh", None)
    assert p.command.argv[3:] == ["a=kept"]
    assert any("'if' block not evaluated" in n for n in p.notes), p.notes


# --------------------------------------------------------------------------------------------------
# The fresh seed 8037's real survivors, and the RecursionErrors that looking at them turned up


def bash_print(setup: str, expr: str) -> list[str]:
    out = subprocess.run(["bash", "-c", setup + f"\nprintf '%s\\n' {expr}"], capture_output=True, text=True,
                         check=True).stdout
    return out.split("\n")[:-1]


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        ("", "$(basename '/m/Qwen3-8B')"),  # a quoted argument inside $(...): its closing quote ends it
        ("", "$(basename '/m/a b)c')"),  # a ) inside the quotes is not the end of the $(...)
        ("M=/m/x/y", "$(basename \"$(dirname '/m/x/y')\")-$(dirname '/p/q')"),
        ("N=3\nM=4", "$(( $N * ${M} + 1 ))"),  # $VAR and ${VAR} inside arithmetic
        ("N=8", '$(( "$N" / 2 ))'),
        ("", "$((3 > 3))$((2 > 3))$((4 > 3))$((-1 > -2))$((3 >= 3))$((2 >= 3))"),
        ("", "$((2 ** 3 ** 2))$((3 ** 2 ** 0))$((-2 ** 3))$((2 ** 62 ** 1))"),  # right-associative
        ("", "$((- - 5))$((!!7))$((~~3))$((-~2))$((!-1))$((+-+4))"),
    ],
)
def test_command_substitutions_and_arithmetic_read_as_bash_reads_them(setup: str, expr: str) -> None:
    p = parse_script(f"{setup}\n{ENTRY} a={expr}\n", "t.sh", None)
    first, *others = p.command.argv[3:]
    assert [first.split("=", 1)[1], *others] == bash_print(setup, expr)
    assert not p.notes


def test_an_arithmetic_of_an_unknown_value_is_reported_unresolved() -> None:
    p = parse_script(f"{ENTRY} a=$(( $(nproc) / 2 ))\n", "t.sh", None)
    assert p.command.argv[3].startswith("a=" + UNRESOLVED) and p.command.argv[3].endswith(UNRESOLVED)
    assert any("$(nproc) is not evaluated" in n for n in p.notes), p.notes


@pytest.mark.parametrize("n", [9, 40, 3000])
def test_command_substitutions_nested_deep_are_one_line_not_a_recursion_error(n: int) -> None:
    """``$(dirname $(dirname ...))`` thousands deep raised RecursionError out of the import (a traceback); now
    it is one line, as a ``${...}`` nested that deep already was. Eight levels (more than any script needs)
    are still read."""
    deep = "/a/b/c/d/e/f/g/h/i/j"
    for _ in range(n):
        deep = f"$(dirname {deep})"
    with pytest.raises(ScriptError) as exc:
        parse_script(f"{ENTRY} a={deep}\n", "t.sh", None)
    assert str(exc.value) == "t.sh: line 1: command substitutions nested too deeply"
    eight = "/a/b/c/d/e/f/g/h/i/j"
    for _ in range(8):
        eight = f"$(dirname {eight})"
    assert parse_script(f"{ENTRY} a={eight}\n", "t.sh", None).command.argv[3] == "a=/a/b"


@pytest.mark.parametrize("ops", ["!" * 990, "~" * 991, "- " * 600, "1**" * 600])
def test_a_long_chain_of_unary_operators_or_powers_is_read_as_bash_reads_it(ops: str) -> None:
    """990 ``!`` before an operand raised RecursionError (a traceback): now read in a loop, as bash reads it."""
    expr = f"$(({ops}1))"
    p = parse_script(f"{ENTRY} a={expr}\n", "t.sh", None)
    assert p.command.argv[3:] == [f"a={bash_print('', expr)[0]}"] and not p.notes


def test_parentheses_nested_hundreds_deep_are_reported_not_a_recursion_error() -> None:
    """300 nested parentheses raised RecursionError; verlctl reads up to MAX_ARITH_PARENS and reports deeper
    ones (bash, whose own limit is higher, gives 1 here): a note naming why, never a value of its own."""
    from verlctl.inputs.shell_script import MAX_ARITH_PARENS

    ok = "(" * MAX_ARITH_PARENS + "2" + ")" * MAX_ARITH_PARENS
    p = parse_script(f"{ENTRY} a=$(({ok}*3))\n", "t.sh", None)
    assert p.command.argv[3:] == ["a=6"] and not p.notes
    for n in (MAX_ARITH_PARENS + 1, 300, 990):
        deep = "(" * n + "1" + ")" * n
        p = parse_script(f"V='{deep}'\n{ENTRY} a=$(({deep})) b=$((V))\n", "t.sh", None)
        assert all(w.split("=", 1)[1].startswith(UNRESOLVED) for w in p.command.argv[3:]), p.command.argv[3:]
        assert sum("arithmetic: parentheses nested too deeply" in x for x in p.notes) == 2, p.notes
    # the bound counts parentheses open at once (also through a variable), not all of them
    half = "(" * (MAX_ARITH_PARENS // 2) + "2" + ")" * (MAX_ARITH_PARENS // 2)
    p = parse_script(f"V='{half}'\n{ENTRY} a=$(({'(1)+' * 200}0)) b=$(({'(V)+' * 20}0))\n", "t.sh", None)
    assert p.command.argv[3:] == ["a=200", "b=40"] and not p.notes
    p = parse_script(f"V='{ok}'\n{ENTRY} a=$(((V)))\n", "t.sh", None)
    assert UNRESOLVED in p.command.argv[3] and any("parentheses nested too deeply" in x for x in p.notes)


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        # a backslash in double quotes before anything but $ ` " \ and a newline is kept, with what follows
        ("", '"a\\b\\q"'),
        ("", '"C:\\models\\x"'),
        ("", '"\\d+\\.\\w"'),
        # a value that is only white space, unquoted between two words: bash splits there and adds no empty word
        ('X=" "', "a${X}c"),
        ('X="   "', "a${X}c"),
        ('X=" b "', "a${X}c"),
        ('X=" "\nY=" "', "a${X}${Y}c"),
    ],
)
def test_quoted_backslashes_and_white_space_values_read_as_bash_reads_them(setup: str, expr: str) -> None:
    p = parse_script(f"{setup}\n{ENTRY} {expr}\n", "t.sh", None)
    assert p.command.argv[3:] == bash_print(setup, expr)
    assert not p.notes


def test_bash_other_sh_is_followed_at_most_max_follow_deep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain of ``bash next.sh`` is read MAX_FOLLOW scripts deep (as bash runs it: the arguments arrive as
    ``$1``); one deeper is reported, not followed, and what the last script read does itself stands."""
    from verlctl.inputs.shell_script import MAX_FOLLOW

    monkeypatch.chdir(tmp_path)
    for i in range(MAX_FOLLOW):
        write(tmp_path / f"s{i}.sh", f"bash s{i + 1}.sh a{i}\n")
    write(tmp_path / f"s{MAX_FOLLOW}.sh", f"{ENTRY} x=$1\n")
    assert bash_argv(tmp_path, "s0.sh") == [f"x=a{MAX_FOLLOW - 1}"]
    p = parse_file("s0.sh")
    assert p.command.argv[3:] == [f"x=a{MAX_FOLLOW - 1}"]
    assert sum("followed `bash" in n for n in p.notes) == MAX_FOLLOW, p.notes
    # one deeper: s{MAX_FOLLOW} hands over to a script that is not read; its own command is the one imported
    write(tmp_path / f"s{MAX_FOLLOW}.sh", f"bash s{MAX_FOLLOW + 1}.sh z\n{ENTRY} x=$1\n")
    write(tmp_path / f"s{MAX_FOLLOW + 1}.sh", f"{ENTRY} x=deeper\n")
    p = parse_file("s0.sh")
    assert p.command.argv[3:] == [f"x=a{MAX_FOLLOW - 1}"]
    assert any(f"`bash s{MAX_FOLLOW + 1}.sh` not followed" in n and f"at most {MAX_FOLLOW} deep" in n
               for n in p.notes), p.notes


# --------------------------------------------------------------------------------------------------
# Seed 8363's real survivors (measured before these tests)


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        (f'A=1\n{ENTRY} a="x\ny\nz\n', 2, 'unbalanced double quote (no closing ")'),
        ('A=1\nX="first\nsecond \'q\n' + ENTRY + "\n", 2, 'unbalanced double quote (no closing ")'),
        (f"A=1\nB=2\n{ENTRY} a='x\ny\n", 3, "unbalanced single quote (no closing ')"),
    ],
)
def test_an_unclosed_quote_is_reported_at_the_line_it_opens(text: str, line: int, what: str) -> None:
    """The line to fix is where the quote opens (bash names the end of the file, far below it)."""
    with pytest.raises(ScriptError) as exc:
        parse_script(text, "t.sh", None)
    assert str(exc.value) == f"t.sh: line {line}: {what}"


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        ("", '$(basename "/m/a)b")'),  # a ) inside double quotes inside $(...) does not end it
        ("", '$(basename "/m/x y")-$(dirname "/p/(q)/r")'),
        ("D='/d/e'", '$(dirname "$D/f")'),
    ],
)
def test_double_quotes_inside_a_command_substitution_read_as_bash_reads_them(setup: str, expr: str) -> None:
    p = parse_script(f"{setup}\n{ENTRY} a={expr}\n", "t.sh", None)
    first, *others = p.command.argv[3:]
    assert [first.split("=", 1)[1], *others] == bash_print(setup, expr)
    assert not p.notes


@pytest.mark.parametrize(
    "redirs",
    [
        ">out.log a=1 b=2",  # a redirection before the arguments: bash passes them all
        "a=1 2>err.log b=2 >>out.log c=3",
        "a=1 2>&1 b=2",
        "<in.txt a=1 b=2",
    ],
)
def test_words_after_a_redirection_are_still_the_commands_arguments(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    redirs: str) -> None:
    write(tmp_path / "in.txt", "")
    write(tmp_path / "run.sh", f"{ENTRY} {redirs}\n")
    want = bash_argv(tmp_path, "run.sh")
    words, _ = ours(tmp_path, monkeypatch, "run.sh")
    assert words == want and len(want) >= 2
