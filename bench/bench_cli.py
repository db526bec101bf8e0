"""Benchmark: CLI start-up. `verlctl --help` and `verlctl plan` vs a minimal typer hello-world.

A benchmark, not a test: it prints wall times (median and best of N runs, interleaved so that machine noise
hits every command alike) and the ratios to the hello-world baseline measured in the same run.
Target: `verlctl --help` <= 1.3x the baseline.

    .venv/bin/python bench/bench_cli.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HELLO = '''
import typer

app = typer.Typer()


@app.command()
def hello(name: str = "world", count: int = 1) -> None:
    """Say hello."""
    for _ in range(count):
        print(f"hello {name}")


@app.command()
def bye(name: str = "world") -> None:
    """Say bye."""
    print(f"bye {name}")


if __name__ == "__main__":
    app()
'''


def timed(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed: {proc.stderr.decode()[-500:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        hello = Path(tmp) / "hello.py"
        hello.write_text(HELLO)
        out = Path(tmp) / "plan"
        cmds = {
            "typer hello --help (baseline)": [py, str(hello), "--help"],
            "verlctl --help": [py, "-m", "verlctl", "--help"],
            "verlctl plan (example spec)": [py, "-m", "verlctl", "plan", "-c", str(ROOT / "examples/run.yaml"),
                                            "-o", str(out), "--force"],
            "verlctl plan --json": [py, "-m", "verlctl", "plan", "-c", str(ROOT / "examples/run.yaml"), "--json"],
        }
        for cmd in cmds.values():  # warm the page cache and .pyc files
            timed(cmd, ROOT)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.runs):
            for name, cmd in cmds.items():
                times[name].append(timed(cmd, ROOT))
    base_med = statistics.median(times["typer hello --help (baseline)"])
    base_min = min(times["typer hello --help (baseline)"])
    print(f"{'command':34} {'median ms':>10} {'best ms':>9} {'x baseline (median)':>20} {'x baseline (best)':>18}")
    for name, ts in times.items():
        med, best = statistics.median(ts), min(ts)
        print(f"{name:34} {med * 1000:10.1f} {best * 1000:9.1f} {med / base_med:20.2f} {best / base_min:18.2f}")


if __name__ == "__main__":
    main()
