"""Defence in depth in the signal path (issue #22): every single-comparison mutant of runtime/procscan.py and
of the stop path runs against decoy processes INSIDE A PRIVATE PID NAMESPACE (tests/signal_mutants.py, as the
namespace's init), and none of them signals a decoy. Never outside one: bench/mutate.py refuses to."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


def test_mutating_the_signal_path_is_refused_outside_a_private_pid_namespace(tmp_path: Path) -> None:
    for target in ("src/verlctl/runtime/procscan.py", "./src/verlctl/orchestrator/inspect.py",
                   "src/verlctl/backends/docker.py", "src/verlctl/runtime/executor.py"):
        res = subprocess.run([sys.executable, str(ROOT / "bench/mutate.py"), str(tmp_path), target,
                              str(tmp_path / "o.json"), "1", "1", "--", "tests"], capture_output=True, text=True,
                             timeout=120)
        assert res.returncode != 0 and "private PID namespace" in res.stderr, res.stderr
    assert not (tmp_path / "o.json").exists()
    res = subprocess.run([sys.executable, str(ROOT / "tests/signal_mutants.py"), str(tmp_path / "o.json")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "private PID namespace" in res.stderr, res.stderr


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1) for a private PID namespace")
def test_no_comparison_mutant_of_the_signal_path_signals_a_decoy(tmp_path: Path) -> None:
    out = tmp_path / "mutants.json"
    res = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--",
                          sys.executable, str(ROOT / "tests/signal_mutants.py"), str(out)],
                         capture_output=True, text=True, timeout=3000, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads(out.read_text())
    results = doc["results"]
    baseline, canary, mutants = results[0], results[1], results[2:]
    assert baseline["kind"] == "baseline" and baseline["decoys_signalled"] == [] and baseline["run_stopped"]
    # the harness sees a signalled decoy: procscan without its last check and with the review's flip
    assert canary["kind"] == "canary" and len(canary["decoys_signalled"]) >= 4, canary
    assert len(mutants) == doc["mutants"] >= 90
    bad = [m for m in mutants if m["decoys_signalled"]]
    print(f"{len(mutants)} comparison mutants in {doc['secs']} s: {sum(not m['run_stopped'] for m in mutants)} "
          f"broke stop, {len(bad)} signalled a decoy")
    assert not bad, bad
    assert all(m["status"] == "done" for m in mutants), [m for m in mutants if m["status"] != "done"]
