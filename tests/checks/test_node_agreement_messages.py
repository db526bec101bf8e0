"""checks/nodes.py: what a mutation sample showed unguarded (docs/development/mutation.md): the messages name each
node with its value (an image id shortened), the marker rules without a head or a marker, the head's own route,
which interface the message says a node has, and cluster.host_memory_gib over a node's RAM for /dev/shm."""

from __future__ import annotations

from typing import Any

from verlctl.checks.findings import Finding
from verlctl.checks.nodes import (
    check_node_checkpoints,
    check_node_resources,
    check_node_routes,
    node_findings,
)
from verlctl.detect.node_probe import NodeFacts
from verlctl.spec.model import RunSpec
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS

HEAD, WORKER = "192.0.2.1", "192.0.2.2"
MARKER = "/mnt/nfs/ckpt/.verlctl-preflight-r1"
IMAGE_A, IMAGE_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def spec(**flags: Any) -> RunSpec:
    return load_spec(None, flags={**BASE_PATHS, "cluster.nodes": [HEAD, WORKER], "cluster.master_addr": HEAD,
                                  "cluster.socket_ifname": "eth0", "device": "npu", **flags}, environ={}).spec


def facts(address: str, head: bool = False, **kw: Any) -> NodeFacts:
    """A node that agrees with the others (the head reaches itself through lo, as a real route lookup says)."""
    base: dict[str, Any] = dict(
        image_id=IMAGE_A, python="3.10.12", ray="2.49.0", shm_bytes=64 * 2**30, ram_bytes=128 * 2**30,
        route_src="127.0.0.1" if head else address, route_iface="lo" if head else "eth0",
        interfaces={"lo": "127.0.0.1", "eth0": address}, marker_seen=True,
    )
    return NodeFacts(address=address, head=head, **{**base, **kw})


def findings(worker: dict[str, Any] | None = None, head: dict[str, Any] | None = None,
             marker: str | None = MARKER, **flags: Any) -> list[Finding]:  # fmt: skip
    return node_findings(spec(**flags), [facts(HEAD, True, **(head or {})), facts(WORKER, **(worker or {}))],
                         "0.7.0", marker, {})


def one(found: list[Finding], code: str) -> Finding:
    (f,) = [f for f in found if f.code == code]
    return f


def test_nodes_that_agree_give_no_finding() -> None:
    assert findings() == []
    assert findings(marker=None) == []  # no checkpoint directory: no marker to read back


def test_the_messages_name_each_node_and_its_value() -> None:
    image = one(findings({"image_id": IMAGE_B}), "nodes_image_differs").message
    # an image id is shown as Docker shows it short: sha256: and 12 hex digits
    assert f"sha256:aaaaaaaaaaaa on {HEAD}; sha256:bbbbbbbbbbbb on {WORKER}" in image
    assert "a" * 13 not in image
    python = one(findings({"python": "3.10.13"}), "nodes_python_differs").message
    assert f"3.10.12 on {HEAD}; 3.10.13 on {WORKER}" in python and "Version mismatch" in python
    ray = one(findings({"ray": "2.49.1"}), "nodes_ray_differs").message
    assert f"2.49.0 on {HEAD}; 2.49.1 on {WORKER}" in ray


def test_the_head_that_could_not_write_the_marker_says_why_when_it_knows() -> None:
    why = one(findings(head={"marker_seen": False, "marker_error": f"{MARKER}: Read-only file system"}),
              "checkpoint_marker_unwritten").message
    assert why.endswith(f"could not write the pre-flight marker {MARKER} ({MARKER}: Read-only file system)"), why
    bare = one(findings(head={"marker_seen": False}), "checkpoint_marker_unwritten").message
    assert bare.endswith(f"could not write the pre-flight marker {MARKER}"), bare


def test_no_marker_is_read_back_without_a_head_that_answered() -> None:
    s = spec()
    worker = facts(WORKER, marker_seen=False)
    assert check_node_checkpoints(s, [worker], MARKER) == []  # no head among the facts
    failed_head = facts(HEAD, True, error="the probe failed (exit 1)", marker_seen=None)
    assert check_node_checkpoints(s, [failed_head, worker], MARKER) == []
    assert check_node_checkpoints(s, [facts(HEAD, True), worker], None) == []
    assert [f.code for f in check_node_checkpoints(s, [facts(HEAD, True), worker], MARKER)] == ["checkpoint_not_shared"]


def test_the_head_is_not_judged_by_its_route_to_itself_and_a_silent_node_not_at_all() -> None:
    s = spec()
    # the head reaches its own address through lo, not eth0: that is no finding
    assert check_node_routes(s, [facts(HEAD, True), facts(WORKER)]) == []
    silent = facts(WORKER, error="the probe failed (exit 127)", route_error="unknown", route_iface="eth1")
    assert check_node_routes(s, [facts(HEAD, True), silent]) == []


def test_the_route_message_says_which_interface_the_node_has() -> None:
    s = spec()
    other = facts(WORKER, route_iface="eth1", interfaces={"eth0": "198.51.100.2", "eth1": WORKER})
    (f,) = check_node_routes(s, [facts(HEAD, True), other])
    assert f"through eth1 ({WORKER}), not through socket_ifname eth0 (it has eth0 (198.51.100.2))" in f.message
    lacking = facts(WORKER, route_iface="eth1", interfaces={"eth1": WORKER})
    (f,) = check_node_routes(s, [facts(HEAD, True), lacking])
    assert "(it has no interface eth0)" in f.message


def test_shm_is_judged_against_the_specs_host_memory_over_the_nodes_ram() -> None:
    nodes = [facts(HEAD, True), facts(WORKER, shm_bytes=29 * 2**30)]
    # 100 GiB given: Ray wants 30 GiB of /dev/shm (30 %), not the 38 GiB of the node's 128 GiB
    (f,) = check_node_resources(spec(**{"cluster.host_memory_gib": 100}), nodes, {})
    assert f.code == "shm_too_small" and "Ray wants 30 GiB" in f.message and f"node {WORKER}" in f.message
    (f,) = check_node_resources(spec(), nodes, {})
    assert "Ray wants 38 GiB" in f.message
    assert check_node_resources(spec(**{"cluster.host_memory_gib": 96}), nodes, {}) == []  # 28.8 GiB wanted
