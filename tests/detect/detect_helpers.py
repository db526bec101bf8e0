"""Helpers shared by the tests in tests/detect (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from conftest import capture, fixture_names  # noqa: F401 - re-exported for the tests here

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"  # copies of /work/shared/fixtures, provenance headers kept



# The real `verlctl` entry point (verlctl.cli.main: one-line errors, exit codes). While the command is
# not yet registered in verlctl.commands.registry, it is added to the same app the same way
# (`app.command("detect")(detect)`) before main() runs, so the tests exercise the real error handling.
_DRIVER = """
import sys
import verlctl.cli as cli
from verlctl.commands.detect import detect
if "detect" not in {c.name for c in cli.app.registered_commands}:
    cli.app.command("detect")(detect)
cli.main(sys.argv[1:])
"""


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)


def run_verlctl(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Run:
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, *args],
        capture_output=True,
        text=True,
        env=env if env is not None else dict(os.environ),
        timeout=timeout,
        cwd=str(REPO),
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)
