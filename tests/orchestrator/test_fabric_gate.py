"""The collective fabric gate (orchestrator/fabric.py) for real: three "nodes" are three containers of the real-verl image
(real torch.distributed, the gloo backend: the accelerator double), each in its own network namespace on a Docker
bridge network, reached through the same DockerExecutor as the node pre-flight, the second one over a real sshd
(its engine's socket forwarded by ssh, as for an SSH host). One node's link is slowed with
a `tc` token bucket in its namespace, another's ports are blocked with iptables in its namespace; the verdict names them.

Everything here is this test's own: its network, its containers (removed at the end), the qdisc and the rules in
those containers' namespaces (gone with them)."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from verlctl.checks.findings import Severity

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("fabric")]


@pytest.fixture(scope="module")
def nodes(docker_engine: Any, realverl_image: str, tmp_path_factory: Any) -> Iterator[list[tuple[str, Any, Any]]]:
    """(address, executor, container) for three containers on a private bridge network; the second node's
    executor reaches its engine over a real sshd (the SSH hosts' path: the engine's socket forwarded by ssh)."""
    from test_multinode_docker import WORKER, private_sshd
    from verlctl.runtime.executor import DockerExecutor
    from verlctl.runtime.nodes import node_client

    sshd = private_sshd(tmp_path_factory.mktemp("sshd"))
    home = next(sshd)
    over_ssh = node_client(WORKER, ssh_config=str(home / ".ssh" / "config"))
    tag = secrets.token_hex(4)
    network = docker_engine.networks.create(f"verlctl-fabric-{tag}", driver="bridge")
    made: list[Any] = []
    try:
        for i in range(3):
            c = docker_engine.containers.run(realverl_image, ["sleep", "infinity"], detach=True,
                                             name=f"verlctl-fabric-{tag}-{i}", network=network.name)
            made.append(c)
        out = []
        for i, c in enumerate(made):
            c.reload()
            ip = c.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
            out.append((ip, DockerExecutor(over_ssh if i == 1 else docker_engine, c.id, c.name), c))
        yield out
    finally:
        for c in made:
            c.remove(force=True)
        network.remove()
        over_ssh.close()
        next(sshd, None)


def spec_for(addresses: list[str], **fabric: Any) -> Any:
    from verlctl.spec.model import RunSpec

    return RunSpec.model_validate({
        "device": "gpu", "strategy": "fsdp",
        "paths": {"model": "/m", "train_files": "/t.parquet", "val_files": "/v.parquet"},
        "cluster": {"nodes": addresses, "devices": [0],
                    "fabric": {"backend": "gloo", "sizes_mib": [1], "timeout_s": 40, **fabric}},
    })


def in_netns(container: Any, *argv: str) -> None:
    """A command of the host's iproute2/iptables inside the container's network namespace (nsenter)."""
    pid = str(container.attrs["State"]["Pid"])
    subprocess.run(["nsenter", "-t", pid, "-n", "--", *argv], check=True, capture_output=True, timeout=30)


def gate(nodes: list[tuple[str, Any, Any]], **fabric: Any) -> Any:
    from verlctl.orchestrator.fabric import run_fabric

    addresses = [a for a, _, _ in nodes]
    return run_fabric(spec_for(addresses, **fabric), [(a, ex) for a, ex, _ in nodes], {})


def errors_of(result: Any) -> list[Any]:
    return [f for f in result.findings if f.severity is Severity.ERROR]


def test_a_healthy_fabric_passes_with_every_link_measured(nodes: list[tuple[str, Any, Any]]) -> None:
    result = gate(nodes, min_link_gbps=0.005)
    assert not errors_of(result), [f.line() for f in result.findings]
    assert result.run.world == 3 and len(result.run.links) == 3 and result.run.allreduce
    (measured,) = [f for f in result.findings if f.code == "fabric_measured"]
    assert "over 3 ranks (gloo)" in measured.message and "slowest link node" in measured.message


def test_a_slowed_link_stops_the_launch_naming_the_node(nodes: list[tuple[str, Any, Any]]) -> None:
    """The third node's egress is limited to 8 Mbit/s (1 MB/s): its link to the first node falls below a floor
    of 5 MB/s that every healthy link here clears several times over, even on a loaded machine."""
    slow_ip, _, slow = nodes[2]
    head_ip = nodes[0][0]
    # a token bucket (tbf): the kernels here have no netem
    in_netns(slow, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "8mbit", "burst", "32kbit",
             "latency", "400ms")
    try:
        result = gate(nodes, min_link_gbps=0.005, min_busbw_gbps=0.000001)
    finally:
        in_netns(slow, "tc", "qdisc", "del", "dev", "eth0", "root")
    (slow_link,) = errors_of(result)
    assert slow_link.code == "fabric_link_slow" and slow_link.field == "cluster.fabric.min_link_gbps"
    assert f"the link node {slow_ip} (rank 2) -> node {head_ip} (rank 0) moves" in slow_link.message
    assert "below the floor of 0.005 GB/s" in slow_link.message


def test_a_node_whose_ports_are_blocked_is_named_and_nothing_hangs(nodes: list[tuple[str, Any, Any]]) -> None:
    """The second node drops every incoming TCP connection (its collective ports): the test ends within its
    bound and names that node."""
    blocked_ip, _, blocked = nodes[1]
    in_netns(blocked, "iptables", "-A", "INPUT", "-p", "tcp", "--syn", "-j", "DROP")
    try:
        result = gate(nodes, timeout_s=15)
    finally:
        in_netns(blocked, "iptables", "-F", "INPUT")
    errors = errors_of(result)
    assert errors, [f.line() for f in result.findings]
    assert {f.code for f in errors} <= {"fabric_init_failed", "fabric_timeout"}
    assert any(blocked_ip in f.message or "rank 1" in f.message for f in errors), [f.line() for f in errors]
    assert result.seconds < 15 + 60 + 30


def test_check_fabric_runs_the_gate_in_the_runs_running_container(nodes: list[tuple[str, Any, Any]],
                                                                   tmp_path: Any) -> None:
    """`check --fabric` finds the run's container the way launch plans it and runs the test there (2 devices on
    one node: 2 ranks); with no such container it says the fabric was not tested, and why."""
    from verlctl.orchestrator.fabric_check import check_fabric
    from verlctl.spec.resolve import load_spec

    _, _, container = nodes[0]
    flags = {"device": "gpu", "strategy": "fsdp", "paths.model": str(tmp_path), "paths.train_files": "/t.parquet",
             "paths.val_files": "/v.parquet", "cluster.devices": "0,1", "cluster.fabric.backend": "gloo",
             "cluster.fabric.sizes_mib": [1], "container.name": container.name,
             "container.image": container.image.tags[0]}
    findings = check_fabric(load_spec(None, flags=flags))
    assert [f.code for f in findings] == ["fabric_measured"], [f.line() for f in findings]
    assert "over 2 ranks (gloo)" in findings[0].message
    gone = check_fabric(load_spec(None, flags={**flags, "container.name": f"{container.name}-absent"}))
    assert [f.code for f in gone] == ["fabric_not_checked"], [f.line() for f in gone]
    assert "is not running" in gone[0].message


def test_launch_walks_the_fabric_stage_only_with_more_than_one_device_and_skip_fabric_drops_it(
        tmp_path: Any) -> None:
    import json

    from conftest import clean_env, run_cli

    base = ["launch", "--dry-run", "--json", "--set", f"paths.model={tmp_path}", "--set", "paths.train_files=/t.p",
            "--set", "paths.val_files=/v.p", "--set", "container.runtime=host", "--device", "gpu", "--strategy", "fsdp"]
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"))
    stages = {}
    for name, extra in (("eight", []), ("one", ["--set", "cluster.devices=0"]), ("skipped", ["--skip-fabric"])):
        res = run_cli(*base, *extra, env=env)
        doc = json.loads(res.out)
        stages[name] = doc["request"]["stages"]
        if name == "eight":
            assert any("fabric test in the run's containers" in a for a in doc["actions"]), doc["actions"]
    assert "fabric" in stages["eight"] and stages["eight"].index("fabric") == stages["eight"].index("readiness") + 1
    assert "fabric" not in stages["one"] and "fabric" not in stages["skipped"]
