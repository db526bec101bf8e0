"""Every ``--help`` page with an ``Examples:`` section shows ``verlctl …`` lines that the command's own parser
accepts (so an example cannot rot); the commands a new user starts with have one (``launch``: one per backend);
and the top page lists each command's first paragraph without the docstring's line breaks."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from verlctl.cli import app

#: Commands whose help must carry examples (any other command with an Examples section is checked too).
MUST_HAVE = {"launch", "init", "plan", "check", "status", "watch", "export slurm", "export rayjob"}
#: What a line of an Examples section may start with: a comment or a command to copy.
LINE_START = ("# ", "verlctl ", "sbatch ", "kubectl ")


def commands() -> list[tuple[str, Any]]:
    group = typer.main.get_command(app)
    ctx = group.make_context("verlctl", [], resilient_parsing=True)
    out = []
    for name in group.list_commands(ctx):  # type: ignore[attr-defined]
        cmd = group.get_command(ctx, name)  # type: ignore[attr-defined]
        if hasattr(cmd, "list_commands"):
            out += [(f"{name} {sub}", cmd.get_command(ctx, sub)) for sub in cmd.list_commands(ctx)]
        else:
            out.append((name, cmd))
    return out


def help_page(path: str, columns: int = 80) -> str:
    res = CliRunner().invoke(app, [*path.split(), "--help"], env={"COLUMNS": str(columns), "NO_COLOR": "1"},
                             prog_name="verlctl")
    assert res.exit_code == 0, res.output
    return res.output


def example_section(page: str) -> list[str]:
    lines = page.splitlines()
    if " Examples:" not in [ln.rstrip() for ln in lines]:
        return []
    start = [ln.rstrip() for ln in lines].index(" Examples:")
    out = []
    for ln in lines[start + 1:]:
        if ln.startswith(("╭", "│", "╰")):  # an Examples paragraph of the help text: the options panel follows
            break
        if ln.strip():
            out.append(ln.strip())
    return out


def parse(argv: list[str]) -> None:
    """Parse ``argv`` (after ``verlctl``) with the command's own click parser: every option exists, every value
    converts, nothing required is missing; the command itself does not run."""
    cmd: Any = typer.main.get_command(app)
    ctx = cmd.make_context("verlctl", list(argv), resilient_parsing=True)
    while hasattr(cmd, "list_commands"):
        name, *argv = argv
        cmd = cmd.get_command(ctx, name)
        assert cmd is not None, f"no command {name!r}"
    cmd.make_context(cmd.name, list(argv))


PAGES = {name: example_section(help_page(name)) for name, _ in commands()}


@pytest.mark.parametrize("name", sorted(n for n, ex in PAGES.items() if ex or n in MUST_HAVE))
def test_every_example_parses_and_fits_80_columns(name: str) -> None:
    section = PAGES[name]
    runs = [ln for ln in section if ln.startswith("verlctl ")]
    assert runs, f"`verlctl {name} --help` has no example"
    for line in section:  # a wrapped line would start with the rest of the one before it
        assert line.startswith(LINE_START), (name, line)
    argvs = [shlex.split(line, comments=True)[1:] for line in runs]
    assert any(" ".join(a[: len(name.split())]) == name for a in argvs), f"no example of `verlctl {name}` itself"
    for argv in argvs:  # an example may show the next command too: each is parsed by its own command
        parse(argv)


def test_launch_has_an_example_per_backend() -> None:
    runs = [ln for ln in PAGES["launch"] if ln.startswith("verlctl ")]
    assert any("--backend" not in r and "runtime=host" not in r and "cluster.nodes" not in r and "--dry-run" not in r
               for r in runs), "local Docker"
    assert any("container.runtime=host" in r for r in runs), "host runtime"
    assert any("cluster.nodes=" in r for r in runs), "SSH hosts"
    assert any("--backend slurm" in r for r in runs), "Slurm"


def test_a_broken_example_is_caught_by_the_parser() -> None:
    parse(["launch", "-c", "run.yaml", "--backend", "slurm", "-N", "2"])
    for bad in (["launch", "--no-such-flag"], ["launch", "-N", "two"], ["export", "nothing"]):
        with pytest.raises(Exception):  # noqa: B017 - click's UsageError / BadParameter, or the assert
            parse(bad)


def test_the_top_page_lists_each_command_on_unbroken_lines() -> None:
    page = help_page("", columns=400)  # wide enough that no description wraps
    rows = [ln for ln in page.splitlines() if ln.startswith("│")]
    group = typer.main.get_command(app)
    ctx = group.make_context("verlctl", [], resilient_parsing=True)
    for name in group.list_commands(ctx):  # type: ignore[attr-defined]
        cmd = group.get_command(ctx, name)  # type: ignore[attr-defined]
        first = " ".join((cmd.help or "").split("\n\n")[0].split())
        row = next(i for i, ln in enumerate(rows) if re.match(rf"│ {re.escape(name)} ", ln))
        assert first in rows[row], (name, rows[row])
        follow = rows[row + 1] if row + 1 < len(rows) else "│ x"
        assert re.match(r"│ \S", follow), (name, follow)  # the next row is the next command, not a broken line
