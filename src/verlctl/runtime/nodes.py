"""Nodes of a run: which address is this machine, and a Docker client for any node.

The other nodes' Docker engines are reached through OpenSSH (the user's ssh config, agent, keys, jump hosts
all apply): ``ssh -N -L <local socket>:<remote docker socket> [user@]host`` forwards the engine's socket, and
the Docker SDK talks to the local end. No Python SSH library is involved, and nothing is installed remotely.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import socket
import subprocess
import time
from typing import Any

from verlctl.errors import RuntimeFailure

_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def local_addresses() -> set[str]:
    import psutil

    out = set(_LOCAL_NAMES)
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                out.add(a.address.split("%")[0])
    out.add(socket.gethostname())
    with contextlib.suppress(OSError):
        out.add(socket.getfqdn())
    return out


def is_local(address: str) -> bool:
    return address in local_addresses()


class SshTunnel:
    """A forwarded Docker socket of a remote node, owned by this process (closed at exit)."""

    def __init__(self, host: str, user: str | None = None, port: int | None = None,
                 remote_socket: str = "/var/run/docker.sock", config: str | None = None) -> None:
        self.host = host
        self.config = config
        self.user = user
        self.port = port
        self.remote_socket = remote_socket
        self.local_socket = f"/tmp/verlctl-ssh-{os.getpid()}-{secrets.token_hex(3)}.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def argv(self) -> list[str]:
        cmd = ["ssh", "-N", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=15",
               "-o", "StreamLocalBindUnlink=yes", "-L", f"{self.local_socket}:{self.remote_socket}"]
        if self.port:
            cmd += ["-p", str(self.port)]
        if self.config:
            cmd += ["-F", self.config]
        # `--`: the destination is never read as an option (a node named `-oProxyCommand=...`).
        return [*cmd, "--", self.target]

    def open(self, timeout: float = 30.0) -> str:
        try:
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, start_new_session=True)
        except FileNotFoundError:
            raise RuntimeFailure("ssh (OpenSSH client) is not installed: it is needed for multi-node runs") from None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(self.local_socket):
                _TUNNELS.append(self)
                return self.local_socket
            if self.proc.poll() is not None:
                err = (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace")
                raise RuntimeFailure(
                    f"cannot reach the Docker engine of {self.target} over ssh: {' '.join(err.split())[:300]}",
                    hint="check `ssh " + self.target + " docker version` (keys, user, cluster.ssh_port, "
                    "cluster.remote_docker_socket)",
                )
            time.sleep(0.05)
        self.close()
        raise RuntimeFailure(f"ssh to {self.target} did not forward the Docker socket within {timeout:.0f}s")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.local_socket)


_TUNNELS: list[SshTunnel] = []


@atexit.register
def _close_tunnels() -> None:
    for t in _TUNNELS:
        t.close()


def node_client(address: str, ssh_user: str | None = None, ssh_port: int | None = None,
                remote_socket: str = "/var/run/docker.sock", ssh_config: str | None = None) -> Any:
    """A Docker client for the node at ``address``: the local engine, or the remote one over ssh."""
    from verlctl.runtime.containers import connect

    if is_local(address):
        return connect()
    tunnel = SshTunnel(address, ssh_user, ssh_port, remote_socket, ssh_config)
    return connect(base_url=f"unix://{tunnel.open()}", where=f"{tunnel.target} (over ssh)")
