"""``ray status`` (and ``ray status -v``) text: nodes, cluster resources, per-node usage.

Formats understood: Ray <= 2.44 ``Usage:``/``Demands:``; newer ``Total Usage:``/``Total
Constraints:``/``Total Demands:``; ``Active:`` (node ids) or ``Healthy:`` (node types) node lists;
``-v`` per-node ``Node: <ip> (<type>)`` blocks. Pastes may be indented as a whole (docs), wrapped
in shell prompts, or cut at the end.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}  # fmt: skip
_AMOUNT = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)([A-Za-z]*)$")
_RESOURCE = re.compile(r"^(\S+)/(\S+)\s+(\S+)(?:\s+\((.*)\))?$")
_NODE = re.compile(r"^Node:\s+(\S+)(?:\s+\((.*)\))?\s*$")
_COUNTED = re.compile(r"^(\d+)\s+(\S+)$")
KNOWN_RESOURCES = ("CPU", "GPU", "NPU", "memory", "object_store_memory")


class RayResource(BaseModel):
    name: str
    used: float
    total: float
    unit: str | None = None  # 'bytes' for memory-like amounts printed with B/KiB/MiB/GiB/TiB
    note: str | None = None  # e.g. '0.0 used of 8.0 reserved in placement groups'

    @property
    def available(self) -> float:
        return self.total - self.used


class RayNodeUsage(BaseModel):
    address: str
    node_type: str | None = None
    usage: dict[str, RayResource] = {}
    is_idle: bool | None = None


class RayStatus(BaseModel):
    ray_version: str | None = None  # when the paste includes `ray --version`
    timestamp: str | None = None
    active: dict[str, int] = {}  # node id or node type -> count ('Active:' / 'Healthy:')
    idle: dict[str, int] = {}
    pending: list[str] = []
    failures: list[str] = []
    usage: dict[str, RayResource] = {}
    constraints: list[str] = []
    demands: list[str] = []
    nodes: list[RayNodeUsage] = []  # `ray status -v` only
    warnings: list[str] = []

    @property
    def node_count(self) -> int:
        return sum(self.active.values()) + sum(self.idle.values())

    def total(self, resource: str) -> float | None:
        r = self.usage.get(resource)
        return r.total if r else None

    def used(self, resource: str) -> float | None:
        r = self.usage.get(resource)
        return r.used if r else None


def parse_amount(text: str) -> tuple[float, str | None] | None:
    """``'3.39TiB'`` -> (bytes, 'bytes'); ``'16.0'`` -> (16.0, None); anything else -> None."""
    m = _AMOUNT.match(text)
    if not m:
        return None
    value, unit = float(m.group(1)), m.group(2)
    if not unit:
        return value, None
    if unit in _UNITS:
        return value * _UNITS[unit], "bytes"
    return None


def _resource(line: str) -> RayResource | None:
    m = _RESOURCE.match(line)
    if not m:
        return None
    used, total = parse_amount(m.group(1)), parse_amount(m.group(2))
    if used is None or total is None:
        return None
    return RayResource(
        name=m.group(3), used=used[0], total=total[0], unit=total[1] or used[1], note=m.group(4)
    )


_SECTIONS = {
    "Active:": "active",
    "Healthy:": "active",
    "Idle:": "idle",
    "Pending:": "pending",
    "Recent failures:": "failures",
    "Usage:": "usage",
    "Total Usage:": "usage",
    "Total Constraints:": "constraints",
    "Demands:": "demands",
    "Total Demands:": "demands",
}


def parse_ray_status(text: str) -> RayStatus:
    status = RayStatus()
    lines = text.splitlines()
    base = ""
    for line in lines:
        m = re.match(r"^(\s*)=+ Autoscaler status", line)
        if m:
            base = m.group(1)
            break
    section: str | None = None
    node: RayNodeUsage | None = None
    last_resource: tuple[dict[str, RayResource], str, bool] | None = None  # (dict, name, was last line)
    seen_header = False
    for raw in lines:
        v = re.search(r"\bray, version (\S+)", raw)
        if v:
            status.ray_version = v.group(1)
        line = raw[len(base) :] if base and raw.startswith(base) else raw
        stripped = line.strip()
        last_resource = (last_resource[0], last_resource[1], False) if last_resource else None
        if not stripped:
            continue
        m = re.match(r"^=+ Autoscaler status: (.*?) =+$", stripped)
        if m:
            status.timestamp = m.group(1)
            seen_header = True
            section, node = None, None
            continue
        if not seen_header:
            continue
        indented = line[:1].isspace()
        if not indented:
            nm = _NODE.match(stripped)
            if nm:
                node = RayNodeUsage(address=nm.group(1), node_type=nm.group(2))
                status.nodes.append(node)
                section = None
                continue
            if stripped in _SECTIONS:
                section, node = _SECTIONS[stripped], None
                continue
            if stripped in ("Node status", "Resources") or set(stripped) == {"-"}:
                section = None
                continue
            if re.match(r"^(GCS request time|Node Provider|Autoscaler iteration)", stripped):
                continue
            section, node = None, None  # a shell prompt or other text: the status block ended
            continue
        if node is not None:
            if stripped == "Usage:":
                section = "node_usage"
                continue
            if stripped == "Is Idle:":
                section = "node_idle"
                continue
            if section == "node_usage":
                r = _resource(stripped)
                if r:
                    node.usage[r.name] = r
                    last_resource = (node.usage, r.name, True)
            elif section == "node_idle":
                node.is_idle = stripped.lower() == "true" if stripped.lower() in ("true", "false") else None
            continue
        if section in ("active", "idle"):
            cm = _COUNTED.match(stripped)
            if cm:
                target = status.active if section == "active" else status.idle
                target[cm.group(2)] = target.get(cm.group(2), 0) + int(cm.group(1))
        elif section == "pending" and not stripped.startswith("("):
            status.pending.append(stripped)
        elif section == "failures" and not stripped.startswith("("):
            status.failures.append(stripped)
        elif section == "usage":
            r = _resource(stripped)
            if r:
                status.usage[r.name] = r
                last_resource = (status.usage, r.name, True)
        elif section == "constraints" and not stripped.startswith("("):
            status.constraints.append(stripped)
        elif section == "demands" and not stripped.startswith("("):
            status.demands.append(stripped)
    if last_resource and last_resource[2]:
        where, name, _ = last_resource
        if name not in KNOWN_RESOURCES and any(k.startswith(name) for k in KNOWN_RESOURCES):
            del where[name]
            status.warnings.append(f"the input ends inside a resource line ('{name}…'); that line is dropped")
    if not seen_header:
        status.warnings.append("no '======== Autoscaler status' header in the input")
    declared = status.node_count
    if status.nodes and declared and len(status.nodes) < declared:
        status.warnings.append(
            f"{declared} nodes are listed but only {len(status.nodes)} node blocks are in the input"
        )
    return status
