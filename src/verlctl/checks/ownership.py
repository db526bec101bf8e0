"""What other runs and other users own: a checkpoint directory that a live run writes (review A5).

``start_verl.sh`` holds an exclusive ``flock`` on ``<paths.checkpoints>/.verlctl.lock`` for the whole
attempt (its processes inherit it): a second run on that directory, of this user or another, stops at
once with one line, and this check reports it before anything is started (``verlctl check``, ``launch``).
The lock ends with the run's last process, however it ends: no stale lock after a kill -9.
"""

from __future__ import annotations

import contextlib
import os
import stat

from verlctl.checks.findings import Finding, error
from verlctl.spec.model import RunSpec

CHECKPOINT_LOCK = ".verlctl.lock"


def checkpoint_lock_held(path: str) -> bool | None:
    """Whether a live process holds the checkpoint directory's lock (None: no lock file, or not readable)."""
    import fcntl

    lock = os.path.join(path, CHECKPOINT_LOCK)
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def checkpoint_in_use(spec: RunSpec, users: list[str] | None = None) -> list[Finding]:
    """An error when a live run holds ``paths.checkpoints`` (``users``: the recorded runs that use it)."""
    path = spec.paths.checkpoints
    if not path or not checkpoint_lock_held(path):
        return []
    who = f"run {', '.join(users)}" if users else "a run of another user or state directory"
    return [error(
        "checkpoint_in_use",
        f"the checkpoint directory {path} is in use by a live run ({who}): a second run would resume from "
        "its checkpoints and overwrite them",
        field="paths.checkpoints",
        hint="set paths.checkpoints (and paths.logs) to directories of this run's own, or stop that run first",
    )]
