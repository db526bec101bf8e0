"""Node names, master_addr and ssh_user never reach `ssh` as options (adversarial review D22)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import BASE_PATHS, clean_env, run_cli


@pytest.mark.parametrize("key,value", [
    ("cluster.nodes", '["-oProxyCommand=touch {tmp}/pwned", "node2"]'),
    ("cluster.nodes", '["node1", "-oLocalCommand=touch {tmp}/pwned"]'),
    ("cluster.nodes", '["node1", "a b"]'),
    ("cluster.master_addr", "-oProxyCommand=touch {tmp}/pwned"),
    ("cluster.ssh_user", "-oProxyCommand=touch {tmp}/pwned"),
    ("cluster.ssh_user", "me@evil"),
])
def test_hostile_hosts_and_users_are_refused_in_one_line(tmp_path: Path, key: str, value: str) -> None:
    args = ["plan", "--json"]
    for k, v in BASE_PATHS.items():
        args += ["--set", f"{k}={v}"]
    args += ["--set", f"{key}={value.format(tmp=tmp_path)}"]
    res = run_cli(*args, env=clean_env())
    assert res.code != 0 and "Traceback" not in res.err, res.out + res.err
    err = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and key in err[0], res.err
    assert not (tmp_path / "pwned").exists()


def test_ordinary_hosts_and_users_are_accepted() -> None:
    from verlctl.spec.model import ClusterSpec

    c = ClusterSpec(nodes=["node-1", "10.0.0.2", "fe80::1", "gpu_node.example.com", "n2."], master_addr="10.0.0.2",
                    ssh_user="ml.user_1")
    assert c.nodes[0] == "node-1"


def test_the_ssh_destination_comes_after_a_double_dash() -> None:
    from verlctl.runtime.nodes import SshTunnel

    argv = SshTunnel("-oProxyCommand=touch /tmp/x", user=None, port=2222, config="/dev/null").argv()
    assert argv[-2:] == ["--", "-oProxyCommand=touch /tmp/x"]
    argv = SshTunnel("node2", user="me").argv()
    assert argv[-2:] == ["--", "me@node2"]
    assert json.dumps(argv)  # plain strings only
