"""A real stalled mount for tests: a FUSE file system whose server never answers.

``mount -t fuse`` is done with a ``/dev/fuse`` descriptor that this process holds but never reads,
so the kernel's ``FUSE_INIT`` request is never answered and every ``opendir``/``stat`` below the
mount point waits in the kernel -- what a hung NFS or sshfs server does to ``scandir``. Nothing in
verlctl is patched. ``abort()`` closes the descriptor: blocked and later calls then fail with
ENOTCONN ("Transport endpoint is not connected"), which is what a dead sshfs/FUSE mount looks like.

Needs /dev/fuse and CAP_SYS_ADMIN (root in the test container); ``StalledMount.available()`` says
whether this machine allows it, so tests can skip elsewhere.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

MNT_DETACH = 2


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


class StalledMount:
    def __init__(self, target: Path) -> None:
        self.target = target
        self.fd: int | None = None
        self.mounted = False

    @staticmethod
    def available(scratch: Path) -> str | None:
        """None if a stalled FUSE mount can be made here, else why not."""
        probe = StalledMount(scratch / "fuse-probe")
        try:
            probe.__enter__()
        except OSError as exc:
            return f"cannot mount FUSE here: {exc}"
        finally:
            probe.__exit__(None, None, None)
        return None

    def __enter__(self) -> StalledMount:
        self.target.mkdir(parents=True, exist_ok=True)
        self.fd = os.open("/dev/fuse", os.O_RDWR)
        opts = f"fd={self.fd},rootmode=40000,user_id=0,group_id=0".encode()
        rc = _libc().mount(b"verlctl-test-stall", str(self.target).encode(), b"fuse", 0, opts)
        if rc != 0:
            err = ctypes.get_errno()
            os.close(self.fd)
            self.fd = None
            raise OSError(err, os.strerror(err))
        self.mounted = True
        return self

    def abort(self) -> None:
        """Kill the 'server': blocked calls return ENOTCONN; the mount stays, stale."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __exit__(self, *exc: object) -> None:
        self.abort()
        if self.mounted:
            _libc().umount2(str(self.target).encode(), MNT_DETACH)
            self.mounted = False
