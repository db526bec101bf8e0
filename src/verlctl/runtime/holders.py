"""Who holds a device: for the stale-process check (Ascend's EJ0001), the process on this host, its owner, its
container and whether it belongs to a run recorded here (by the attempt marker in its environment). Reads
``/proc`` and the run records; never signals anything."""

from __future__ import annotations

import os
from typing import Any

from verlctl.runtime.records import all_runs


def device_holder(pid: int) -> dict[str, Any]:
    """Who holds a device, for the stale-process check: the process on this host, and whether it belongs to a
    run recorded here (by the attempt marker in its environment). Never signals anything."""
    from verlctl.runtime import procscan

    doc: dict[str, Any] = {"pid": pid, "alive": False, "run_id": None, "recorded": False, "container": None}
    st = procscan.leader_start(pid) if procscan.valid_pgid(pid) else None
    if st is None:
        return doc
    doc["alive"] = True
    doc["cmd"] = procscan._cmd_of(pid)[:120]
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        uid = -1
    doc["uid"] = uid
    try:
        import pwd

        doc["user"] = pwd.getpwuid(uid).pw_name
    except (KeyError, OSError):
        doc["user"] = None
    doc["container"] = _container_of(pid)
    marker = procscan._marker_of(pid)
    if marker:
        run_id = marker.split("/", 1)[0]
        doc["run_id"] = run_id
        doc["recorded"] = any(r.run_id == run_id for r in all_runs())
    return doc


def _container_of(pid: int) -> str | None:
    import re

    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as fh:
            text = fh.read(65536)
    except OSError:
        return None
    m = re.search(r"(?:docker[-/]|/containers?/)([0-9a-f]{64})", text)
    return m.group(1)[:12] if m else None


def describe_holders(pids: list[int], limit: int = 64) -> dict[int, str]:
    """:func:`describe_device_holder` of each pid (at most ``limit`` of them): the fact the device check reads."""
    return {pid: describe_device_holder(pid) for pid in pids[:limit]}


def describe_device_holder(pid: int) -> str:
    """One line: what holds a device and whose it is; the `verlctl stop` offer only for runs recorded here."""
    h = device_holder(pid)
    if not h["alive"]:
        return f"pid {pid}: no such process on this host (it ended, or runs in another PID namespace)"
    where = f" in container {h['container']}" if h["container"] else ""
    owner = f"owner uid {h['uid']}" + (f" ({h['user']})" if h["user"] else "")
    what = f"pid {pid} ({h['cmd'] or '?'}){where}"
    if h["run_id"] and h["recorded"]:
        return f"{what} is verlctl run {h['run_id']}: `verlctl stop {h['run_id']}` frees the device"
    if h["run_id"]:
        return f"{what} is verlctl run {h['run_id']}, not recorded here ({owner}): ask its owner to stop it"
    return f"{what} is not a verlctl run: {owner}; verlctl does not stop it, ask its owner"
