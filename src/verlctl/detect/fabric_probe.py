"""The collective fabric test, run inside every node's container before training (``orchestrator/fabric.py``).

:data:`FABRIC_PROBE` is a small Python program run with the container's ``python3`` through the node's executor,
one per node, with the run's own collective environment (``HCCL_*``/``NCCL_*``, the socket interface). It starts
one process per device of the node (global rank = node index x devices + local rank) and, with
``torch.distributed`` on the run's backend (``hccl`` on NPU, ``nccl`` on GPU; ``gloo`` where asked):

- an all-reduce of float32 tensors at each size of the sweep: bus bandwidth = size / time x 2(n-1)/n, the
  ring all-reduce's traffic per rank (nccl-tests, ``doc/PERFORMANCE.md``, "busBw");
- point-to-point at the largest size, one link at a time (rank k sends to rank k + 1 while the others wait), so
  every link of the ring (rank -> rank + 1) is timed on its own and a slow one is named.

Rank 0 prints one line ``FABRIC {json}``; a rank that fails prints ``FABRIC_ERROR {json}`` (its exception type and
message: an HCCL/NCCL init failure carries its error code there) and exits non-zero. Every wait is bounded by
``timeout_s`` (``init_process_group``'s timeout, then the executor's). Nothing is written.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

FABRIC_PROBE = r'''
import json, os, socket, subprocess, sys, time, traceback

args = json.loads(sys.argv[1])
NODE, NNODES, NPROC = args["node"], args["nnodes"], args["nproc"]
BACKEND, DEVICE = args["backend"], args["device"]
SIZES = [int(s) for s in args["sizes"]]
ITERS = int(args.get("iters", 5))


def say(kind, doc):
    sys.stdout.write(kind + " " + json.dumps(doc) + "\n")
    sys.stdout.flush()


def route_iface(addr):
    """The NIC on the route to ``addr``; on the node that holds ``addr`` (the route is local, via lo), the NIC
    that has it: the one the other nodes reach."""
    try:
        out = subprocess.run(["ip", "route", "get", addr], capture_output=True, text=True, timeout=10).stdout
        words = out.split()
        dev = words[words.index("dev") + 1] if "dev" in words else None
        if dev == "lo" and not addr.startswith("127."):
            for line in subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                                       timeout=10).stdout.splitlines():
                parts = line.split()
                if len(parts) > 3 and parts[3].split("/")[0] == addr:
                    return parts[1]
        return dev
    except Exception:
        return None


def rank_main(local):
    rank = NODE * NPROC + local
    world = NNODES * NPROC
    try:
        import datetime
        import torch
        import torch.distributed as dist
        if DEVICE == "npu":
            import torch_npu  # noqa: F401
            torch.npu.set_device(local)
            dev = torch.device("npu", local)
            sync = torch.npu.synchronize
        elif DEVICE == "gpu" and BACKEND == "nccl":
            torch.cuda.set_device(local)
            dev = torch.device("cuda", local)
            sync = torch.cuda.synchronize
        else:
            dev = torch.device("cpu")
            sync = lambda: None  # noqa: E731
        dist.init_process_group(BACKEND, init_method="tcp://%s:%d" % (args["master_addr"], args["master_port"]),
                                rank=rank, world_size=world, timeout=datetime.timedelta(seconds=args["timeout_s"]))
        results = []
        for size in SIZES:
            t = torch.ones(max(1, size // 4), dtype=torch.float32, device=dev)
            dist.all_reduce(t)
            sync()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(ITERS):
                dist.all_reduce(t)
            sync()
            took = torch.tensor([(time.perf_counter() - start) / ITERS], dtype=torch.float64, device=dev)
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            seconds = float(took.item())
            alg = size / seconds / 1e9
            results.append({"bytes": size, "seconds": seconds, "busbw_gbps": alg * 2 * (world - 1) / world})
        links = []
        if world > 1:
            # one link at a time (rank k sends to k + 1 while the others wait), so a slow link is that link's own
            size = SIZES[-1]
            buf = torch.ones(max(1, size // 4), dtype=torch.float32, device=dev)
            mine = []
            for k in range(world):
                src, dst = k, (k + 1) % world
                dist.barrier()
                if rank == src:
                    for _ in range(ITERS):
                        dist.send(buf, dst)
                    sync()
                elif rank == dst:
                    start = time.perf_counter()
                    for _ in range(ITERS):
                        dist.recv(buf, src)
                    sync()
                    mine.append((time.perf_counter() - start) / ITERS)
            seconds = torch.tensor([mine[0] if mine else 0.0], dtype=torch.float64, device=dev)
            every = [torch.zeros_like(seconds) for _ in range(world)]
            dist.all_gather(every, seconds)
            for k in range(world):  # rank k + 1 received link k -> k + 1
                took = max(float(every[(k + 1) % world].item()), 1e-9)
                links.append({"src": k, "dst": (k + 1) % world, "bytes": size, "seconds": took,
                              "gbps": size / took / 1e9})
        hosts = [None] * world
        dist.all_gather_object(hosts, {"rank": rank, "node": NODE, "host": socket.gethostname()})
        if rank == 0:
            say("FABRIC", {"world": world, "backend": BACKEND, "allreduce": results, "links": links, "ranks": hosts})
        dist.barrier()
        dist.destroy_process_group()
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, with its type and message
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        say("FABRIC_ERROR", {"rank": rank, "node": NODE, "type": type(exc).__name__, "message": last[:2000]})
        return 3


if __name__ == "__main__":
    for name in ("HCCL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if not os.environ.get(name):
            iface = route_iface(args["master_addr"])
            if iface:
                os.environ[name] = iface
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=lambda i=i: sys.exit(rank_main(i))) for i in range(NPROC)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + args["timeout_s"] + 30
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    codes = []
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
            codes.append(124)
        else:
            codes.append(p.exitcode or 0)
    sys.exit(max(codes))
'''


class FabricRun(BaseModel):
    """What the probes printed: rank 0's measurements, every rank's error, each node's exit."""

    world: int = 0
    backend: str = ""
    allreduce: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    ranks: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    timed_out: list[int] = []  # node indexes whose probe did not end in time
    no_torch: list[int] = []  # node indexes whose image has no torch.distributed


def parse_output(text: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Rank 0's ``FABRIC`` document (None when absent) and the ``FABRIC_ERROR`` documents of one node's output."""
    result, errors = None, []
    for line in text.splitlines():
        kind, _, doc = line.partition(" ")
        if kind not in ("FABRIC", "FABRIC_ERROR"):
            continue
        try:
            value = json.loads(doc)
        except ValueError:
            continue
        if isinstance(value, dict):
            if kind == "FABRIC":
                result = value
            else:
                errors.append(value)
    return result, errors
