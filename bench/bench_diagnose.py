"""Benchmark: `verlctl diagnose --json` against `grep -E -c` with the same patterns, on a >= 500 MB log.

A benchmark, not a test. It builds the log in a temporary directory from real fixture lines (the lines of
tests/fixtures/verl-logs repeated in file order, with a random line of tests/fixtures/errors sprinkled in
after about one block in 50), runs both tools on it (interleaved, best of --repeat), prints wall seconds,
CPU seconds and MB/s of each and the ratio, then deletes the log.

grep gets the catalogue's signatures in their POSIX ERE form (`catalogue.ere_patterns()`, one per line, via
`-f`). It runs twice: in this environment's locale (what a user typing `grep` gets) and with LC_ALL=C (byte
matching, grep's fastest mode). verlctl streams the steps JSON to a file in the same temporary directory, and
the run is checked (it must find failures and every step line).

Target: verlctl >= 0.5x grep's throughput.

    .venv/bin/python bench/bench_diagnose.py [--size-mb 512] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "src"))

from verlctl.monitor.catalogue import ere_patterns  # noqa: E402
from verlctl.monitor.events import StepMetrics, of_type, parse_text  # noqa: E402


def capture(path: Path) -> list[str]:
    """The captured lines of a fixture file (everything after the first line that is exactly '# ---')."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[lines.index("# ---") + 1 :]


def build_log(path: Path, size: int, seed: int = 0) -> tuple[int, int]:
    """Write the benchmark log; returns (bytes, step lines written)."""
    block_lines = [line for p in sorted((FIXTURES / "verl-logs").glob("*.txt")) for line in capture(p)]
    errors = [
        line for p in sorted((FIXTURES / "errors").glob("*.txt")) for line in capture(p) if line.strip()
    ]
    block = ("\n".join(block_lines) + "\n").encode()
    steps_per_block = len(of_type(parse_text(block.decode()), StepMetrics))
    rng = random.Random(seed)
    written = steps = 0
    with open(path, "wb") as f:
        while written < size:
            parts = [block] * 64
            for i in range(64):
                if rng.random() < 0.02:
                    parts[i] = block + (rng.choice(errors) + "\n").encode()
            data = b"".join(parts)
            f.write(data)
            written += len(data)
            steps += 64 * steps_per_block
    return written, steps


def timed(cmd: list[str], env: dict[str, str], stdout) -> tuple[float, float, subprocess.CompletedProcess]:  # type: ignore[no-untyped-def]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=int, default=512, help="log size in MiB (default 512)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool; the best is reported")
    args = ap.parse_args()
    if shutil.which("grep") is None:
        raise SystemExit("grep not found")

    tmp = Path(tempfile.mkdtemp(prefix="verlctl-bench-diagnose-"))
    try:
        log = tmp / "train.log"
        t0 = time.perf_counter()
        size, steps = build_log(log, args.size_mb << 20)
        print(
            f"log: {size / 1e6:.0f} MB, {steps} step lines, built in {time.perf_counter() - t0:.1f}s ({tmp})"
        )
        patterns = tmp / "patterns.ere"
        patterns.write_text("\n".join(ere_patterns()) + "\n", encoding="utf-8")
        with open(log, "rb") as f:  # warm the page cache so that both tools read from memory
            while f.read(64 << 20):
                pass

        env = dict(os.environ)
        env_c = dict(env, LC_ALL="C")
        locale = env.get("LC_ALL") or env.get("LC_CTYPE") or env.get("LANG") or "POSIX"
        out_json = tmp / "diagnose.json"
        runs: dict[str, list[tuple[float, float]]] = {
            "verlctl": [], "verlctl2": [], "verlctl_text": [], "grep": [], "grep_c": []
        }
        verlctl_cmd = [sys.executable, "-m", "verlctl", "diagnose", str(log), "--json"]
        grep_cmd = ["grep", "-E", "-c", "-f", str(patterns), str(log)]
        grep_counts = set()
        for _ in range(args.repeat):
            for key, mode in (("verlctl", "0"), ("verlctl2", "1")):  # one process / JSON writer on a 2nd core
                with open(out_json, "wb") as out:
                    wall, cpu, proc = timed(verlctl_cmd, dict(env, VERLCTL_DIAGNOSE_PIPELINE=mode), out)
                if proc.returncode != 1:
                    raise SystemExit(
                        f"verlctl diagnose: exit {proc.returncode}: {proc.stderr.decode()[-800:]}"
                    )
                runs[key].append((wall, cpu))
            # the same diagnosis as text (root cause, progress, last step): no JSON for every step line
            wall, cpu, proc = timed(verlctl_cmd[:-1], env, subprocess.DEVNULL)
            if proc.returncode != 1:
                raise SystemExit(f"verlctl diagnose: exit {proc.returncode}: {proc.stderr.decode()[-800:]}")
            runs["verlctl_text"].append((wall, cpu))
            for key, e in (("grep", env), ("grep_c", env_c)):
                wall, cpu, proc = timed(grep_cmd, e, subprocess.PIPE)
                if proc.returncode != 0:
                    raise SystemExit(f"grep: exit {proc.returncode}: {proc.stderr.decode()[-800:]}")
                grep_counts.add(int(proc.stdout))
                runs[key].append((wall, cpu))

        # the diagnose output must be a complete result: every step line, and the failures
        with open(out_json, "rb") as f:
            f.seek(max(0, out_json.stat().st_size - (1 << 20)))
            tail = f.read()
        doc = json.loads("{" + tail[tail.rindex(b'"progress":') :].decode())
        with open(out_json, "rb") as f:
            head = f.read(32)
            emitted = sum(chunk.count(b'{"step": ') for chunk in iter(lambda: f.read(64 << 20), b""))
        assert head.startswith(b'{"steps": ['), head
        if emitted != steps or not doc["findings"]:
            raise SystemExit(
                f"unexpected diagnose result: {emitted} steps (want {steps}), {len(doc['findings'])} findings"
            )

        mb = size / 1e6
        best = {k: min(v) for k, v in runs.items()}
        load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"\n{os.cpu_count()} CPUs, load average {load} (other processes slow every tool alike)")
        print(f"{'tool':<34} {'wall s':>7} {'cpu s':>7} {'MB/s':>7}")
        rows = [
            ("verlctl diagnose --json (1 proc)", best["verlctl"]),
            ("verlctl diagnose --json (2 procs)", best["verlctl2"]),
            ("verlctl diagnose (text)", best["verlctl_text"]),
            (f"grep -E -c -f ({locale})", best["grep"]),
            ("grep -E -c -f (LC_ALL=C)", best["grep_c"]),
        ]
        rates = {name: mb / wall for name, (wall, _) in rows}
        for name, (wall, cpu) in rows:
            print(f"{name:<34} {wall:7.2f} {cpu:7.2f} {rates[name]:7.1f}")
        print("\nratio = verlctl MB/s / grep MB/s (target >= 0.5)")
        for v in rows[:3]:
            for g in rows[3:]:
                print(f"  {v[0]:<34} vs {g[0]:<26} {rates[v[0]] / rates[g[0]]:5.2f}")
        print(
            f"\n{len(ere_patterns())} patterns; grep matched {sorted(grep_counts)} lines; verlctl: "
            f"{emitted} steps, {len(doc['findings'])} distinct findings, root cause {doc['findings'][0]['category']}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
