"""inputs/shell_script.py at its edges, against bash itself: negative array indices, 64-bit arithmetic, deep
default chains, the script size and word limits, another interpreter's shebang, and line numbers across
multi-line quotes and skipped functions."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ENTRY = "python3 -m verl.trainer.main_ppo"


def script_overrides(text: str) -> list[str]:
    from verlctl.inputs.shell_script import parse_script

    return parse_script(text, "t.sh", None).command.overrides


def bash_prints(text: str, expr: str) -> str:
    """What bash itself prints for ``expr`` after the script's lines (the reference)."""
    return subprocess.run(["bash", "-c", text + f"\nprintf '%s' {expr}"], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        ("A=(x y z)", "${A[-3]}"),  # a negative index as far back as the array goes is its first element
        ("A=(x y z)", "${A[-1]}"),
        ("N=62", "$((2**N))"),  # 64-bit arithmetic: 2^62 is still positive, 2^63 wraps to the minimum
        ("N=63", "$((2**N))"),
        # a default chain eight deep (verl's scripts nest two or three): the deepest the lexer takes
        ("", "${A:-${B:-${C:-${D:-${E:-${F:-${G:-${H:-deep}}}}}}}}"),
        # arithmetic through ten variables naming each other
        ("a0=1; " + "; ".join(f"a{i}=a{i - 1}" for i in range(1, 11)), "$((a10 + 1))"),
    ],
)
def test_expansions_at_the_edges_read_as_bash_reads_them(setup: str, expr: str) -> None:
    want = bash_prints(setup, expr)
    assert script_overrides(f"{setup}\n{ENTRY} trainer.experiment_name={expr}\n") == [
        f"trainer.experiment_name={want}"]


def test_a_script_of_exactly_the_size_limit_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    """read_script's documented bound (MAX_SCRIPT_BYTES, 256 KiB): the limit itself is allowed, the next byte is
    one clear error naming the limit."""
    from verlctl.inputs.shell_script import MAX_SCRIPT_BYTES, ScriptError, read_script

    assert MAX_SCRIPT_BYTES == 256 * 1024
    head = f"#!/bin/bash\n{ENTRY} trainer.total_epochs=1\n"
    ok = tmp_path / "ok.sh"
    ok.write_text(head + "#" * (MAX_SCRIPT_BYTES - len(head) - 1) + "\n")
    assert ok.stat().st_size == MAX_SCRIPT_BYTES
    assert read_script(ok).startswith(head)
    big = tmp_path / "big.sh"
    big.write_text(head + "#" * (MAX_SCRIPT_BYTES - len(head)) + "\n")
    with pytest.raises(ScriptError, match=rf"{MAX_SCRIPT_BYTES + 1} bytes is too large .*at most {MAX_SCRIPT_BYTES}"):
        read_script(big)


def test_a_script_for_another_interpreter_is_named_with_its_whole_shebang() -> None:
    from verlctl.inputs.shell_script import ScriptError, parse_script

    with pytest.raises(ScriptError) as e:
        parse_script("#!/usr/bin/env python3\nprint(1)\n", "train.py", None)
    assert str(e.value) == "train.py: a python3 script (#!/usr/bin/env python3), not a bash launch script"


def test_line_numbers_count_the_newlines_inside_an_ansi_quote_and_span_a_skipped_function() -> None:
    """A $'...' value over three lines, then a function over four: the note names the function's own lines."""
    from verlctl.inputs.shell_script import parse_script

    text = "X=$'a\nb\nc'\nsetup() {\n  echo one\n  echo two\n}\n" + f"{ENTRY} trainer.total_epochs=1\n"
    p = parse_script(text, "t.sh", None)
    assert any(n.startswith("lines 4-7: function not evaluated") for n in p.notes), p.notes


def test_an_array_of_sixty_thousand_words_is_below_the_word_limit() -> None:
    """MAX_TOKENS (100,000) bounds the words of a script; an array's elements count one each."""
    words = " ".join(f"w{i}" for i in range(60_000))
    assert script_overrides(f"A=({words})\n{ENTRY} trainer.experiment_name=${{A[59999]}}\n") == [
        "trainer.experiment_name=w59999"]
