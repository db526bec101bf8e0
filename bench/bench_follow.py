"""Benchmark: following a live log, as the watcher does.

A benchmark, not a test. Two figures, for a log on the host and for a log inside a container (followed with
the streaming `tail -F` exec the watcher uses):

* latency: a writer appends verl step lines at random intervals, each carrying the time it was written; the
  follower (runtime.follow.Follower + monitor.events.LogParser, the watcher's pair) records when each line
  became an event. Target p99 <= 1 s.
* idle CPU: the follower on a quiet log for a while, with the watcher's liveness check every 5 s; CPU time
  of this process (all threads) over wall time. Target <= 2 %.

    .venv/bin/python bench/bench_follow.py [--lines 200] [--idle 30] [--no-docker]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from verlctl.monitor.catalogue import Classifier
from verlctl.monitor.events import LogParser, StepMetrics
from verlctl.runtime.executor import DockerExecutor, Executor, HostExecutor
from verlctl.runtime.follow import Follower

ROOT = Path(__file__).resolve().parents[1]


def writer(path: Path, n: int, stop: threading.Event) -> None:
    with open(path, "a", buffering=1) as fh:
        for i in range(1, n + 1):
            if stop.is_set():
                return
            time.sleep(random.uniform(0.0, 0.1))
            fh.write(f"step:{i} - bench/written_at:{time.time():.6f} - critic/score/mean:0.5 - "
                     f"response_length/mean:231.0 - timing_s/step:{random.random():.3f}\n")


def latency(ex: Executor, host_path: Path, target_path: str, n: int) -> list[float]:
    host_path.write_text("")
    follower = Follower(ex, target_path, 0)
    parser = LogParser(Classifier())
    stop = threading.Event()
    t = threading.Thread(target=writer, args=(host_path, n, stop), daemon=True)
    time.sleep(1.0)  # the follower is attached
    t.start()
    lat: list[float] = []
    deadline = time.monotonic() + n * 0.1 + 30
    while len(lat) < n and time.monotonic() < deadline:
        text = follower.get(timeout=1.0)
        now = time.time()
        for ev in parser.feed(text):
            if isinstance(ev, StepMetrics) and "bench/written_at" in ev.metrics:
                lat.append(now - float(ev.metrics["bench/written_at"]))
    stop.set()
    follower.stop()
    return lat


def idle_cpu(ex: Executor, host_path: Path, target_path: str, seconds: float) -> float:
    host_path.write_text("quiet\n")
    follower = Follower(ex, target_path, 0)
    parser = LogParser(Classifier())
    time.sleep(1.0)
    c0, w0 = time.process_time(), time.monotonic()
    next_liveness = 0.0
    while time.monotonic() - w0 < seconds:
        parser.feed(follower.get(timeout=1.0))
        if time.monotonic() >= next_liveness:  # the watcher checks the process group every 5 s
            ex.group_alive(1)
            next_liveness = time.monotonic() + 5.0
    cpu = time.process_time() - c0
    wall = time.monotonic() - w0
    follower.stop()
    return 100.0 * cpu / wall


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--idle", type=float, default=30.0)
    ap.add_argument("--no-docker", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        lat = latency(HostExecutor(), d / "host.log", str(d / "host.log"), args.lines)
        cpu = idle_cpu(HostExecutor(), d / "idle.log", str(d / "idle.log"), args.idle)
        rows.append(("host file", lat, cpu))
        if not args.no_docker:
            import docker

            image = subprocess.run([str(ROOT / "tests/image/build.sh")], check=True, capture_output=True,
                                   text=True).stdout.split()[-1]
            client = docker.from_env()
            c = client.containers.run(image, ["sleep", "infinity"], detach=True, init=True,
                                      volumes={tmp: {"bind": "/bench", "mode": "rw"}},
                                      name=f"verlctl-bench-follow-{os.getpid()}")
            try:
                ex = DockerExecutor(client, c.id, c.name)
                lat = latency(ex, d / "c.log", "/bench/c.log", args.lines)
                cpu = idle_cpu(ex, d / "cidle.log", "/bench/cidle.log", args.idle)
                rows.append(("container (tail -F exec)", lat, cpu))
            finally:
                c.remove(force=True)
    print(f"{'log':26} {'events':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'idle CPU %':>11}")
    for name, lat, cpu in rows:
        print(f"{name:26} {len(lat):7d} {statistics.median(lat) * 1000:8.1f} {pct(lat, 0.99) * 1000:8.1f} "
              f"{max(lat) * 1000:8.1f} {cpu:11.2f}")


if __name__ == "__main__":
    main()
