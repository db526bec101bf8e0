"""Benchmark: `verlctl list`, `status RUN` and `stop RUN` (a run that has already ended) with 20 recorded runs.

A benchmark, not a test: it prints wall times (median and best of N runs of each command as a subprocess, as a
user runs them). The recorded runs are real records as `launch` writes them (run.json, events.jsonl,
status.json, a host log under paths.logs): 18 Docker runs that ended (finished, failed, stopped, one recovered
from OOM) whose containers are gone, one launch that never started, and one running host-runtime run (a real
process group with its attempt marker, so that `list` and `status` check a live process). Targets (issue 24):
`status RUN` <= 1.5 s, `list` <= 1 s, `stop` of an ended run <= 2 s. Load the machine yourself for the
"2 busy loops per core" figure, e.g. `bench/bench_inspect.py --busy 2`. Each time is also given as a ratio to
the CLI benchmarks' baseline, a minimal typer app's `--help` (bench/bench_cli.py), measured in the same run:
on a loaded machine the ratio (and the CPU time) move less than the wall time.

    .venv/bin/python bench/bench_inspect.py [--runs 7] [--busy N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNNING = "20261201-090000-bench-running-0000"


def write_runs(state: Path, logs: Path) -> list[str]:
    ids = []
    now = time.time()
    kinds = ["finished", "gave_up", "stopped", "recovered", "exited"] * 4
    for i, kind in enumerate(kinds[:18]):
        run_id = f"20261201-08{i:02d}00-bench-{kind}-{i:04x}"
        ids.append(run_id)
        d = state / "runs" / run_id
        d.mkdir(parents=True)
        log = logs / f"verlctl-{run_id}.log"
        body = "".join(f"step:{s} - critic/score/mean:0.{s} - timing_s/step:1.5\n" for s in range(1, 31))
        attempts = [{"number": 1, "pgid": 40000 + i, "started_at": now - 3000, "marker": f"{run_id}/1/ab",
                     "leader_start": 1, "log_offset": 0}]
        events = [{"event": "launch"}, {"event": "started", "attempt": 1, "pgid": 40000 + i}]
        if kind == "recovered":
            attempts.append({**attempts[0], "number": 2, "log_offset": len(body) // 2, "reason": "device_oom"})
            events += [{"event": "alert", "category": "device_oom", "message": "NPU out of memory", "step": 3},
                       {"event": "recovery", "category": "device_oom", "add_feature": "offload"},
                       {"event": "started", "attempt": 2, "pgid": 40000 + i}, {"event": "finished"}]
        elif kind == "finished":
            events.append({"event": "finished"})
        elif kind == "gave_up":
            events.append({"event": "gave_up", "reason": "gave up: python_exception: no automatic restart"})
        elif kind == "stopped":
            events.append({"event": "stopped"})
        else:
            body += "[verlctl 09:00:00] start_verl.sh exits with status 1\n"
        log.write_text(body, encoding="utf-8")
        rec = {"run_id": run_id, "created_at": now - 3600 + i, "runtime": "docker", "workdir": "/verl",
               "scripts_dir": f"/verl/.verlctl/runs/{run_id}", "run_log": str(log), "train_log": "",
               "checkpoints": "/ckpt", "experiment": "bench", "verl_version": "0.7.0",
               "container_id": f"{i:064x}", "container_name": f"verlctl-bench-gone-{i}", "container_created": True,
               "pgid": 40000 + i, "attempts": attempts, "stopped": kind == "stopped"}
        (d / "run.json").write_text(json.dumps(rec), encoding="utf-8")
        (d / "events.jsonl").write_text("".join(json.dumps({"time": now - 100, "run": run_id, **e}) + "\n"
                                                for e in events), encoding="utf-8")
        (d / "status.json").write_text(json.dumps({"attempt": len(attempts), "phase": "finished", "step": 30,
                                                   "total": 30}), encoding="utf-8")
    never = "20261201-085900-bench-never-ffff"
    ids.append(never)
    d = state / "runs" / never
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"run_id": never, "created_at": now - 60, "runtime": "docker",
                                            "workdir": "/verl", "scripts_dir": "/verl/x", "run_log": "/nonexistent",
                                            "train_log": "", "checkpoints": "", "experiment": "bench",
                                            "verl_version": "0.7.0"}), encoding="utf-8")
    (d / "events.jsonl").write_text(json.dumps({"time": now, "event": "launch_failed", "error": "image missing"})
                                    + "\n", encoding="utf-8")
    return ids


def start_running(state: Path, logs: Path) -> subprocess.Popen[bytes]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from verlctl.runtime.procscan import leader_start

    marker = f"{RUNNING}/1/cafe"
    log = logs / f"verlctl-{RUNNING}.log"
    log.write_text("[verlctl] training starts\nstep:1 - critic/score/mean:0.1\n", encoding="utf-8")
    p = subprocess.Popen(["sleep", "3600"], start_new_session=True, env={**os.environ, "VERLCTL_ATTEMPT": marker})
    ticks = None
    deadline = time.monotonic() + 30
    while ticks is None and time.monotonic() < deadline:
        ticks = leader_start(p.pid)
    d = state / "runs" / RUNNING
    d.mkdir(parents=True)
    rec = {"run_id": RUNNING, "created_at": time.time(), "runtime": "host", "workdir": str(logs),
           "scripts_dir": str(logs), "run_log": str(log), "train_log": "", "checkpoints": "", "experiment": "bench",
           "verl_version": "0.7.0", "pgid": p.pid,
           "attempts": [{"number": 1, "pgid": p.pid, "started_at": time.time(), "marker": marker,
                         "leader_start": ticks}]}
    (d / "run.json").write_text(json.dumps(rec), encoding="utf-8")
    (d / "events.jsonl").write_text(json.dumps({"time": time.time(), "event": "started", "attempt": 1}) + "\n",
                                    encoding="utf-8")
    return p


def start_container(image: str, state: Path) -> tuple[str, str]:
    """A stopped-training container as a finished run leaves it (`sleep infinity`, nothing of the run left),
    and the record of that run: `status` and `stop` then check the process inside it (docker exec)."""
    name = f"verlctl-bench-ended-{os.getpid()}"
    cid = subprocess.run(["docker", "run", "-d", "--name", name, "--label", "verlctl.bench=1", "--", image,
                          "sleep", "infinity"], capture_output=True, text=True, check=True).stdout.strip()
    run_id = "20261201-090100-bench-ended-in-container-1111"
    d = state / "runs" / run_id
    d.mkdir(parents=True)
    rec = {"run_id": run_id, "created_at": time.time(), "runtime": "docker", "workdir": "/verl",
           "scripts_dir": f"/verl/.verlctl/runs/{run_id}", "run_log": f"/verl/logs/verlctl-{run_id}.log",
           "train_log": "", "checkpoints": "/ckpt", "experiment": "bench", "verl_version": "0.7.0",
           "container_id": cid, "container_name": name, "pgid": 4242,
           "attempts": [{"number": 1, "pgid": 4242, "started_at": time.time(), "marker": f"{run_id}/1/beef",
                         "leader_start": 1}]}
    (d / "run.json").write_text(json.dumps(rec), encoding="utf-8")
    (d / "events.jsonl").write_text("".join(json.dumps({"time": time.time(), "event": e}) + "\n"
                                            for e in ("started", "finished")), encoding="utf-8")
    return cid, run_id


CPU: dict[str, list[float]] = {}


def timed(cmd: list[str], env: dict[str, str], name: str = "") -> float:
    """Wall time of ``cmd``; its CPU time (user + sys, the load-independent part) goes to CPU[name]."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.setdefault(name, []).append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed ({proc.returncode}): {proc.stderr.decode()[-800:]}")
    return dt


def busy_loops(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--busy", type=int, default=0, help="busy loops per core to run alongside")
    ap.add_argument("--image", default=None, help="an image with python3 for the ended-run-in-a-container case "
                    "(default: the newest verlctl-test-base image; 'none' to skip)")
    args = ap.parse_args()
    verlctl = [sys.executable, "-m", "verlctl"]
    from bench_cli import HELLO  # the CLI benchmarks' baseline: a minimal typer app (bench/bench_cli.py)

    loops = busy_loops(args.busy * (os.cpu_count() or 1))
    running = None
    cid = None
    image = args.image
    if image is None:
        out = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "verlctl-test-base"],
                             capture_output=True, text=True).stdout.split()
        image = out[0] if out else "none"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            state, logs = Path(tmp) / "state", Path(tmp) / "logs"
            logs.mkdir()
            ids = write_runs(state, logs)
            running = start_running(state, logs)
            in_container = None
            if image != "none":
                cid, in_container = start_container(image, state)
            env = {**os.environ, "VERLCTL_STATE_DIR": str(state), "COLUMNS": "160"}
            env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its .pyc files: time them, not compile
            hello = Path(tmp) / "hello.py"
            hello.write_text(HELLO)
            baseline = [sys.executable, str(hello), "--help"]
            timed(baseline, env, "baseline")
            for cmd in ([*verlctl, "list"], [*verlctl, "status", RUNNING]):  # write the .pyc files
                timed(cmd, env, "warm-up")
            results: dict[str, list[float]] = {"typer hello --help (baseline)": [], "list": [], "status RUN (ended, container gone)": [],
                                               "status RUN (running)": [], "stop RUN (ended, container gone)": []}
            budgets = {"typer hello --help (baseline)": float("inf"), "list": 1.0, "status RUN (ended, container gone)": 1.5, "status RUN (running)": 1.5,
                       "stop RUN (ended, container gone)": 2.0}
            if in_container:
                results["status RUN (ended, container kept)"] = []
                results["stop RUN (ended, container kept)"] = []
                budgets["status RUN (ended, container kept)"] = 1.5
                budgets["stop RUN (ended, container kept)"] = 2.0
            for i in range(args.runs):
                results["typer hello --help (baseline)"].append(
                    timed(baseline, env, "typer hello --help (baseline)"))
                results["list"].append(timed([*verlctl, "list"], env, "list"))
                results["status RUN (ended, container gone)"].append(
                    timed([*verlctl, "status", ids[3]], env, "status RUN (ended, container gone)"))
                results["status RUN (running)"].append(timed([*verlctl, "status", RUNNING], env, "status RUN (running)"))
                results["stop RUN (ended, container gone)"].append(
                    timed([*verlctl, "stop", ids[i % 18]], env, "stop RUN (ended, container gone)"))
                if in_container:
                    results["status RUN (ended, container kept)"].append(
                        timed([*verlctl, "status", in_container], env, "status RUN (ended, container kept)"))
                    results["stop RUN (ended, container kept)"].append(
                        timed([*verlctl, "stop", in_container], env, "stop RUN (ended, container kept)"))
            load = os.getloadavg()[0]
            print(f"{len(ids) + 1 + bool(in_container)} recorded runs, {args.busy} busy loop(s) per core, "
                  f"{args.runs} runs each, load average {load:.1f} on {os.cpu_count()} cores:")
            base = statistics.median(results["typer hello --help (baseline)"])
            base_cpu = statistics.median(CPU["typer hello --help (baseline)"])
            for name, times in results.items():
                med = statistics.median(times)
                cpu = statistics.median(CPU.get(name) or [0.0])
                verdict = "" if budgets[name] == float("inf") else (
                    f"budget {budgets[name]:.1f} s  {'ok' if med <= budgets[name] else 'OVER'}")
                print(f"  {name:40s} median {med:5.2f} s  best {min(times):5.2f} s  cpu {cpu:4.2f} s  "
                      f"x baseline {med / base:4.1f} (cpu {cpu / base_cpu:4.1f})  {verdict}")
    finally:
        if running is not None:
            with contextlib.suppress(OSError):
                os.killpg(running.pid, signal.SIGKILL)
            running.wait()
        if cid:
            subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
        for p in loops:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
