"""Multi-node pre-flight: the nodes agree before anything starts (issue 14).

Rules on the facts gathered on every node (:class:`verlctl.detect.node_probe.NodeFacts`, collected by
``orchestrator.node_preflight`` through each node's executor):

* one image on every node (Docker's content-addressed image id), and the same Python and Ray: Ray refuses a
  node whose Ray or Python differs from the head's, even at patch level ("Version mismatch: The cluster was
  started with", ``ray/_private/utils.py`` ``check_version_info``); and what verl requires of them
  (:func:`verlctl.checks.container.check_image_versions`);
* the checkpoint directory is one directory: a marker the head writes there is read back on every node (else
  each node saves its shards to its own disk and ``resume_mode: auto`` cannot resume after a restart);
* a route from every node to the head, through ``cluster.socket_ifname`` when one is set (NCCL / HCCL / Gloo
  bind that NIC; the route decides which NIC reaches the head);
* the run's fixed HCCL port ranges are free on every node (``EJ0003: Failed to bind the IP port``);
* ``/dev/shm`` of every node is large enough for Ray's object store.
"""

from __future__ import annotations

from verlctl.checks.container import check_image_versions
from verlctl.checks.field_checks import check_hccl_ports, check_shm
from verlctl.checks.findings import Finding, error, warning
from verlctl.detect.check_probes import ImageVersions
from verlctl.detect.node_probe import NodeFacts
from verlctl.spec.model import RunSpec

RAY_VERSION_RULE = ("Ray refuses a node whose Ray or Python version differs from the head's, even at patch level "
                    "('Version mismatch: The cluster was started with')")


def _by_value(nodes: list[NodeFacts], attr: str) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for n in nodes:
        value = getattr(n, attr)
        if value is not None:
            groups.setdefault(str(value), []).append(n.address)
    return groups


def _spread(groups: dict[str, list[str]], short: bool = False) -> str:
    return "; ".join(f"{v[:19] if short else v} on {', '.join(a)}" for v, a in groups.items())


def check_node_images(spec: RunSpec, nodes: list[NodeFacts], verl_version: str) -> list[Finding]:
    """One image, one Python, one Ray on every node; each as the targeted verl requires."""
    ok = [n for n in nodes if n.error is None]
    out: list[Finding] = []
    images = _by_value(ok, "image_id")
    if len(images) > 1:
        out.append(error(
            "nodes_image_differs",
            f"the nodes' containers run different images of {spec.container.image}: {_spread(images, short=True)}",
            "container.image",
            f"pull the same image on every node (by digest: `docker pull {spec.container.image}` then compare "
            "`docker image inspect --format '{{.Id}}'`), or use another container.name so that every node gets a "
            "new container of the same image",
        ))
    for attr, label, code in (("python", "Python", "nodes_python_differs"), ("ray", "Ray", "nodes_ray_differs")):
        groups = _by_value(ok, attr)
        if len(groups) > 1:
            out.append(error(
                code,
                f"the nodes run different {label} versions: {_spread(groups)}; {RAY_VERSION_RULE}",
                "container.image",
                "run the same image on every node (compare `python3 -V` and `ray --version` in each node's "
                "container)",
            ))
    seen: set[str] = set()
    for n in ok:
        for f in check_image_versions(verl_version, ImageVersions(where="its container", python=n.python, ray=n.ray),
                                      node=f"node {n.address}: "):
            if f.code not in seen:  # one finding per problem; the other nodes are named by the rules above
                seen.add(f.code)
                out.append(f)
    return out


def check_node_checkpoints(spec: RunSpec, nodes: list[NodeFacts], marker_path: str | None) -> list[Finding]:
    """The marker the head wrote to the checkpoint directory is there on every node."""
    if marker_path is None:
        return []
    head = next((n for n in nodes if n.head), None)
    if head is None or head.error is not None:
        return []  # no marker was written: nothing to read back (node_unchecked says why)
    if not head.marker_seen:
        return [error(
            "checkpoint_marker_unwritten",
            f"the head {head.address} could not write the pre-flight marker {marker_path}"
            + (f" ({head.marker_error})" if head.marker_error else ""),
            "paths.checkpoints",
            "choose a paths.checkpoints the containers can write (a directory on shared storage, mounted at the "
            "same path on every node)",
        )]
    blind = [n for n in nodes if not n.head and n.error is None and n.marker_seen is False]
    if not blind:
        return []
    why = "; ".join(f"{n.address}: {n.marker_error or 'not found'}" for n in blind)
    return [error(
        "checkpoint_not_shared",
        f"the marker the head wrote to {marker_path} is not visible on {', '.join(n.address for n in blind)} "
        f"({why}): each node would save its checkpoint shards to its own disk, so resume cannot work (after a "
        "restart the run starts over or fails)",
        "paths.checkpoints",
        "set paths.checkpoints to a directory on storage that every node mounts at the same path (e.g. an NFS "
        "export)",
    )]


def check_node_routes(spec: RunSpec, nodes: list[NodeFacts]) -> list[Finding]:
    """Every node has a route to the head, through cluster.socket_ifname when one is set."""
    head = spec.cluster.master_addr
    name = spec.cluster.socket_ifname
    out: list[Finding] = []
    for n in nodes:
        if n.error is not None or n.head:
            continue
        if n.route_error is not None:
            out.append(error(
                "node_no_route_to_head",
                f"node {n.address} has no route to the Ray head {head}: {n.route_error}",
                "cluster.master_addr",
                "fix the routing between the nodes, or set master_addr to an address of the head every node reaches",
            ))
        elif name and n.route_iface is not None and n.route_iface != name:
            # (a source address no NIC lists as its primary one, e.g. a secondary or IPv6 address: not judged)
            has = f"{name} ({n.interfaces[name]})" if name in n.interfaces else f"no interface {name}"
            out.append(error(
                "node_route_not_on_ifname",
                f"node {n.address} reaches the head {head} through {n.route_iface} ({n.route_src}), not "
                f"through socket_ifname {name} (it has {has}): the collective libraries bind {name}",
                "cluster.socket_ifname",
                f"set cluster.socket_ifname to the NIC that routes to the head on every node "
                f"(here {n.route_iface}), or fix the routes",
            ))
    return out


def check_node_resources(spec: RunSpec, nodes: list[NodeFacts], port_ranges: dict[str, list[int]]) -> list[Finding]:
    """The HCCL port ranges are free and /dev/shm is large enough, on every node."""
    out: list[Finding] = []
    host_ram = int((spec.cluster.host_memory_gib or 0) * 2**30) or None
    for n in nodes:
        if n.error is not None:
            continue
        busy = {k: v for k, v in n.busy_ports.items() if k in port_ranges}
        out += check_hccl_ports(busy, port_ranges, where=f"node {n.address}")
        out += check_shm(spec, n.shm_bytes, host_ram or n.ram_bytes, f"node {n.address}")
    return out


def check_nodes_answered(nodes: list[NodeFacts]) -> list[Finding]:
    return [warning("node_unchecked", f"node {n.address} was not checked: {n.error}", "cluster.nodes")
            for n in nodes if n.error is not None]


def node_findings(spec: RunSpec, nodes: list[NodeFacts], verl_version: str, marker_path: str | None,
                  port_ranges: dict[str, list[int]]) -> list[Finding]:  # fmt: skip
    """Every multi-node pre-flight rule on the facts of every node."""
    return (check_nodes_answered(nodes) + check_node_images(spec, nodes, verl_version)
            + check_node_checkpoints(spec, nodes, marker_path) + check_node_routes(spec, nodes)
            + check_node_resources(spec, nodes, port_ranges))
