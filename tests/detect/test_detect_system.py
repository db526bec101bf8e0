"""Free space, /dev/shm and the CANN toolkit, checked against `df` and against real files laid out in
tmp dirs the way CANN installs them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from verlctl.detect.common import Unavailable
from verlctl.detect.system import CannInfo, DiskSpace, disk_space, probe_cann, shm_space


def _df(path: str) -> tuple[int, int]:
    out = subprocess.run(
        ["df", "-B1", "--output=size,avail", path], capture_output=True, text=True, check=True
    )
    size, avail = out.stdout.splitlines()[1].split()
    return int(size), int(avail)


@pytest.mark.skipif(shutil.which("df") is None, reason="needs df")
def test_disk_space_at_the_nearest_existing_parent(tmp_path: Path) -> None:
    d = disk_space(str(tmp_path / "ckpts" / "run1" / "global_step_1"))
    assert isinstance(d, DiskSpace)
    assert d.checked_path == str(tmp_path) and d.path.endswith("global_step_1")
    size, avail = _df(str(tmp_path))
    assert d.total_bytes == size
    assert abs(d.free_bytes - avail) <= max(64 * 2**20, avail // 100)  # other writers may move it a little
    assert 0 <= d.used_bytes <= d.total_bytes


@pytest.mark.skipif(
    not os.path.isdir("/dev/shm") or shutil.which("df") is None, reason="needs /dev/shm and df"
)
def test_shm_size_matches_df() -> None:
    s = shm_space()
    assert isinstance(s, DiskSpace) and s.checked_path == "/dev/shm"
    assert s.total_bytes == _df("/dev/shm")[0]


def test_shm_absent_is_typed(tmp_path: Path) -> None:
    s = shm_space(path=str(tmp_path / "no-shm"))
    assert isinstance(s, Unavailable) and s.code.value == "not_present"


def _write(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cann_classic_toolkit_layout(tmp_path: Path) -> None:
    root = tmp_path / "Ascend"
    _write(root / "ascend-toolkit" / "set_env.sh", "export ASCEND_TOOLKIT_HOME=...\n")
    _write(
        root / "ascend-toolkit" / "latest" / "ascend_toolkit_install.info",
        "package_name=Ascend-cann-toolkit\nversion=8.0.RC2\n",
    )
    _write(root / "nnal" / "atb" / "set_env.sh")
    _write(root / "driver" / "version.info", "Version=24.1.rc2\nascendhal_version=7.35.19\n")
    info = probe_cann(str(root))
    assert isinstance(info, CannInfo) and info.present
    assert info.toolkit_set_env == str(root / "ascend-toolkit" / "set_env.sh")
    assert info.nnal_set_env == str(root / "nnal" / "atb" / "set_env.sh")
    assert (info.toolkit_version, info.driver_version, info.driver_present) == ("8.0.RC2", "24.1.rc2", True)
    assert info.notes == []


def test_cann_layout_of_the_verl_npu_images(tmp_path: Path) -> None:
    # the seed sources /usr/local/Ascend/cann/ascend-toolkit/set_env.sh and cann/nnal/atb/set_env.sh
    root = tmp_path / "Ascend"
    _write(root / "cann" / "ascend-toolkit" / "set_env.sh")
    _write(root / "cann" / "nnal" / "atb" / "set_env.sh")
    info = probe_cann(str(root))
    assert isinstance(info, CannInfo) and info.present
    assert info.toolkit_set_env == str(root / "cann" / "ascend-toolkit" / "set_env.sh")
    assert info.nnal_set_env == str(root / "cann" / "nnal" / "atb" / "set_env.sh")
    assert info.toolkit_version is None and not info.driver_present


def test_cann_driver_only_and_absent(tmp_path: Path) -> None:
    root = tmp_path / "Ascend"
    _write(root / "driver" / "version.info", "Version=25.0.rc1.1\n")
    info = probe_cann(str(root))
    assert isinstance(info, CannInfo) and not info.present and info.driver_version == "25.0.rc1.1"
    assert info.notes == [f"no CANN toolkit set_env.sh under {root}"]
    none = probe_cann(str(tmp_path / "nothing"))
    assert (
        isinstance(none, CannInfo)
        and not none.present
        and none.notes == [f"{tmp_path / 'nothing'} does not exist"]
    )


def test_cann_on_this_host() -> None:
    info = probe_cann()
    assert isinstance(info, CannInfo)
    assert info.present == any(
        os.path.isfile(os.path.join("/usr/local/Ascend", p))
        for p in ("ascend-toolkit/set_env.sh", "cann/ascend-toolkit/set_env.sh", "cann/set_env.sh",
                  "ascend-toolkit/latest/set_env.sh")
    )  # fmt: skip
