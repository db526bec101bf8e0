"""`verlctl status` (issue 24): its lines break between words at 80 columns with a hanging indent (a path stays
whole on its own indented line, never pushed to column 0), and it starts without the spec model or an image
lookup (the time budget of `status` with the container kept; bench/bench_inspect.py measures it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from test_face import cli, write_record

from conftest import clean_env

LONG_LOG = "/tmp/verlctl-face-status-a-rather-long-log-directory-name/logs/verlctl-20261201-101010-face-long.log"


def test_status_at_80_columns_keeps_the_log_path_whole_on_an_indented_line(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = "20261201-101010-face-long-0001"
    write_record(state, run_id, run_log=LONG_LOG, pgid=4242,
                 attempts=[{"number": 1, "pgid": 4242, "started_at": 1.0, "marker": f"{run_id}/1/ab"}])
    res = cli(state, "status", run_id, columns=80)
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines and lines[0].startswith(f"run {run_id}")
    for line in lines[1:]:
        assert line.startswith("  "), f"a continuation pushed to column 0: {line!r}\n{res.out}"
        assert len(line) <= 80 or len(line.split()) == 1, line
    assert LONG_LOG in [w for ln in lines for w in ln.split()], res.out


def test_status_imports_neither_the_spec_model_nor_asks_for_the_image(tmp_path: Path) -> None:
    """A Docker run whose container is gone: status connects to the engine and asks for the container, and
    nothing it needs is in the spec model (a pydantic model tree that costs start-up time)."""
    state = tmp_path / "state"
    run_id = "20261201-101011-face-gone-0002"
    write_record(state, run_id, runtime="docker", container_id="f" * 64, container_name="verlctl-face-gone-0002")
    env = clean_env(VERLCTL_STATE_DIR=str(state), COLUMNS="120")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "verlctl", "status", run_id], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = set(re.findall(r"\|\s+([\w.]+)\s*$", proc.stderr, re.M))
    assert "verlctl.orchestrator.inspect" in imported and "verlctl.runtime.records" in imported
    assert "verlctl.spec.model" not in imported
    assert "verlctl.verl" not in {m.rsplit(".", 1)[0] for m in imported if m.startswith("verlctl.verl.")}
