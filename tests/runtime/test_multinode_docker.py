"""A two-node launch on the real engine: the second node is reached through a real sshd (OpenSSH, key auth).

Both "nodes" are this machine: the head is its network address, the worker is 127.0.0.2, where a private sshd
listens; verlctl forwards that node's Docker socket over ssh, exactly as for a remote machine. The two nodes
share one engine here, so the worker's container gets a node suffix. Ray really runs two nodes (one per
container, host network) and the stand-in trainer checks the device count of both.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from launch_support import LaunchEnv, free_port

pytestmark = pytest.mark.docker

WORKER = "127.0.0.2"


def _local_ip() -> str:
    from verlctl.detect.network import NetworkInfo, probe_network

    info = probe_network()
    assert isinstance(info, NetworkInfo)
    ip = info.primary_ipv4
    if not ip or ip.startswith("127."):
        pytest.skip("no non-loopback address for the head node")
    return ip


@pytest.fixture
def ssh_home(tmp_path: Path):  # type: ignore[no-untyped-def]
    yield from private_sshd(tmp_path)


def private_sshd(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A private sshd on 127.0.0.2 (started and stopped by this fixture) and a HOME whose ssh config reaches it.
    Its pid is in ``<tmp_path>/sshd/sshd.pid``."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd):
        if os.environ.get("CI"):
            pytest.fail("sshd is missing (.ci/run installs openssh-server)")
        pytest.skip("sshd is not installed")
    d = tmp_path / "sshd"
    d.mkdir()
    for name in ("client", "host"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    port = free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress {WORKER}\nHostKey {d / 'host'}\nAuthorizedKeysFile {d / 'client.pub'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nStrictModes no\nUsePAM no\n"
        f"PidFile {d / 'sshd.pid'}\nAllowStreamLocalForwarding yes\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex((WORKER, port)) == 0:
                break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"sshd did not listen: {proc.stderr.read().decode() if proc.stderr else ''}")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host {WORKER}\n  Port {port}\n  User root\n  IdentityFile {d / 'client'}\n  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
    )
    (home / ".ssh" / "config").chmod(0o600)
    yield home
    proc.terminate()
    proc.wait(timeout=10)


def test_two_nodes_over_ssh_launch_status_stop(launch_env: LaunchEnv, ssh_home: Path, docker_engine) -> None:  # type: ignore[no-untyped-def]
    head = _local_ip()
    env = launch_env
    env.spec["cluster"].update({"nodes": [head, WORKER], "devices": [0, 1, 2, 3],
                                "ssh_config": str(ssh_home / ".ssh" / "config")})
    env.spec["train"].update({"steps": 600})  # still training when status is asked, however loaded the machine
    env.spec["env"]["VERLCTL_STANDIN_STEP_SECONDS"] = "1"
    res = env.cli("launch", "-c", str(env.spec_file), "--yes", "--verify-timeout", "240")
    assert res.code == 0, res.out + res.err
    assert f"on {WORKER}" in res.out
    assert "pre-flight on every node" in res.out, res.out  # it ran, and found nothing that blocks
    worker_name = f"{env.name}-node1"
    head_c = docker_engine.containers.get(env.name)
    worker_c = docker_engine.containers.get(worker_name)
    assert worker_c.status == "running"

    # Ray has both nodes and all 8 devices; the trainer was told 2 nodes x 4.
    status = head_c.exec_run(["ray", "status", "--address", f"{head}:{env.spec['cluster']['ray_port']}"]).output.decode()
    assert "8.0 NPU" in status and status.count("node_") >= 2, status
    argv = env.argv_log[-1]["argv"]
    assert "trainer.nnodes=2" in argv and "trainer.n_gpus_per_node=4" in argv, argv

    st = json.loads(env.cli("status", "--json").out)
    why = {k: st.get(k) for k in ("state", "last_line", "last_error", "progress")}
    assert st["alive"] is True and st["head"] == head, why
    assert [(w["node"], w["alive"]) for w in st["workers"]] == [(WORKER, True)], st
    # a multi-node run's log lies in the head's target, not on this host: status reads it there
    assert st["log_read_from"] == "target" and st["last_line"], why

    res = env.cli("stop", "--remove-container")
    assert res.code == 0, res.out + res.err
    assert f"on {WORKER}" in res.out, res.out
    import docker

    for name in (env.name, worker_name):
        with pytest.raises(docker.errors.NotFound):
            docker_engine.containers.get(name)
    # the run's own history says what was removed, and where
    (run_dir,) = (env.state / "runs").iterdir()
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    removed = sorted((e["container"], e["node"]) for e in events if e["event"] == "container_removed")
    assert removed == sorted([(env.name, head), (worker_name, WORKER)]), removed


def test_the_node_preflight_stops_a_launch_before_anything_starts(launch_env: LaunchEnv, ssh_home: Path, docker_engine) -> None:  # type: ignore[no-untyped-def]
    """Issue 14: the pre-flight runs on every node before Ray starts; an HCCL port range a real socket holds on
    the nodes' host is an error found there, and the launch stops, removing the containers it created."""
    head = _local_ip()
    env = launch_env
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("0.0.0.0", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    env.spec["cluster"].update({"nodes": [head, WORKER], "devices": [0, 1, 2, 3],
                                "ssh_config": str(ssh_home / ".ssh" / "config")})
    env.spec["env"]["HCCL_HOST_SOCKET_PORT_RANGE"] = f"{port}-{port}"
    try:
        res = env.cli("launch", "-c", str(env.spec_file), "--yes", "--verify-timeout", "240")
    finally:
        holder.close()
    assert res.code != 0, res.out + res.err
    out = " ".join((res.out + res.err).split())
    # The head and the worker share this host: the verdict's live-ports rule (hccl_ports) sees the held port on
    # the head before the per-node pre-flight runs, and the launch stops there, every problem listed at once.
    assert "hccl_ports_in_use" in out and "ports of HCCL_HOST_SOCKET_PORT_RANGE are already bound" in out, out
    assert "Traceback" not in res.err
    assert env.argv_log == [], "training never started"
    ours = [c.name for c in docker_engine.containers.list(all=True, filters={"name": env.name})]
    assert ours == [], ours


def test_an_unreachable_node_is_one_line_and_changes_nothing(launch_env: LaunchEnv, docker_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    head = _local_ip()
    env = launch_env
    env.spec["cluster"].update({"nodes": [head, WORKER], "devices": [0, 1, 2, 3], "ssh_port": free_port()})
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host *\n  BatchMode yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n")
    env.spec["cluster"]["ssh_config"] = str(cfg)
    res = env.cli("launch", "-c", str(env.spec_file), "--yes")
    assert res.code != 0
    lines = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and f"cannot reach the Docker engine of {WORKER} over ssh" in lines[0], res.err
    assert "Traceback" not in res.err
    # Nothing of this run exists (the engine is shared: other sessions' containers come and go meanwhile).
    ours = [c.name for c in docker_engine.containers.list(all=True, filters={"name": env.name})]
    assert ours == [], ours
    assert not (env.state / "runs").exists() or not any((env.state / "runs").iterdir())
