"""Benchmark: issue #20's real-verl budgets, one real run: wall time <= 8 min and peak memory <= 8 GiB.

A benchmark, not a test. One real verl 0.9.1 GRPO run on CPU (the real-verl image of
tests/image/build_realverl.sh, the user's spec and container of tests/realverl_support.py; the accelerator
is the TEST DOUBLE tests/realverl/verl_cpu_device_double.py), started by `verlctl launch --yes --watch` as a
subprocess and followed with `verlctl status --json` until it ends. Measured:

* wall: `verlctl launch` started -> `status` says the run ended (finished). The budget is for a QUIET 2-core
  machine: the load average (1 min) at the start and at the end and the core count are recorded beside it,
  and a loaded measurement is marked ``loaded`` (load average at start > cores).
* peak memory of the run: the whole run lives in one container (Ray daemons, TaskRunner, the FSDP workers,
  vLLM's server and EngineCore, TransferQueue, the reward and agent-loop workers), so its memory cgroup holds
  all of it. Sampled every 0.5 s from the cgroup files, as `docker stats` computes it: ``usage -
  inactive_file`` (cgroup v1: ``memory.usage_in_bytes - total_inactive_file``; v2: ``memory.current -
  inactive_file``). That is the budgeted number (``peak_bytes``). Also recorded: the kernel's own high-water
  mark, page cache included (v1 ``memory.max_usage_in_bytes``, v2 ``memory.peak``; ``kernel_peak_bytes``),
  and, every 5 s, the PSS of each process of the container by role, kept for the sample nearest the peak
  (``breakdown_at_peak``: which processes to make smaller).

``--profile after`` (default) is the spec of tests/realverl_support.py as the real-verl tests run it;
``--profile before`` leaves out its MEMORY_OVERRIDES / MEMORY_RAY_ARGS and sets VLLM_CPU_KVCACHE_SPACE=1,
as the tests ran before them (what a CPU user's spec would say; no Hydra key that the double changes). Holds the
machine-wide real-verl run lock while the run lasts. Writes one JSON object (``--json PATH`` and stdout's last
line) with PASS/OVER per budget.

    .venv/bin/python bench/realverl_budget.py [--profile before|after] [--steps 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

WALL_BUDGET_S = 8 * 60
MEM_BUDGET_BYTES = 8 * 1024**3

ROLES = (
    ("vllm_engine_core", re.compile(r"EngineCore|VLLM::EngineCore")),
    ("vllm_server", re.compile(r"vllm|vLLMHttpServer|AsyncvLLMServer")),
    ("fsdp_worker", re.compile(r"WorkerDict|ActorRollout")),
    ("task_runner", re.compile(r"TaskRunner|main_ppo")),
    ("transfer_queue", re.compile(r"TransferQueue|Storage|Controller", re.I)),
    ("reward_or_agent_loop", re.compile(r"Reward|AgentLoop", re.I)),
    ("ray_daemon", re.compile(r"raylet|gcs_server|dashboard|log_monitor|runtime_env|monitor\.py|ray/_private")),
    ("ray_idle_worker", re.compile(r"ray::IDLE|default_worker\.py")),
    ("dataloader_worker", re.compile(r"pt_data_worker|DataLoader", re.I)),
)


def role(cmdline: str) -> str:
    for name, pat in ROLES:
        if pat.search(cmdline):
            return name
    return "other"


def container_cpu_s(container_id: str) -> float | None:
    """CPU seconds the container's processes used so far (cgroup v1 cpuacct, or v2 cpu.stat), None if unreadable."""
    for p in (Path(f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage"),
              Path(f"/sys/fs/cgroup/cpu,cpuacct/docker/{container_id}/cpuacct.usage"),
              Path(f"/sys/fs/cgroup/cpuacct/system.slice/docker-{container_id}.scope/cpuacct.usage")):
        if p.is_file():
            return int(p.read_text()) / 1e9
    for p in (Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat"),
              Path(f"/sys/fs/cgroup/docker/{container_id}/cpu.stat")):
        if p.is_file():
            for ln in p.read_text().splitlines():
                k, _, v = ln.partition(" ")
                if k == "usage_usec":
                    return int(v) / 1e6
    return None


class CgroupMemory:
    """The memory cgroup of one container (v1 cgroupfs/systemd or v2)."""

    def __init__(self, container_id: str) -> None:
        cands = [
            Path(f"/sys/fs/cgroup/memory/docker/{container_id}"),
            Path(f"/sys/fs/cgroup/memory/system.slice/docker-{container_id}.scope"),
            Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope"),
            Path(f"/sys/fs/cgroup/docker/{container_id}"),
        ]
        found = next((p for p in cands if p.is_dir()), None)
        if found is None:
            raise SystemExit(f"no memory cgroup for container {container_id[:12]} under /sys/fs/cgroup")
        self.path = found
        self.v1 = (found / "memory.usage_in_bytes").exists()

    def _stat(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for ln in (self.path / "memory.stat").read_text().splitlines():
            k, _, v = ln.partition(" ")
            with contextlib.suppress(ValueError):
                out[k] = int(v)
        return out

    def used(self) -> int:
        """``docker stats``' number: usage minus the inactive page cache."""
        if self.v1:
            usage = int((self.path / "memory.usage_in_bytes").read_text())
            return usage - self._stat().get("total_inactive_file", 0)
        usage = int((self.path / "memory.current").read_text())
        return usage - self._stat().get("inactive_file", 0)

    def kernel_peak(self) -> int | None:
        p = self.path / ("memory.max_usage_in_bytes" if self.v1 else "memory.peak")
        try:
            return int(p.read_text())
        except (OSError, ValueError):
            return None

    def pids(self) -> list[int]:
        pids: set[int] = set()
        for f in self.path.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(x) for x in f.read_text().split())
        return sorted(pids)


def pss_by_role(pids: list[int]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            m = re.search(r"^Pss:\s+(\d+) kB", Path(f"/proc/{pid}/smaps_rollup").read_text(), re.M)
        except OSError:
            continue
        if not m:
            continue
        r = role(f"{comm} {cmd}")
        slot = out.setdefault(r, {"processes": 0, "pss_bytes": 0, "top": []})
        slot["processes"] += 1
        slot["pss_bytes"] += int(m.group(1)) * 1024
        slot["top"].append([int(m.group(1)) * 1024, f"{comm}: {cmd[:120]}"])
    for slot in out.values():
        slot["top"] = sorted(slot["top"], reverse=True)[:6]
    return out


class Sampler(threading.Thread):
    def __init__(self, cg: CgroupMemory, every: float = 0.5, breakdown_every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.cg, self.every, self.breakdown_every = cg, every, breakdown_every
        self.stop_evt = threading.Event()
        self.peak = 0
        self.peak_at = 0.0
        self.samples = 0
        self.t0 = time.monotonic()
        self.breakdown_at_peak: dict[str, Any] = {}
        self._breakdown_peak = 0

    def run(self) -> None:
        last_bd = 0.0
        while not self.stop_evt.is_set():
            with contextlib.suppress(OSError, ValueError):
                used = self.cg.used()
                self.samples += 1
                now = time.monotonic()
                if used > self.peak:
                    self.peak, self.peak_at = used, now - self.t0
                # the breakdown nearest the peak: taken every breakdown_every s, and whenever a new peak is seen
                if now - last_bd >= self.breakdown_every or used >= self.peak:
                    if used >= self._breakdown_peak and now - last_bd >= 1.0:
                        bd = pss_by_role(self.cg.pids())
                        self._breakdown_peak = used
                        self.breakdown_at_peak = {"at_s": round(now - self.t0, 1), "used_bytes": used,
                                                  "roles": bd}
                        last_bd = now
                    elif now - last_bd >= self.breakdown_every:
                        last_bd = now
            self.stop_evt.wait(self.every)


def loadavg() -> float:
    return os.getloadavg()[0]


def gib(n: int | None) -> float | None:
    return None if n is None else round(n / 1024**3, 2)


def run_once(image: str, profile: str, steps: int, keep: bool) -> dict[str, Any]:
    import docker

    from realverl_support import make_realverl_env, run_lock

    from launch_support import remove_container

    client = docker.from_env()
    tmp = Path(tempfile.mkdtemp(prefix="verlctl-realverl-budget-"))
    env = make_realverl_env(tmp, client, image, steps=steps, lean=profile == "after")
    result: dict[str, Any] = {"profile": profile, "steps": steps, "image": image, "cores": os.cpu_count()}
    try:
        env.container.reload()
        cg = CgroupMemory(env.container.id)
        result["memory_source"] = f"{cg.path} ({'v1' if cg.v1 else 'v2'}: usage - inactive_file, every 0.5 s)"
        with run_lock() as waited:
            result["lock_wait_s"] = round(waited, 1)
            sampler = Sampler(cg)
            sampler.start()
            result["load_start"] = round(loadavg(), 2)
            t0 = time.monotonic()
            cpu_start = container_cpu_s(env.container.id)
            res = env.cli("launch", "-c", str(env.spec_file), "--yes", "--watch", "--verify-timeout", "1200",
                          timeout=1500)
            if res.code != 0:
                raise SystemExit(f"launch failed (exit {res.code}):\n{res.out[-3000:]}\n{res.err[-2000:]}")
            result["launch_returned_s"] = round(time.monotonic() - t0, 1)
            deadline = time.monotonic() + 2400
            st: dict[str, Any] = {}
            while time.monotonic() < deadline:
                r = env.cli("status", "--json", timeout=180)
                if r.code == 0:
                    st = json.loads(r.out)
                    s = str(st.get("state"))
                    if s in ("finished", "stopped") or s.startswith("failed"):
                        break
                time.sleep(5)
            wall = time.monotonic() - t0
            cpu_end = container_cpu_s(env.container.id)
            if cpu_start is not None and cpu_end is not None:
                result["container_cpu_s"] = round(cpu_end - cpu_start, 1)
            sampler.stop_evt.set()
            sampler.join(timeout=30)
            result["load_end"] = round(loadavg(), 2)
        result["state"] = st.get("state")
        result["wall_s"] = round(wall, 1)
        result["peak_bytes"] = sampler.peak
        result["peak_gib"] = gib(sampler.peak)
        result["peak_at_s"] = round(sampler.peak_at, 1)
        result["samples"] = sampler.samples
        result["kernel_peak_bytes"] = cg.kernel_peak()
        result["kernel_peak_gib"] = gib(result["kernel_peak_bytes"])
        result["breakdown_at_peak"] = sampler.breakdown_at_peak
        log = env.train_log.read_text(errors="replace") if env.train_log.exists() else ""
        result["steps_seen"] = sorted({int(x) for x in re.findall(r"step:(\d+) ", log)})
    finally:
        remove_container(client, env.name)
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            result["kept"] = str(tmp)
    ok_run = result.get("state") == "finished" and result.get("steps_seen", [])[-1:] == [steps]
    result["loaded"] = bool(result.get("load_start", 0) > (os.cpu_count() or 1))
    result["budgets"] = {
        "wall": {"budget_s": WALL_BUDGET_S, "measured_s": result.get("wall_s"),
                 "ratio": round(result["wall_s"] / WALL_BUDGET_S, 2),
                 "verdict": "PASS" if ok_run and result["wall_s"] <= WALL_BUDGET_S else "OVER",
                 "note": "loaded machine: the budget is for a quiet one" if result["loaded"] else "quiet"},
        "memory": {"budget_bytes": MEM_BUDGET_BYTES, "measured_bytes": result.get("peak_bytes"),
                   "ratio": round(result["peak_bytes"] / MEM_BUDGET_BYTES, 2),
                   "verdict": "PASS" if ok_run and result["peak_bytes"] <= MEM_BUDGET_BYTES else "OVER"},
    }
    if not ok_run:
        result["budgets"]["run"] = f"the run did not finish all {steps} steps (state {result.get('state')})"
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=("before", "after"), default="after")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--keep", action="store_true", help="keep the run's folder (logs, checkpoints)")
    args = ap.parse_args()
    if args.steps < 1:
        print("--steps: must be 1 or more", file=sys.stderr)
        return 2
    proc = subprocess.run(["bash", str(ROOT / "tests" / "image" / "build_realverl.sh")], capture_output=True,
                          text=True, timeout=5400)
    if proc.returncode != 0:
        print(f"tests/image/build_realverl.sh failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}",
              file=sys.stderr)
        return 1
    image = proc.stdout.strip().splitlines()[-1]
    result = run_once(image, args.profile, args.steps, args.keep)
    b = result["budgets"]
    print(f"profile {args.profile}: wall {result['wall_s']:.0f} s / {WALL_BUDGET_S} s -> {b['wall']['verdict']}"
          f" (load {result['load_start']} -> {result['load_end']}, {result['cores']} cores); "
          f"peak {result['peak_gib']} GiB / 8 GiB -> {b['memory']['verdict']}"
          f" (kernel high-water incl. page cache {result['kernel_peak_gib']} GiB)", file=sys.stderr)
    text = json.dumps(result, sort_keys=True)
    if args.json:
        tmp = args.json.with_name(f".{args.json.name}.tmp")
        tmp.write_text(text + "\n")
        os.replace(tmp, args.json)
    print(text)
    return 0 if all(v["verdict"] == "PASS" for v in (b["wall"], b["memory"])) and "run" not in b else 1


if __name__ == "__main__":
    sys.exit(main())
