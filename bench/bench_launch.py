"""Benchmark: `verlctl launch --yes` to the trainer's first line, vs a hand-written docker flow.

A benchmark, not a test. Both flows start from no container and end when the training command's first line
(the stand-in trainer's banner) appears in the log on the host, measured in the same run, alternating:

* hand-written: `docker run` (same devices, mounts, network/ipc host, init) + `docker cp` of the two scripts
  rendered by `verlctl plan` + `docker exec -d bash start_verl.sh` (what the seed does by hand);
* verlctl: `verlctl launch -c run.yaml --yes` (readiness checks, preflight compose, copy, start; its own
  verification wait is not counted: the clock stops at the same log line).

Needs the Docker engine and the test image (`tests/image/build.sh`). Target: verlctl <= 1.2x.

    .venv/bin/python bench/bench_launch.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

FIRST_LINE = "TEST DOUBLE for `python3 -m"


def wait_line(log_dir: Path, started: float, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in log_dir.glob("*.log"):
            try:
                if FIRST_LINE in p.read_text(errors="replace"):
                    return time.monotonic() - started
            except OSError:
                pass
        time.sleep(0.05)
    raise SystemExit(f"no trainer line in {log_dir} within {timeout}s")


def prepare(tmp: Path, image: str) -> tuple[Path, dict]:
    from launch_support import make_launch_env

    env = make_launch_env(tmp, image, steps=200, step_seconds=1.0)
    return env.spec_file, env.spec


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout.strip()


def hand_written(spec: dict, spec_file: Path, scripts: Path) -> float:
    name = spec["container"]["name"]
    paths = spec["paths"]
    logs = Path(paths["logs"])
    mounts = [paths["model"], str(Path(paths["train_files"]).parent), paths["checkpoints"], paths["logs"]]
    for m in mounts:
        Path(m).mkdir(parents=True, exist_ok=True)
    devices = [f"/dev/davinci{i}" for i in range(8)] + ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    started = time.monotonic()
    run = ["run", "-d", "--init", "--name", name, "--network", "host", "--ipc", "host", "--shm-size",
           spec["container"]["shm_size"], "-w", "/verl"]
    for d in devices:
        run += ["--device", d]
    for m in mounts:
        run += ["-v", f"{m}:{m}"]
    docker(*run, spec["container"]["image"], "sleep", "infinity")
    docker("exec", name, "mkdir", "-p", "/verl/bench")
    docker("cp", str(scripts / "start_verl.sh"), f"{name}:/verl/bench/start_verl.sh")
    docker("cp", str(scripts / "run_training.sh"), f"{name}:/verl/bench/run_training.sh")
    docker("exec", "-d", "-w", "/verl", name, "bash", "-c", f"bash /verl/bench/start_verl.sh >> {logs}/hand.log 2>&1")
    return wait_line(logs, started)


def with_verlctl(spec: dict, spec_file: Path, state: Path) -> float:
    env = {**os.environ, "VERLCTL_STATE_DIR": str(state)}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "verlctl", "launch", "-c", str(spec_file), "--yes"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t = wait_line(Path(spec["paths"]["logs"]), started)
    proc.wait(timeout=600)
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    image = subprocess.run([str(ROOT / "tests/image/build.sh")], check=True, capture_output=True,
                           text=True).stdout.split()[-1]
    times: dict[str, list[float]] = {"hand-written docker run/cp/exec": [], "verlctl launch --yes": []}
    for i in range(args.runs):
        for flow in list(times):
            tmp = Path(tempfile.mkdtemp(prefix="verlctl-bench-"))
            spec_file, spec = prepare(tmp, image)
            try:
                if flow.startswith("hand"):
                    scripts = tmp / "scripts"
                    subprocess.run([sys.executable, "-m", "verlctl", "plan", "-c", str(spec_file), "-o", str(scripts)],
                                   check=True, capture_output=True)
                    times[flow].append(hand_written(spec, spec_file, scripts))
                else:
                    times[flow].append(with_verlctl(spec, spec_file, tmp / "state"))
            finally:
                subprocess.run(["docker", "rm", "-f", spec["container"]["name"]], capture_output=True)
                shutil.rmtree(tmp, ignore_errors=True)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()), flush=True)
    base = statistics.median(times["hand-written docker run/cp/exec"])
    print(f"{'flow':34} {'median s':>9} {'best s':>8} {'x hand-written':>15}")
    for k, v in times.items():
        print(f"{k:34} {statistics.median(v):9.2f} {min(v):8.2f} {statistics.median(v) / base:15.2f}")


if __name__ == "__main__":
    main()
