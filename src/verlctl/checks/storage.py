"""Multi-node runs: the checkpoint directory must be on storage every node sees.

verl saves checkpoints from every rank into ``trainer.default_local_dir`` and resumes (``resume_mode: auto``)
by reading ``latest_checkpointed_iteration.txt`` and the ranks' shards there. On a directory local to one
machine, the other nodes write their shards to their own disks and the head alone cannot resume: after a
restart (OOM recovery, a lost node) the run starts over or fails. So a multi-node spec needs its checkpoints
on shared storage, mounted at the same path on every node; when that cannot be shown, it is an error.

Shown means: the directory is not inside the containers, and every node is this machine (loopback or one of
its addresses) or the directory (its nearest existing parent) is on a network / cluster file system here
(NFS, CIFS, Lustre, GPFS, CephFS, …). Checked by ``verlctl check`` and, before anything is changed, by
``verlctl launch``.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import PurePosixPath

from pydantic import BaseModel

from verlctl.checks.findings import Finding, error, info
from verlctl.spec.model import RunSpec

#: File systems that other machines can mount (``/proc/self/mountinfo`` type names).
SHARED_FS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "ceph", "fuse.ceph", "fuse.cephfs", "glusterfs",
    "fuse.glusterfs", "beegfs", "ocfs2", "gfs2", "fuse.juicefs", "juicefs", "wekafs", "panfs", "afs",
    "fuse.weed", "fuse.alluxio-fuse", "fuse.s3fs", "fuse.goofys", "fuse.mountpoint-s3",
})

FIX = ("set paths.checkpoints to a directory on storage that every node mounts at the same path (e.g. an NFS "
       "export such as /mnt/nfs/checkpoints/<experiment>)")


class StorageFacts(BaseModel):
    """Where the checkpoint directory lives on this machine, and whether every node is this machine."""

    path: str
    checked_path: str  # the nearest existing parent of ``path``
    fstype: str | None = None
    mountpoint: str | None = None
    source: str | None = None  # e.g. nfs-server:/export
    nodes_here: bool = False  # every node of the spec is this machine
    in_container: bool = False  # under the container work dir: not mounted, inside each node's container


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 …)."""
    out, i = "", 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out += chr(int(field[i + 1 : i + 4], 8))
            i += 4
        else:
            out += field[i]
            i += 1
    return out


def mount_of(path: str, mountinfo: str | None = None) -> tuple[str, str, str] | None:
    """(mount point, file system type, source) of the mount holding ``path`` (which must exist)."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
                mountinfo = fh.read(4 * 1024 * 1024)
        except OSError:
            return None
    best: tuple[str, str, str] | None = None
    target = PurePosixPath(path)
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 2:
            continue
        mp = PurePosixPath(_unescape(fields[4]))
        # The last mount listed on the longest matching mount point is the one in effect.
        if (mp == target or mp in target.parents) and (best is None or len(str(mp)) >= len(best[0])):
            best = (str(mp), tail[0], _unescape(tail[1]))
    return best


def nearest_existing(path: str) -> str:
    p = PurePosixPath(path)
    for candidate in (p, *p.parents):
        if os.path.exists(candidate):
            return os.path.realpath(candidate)
    return "/"


def local_addresses() -> set[str]:
    """This machine's addresses and names (psutil; loopback is checked separately)."""
    out = {socket.gethostname(), socket.getfqdn(), "localhost"}
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            out |= {a.address.split("%", 1)[0] for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)}
    except Exception:  # noqa: BLE001 - without psutil's answer only names and loopback count as here
        pass
    return out


def is_this_machine(node: str, here: set[str]) -> bool:
    try:
        if ipaddress.ip_address(node).is_loopback:
            return True
    except ValueError:
        pass
    return node in here


def collect_storage(spec: RunSpec, here: set[str] | None = None) -> StorageFacts | None:
    """The facts for a multi-node spec (None for a single node or no checkpoint path)."""
    path = spec.paths.checkpoints
    if len(spec.cluster.nodes) <= 1 or not path:
        return None
    here = local_addresses() if here is None else here
    facts = StorageFacts(path=path, checked_path=path)
    facts.nodes_here = all(is_this_machine(n, here) for n in spec.cluster.nodes)
    workdir = PurePosixPath(spec.container.workdir)
    pp = PurePosixPath(path)
    facts.in_container = spec.container.runtime == "docker" and (pp == workdir or workdir in pp.parents)
    if not facts.in_container:
        facts.checked_path = nearest_existing(path)
        found = mount_of(facts.checked_path)
        if found is not None:
            facts.mountpoint, facts.fstype, facts.source = found
    return facts


def check_checkpoint_storage(spec: RunSpec, facts: StorageFacts | None) -> list[Finding]:
    """Multi-node: an error unless the checkpoints are shown to be on storage every node sees."""
    if facts is None:
        return []
    field = "paths.checkpoints"
    nodes = len(spec.cluster.nodes)
    consequence = (f"the {nodes} nodes do not share it, so resuming from a checkpoint after a restart (OOM "
                   "recovery, a lost node) will not work")
    if facts.in_container:  # each node has its own container, even when the nodes are one machine
        return [error("checkpoints_not_shared", f"{facts.path} is under the container work dir "
                      f"{spec.container.workdir}, inside each node's own container: {consequence}", field, FIX)]
    if facts.nodes_here:
        return []
    if facts.fstype in SHARED_FS:
        return [info("checkpoints_shared", f"{facts.path} is on {facts.fstype} ({facts.source}, mounted at "
                     f"{facts.mountpoint}): every node must mount it at the same path", field)]
    where = (f"on {facts.fstype} ({facts.mountpoint}), a file system local to this machine" if facts.fstype
             else f"on storage whose file system could not be read ({facts.checked_path})")
    return [error("checkpoints_not_shared", f"{facts.path} is {where}: {consequence}", field, FIX)]
