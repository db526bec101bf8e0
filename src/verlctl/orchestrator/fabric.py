"""The collective fabric gate: before training, move bytes between every node's devices inside the run's own
containers, through the same executors as the node pre-flight, with the run's collective environment; a link
below the floor, an init failure or a node that does not answer stops the launch, named.

The probe (:data:`verlctl.detect.fabric_probe.FABRIC_PROBE`) runs on every node at once (one process per device);
its verdict is :func:`verlctl.checks.fabric.fabric_findings`; an init failure's message is classified with the
failure catalogue (the HCCL/NCCL error code and the catalogue's fix).

Budget (2 nodes x 8 devices on a real cluster): the sweep moves, per rank and iteration, 2(n-1)/n x size for
the all-reduce and 2 x size for the ring; with the default sizes (1, 16, 64 MiB), 1 warm-up + 5 iterations each
and 2 x 64 MiB x 5 for the ring, that is about 0.6 GB per rank: under 0.1 s at the 12.5 GB/s floor. The rest is
process start-up and the communicator's initialisation (seconds each on HCCL), well within 60 s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from verlctl.checks.fabric import fabric_findings, init_failures, not_tested
from verlctl.checks.findings import Finding
from verlctl.detect.fabric_probe import FABRIC_PROBE, FabricRun, parse_output
from verlctl.runtime.executor import Executor
from verlctl.spec.model import RunSpec

#: Seconds beyond ``cluster.fabric.timeout_s`` an executor waits for the probe to end on its own.
GRACE_S = 60.0
BACKEND = {"npu": "hccl", "gpu": "nccl", "cpu": "gloo"}


@dataclass
class FabricResult:
    run: FabricRun
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0


def wanted(spec: RunSpec) -> bool:
    """Whether the gate runs: enabled, and more than one device takes part."""
    return spec.cluster.fabric.enabled and spec.cluster.node_count * len(spec.cluster.devices) > 1


def backend_of(spec: RunSpec) -> str:
    chosen = spec.cluster.fabric.backend
    return BACKEND[spec.device] if chosen == "auto" else chosen


def run_fabric(spec: RunSpec, targets: Sequence[tuple[str, Executor]], env: Mapping[str, str]) -> FabricResult:
    """The probe on every target (address, executor) at once, the head first in the list; its verdict."""
    fabric = spec.cluster.fabric
    addresses = [a or "127.0.0.1" for a, _ in targets]
    master = spec.cluster.master_addr or addresses[0]
    base = {"nnodes": len(targets), "nproc": len(spec.cluster.devices), "backend": backend_of(spec),
            "device": spec.device, "sizes": [m << 20 for m in fabric.sizes_mib], "master_addr": master,
            "master_port": fabric.port, "timeout_s": fabric.timeout_s}
    started = time.monotonic()

    def one(i: int) -> tuple[int, str | None]:
        from verlctl.errors import VerlctlError

        ex = targets[i][1]
        try:
            res = ex.run(["python3", "-c", FABRIC_PROBE, json.dumps({**base, "node": i})], env=dict(env),
                         timeout=fabric.timeout_s + GRACE_S)
        except VerlctlError:  # the executor's own time limit: the node did not answer
            return i, None
        text = res.out + "\n" + res.err
        if res.code != 0 and "FABRIC" not in text:  # its ranks were stopped at the deadline, silent
            return i, None
        return i, text

    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        outputs = list(pool.map(one, range(len(targets))))
    run = FabricRun()
    for i, text in outputs:
        if text is None:
            run.timed_out.append(i)
            continue
        result, errors = parse_output(text)
        if result is not None:
            run = run.model_copy(update={k: v for k, v in result.items() if k in FabricRun.model_fields
                                         and k not in ("errors", "timed_out", "no_torch")})
        for e in errors:
            if e.get("type") in ("ModuleNotFoundError", "ImportError") and "torch" in str(e.get("message")):
                if i not in run.no_torch:
                    run.no_torch.append(i)
            else:
                run.errors.append(e)
    findings = fabric_findings(spec, run, addresses) + init_failures(run, addresses, diagnose)
    return FabricResult(run, findings, time.monotonic() - started)


def diagnose(message: str) -> tuple[str, str] | None:
    """The failure catalogue's (message, fix) for an error line, None when it does not know it."""
    from verlctl.monitor.catalogue import classify_lines

    known = classify_lines([message])
    return (known[0].message, known[0].hint) if known else None


def skipped(reason: str) -> Finding:
    return not_tested(reason)

