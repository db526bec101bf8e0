#!/usr/bin/env python3
"""Could a maintained bash parser replace the launch-script reader's hand-written lexer? A measurement, not a
dependency: run it with a Python that has ``bashlex`` and/or ``tree-sitter`` + ``tree-sitter-bash`` installed
(e.g. a throw-away venv) and verlctl importable (``PYTHONPATH=src``):

    python3 -m venv /tmp/pv && /tmp/pv/bin/pip install bashlex tree-sitter tree-sitter-bash
    PYTHONPATH=src /tmp/pv/bin/python bench/bash_parsers.py

It prints, per parser: the share of the fixture scripts (tests/fixtures/**/*.sh) it parses without an error,
the time to parse them all, and what it does with hostile input (a 1 MiB script, deep nesting, many tokens),
beside the same figures for verlctl's own lexer (``tokenize``) and reader (``parse_script``). A parser missing
from the running Python is reported as such. The numbers of one run are in docs/development/architecture.md.
"""

from __future__ import annotations

import ast
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READER = ROOT / "src" / "verlctl" / "inputs" / "shell_script.py"
TIME_LIMIT_S = 60.0


def lexer_lines() -> tuple[int, int]:
    """Lines of the hand-written lexer (the token classes, ``_Lexer``, ``tokenize``) and of the whole reader."""
    text = READER.read_text(encoding="utf-8")
    tree = ast.parse(text)
    names = {"Part", "Word", "ArrayAssign", "Op", "_Lexer", "tokenize"}
    lexer = sum(n.end_lineno - n.lineno + 1 + len(getattr(n, "decorator_list", []))  # type: ignore[operator]
                for n in tree.body if getattr(n, "name", None) in names)
    return lexer, len(text.splitlines())


def parsers() -> dict[str, Callable[[str], bool]]:
    """name -> parse(text) -> True when parsed without an error (an exception is an error too)."""
    out: dict[str, Callable[[str], bool]] = {}
    from verlctl.inputs.shell_script import parse_script, tokenize

    def ours_lexer(text: str) -> bool:
        tokenize(text, "t.sh")
        return True

    def ours_reader(text: str) -> bool:
        parse_script(text, "t.sh", {"HOME": "/h"})
        return True

    out["verlctl tokenize"] = ours_lexer
    out["verlctl parse_script"] = ours_reader
    try:
        import bashlex

        def with_bashlex(text: str) -> bool:
            bashlex.parse(text)
            return True

        out["bashlex"] = with_bashlex
    except ImportError:
        print("bashlex: not installed")
    try:
        import tree_sitter
        import tree_sitter_bash

        ts = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))

        def with_tree_sitter(text: str) -> bool:
            return not ts.parse(text.encode()).root_node.has_error

        out["tree-sitter-bash"] = with_tree_sitter
    except ImportError:
        print("tree-sitter-bash: not installed")
    return out


def attempt(fn: Callable[[str], bool], text: str) -> tuple[str, float, float]:
    """(outcome, seconds, peak MiB) of one parse, in a thread with a deep stack and a time limit."""
    box: dict[str, object] = {}

    def go() -> None:
        try:
            box["ok"] = "ok" if fn(text) else "parse error"
        except RecursionError:
            box["ok"] = "RecursionError"
        except MemoryError:
            box["ok"] = "MemoryError"
        except Exception as exc:
            box["ok"] = f"refused: {type(exc).__name__}: {str(exc)[:70]}"

    threading.stack_size(256 << 20)
    tracemalloc.start()
    t0 = time.perf_counter()
    th = threading.Thread(target=go, daemon=True)
    th.start()
    th.join(TIME_LIMIT_S)
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / (1 << 20)
    tracemalloc.stop()
    return (str(box.get("ok", f"still running after {TIME_LIMIT_S:.0f} s")), dt, peak)


def hostile() -> dict[str, str]:
    line = "python3 -m verl.trainer.main_ppo data.train_batch_size=8 trainer.experiment_name=x_${N}_y \\\n"
    return {
        "1 MiB script": "N=1\n" + line * ((1 << 20) // len(line)) + "  trainer.n_gpus_per_node=8\n",
        "$( nested 5000 deep": "X=" + "$(echo " * 5000 + "a" + ")" * 5000 + "\n",
        "${ nested 5000 deep": "X=" + "${A:-" * 5000 + "a" + "}" * 5000 + "\n",
        "if nested 2000 deep": "if true; then\n" * 2000 + "X=1\n" + "fi\n" * 2000,
        "200k tokens on one line": "X=1 " + "a " * 200_000 + "\n",
        "( subshells 5000 deep": "(" * 5000 + "true" + ")" * 5000 + "\n",
    }


def main() -> None:
    lex, total = lexer_lines()
    print(f"verlctl's reader: {total} lines, of which the lexer (token classes, _Lexer, tokenize) {lex}")
    fixtures = sorted((ROOT / "tests" / "fixtures").rglob("*.sh"))
    texts = [(p, p.read_text(encoding="utf-8", errors="replace")) for p in fixtures]
    print(f"{len(texts)} fixture scripts, {sum(len(t) for _, t in texts) / 1024:.0f} KiB")
    for name, fn in parsers().items():
        ok, failed = 0, []
        t0 = time.perf_counter()
        for p, text in texts:
            try:
                good = fn(text)
            except Exception as exc:  # a parser's error on a fixture: counted, named
                good = False
                failed.append(f"{p.relative_to(ROOT)}: {type(exc).__name__}: {str(exc)[:80]}")
            else:
                if not good:
                    failed.append(f"{p.relative_to(ROOT)}: parse error")
            ok += good
        dt = time.perf_counter() - t0
        print(f"\n{name}: {ok}/{len(texts)} fixtures parsed without an error, {dt * 1000:.0f} ms for all")
        for f in failed[:6]:
            print(f"  not parsed: {f}")
        for what, text in hostile().items():
            outcome, secs, peak = attempt(fn, text)
            print(f"  {what:26} {outcome[:90]:90} {secs:7.2f} s  peak {peak:7.1f} MiB")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
