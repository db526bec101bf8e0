"""Benchmark: an out-of-memory line written to the run's log -> the relaunch started (OOM recovery).

A benchmark, not a test. A run on the real engine with the stand-in trainer (a test double for verl's
training step) hits a device OOM at step 3 unless offload is on; `verlctl watch` follows it. Measured per
run, in wall-clock time on this machine:

* detect:   the OOM line appears in the log on the host (polled every 20 ms) -> the watcher's ``alert`` event
* teardown: stopping the attempt's process group and waiting for device memory (the ``recovery`` event's
  ``teardown_s``; reported separately, it depends on how fast the trainer exits)
* relaunch: the OOM line -> the ``started`` event of attempt 2 (the new start_verl.sh is running)

Goal: relaunch - teardown <= 5 s. Needs the Docker engine and the test image (`tests/image/build.sh`).

    .venv/bin/python bench/bench_recovery.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

OFFLOAD = "actor_rollout_ref.actor.megatron.param_offload=True"
VERBOSE = False
EXTRA_ENV: dict[str, str] = {}


def events(state: Path) -> list[dict]:
    out: list[dict] = []
    for p in (state / "runs").glob("*/events.jsonl"):
        out += [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    return out


def one_run(tmp: Path, image: str, src: str | None = None) -> dict[str, float]:
    from launch_support import make_launch_env, remove_container

    # The OOM comes a few steps after `launch` returns, once the watcher follows the log.
    env = make_launch_env(tmp, image, steps=12, step_seconds=1.0,
                          standin={"VERLCTL_STANDIN_OOM_AT_STEP": "8", "VERLCTL_STANDIN_OOM_UNLESS": OFFLOAD})
    watch = None
    if src is not None:  # verlctl from another source tree (the baseline)
        env.extra_env["PYTHONPATH"] = src
    try:
        res = env.cli("launch", "-c", str(env.spec_file), "--yes")
        if res.code != 0:
            raise SystemExit(f"launch failed: {res.err}")
        watch = subprocess.Popen([sys.executable, "-m", "verlctl", "watch"], env={**env.env(), **EXTRA_ENV},
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        logs = Path(env.spec["paths"]["logs"])
        t_oom = None
        deadline = time.monotonic() + 300
        while t_oom is None and time.monotonic() < deadline:
            for p in logs.glob("verlctl-*.log"):
                if "out of memory" in p.read_text(errors="replace"):
                    t_oom = time.time()
            time.sleep(0.02)
        if t_oom is None:
            raise SystemExit("no OOM line within 300 s")
        while time.monotonic() < deadline:
            evs = events(env.state)
            started = [e for e in evs if e["event"] == "started" and e.get("attempt") == 2]
            if started:
                alert = next(e for e in evs if e["event"] == "alert")
                recovery = next(e for e in evs if e["event"] == "recovery")
                if VERBOSE:
                    for e in evs:
                        print(f"  {e['time'] - t_oom:+7.2f} s  {e['event']}", flush=True)
                return {"detect": alert["time"] - t_oom, "teardown": float(recovery["teardown_s"]),
                        "recovery": recovery["time"] - t_oom, "relaunch": started[0]["time"] - t_oom}
            time.sleep(0.1)
        raise SystemExit("no relaunch within 300 s")
    finally:
        env.cli("stop")
        if watch is not None:
            watch.wait(timeout=60)
        import docker

        remove_container(docker.from_env(), env.name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--events", action="store_true", help="print each run's events, relative to the OOM line")
    ap.add_argument("--baseline", metavar="DIR", help="also measure verlctl from DIR/src (e.g. `git archive REV src "
                    "| tar -x -C DIR`), alternating with this tree's, round by round")
    args = ap.parse_args()
    global VERBOSE
    VERBOSE = args.events
    image = subprocess.run([str(ROOT / "tests" / "image" / "build.sh")], check=True, capture_output=True,
                           text=True).stdout.strip().splitlines()[-1]
    trees: list[tuple[str, str | None]] = [("this tree", None)]
    if args.baseline:
        trees.insert(0, (f"baseline {args.baseline}", str(Path(args.baseline).resolve() / "src")))
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for i in range(args.runs):
        for name, src in trees:
            with tempfile.TemporaryDirectory(prefix="verlctl-bench-recovery-") as d:
                r = one_run(Path(d), image, src)
            rows[name].append(r)
            print(f"run {i + 1} ({name}): detect {r['detect']:.2f} s, teardown {r['teardown']:.2f} s, OOM line -> "
                  f"relaunch started {r['relaunch']:.2f} s (without teardown {r['relaunch'] - r['teardown']:.2f} s)",
                  flush=True)
    for name, got in rows.items():
        med = {k: statistics.median(r[k] for r in got) for k in got[0]}
        print(f"{name}: median of {len(got)}: detect {med['detect']:.2f} s, teardown {med['teardown']:.2f} s, "
              f"relaunch {med['relaunch']:.2f} s, relaunch - teardown "
              f"{statistics.median(r['relaunch'] - r['teardown'] for r in got):.2f} s (goal <= 5 s)")


if __name__ == "__main__":
    main()
