"""The multi-node pre-flight (issue 14) on real nodes: containers of the test image as nodes, on the host network
(as verlctl's own containers), each reached through its DockerExecutor exactly as a launch reaches it.

The head and one worker mount the same host directory at the checkpoint path; another worker has no such mount
(its checkpoint directory is its own, like a local disk on another machine): the head's marker is read back
on the first and not on the second. A real listening socket holds an HCCL port range on this host.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from verlctl.checks.findings import Finding, Severity
from verlctl.orchestrator.node_preflight import MARKER_PREFIX, check_nodes
from verlctl.runtime.executor import DockerExecutor
from verlctl.spec.resolve import load_spec

pytestmark = pytest.mark.docker

HEAD, SHARED, LOCAL = "127.0.0.1", "127.0.0.2", "127.0.0.3"


def _spec(ckpt: str, **flags: Any) -> Any:
    base = {"cluster.nodes": [HEAD, SHARED, LOCAL], "cluster.master_addr": HEAD, "paths.checkpoints": ckpt,
            "device": "npu", "verl_version": "0.7.0"}
    return load_spec(None, flags={**base, **flags}, environ={}).spec


def _codes(findings: list[Finding]) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in findings:
        out.setdefault(f.code, []).append(f)
    return out


def test_every_node_is_checked_through_its_executor(container_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    mount = {str(ckpt): {"bind": str(ckpt), "mode": "rw"}}
    client = container_factory.client
    head = container_factory(network_mode="host", ipc_mode="host", volumes=mount)
    shared = container_factory(network_mode="host", ipc_mode="host", volumes=mount)
    local = container_factory(network_mode="host", ipc_mode="host")
    targets = [(HEAD, True, DockerExecutor(client, head.id, head.name)),
               (SHARED, False, DockerExecutor(client, shared.id, shared.name)),
               (LOCAL, False, DockerExecutor(client, local.id, local.name))]
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("0.0.0.0", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        env = {"HCCL_HOST_SOCKET_PORT_RANGE": f"{port}-{port}", "HCCL_NPU_SOCKET_PORT_RANGE": "auto"}
        spec = _spec(str(ckpt), **{"cluster.socket_ifname": "lo", "env": env})
        result = check_nodes(spec, targets, "r-test-1", "0.7.0", {})
    finally:
        holder.close()
    by_code = _codes(result.findings)
    facts = {n.address: n for n in result.nodes}
    # the facts are the containers' own: the same image, Python and Ray everywhere, the route to the head on lo
    assert all(n.error is None for n in result.nodes), [n.error for n in result.nodes]
    assert len({n.image_id for n in result.nodes}) == 1 and facts[HEAD].image_id == head.attrs["Image"]
    # The container's Python writes its version into the shared directory: the exec's output stream is not read
    # (under load the engine's exec attach once returned an empty stdout for a command that printed it).
    pyver = ckpt / "python-version"
    py = container_factory.exec(head, ["python3", "-c", "import sys; open(sys.argv[1], 'w').write("
                                       "'%d.%d.%d' % sys.version_info[:3])", str(pyver)])
    assert py.exit_code == 0, py
    assert facts[SHARED].python == pyver.read_text() and facts[HEAD].python == pyver.read_text()
    pyver.unlink()
    assert facts[SHARED].ray and facts[SHARED].ray == facts[HEAD].ray
    assert facts[LOCAL].route_iface == "lo" and facts[LOCAL].route_src == "127.0.0.1"
    assert facts[HEAD].shm_bytes and facts[HEAD].ram_bytes
    # the marker: written by the head, read back where the directory is shared, not elsewhere; then removed
    assert (facts[HEAD].marker_seen, facts[SHARED].marker_seen, facts[LOCAL].marker_seen) == (True, True, False)
    (missing,) = by_code["checkpoint_not_shared"]
    assert missing.severity is Severity.ERROR and missing.field == "paths.checkpoints"
    assert LOCAL in missing.message and SHARED not in missing.message and "resume cannot work" in missing.message
    assert not [p for p in ckpt.iterdir() if p.name.startswith(MARKER_PREFIX)]
    # the HCCL port the socket held was bound, seen from every node's container (host network)
    assert sorted(f.message.split("bound on ")[1].split(" (")[0] for f in by_code["hccl_ports_in_use"]) == [
        f"node {a}" for a in sorted((HEAD, SHARED, LOCAL))]
    assert set(by_code) == {"checkpoint_not_shared", "hccl_ports_in_use"}, [f.line() for f in result.findings]

    # the same nodes, all sharing the directory, the port released, and a NIC the route does not use
    result = check_nodes(_spec(str(ckpt), **{"cluster.socket_ifname": "nosuchnic0", "cluster.nodes": [HEAD, SHARED]}),
                         targets[:2], "r-test-2", "0.7.0", {})
    by_code = _codes(result.findings)
    assert set(by_code) == {"node_route_not_on_ifname"}, [f.line() for f in result.findings]
    assert "through lo (127.0.0.1)" in by_code["node_route_not_on_ifname"][0].message
