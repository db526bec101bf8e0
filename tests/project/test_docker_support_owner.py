"""``docker_support``'s clean-up of containers left by dead test processes judges only owners whose pid was taken in
its own PID namespace. A test session inside ``unshare --pid --fork --mount-proc`` (the signal-path mutation
runs) numbers its processes from 1 and sees none of the host's: with owners labelled ``<host>:<pid>`` the two
sessions took each other's live owners for dead and removed each other's containers mid-test."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

import docker_support
from conftest import ROOT


def labels(owner: str) -> dict[str, dict[str, str]]:
    return {"Labels": {docker_support.OWNER_LABEL: owner}}


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_an_owner_of_this_namespace_is_judged_by_its_pid() -> None:
    here = f"{socket.gethostname()}:{docker_support.pid_namespace()}"
    assert f"{here}:{os.getpid()}" == docker_support.OWNER
    assert docker_support.owner_alive(labels(docker_support.OWNER)) is True
    assert docker_support.owner_alive(labels(f"{here}:{dead_pid()}")) is False


def test_owners_of_another_namespace_or_host_or_label_form_are_not_judged() -> None:
    gone = dead_pid()
    ns = docker_support.pid_namespace()
    assert ns.isdigit()
    other_ns = str(int(ns) + 1)
    for owner in (f"{socket.gethostname()}:{other_ns}:{gone}",  # another PID namespace
                  f"not-{socket.gethostname()}:{ns}:{gone}",  # another host
                  f"{socket.gethostname()}:{gone}",  # the label of an older harness: no namespace
                  f"{socket.gethostname()}:{ns}:x"):
        assert docker_support.owner_alive(labels(owner)) is True, owner
    assert docker_support.owner_alive({"Labels": {}}) is True
    assert docker_support.owner_alive({}) is True


JUDGE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import docker_support
print(json.dumps({"owner": docker_support.OWNER, "outside_alive": docker_support.owner_alive(
    {"Labels": {docker_support.OWNER_LABEL: sys.argv[2]}})}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1) for a private PID namespace")
def test_sessions_inside_and_outside_a_private_pid_namespace_keep_each_others_containers() -> None:
    # inside: a session in its own PID namespace judges this (live) process's label
    res = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--", sys.executable, "-c",
                          JUDGE, str(ROOT / "tests"), docker_support.OWNER], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    inside = json.loads(res.stdout.strip().splitlines()[-1])
    host, ns, pid = inside["owner"].split(":")
    assert host == socket.gethostname() and ns != docker_support.pid_namespace() and pid.isdigit(), inside
    assert inside["outside_alive"] is True  # it cannot see this process, and does not call it dead
    # outside: the inside session has ended (its pid does not exist here, or is someone else's): not judged
    assert docker_support.owner_alive(labels(inside["owner"])) is True
