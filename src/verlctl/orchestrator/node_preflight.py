"""The multi-node pre-flight: before anything starts, gather the same facts on every node through the node's
executor (its container, reached over its Docker engine, over ssh for the other nodes) and check that the
nodes agree (:mod:`verlctl.checks.nodes`).

The head runs the probe first and writes a marker (a random token) into the checkpoint directory; then the
other nodes run it at the same time and read the marker back; then the head removes it. Nothing else is
written.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from verlctl.checks.findings import Finding
from verlctl.detect.node_probe import NODE_PROBE, NodeFacts, parse_node_probe
from verlctl.runtime.executor import Executor
from verlctl.spec.model import RunSpec

PROBE_TIMEOUT_S = 60.0
MARKER_PREFIX = ".verlctl-preflight-"


@dataclass
class NodeCheck:
    """What the pre-flight found: each node's facts, the marker it used, and the findings."""

    nodes: list[NodeFacts]
    marker_path: str | None
    findings: list[Finding]


def marker_path(spec: RunSpec, run_id: str) -> str | None:
    path = spec.paths.checkpoints
    return f"{path.rstrip('/')}/{MARKER_PREFIX}{run_id}" if path else None


def _image_id(ex: Executor) -> str | None:
    from verlctl.runtime.executor import DockerExecutor

    if not isinstance(ex, DockerExecutor):
        return None
    try:
        return str(ex.api.inspect_container(ex.container_id)["Image"])
    except Exception:  # noqa: BLE001 - a fact that could not be read stays unknown
        return None


def probe_node(ex: Executor, address: str, head: bool, args: dict[str, Any],
               timeout: float = PROBE_TIMEOUT_S) -> NodeFacts:  # fmt: skip
    from verlctl.errors import VerlctlError

    try:
        res = ex.run(["python3", "-c", NODE_PROBE, json.dumps(args)], timeout=timeout)
    except VerlctlError as exc:
        return NodeFacts(address=address, head=head, error=exc.message)
    facts = parse_node_probe(address, head, res.code, res.out + res.err)
    facts.image_id = _image_id(ex)
    return facts


def gather(spec: RunSpec, targets: Sequence[tuple[str, bool, Executor]], run_id: str,
           port_ranges: dict[str, list[int]], timeout: float = PROBE_TIMEOUT_S) -> tuple[list[NodeFacts], str | None]:  # fmt: skip
    """The facts of every node (``targets``: address, is the head, executor), the head first."""
    marker = marker_path(spec, run_id)
    token = secrets.token_hex(16)
    base: dict[str, Any] = {"head": spec.cluster.master_addr,
                            "ports": {k: [min(v), max(v)] for k, v in port_ranges.items() if v}}
    heads = [t for t in targets if t[1]]
    others = [t for t in targets if not t[1]]
    out: list[NodeFacts] = []
    for address, _, ex in heads:
        args = {**base, "marker": {"path": marker, "token": token, "write": True} if marker else None}
        out.append(probe_node(ex, address, True, args, timeout))
    try:
        args = {**base, "marker": {"path": marker, "token": token} if marker else None}
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(others)))) as pool:
            out += list(pool.map(lambda t: probe_node(t[2], t[0], False, args, timeout), others))
    finally:
        if marker and heads and out[0].marker_seen:
            from verlctl.errors import VerlctlError

            with contextlib.suppress(VerlctlError):
                heads[0][2].run(["rm", "-f", "--", marker], timeout=30)
    return out, marker


def check_nodes(spec: RunSpec, targets: Sequence[tuple[str, bool, Executor]], run_id: str, verl_version: str,
                env: dict[str, str]) -> NodeCheck:  # fmt: skip
    """Gather every node's facts and run the multi-node rules on them."""
    from verlctl.checks.field_checks import hccl_port_ranges
    from verlctl.checks.nodes import node_findings

    ranges = hccl_port_ranges(spec, env) if spec.device == "npu" else {}
    nodes, marker = gather(spec, targets, run_id, ranges)
    return NodeCheck(nodes, marker, node_findings(spec, nodes, verl_version, marker, ranges))
