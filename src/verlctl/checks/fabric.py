"""The fabric test's verdict (``orchestrator/fabric.py`` runs it; ``detect/fabric_probe.py`` measures): every link and the
all-reduce against the spec's thresholds, the slowest link and its nodes named.

Facts: the measurements of one run of the probe (:class:`verlctl.detect.fabric_probe.FabricRun`) and the address of
each node. The defaults are half the per-device line rate of the usual scale-out network: 12.5 GB/s on NPU (an
Atlas 800T A2 has one 200GE RoCE port per NPU: 25 GB/s) and 25 GB/s on GPU (a DGX H100 has one 400 Gb/s
ConnectX-7 per GPU: 50 GB/s). A link inside a node (HCCS, NVLink) is faster than either, so one floor holds for
every link. On the CPU (the gloo backend) nothing is compared unless the spec sets a floor.
"""

from __future__ import annotations

from collections.abc import Callable

from verlctl.checks.findings import Finding, error, info, warning
from verlctl.detect.fabric_probe import FabricRun
from verlctl.spec.model import RunSpec

#: GB/s: half the per-device scale-out line rate (see the module doc).
DEFAULT_FLOOR_GBPS = {"npu": 12.5, "gpu": 25.0}


def floors(spec: RunSpec) -> tuple[float | None, float | None]:
    """The link and all-reduce floors in GB/s (None: not compared)."""
    fabric = spec.cluster.fabric
    default = DEFAULT_FLOOR_GBPS.get(spec.device) if fabric.backend != "gloo" else None
    link = fabric.min_link_gbps if fabric.min_link_gbps is not None else default
    busbw = fabric.min_busbw_gbps if fabric.min_busbw_gbps is not None else link
    return link, busbw


def not_tested(reason: str, hint: str | None = None) -> Finding:
    """The one warning for a fabric test that did not run, and why."""
    return warning("fabric_not_checked", f"the collective fabric was not tested: {reason}", "cluster.fabric", hint)


def where(run: FabricRun, rank: int, addresses: list[str]) -> str:
    """``node ADDRESS (rank R)`` for a global rank."""
    node = next((r.get("node") for r in run.ranks if r.get("rank") == rank), None)
    if isinstance(node, int) and 0 <= node < len(addresses):
        return f"node {addresses[node]} (rank {rank})"
    return f"rank {rank}"


def fabric_findings(spec: RunSpec, run: FabricRun, addresses: list[str]) -> list[Finding]:
    """The verdict of one fabric test: errors stop the launch before training."""
    out: list[Finding] = []
    field = "cluster.fabric"
    if run.no_torch:
        nodes = ", ".join(addresses[i] for i in run.no_torch)
        return [not_tested(f"torch.distributed is not in the image on {nodes}",
                           "use an image with torch (the training needs it anyway)")]
    if run.timed_out:
        nodes = ", ".join(addresses[i] for i in run.timed_out)
        out.append(error("fabric_timeout", f"the collective test did not finish within "
                         f"{spec.cluster.fabric.timeout_s}s on {nodes}: a node that does not answer, or a port that "
                         "is blocked between the nodes", field,
                         f"check that every node reaches {addresses[0]}:{spec.cluster.fabric.port} and the collective "
                         "ports (HCCL_IF_BASE_PORT / the socket port ranges) of every other node"))
    if out or run.errors or not run.allreduce:
        return out
    link_floor, busbw_floor = floors(spec)
    last = run.allreduce[-1]
    slowest = min(run.links, key=lambda x: float(x["gbps"])) if run.links else None
    summary = (f"all-reduce bus bandwidth {float(last['busbw_gbps']):.2f} GB/s at {int(last['bytes']) >> 20} MiB over "
               f"{run.world} ranks ({run.backend})")
    if slowest is not None:
        summary += (f"; slowest link {where(run, int(slowest['src']), addresses)} -> "
                    f"{where(run, int(slowest['dst']), addresses)} at {float(slowest['gbps']):.2f} GB/s")
    out.append(info("fabric_measured", summary, field))
    if link_floor is not None and slowest is not None and float(slowest["gbps"]) < link_floor:
        out.append(error(
            "fabric_link_slow",
            f"the link {where(run, int(slowest['src']), addresses)} -> {where(run, int(slowest['dst']), addresses)} "
            f"moves {float(slowest['gbps']):.2f} GB/s, below the floor of {link_floor:g} GB/s: every step waits for "
            "it", f"{field}.min_link_gbps",
            "check that link's NIC, cable and switch port (and its MTU and RoCE/PFC settings); or lower "
            "cluster.fabric.min_link_gbps if this is the network you have"))
    if busbw_floor is not None and float(last["busbw_gbps"]) < busbw_floor:
        out.append(error(
            "fabric_busbw_low",
            f"the all-reduce moves {float(last['busbw_gbps']):.2f} GB/s of bus bandwidth at "
            f"{int(last['bytes']) >> 20} MiB, below the floor of {busbw_floor:g} GB/s", f"{field}.min_busbw_gbps",
            "the slowest link above sets the pace; or lower cluster.fabric.min_busbw_gbps if this is the network "
            "you have"))
    return out


def init_failures(run: FabricRun, addresses: list[str],
                  diagnose: Callable[[str], tuple[str, str] | None]) -> list[Finding]:
    """One finding per node whose ranks failed: the first failure's message, with ``diagnose``'s reading of it (the
    failure catalogue's: an HCCL/NCCL error code and its fix) when it knows it."""
    out: list[Finding] = []
    seen: set[object] = set()
    for e in run.errors:
        node = e.get("node")
        if node in seen:
            continue
        seen.add(node)
        rank = int(e.get("rank", -1))
        at = where(run.model_copy(update={"ranks": [{"rank": rank, "node": node}]}), rank, addresses)
        message = str(e.get("message", ""))
        known = diagnose(message)
        what = f"{known[0]}: " if known else ""
        hint = known[1] if known else ("check the collective environment (HCCL_*/NCCL_*, the socket interface) and "
                                       "that every node reaches the others' ports")
        out.append(error("fabric_init_failed", f"the collective test failed on {at}: {what}{message}",
                         "cluster.fabric", hint))
    return out
