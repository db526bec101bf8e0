"""The README is the user's front door: short, its first command is the demo (the second the developers' `bash
.ci/run`), no development history, the default image named as the code has it, a sample launch whose every line the
launch code can print, every command of the CLI listed, and every page of docs/ reachable from it. Every relative link
of the README, CONTRIBUTING.md, CHANGELOG.md and docs/ resolves to a file, and an anchor to a heading there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
MAX_LINES = 300
DEMO_COMMAND = "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/verlctl demo"

#: How a development diary gives itself away: internal issue numbers, review-item ids, "turn 5", "stop 34",
#: mutation samples, test-run logs, test files as evidence.
HISTORY = [
    (r"(?<![\w/.\-])#\d+", "an issue number"),
    (r"\bissues? \d+", "an issue number"),
    (r"\b(?:U|N|F\d?-?|RV\d?-|A|O|G)\d{1,2}(?:-\d+)?\b", "a review-item id"),  # not A100, an accelerator
    (r"\b(?:turn|stop|round|session|face)s? ?\d+\b", "a development round"),
    (r"\bsessions?\b", "a development session"),
    (r"\bmutat\w*|\bmutants?\b|\bsurvivors?\b|\bseeds?\b", "mutation testing"),
    (r"\b\d+ (?:passed|failed)\b|\bload average\b|--durations", "a test-run log"),
    (r"\btests/(?:\w+/)*test_\w+\.py\b", "a test file as evidence"),
    (r"\bcommit [0-9a-f]{7,}\b|\btree [0-9a-f]{7,}\b", "a commit as evidence"),
]
#: A line about how long CI or the test suite takes (at most one is allowed).
CI_TIMING = re.compile(r"(?=.*\b(?:CI|\.ci/run|test suite|tests)\b)(?=.*\b\d+(?:\.\d+)? ?(?:s|min|minutes|h)\b)")


def _prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) of ``text`` outside fenced code blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def _blocks(text: str) -> list[tuple[int, list[str]]]:
    """Fenced code blocks: (line of the opening fence, the lines inside)."""
    blocks: list[tuple[int, list[str]]] = []
    current: list[str] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            if current is None:
                current, start = [], n
            else:
                blocks.append((start, current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def history_in(text: str, skip: tuple[str, ...] = ()) -> list[str]:
    """What in ``text`` reads as development history (one entry per line and kind), and a second CI timing; the
    kinds named in ``skip`` are allowed."""
    found = []
    for n, line in _prose(text):
        for pattern, what in HISTORY:
            if what in skip:
                continue
            m = re.search(pattern, line, flags=re.I if what != "a review-item id" else 0)
            if m:
                found.append(f"line {n}: {what}: {m.group(0)!r}")
    timings = [n for n, line in _prose(text) if CI_TIMING.search(line)]
    if len(timings) > 1:
        found.append(f"lines {timings}: more than one line about CI timing")
    return found


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES}): move detail to docs/"


def test_the_first_lines_are_the_demo_and_the_developers_command() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0].startswith("# "), lines[0]
    first = next(line for line in lines[1:] if line.strip())
    assert first.startswith("```"), f"the README opens with a code block after its title, not {first!r}"
    _, block = _blocks(text)[0]
    commands = [line.split("  #", 1)[0].strip() for line in block if line.strip()]
    assert commands[0] == DEMO_COMMAND, commands
    assert len(commands) == 2 and commands[1] == "bash .ci/run", commands
    assert "CONTRIBUTING.md" in block[1], "the developers' command says where to read on"


def test_the_readme_tells_no_development_history() -> None:
    assert history_in(README.read_text(encoding="utf-8")) == []


def test_the_user_guides_tell_no_development_history() -> None:
    """The hand-written pages of docs/ (not the generated references, not docs/development/) may name a product
    (Atlas 800T A3) or the test that holds a figure, but no issue, round, session or mutation sample."""
    from verlctl.guides import GUIDES

    pages = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in GUIDES]
    assert len(pages) >= 8
    found = {p.name: history_in(p.read_text(encoding="utf-8"), skip=("a review-item id", "a test file as evidence"))
             for p in pages}
    assert {name: f for name, f in found.items() if f} == {}


@pytest.mark.parametrize(
    "line",
    [
        "The budget (issue #25) was met.",
        "Fixed in stop 34's CI.",
        "See U27 and F4-1.",
        "Turn 5 added RV4-2.",
        "A mutation sample (seed 9377) killed 10/14.",
        "2,549 passed in 1888 s.",
        "as `tests/test_face.py` shows",
        "measured on tree 7c18f5d",
        "Round 3, the last items",
    ],
)
def test_the_history_rules_catch_a_diary_line(line: str) -> None:
    assert history_in(f"# t\n\n{line}\n")


def test_the_history_rules_leave_the_user_s_words_alone() -> None:
    assert history_in("# t\n\nOn 8 × A100 or H100, `init` asks in rounds; `verlctl stop` stops the run.\n"
                      "```\nverlctl launch  # issue #1 inside a code block is not prose\n```\n") == []


def test_one_ci_timing_line_is_allowed_two_are_not() -> None:
    one = "# t\n\nThe whole test suite takes about 30 min.\n"
    assert history_in(one) == []
    assert history_in(one + "CI took 44 min last time.\n")


def test_the_flow_table_has_the_phases_in_order() -> None:
    text = README.read_text(encoding="utf-8")
    flow = text.split("\n## The flow\n", 1)[1].split("\n## ", 1)[0]
    phases = [row.split("|")[1].strip() for row in flow.splitlines() if row.startswith("| ")][1:]
    assert phases == ["pre-check", "collect", "validate", "confirm", "prepare", "render / start / verify", "watch"]


def test_the_readme_names_the_default_image_and_the_requirements() -> None:
    from verlctl.spec.model import DEFAULT_IMAGE

    text = README.read_text(encoding="utf-8")
    assert f"`{DEFAULT_IMAGE}`" in text
    for needed in ("Python 3.10", "Docker engine", "`container.runtime: host`", "`npu-smi`", "`nvidia-smi`", "ssh",
                   "Slurm", "apt-get install python3-venv"):
        assert needed in text, needed


def test_the_readme_lists_every_command() -> None:
    import typer

    from verlctl.cli import app

    text = README.read_text(encoding="utf-8")
    group = typer.main.get_command(app)
    ctx = group.make_context("verlctl", [], resilient_parsing=True)
    for name in group.list_commands(ctx):  # type: ignore[attr-defined]
        cmd = group.get_command(ctx, name)  # type: ignore[attr-defined]
        subs = cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else []
        for full in [f"{name} {s}" for s in subs] or [name]:
            assert f"| `verlctl {full}` |" in text, f"`verlctl {full}` is missing from the README's commands table"


def _templates() -> list[re.Pattern[str]]:
    """Every line the launch can print (its steps, notes, warnings and closing lines; the local backend prints the
    container steps), as patterns: the literal parts
    of each f-string with rich's markup removed, each replacement field any text."""
    known = {"r.python": r"Python \d+\.\d+\.\d+"}  # `python3 --version` in the target (_readiness requires "Python")
    pats = []
    for rel in ("src/verlctl/orchestrator/launch.py", "src/verlctl/orchestrator/flow.py", "src/verlctl/backends/docker.py"):
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"step", "note", "warn", "print"} and node.args):
                continue
            arg = node.args[0]
            if isinstance(arg, ast.JoinedStr):
                parts = []
                for v in arg.values:
                    if isinstance(v, ast.Constant):
                        parts.append(re.escape(re.sub(r"\[/?[a-z ]*\]", "", str(v.value))))
                    else:
                        parts.append(".+")
                pats.append(re.compile("".join(parts)))
            elif isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                pats.append(re.compile(re.escape(re.sub(r"\[/?[a-z ]*\]", "", arg.value))))
            elif ast.unparse(arg) in known:
                pats.append(re.compile(known[ast.unparse(arg)]))
    return pats


def test_every_line_of_the_sample_launch_is_one_the_launch_can_print() -> None:
    text = README.read_text(encoding="utf-8")
    quick = text.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    samples = [lines for _, lines in _blocks(quick) if any(line.startswith("→ ") for line in lines)]
    assert len(samples) == 1, "the quick start shows one sample launch"
    sample = samples[0]
    assert 12 <= len(sample) <= 25 and sample[-1].startswith("follow it with"), sample
    pats = _templates()
    for line in sample:
        body = line[2:] if line.startswith("→ ") else line.strip()
        assert any(p.fullmatch(body) for p in pats), f"the launch code prints no line like {line!r}"


# ------------------------------------------------------------------------------------------------- links


def _anchors(text: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (a repeated heading gets -1, -2, …)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose(text):
        m = re.match(r"#{1,6} (.+)", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link outside code (fenced blocks and inline code spans)."""
    out = []
    for n, line in _prose(text):
        for target in LINK.findall(re.sub(r"`[^`]*`", "``", line)):
            out.append((n, target))
    return out


def _pages() -> list[Path]:
    return [README, ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The links of ``page`` that name no file, or no heading of the file they name."""
    bad = []
    for n, target in _links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{page.relative_to(root)}:{n}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text(encoding="utf-8")):
            bad.append(f"{page.relative_to(root)}:{n}: {target} (no such heading)")
    return bad


def test_every_relative_link_resolves() -> None:
    assert [b for page in _pages() for b in broken_links(page)] == []


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## Try it: `verlctl demo`\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#try-it-verlctl-demo) [gone](c.md) [no heading](a.md#try-it)\n"
                    "`[in code](d.md)` [web](https://example.com)\n", encoding="utf-8")
    assert [b.split(": ", 1)[1] for b in broken_links(page, tmp_path)] == [
        "c.md (no such file)", "a.md#try-it (no such heading)"]


def test_every_docs_page_is_linked_from_the_readme() -> None:
    text = README.read_text(encoding="utf-8")
    linked = {(ROOT / target.partition("#")[0]).resolve() for _, target in _links(text)}
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
    assert [p.relative_to(ROOT).as_posix() for p in pages if p.resolve() not in linked] == []


def test_every_development_page_is_linked_from_contributing() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    linked = {(ROOT / target.partition("#")[0]).resolve() for _, target in _links(text)}
    pages = sorted((ROOT / "docs" / "development").glob("*.md"))
    assert pages and [p.name for p in pages if p.resolve() not in linked] == []


def test_contributing_has_the_ci_test_command() -> None:
    """`.ci/run`'s TEST_CMD is the test command CONTRIBUTING.md gives (the README's second command runs it)."""
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    m = re.search(r"^TEST_CMD=\((.+)\)$", run, flags=re.M)
    assert m, "TEST_CMD in .ci/run"
    assert m.group(1) in (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    # the README names the same command beside `bash .ci/run`, which runs it
    _, block = _blocks(README.read_text(encoding="utf-8"))[0]
    assert " ".join(m.group(1).split()) in block[1], block[1]
    assert "CONTRIBUTING.md" in run[: run.index("TEST_CMD=")]
