"""Benchmark: the fabric gate's wall time (``orchestrator/fabric.py``) on the gloo double, nodes x devices of your choice.

A benchmark, not a test. Starts ``--nodes`` containers of the real-verl image on a private Docker bridge network
(each its own network namespace), runs the gate across them through DockerExecutors with ``--devices`` ranks per
node, prints the gate's seconds, the all-reduce bus bandwidth per size and the slowest link, then removes what it
made. The load average is printed beside it: compare runs only on one machine at one load.

The budget is for a real cluster (2 nodes x 8 NPUs, HCCL, <= 60 s): there the bytes move in well under a second
(see the arithmetic in orchestrator/fabric.py's docstring) and the time is process start-up and communicator set-up, which
this benchmark measures on the double (CPU processes, torch import, gloo's TCP rendezvous).

    .venv/bin/python bench/fabric_gate.py [--nodes 2] [--devices 8] [--sizes 1,16,64] [--image verlctl-realverl:0.9.1]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> int:
    import docker

    from verlctl.orchestrator.fabric import run_fabric
    from verlctl.runtime.executor import DockerExecutor
    from verlctl.spec.model import RunSpec

    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--sizes", default="1,16,64")
    ap.add_argument("--image", default="verlctl-realverl:0.9.1")
    args = ap.parse_args()
    client = docker.from_env(timeout=600)
    tag = secrets.token_hex(4)
    network = client.networks.create(f"verlctl-fabric-bench-{tag}", driver="bridge")
    made = []
    try:
        for i in range(args.nodes):
            made.append(client.containers.run(args.image, ["sleep", "infinity"], detach=True,
                                              name=f"verlctl-fabric-bench-{tag}-{i}", network=network.name))
        targets = []
        for c in made:
            c.reload()
            ip = c.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
            targets.append((ip, DockerExecutor(client, c.id, c.name)))
        spec = RunSpec.model_validate({
            "device": "gpu", "strategy": "fsdp",
            "paths": {"model": "/m", "train_files": "/t.parquet", "val_files": "/v.parquet"},
            "cluster": {"nodes": [a for a, _ in targets], "devices": list(range(args.devices)),
                        "fabric": {"backend": "gloo", "sizes_mib": [int(s) for s in args.sizes.split(",")],
                                   "timeout_s": 600}}})
        load0 = os.getloadavg()[0]
        started = time.monotonic()
        result = run_fabric(spec, targets, {})
        wall = time.monotonic() - started
        doc = {"nodes": args.nodes, "devices_per_node": args.devices, "world": result.run.world,
               "gate_s": round(wall, 1), "allreduce": result.run.allreduce,
               "slowest_link": min(result.run.links, key=lambda x: x["gbps"]) if result.run.links else None,
               "findings": [f.line() for f in result.findings], "load_1min": [load0, os.getloadavg()[0]],
               "cores": os.cpu_count()}
        print(json.dumps(doc, indent=2))
        return 0
    finally:
        for c in made:
            c.remove(force=True)
        network.remove()


if __name__ == "__main__":
    raise SystemExit(main())
