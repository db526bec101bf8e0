"""Host facts: free space where checkpoints go, /dev/shm size, the CANN toolkit and the Ascend driver.

``statvfs`` on a stalled network mount blocks in the kernel, so the file-system calls run through
:func:`verlctl.detect.common.call_with_timeout` (a daemon thread the caller can walk away from).
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from verlctl.detect.common import (
    CallTimeout,
    ProbeModel,
    Unavailable,
    UnavailableCode,
    call_with_timeout,
    unavailable,
)

DEFAULT_ASCEND_ROOT = "/usr/local/Ascend"


class DiskSpace(ProbeModel):
    path: str  # the path asked about
    checked_path: str  # the nearest existing parent that was measured
    total_bytes: int
    free_bytes: int  # available to an unprivileged user (f_bavail)
    used_bytes: int

    @property
    def free_gib(self) -> float:
        return self.free_bytes / 2**30


def _nearest_existing(path: str) -> str:
    current = os.path.abspath(path)
    while not os.path.exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def _statvfs_space(path: str) -> DiskSpace:
    checked = _nearest_existing(path)
    st = os.statvfs(checked)
    total = st.f_blocks * st.f_frsize
    free = st.f_bavail * st.f_frsize
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    return DiskSpace(path=path, checked_path=checked, total_bytes=total, free_bytes=free, used_bytes=used)


def disk_space(path: str, timeout: float = 5.0) -> DiskSpace | Unavailable:
    """Free space at ``path`` or, when it does not exist yet, at its nearest existing parent."""
    try:
        return call_with_timeout(lambda: _statvfs_space(path), timeout, "verlctl-statvfs")
    except CallTimeout:
        return unavailable(
            "disk", UnavailableCode.TIMEOUT, f"statvfs({path}) did not return within {timeout:g} s"
        )
    except OSError as exc:
        return unavailable("disk", UnavailableCode.FAILED, f"statvfs({path}): {exc.strerror or exc}")


def shm_space(timeout: float = 5.0, path: str = "/dev/shm") -> DiskSpace | Unavailable:
    """Size of ``/dev/shm`` (docker's default is 64 MiB, far too small for NCCL/HCCL and Ray)."""
    try:
        exists = call_with_timeout(lambda: os.path.isdir(path), timeout, "verlctl-shm")
    except CallTimeout:
        return unavailable("shm", UnavailableCode.TIMEOUT, f"{path} did not answer within {timeout:g} s")
    if not exists:
        return unavailable("shm", UnavailableCode.NOT_PRESENT, f"{path} does not exist")
    result = disk_space(path, timeout)
    if isinstance(result, Unavailable):
        return unavailable("shm", result.code, result.reason)
    return result


class AscendEnvFile(BaseModel):
    kind: str  # 'toolkit', 'nnal-atb', 'driver-version'
    path: str


class CannInfo(ProbeModel):
    present: bool
    ascend_root: str
    toolkit_set_env: str | None = None  # the set_env.sh to source
    nnal_set_env: str | None = None  # nnal/atb set_env.sh (needed by vllm-ascend / MindIE)
    toolkit_version: str | None = None
    driver_version: str | None = None
    driver_present: bool = False
    notes: list[str] = []


# where set_env.sh lives, by CANN packaging (classic toolkit layout first, then the 'cann' layout of
# the verl NPU images that the seed sources)
TOOLKIT_SET_ENV = (
    "ascend-toolkit/set_env.sh",
    "cann/ascend-toolkit/set_env.sh",
    "cann/set_env.sh",
    "ascend-toolkit/latest/set_env.sh",
)
NNAL_SET_ENV = ("nnal/atb/set_env.sh", "cann/nnal/atb/set_env.sh")
TOOLKIT_VERSION_FILES = (
    "ascend-toolkit/latest/version.cfg",
    "ascend-toolkit/latest/ascend_toolkit_install.info",
    "cann/ascend-toolkit/latest/ascend_toolkit_install.info",
    "ascend-toolkit/latest/arm64-linux/ascend_toolkit_install.info",
    "ascend-toolkit/latest/x86_64-linux/ascend_toolkit_install.info",
)
DRIVER_VERSION_FILE = "driver/version.info"


def _version_from(path: str) -> str | None:
    """``version=8.0.RC2`` / ``Version=24.1.rc2`` / ``toolkit_running_version=[8.0.RC2:…]`` lines."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(64 * 1024)
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.strip().lower()
        value = value.strip().strip('"')
        if key in ("version", "package_version", "innerversion"):
            return value or None
        if key.endswith("running_version") and value.startswith("["):
            return value.strip("[]").split(":")[0] or None
    return None


def _cann(root: str) -> CannInfo:
    info = CannInfo(present=False, ascend_root=root)
    if not os.path.isdir(root):
        info.notes.append(f"{root} does not exist")
        return info
    for rel in TOOLKIT_SET_ENV:
        p = os.path.join(root, rel)
        if os.path.isfile(p):
            info.toolkit_set_env = p
            break
    for rel in NNAL_SET_ENV:
        p = os.path.join(root, rel)
        if os.path.isfile(p):
            info.nnal_set_env = p
            break
    for rel in TOOLKIT_VERSION_FILES:
        p = os.path.join(root, rel)
        if os.path.isfile(p):
            info.toolkit_version = _version_from(p)
            if info.toolkit_version:
                break
    driver_file = os.path.join(root, DRIVER_VERSION_FILE)
    info.driver_present = os.path.isdir(os.path.join(root, "driver"))
    if os.path.isfile(driver_file):
        info.driver_version = _version_from(driver_file)
    info.present = info.toolkit_set_env is not None
    if not info.present:
        info.notes.append("no CANN toolkit set_env.sh under " + root)
    if info.present and info.nnal_set_env is None:
        info.notes.append("no nnal/atb set_env.sh (NNAL not installed)")
    return info


def probe_cann(ascend_root: str = DEFAULT_ASCEND_ROOT, timeout: float = 5.0) -> CannInfo | Unavailable:
    """Is the CANN toolkit installed on this host (or in this container), and which version."""
    try:
        return call_with_timeout(lambda: _cann(ascend_root), timeout, "verlctl-cann")
    except CallTimeout:
        return unavailable(
            "cann", UnavailableCode.TIMEOUT, f"{ascend_root} did not answer within {timeout:g} s"
        )
