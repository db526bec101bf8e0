"""The test suite removes the device nodes it creates (issue 11): only its own, only as it made them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import launch_support


def test_only_this_runs_char_nodes_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    registry = tmp_path / "created.txt"
    monkeypatch.setattr(launch_support, "CREATED_NODES", registry)
    ours, theirs, replaced = tmp_path / "davinci0", tmp_path / "davinci1", tmp_path / "davinci2"
    for p in (ours, theirs, replaced):
        os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    replaced.unlink()
    replaced.write_text("not a device any more\n")
    registry.write_text(f"run-a {ours}\nrun-b {theirs}\nrun-a {replaced}\nrun-a {tmp_path / 'gone'}\n")

    assert launch_support.remove_created_device_nodes("run-a") == [str(ours)]
    assert not ours.exists() and theirs.exists() and replaced.read_text() == "not a device any more\n"
    assert registry.read_text() == f"run-b {theirs}\n"


def test_nodes_created_here_are_recorded_for_this_run() -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    before = {p for p in ("/dev/davinci0", "/dev/davinci_manager") if os.path.exists(p)}
    launch_support.ensure_npu_device_nodes(1)
    lines = launch_support.CREATED_NODES.read_text().splitlines() if launch_support.CREATED_NODES.exists() else []
    for p in ("/dev/davinci0", "/dev/davinci_manager"):
        assert os.path.exists(p)
        if p not in before:
            assert f"{launch_support.test_run_uid()} {p}" in lines
    assert os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set by conftest for the whole run
