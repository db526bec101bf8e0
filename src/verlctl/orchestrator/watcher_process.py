"""Start the watcher as a detached process that survives the terminal (``launch --watch``)."""

from __future__ import annotations

import os
import subprocess
import sys

from verlctl.runtime.records import RunRecord


def spawn_watcher(record: RunRecord, notify_cmd: str | None) -> int:
    argv = [sys.executable, "-m", "verlctl", "watch", record.run_id]
    if notify_cmd:
        argv += ["--notify-cmd", notify_cmd]
    log = os.fdopen(record.open_file("watcher.log", "append"), "ab")  # handed to the child; never through a link
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            close_fds=True,
        )
    finally:
        log.close()
    record.watcher_pid = proc.pid
    record.save()
    record.event("watcher_spawned", pid=proc.pid, notify_cmd=bool(notify_cmd))
    return proc.pid
