"""Helpers shared by the tests in tests/monitor (imported by name: pytest puts this folder on sys.path)."""

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



@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


def run_verlctl(
    *args: str, stdin: str | None = None, timeout: float = 120, env: dict[str, str] | None = None
) -> Run:
    """``python -m verlctl ARGS`` (the real entry point: one-line errors, exit codes)."""
    proc = subprocess.run(
        [sys.executable, "-m", "verlctl", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        cwd=str(REPO),
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)
