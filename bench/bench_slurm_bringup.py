"""Benchmark: Slurm bring-up to "all devices joined" for 1, 2 and 4 nodes, reported as t(N)/t(1) in one run.

A benchmark, not a test. A real Slurm cluster of 4 slurmd nodes (containers of the test image plus Debian's
Slurm, as in tests/slurm_support.py) runs the job `verlctl export slurm --nodes N` writes, with the stand-in
trainer (a test double for verl's training step). The clock starts when `sbatch --parsable` returns and stops
when the job's output shows the head's "all K NPU devices joined Ray" line (K = 2 devices x N nodes); the job
is then cancelled (its own id). Sizes alternate (1, 2, 4, 1, 2, 4, ...) so that drift hits every size alike.

Needs the Docker engine, the test image (tests/image/build.sh), slurm-wlm and munge on this host.

    .venv/bin/python bench/bench_slurm_bringup.py [--runs 3]
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
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    import docker
    import yaml

    import slurm_support

    from launch_support import free_port, write_model, write_parquet

    client = docker.from_env()
    test_image = subprocess.run([str(ROOT / "tests" / "image" / "build.sh")], capture_output=True, text=True,
                                check=True).stdout.split()[-1]
    image = slurm_support.build_image(test_image)
    shared = Path(tempfile.mkdtemp(prefix="verlctl-bench-slurm-"))
    cluster = slurm_support.start_cluster(client, image, shared / "cluster", nodes=4)
    times: dict[int, list[float]] = {1: [], 2: [], 4: []}
    try:
        root = cluster.shared / "run"
        (root / "data").mkdir(parents=True)
        write_parquet(root / "data" / "train.parquet")
        write_parquet(root / "data" / "val.parquet")
        write_model(root / "models" / "Qwen3-0.6B")
        for i in range(args.runs):
            for n in (1, 2, 4):
                spec = {
                    "paths": {"model": str(root / "models" / "Qwen3-0.6B"),
                              "train_files": str(root / "data" / "train.parquet"),
                              "val_files": str(root / "data" / "val.parquet"),
                              "checkpoints": str(root / f"ckpt-{n}-{i}"), "logs": str(root / "logs")},
                    "cluster": {"ray_port": free_port(), "dashboard_port": free_port(), "join_timeout_s": 300,
                                "devices": [0, 1]},
                    "container": {"runtime": "host"},
                    "train": {"steps": 1, "save_freq": 1, "tensor_parallel": 2, "pipeline_parallel": 1,
                              "train_batch_size": 8},
                }
                spec_file = root / f"run-{n}-{i}.yaml"
                spec_file.write_text(yaml.safe_dump(spec))
                job_file = root / f"job-{n}-{i}.sbatch"
                env = cluster.env(PATH=f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                  "/usr/bin:/sbin:/bin")
                subprocess.run([sys.executable, "-m", "verlctl", "export", "slurm", "-c", str(spec_file), "--nodes",
                                str(n), "-o", str(job_file)], check=True, capture_output=True, env=env, cwd=root)
                cluster.wait_idle()
                out = root / f"out-{n}-{i}.txt"
                t0 = time.monotonic()
                job = subprocess.run(["sbatch", "--parsable", f"--output={out}", str(job_file)], check=True,
                                     capture_output=True, text=True, env=env, cwd=root).stdout.strip()
                want = f"all {2 * n} NPU devices joined Ray"
                deadline = t0 + 300
                while time.monotonic() < deadline:
                    if out.exists() and want in out.read_text(errors="replace"):
                        break
                    time.sleep(0.1)
                else:
                    raise SystemExit(f"job {job} ({n} nodes): no {want!r} within 300 s:\n"
                                     + (out.read_text(errors="replace")[-3000:] if out.exists() else "no output"))
                elapsed = time.monotonic() - t0
                times[n].append(elapsed)
                print(f"run {i + 1}: {n} node(s): {elapsed:.2f} s", flush=True)
                cluster.run("scancel", "--", job)
        med = {n: statistics.median(v) for n, v in times.items()}
        print(f"median of {args.runs}: t(1)={med[1]:.2f} s, t(2)={med[2]:.2f} s, t(4)={med[4]:.2f} s; "
              f"t(2)/t(1)={med[2] / med[1]:.2f}, t(4)/t(1)={med[4] / med[1]:.2f} (goal <= 1.3)")
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
