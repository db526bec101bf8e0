"""The multi-node pre-flight's probe, run for real on this host through the HostExecutor (the same program runs
in every node's container in tests/checks/test_node_preflight_docker.py): what it reports, and the rules on it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from verlctl.checks.nodes import check_node_routes
from verlctl.detect.node_probe import parse_node_probe
from verlctl.orchestrator.node_preflight import MARKER_PREFIX, gather, probe_node
from verlctl.runtime.executor import HostExecutor
from verlctl.spec.resolve import load_spec


def _spec(**flags: object):  # type: ignore[no-untyped-def]
    base = {"cluster.nodes": ["127.0.0.1", "127.0.0.2"], "cluster.master_addr": "127.0.0.1"}
    return load_spec(None, flags={**base, **flags}, environ={}).spec


def test_the_probe_reports_this_hosts_facts() -> None:
    facts = probe_node(HostExecutor(), "here", False, {"head": "127.0.0.1", "ports": {}})
    assert facts.error is None
    assert facts.python and facts.python.count(".") == 2
    assert facts.route_src == "127.0.0.1" and facts.route_iface == "lo"
    assert facts.interfaces.get("lo") == "127.0.0.1"
    assert facts.shm_bytes == os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize
    assert facts.ram_bytes and facts.ram_bytes > 2**28


def test_a_head_that_does_not_resolve_on_a_node_is_no_route() -> None:
    facts = probe_node(HostExecutor(), "here", False, {"head": "no-such-head.invalid", "ports": {}})
    assert facts.route_error and facts.route_src is None
    spec = _spec(**{"cluster.master_addr": "127.0.0.1"})
    (f,) = check_node_routes(spec, [facts])
    assert f.code == "node_no_route_to_head" and "node here has no route to the Ray head" in f.message
    assert check_node_routes(spec, [probe_node(HostExecutor(), "here", False, {"head": "127.0.0.1"})]) == []


def test_bound_ports_are_seen_and_released_ones_are_not() -> None:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("0.0.0.0", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        held = probe_node(HostExecutor(), "here", False, {"ports": {"R": [port, port]}})
    finally:
        holder.close()
    free = probe_node(HostExecutor(), "here", False, {"ports": {"R": [port, port]}})
    assert (held.busy_ports, free.busy_ports) == ({"R": [port]}, {"R": []})


def test_the_head_writes_the_marker_the_others_read_and_it_is_removed(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"  # created by the head's probe
    spec = _spec(**{"paths.checkpoints": str(ckpt)})
    nodes, marker = gather(spec, [("127.0.0.1", True, HostExecutor()), ("127.0.0.2", False, HostExecutor())],
                           "r-host-1", {})
    assert marker == f"{ckpt}/{MARKER_PREFIX}r-host-1"
    assert [(n.address, n.head, n.marker_seen) for n in nodes] == [("127.0.0.1", True, True), ("127.0.0.2", False, True)]
    assert list(ckpt.iterdir()) == []  # removed again
    # a planted symlink in the marker's place is neither followed nor written through
    target = tmp_path / "elsewhere"
    (ckpt / f"{MARKER_PREFIX}r-host-2").symlink_to(target)
    nodes, _ = gather(spec, [("127.0.0.1", True, HostExecutor())], "r-host-2", {})
    assert nodes[0].marker_seen is False and nodes[0].marker_error and not target.exists()


def test_probe_output_that_is_not_there_is_an_unchecked_node() -> None:
    facts = parse_node_probe("10.0.0.9", False, 127, "bash: python3: command not found")
    assert facts.error == "the probe failed (exit 127): bash: python3: command not found"
