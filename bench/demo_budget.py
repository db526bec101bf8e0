"""Benchmark: ``verlctl demo``'s budgets, one real run: time to the first training step and peak memory.

A benchmark, not a test. Runs ``verlctl demo --yes`` as a user would (a subprocess, its output kept) in a memory
cgroup of its own (every process of the run is a descendant, Ray's daemons and vLLM's server included: they
inherit the cgroup), and measures:

* ``first_step_s``: demo started -> verl's first ``step:1`` line in the training log;
* ``total_s``: demo started -> it returned (the run ended, the report written);
* ``env_s``: the environment's build (``environment ready in N s``; 0 when it was reused: ``cached``);
* ``peak_bytes``: the cgroup's ``usage - inactive_file`` (docker stats' formula), sampled every 0.5 s; and the
  kernel's own high-water mark (page cache included) where the cgroup has one;
* the load average (1 min) at the start and at the end and the core count: the budgets are for a quiet 2-core
  machine, a loaded measurement is marked ``loaded``.

Budgets (issue: the front door): first step <= 15 min on a fresh machine, <= 4 min with the environment cached;
peak <= 10 GiB. ``VERLCTL_CACHE_DIR`` and pip's own variables (``PIP_FIND_LINKS``, ``PIP_NO_INDEX``) pass through.

    .venv/bin/python bench/demo_budget.py [--steps 2] [--algorithm dapo] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

GIB = 1024**3
BUDGET_FIRST_STEP_FRESH_S = 15 * 60
BUDGET_FIRST_STEP_CACHED_S = 4 * 60
BUDGET_PEAK_BYTES = 10 * GIB


def make_cgroup(name: str) -> tuple[Path, str] | None:
    """A memory cgroup under this process's own (v2, else v1's memory controller); None if not writable."""
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    own = Path("/proc/self/cgroup").read_text().splitlines()
    try:
        if v2.exists():
            rel = next(ln.split(":", 2)[2] for ln in own if ln.startswith("0::"))
            cg = Path("/sys/fs/cgroup") / rel.lstrip("/") / name
            cg.mkdir(exist_ok=True)
            return cg, "v2"
        rel = next(ln.split(":", 2)[2] for ln in own if ":memory:" in ln)
        cg = Path("/sys/fs/cgroup/memory") / rel.lstrip("/") / name
        cg.mkdir(exist_ok=True)
        return cg, "v1"
    except (OSError, StopIteration):
        return None


def working_set(cg: Path, kind: str) -> int:
    stat = dict(ln.split() for ln in (cg / "memory.stat").read_text().splitlines())
    if kind == "v2":
        return int((cg / "memory.current").read_text()) - int(stat.get("inactive_file", 0))
    return int((cg / "memory.usage_in_bytes").read_text()) - int(stat.get("total_inactive_file", 0))


def kernel_peak(cg: Path, kind: str) -> int | None:
    f = cg / ("memory.peak" if kind == "v2" else "memory.max_usage_in_bytes")
    return int(f.read_text()) if f.exists() else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--algorithm", default="dapo")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="verlctl-demo-bench-"))
    folder = work / "demo"
    env = {**os.environ, "VERLCTL_STATE_DIR": str(work / "state"), "COLUMNS": "160"}
    cgroup = make_cgroup(f"verlctl-demo-bench-{os.getpid()}")
    argv = [sys.executable, "-m", "verlctl", "demo", "--yes", "--steps", str(args.steps), "--algorithm",
            args.algorithm, "--dir", str(folder)]
    if cgroup is not None:  # the shell joins the cgroup, then becomes the demo: every descendant inherits it
        procs = cgroup[0] / "cgroup.procs"
        argv = ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", *argv]
    load0, t0 = os.getloadavg()[0], time.monotonic()
    peak = [0]
    first_step: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            if cgroup is not None:
                with contextlib.suppress(OSError, ValueError):
                    peak[0] = max(peak[0], working_set(*cgroup))
            if not first_step:
                for log in (folder / "logs").glob(f"{args.algorithm}_*.log"):
                    if re.search(rb"\bstep:1 - ", log.read_bytes()):
                        first_step.append(time.monotonic() - t0)
            done.wait(0.5)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    done.set()
    th.join()
    total = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    m = re.search(r"environment ready in (\d+) s", out)
    cached = "reusing the environment" in out
    cores = os.cpu_count() or 1
    first = first_step[0] if first_step else None
    budget_first = BUDGET_FIRST_STEP_CACHED_S if cached else BUDGET_FIRST_STEP_FRESH_S
    result = {
        "exit": proc.returncode, "cached": cached, "env_s": 0 if cached else (int(m.group(1)) if m else None),
        "first_step_s": None if first is None else round(first), "total_s": round(total),
        "peak_bytes": peak[0] or None, "kernel_peak_bytes": kernel_peak(*cgroup) if cgroup else None,
        "cgroup": cgroup[1] if cgroup else None, "load_start": round(load0, 2),
        "load_end": round(os.getloadavg()[0], 2), "cores": cores, "loaded": load0 > cores,
        "budget_first_step_s": budget_first,
        "first_step": "PASS" if first is not None and first <= budget_first else "OVER",
        "peak": "PASS" if peak[0] and peak[0] <= BUDGET_PEAK_BYTES else ("OVER" if peak[0] else "UNMEASURED"),
        "work_dir": str(work),
    }
    if proc.returncode != 0:
        result["tail"] = out[-3000:]
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
