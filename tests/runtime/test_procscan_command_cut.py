"""runtime/procscan.py: the real gap of the turn-5 mutation sample (seed 7451, docs/development/mutation.md):
the marked processes that `stop` names are listed with their command cut at 200 characters, not more, not
less. Real processes of this test's own (a ``sleep`` carrying a marker); nothing else is touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid

from verlctl.runtime import procscan


def test_a_marked_process_is_listed_with_its_command_cut_at_200_characters() -> None:
    marker = f"mut5-{uuid.uuid4().hex}/1/{uuid.uuid4().hex[:8]}"
    sleep = shutil.which("sleep") or "sleep"
    env = {**os.environ, procscan.MARKER_VAR: marker}
    long_arg = "0" * 300  # sleep adds it to 600 as zero seconds
    started = [subprocess.Popen([sleep, "600", long_arg], env=env, process_group=0),
               subprocess.Popen([sleep, "600"], env=env, process_group=0)]
    try:
        deadline = time.monotonic() + 60
        listed: dict[int, str] = {}
        while time.monotonic() < deadline:
            listed = {m["pid"]: m["cmd"] for m in procscan.markers() if m["marker"] == marker}
            if len(listed) == 2 and all(c.endswith(("0", "600")) for c in listed.values()):
                break
            time.sleep(0.05)
        full = f"{sleep} 600 {long_arg}"
        assert listed[started[0].pid] == full[:200] and len(listed[started[0].pid]) == 200
        assert listed[started[1].pid] == f"{sleep} 600"  # a short command whole
    finally:
        for p in started:
            p.kill()
            p.wait(timeout=60)
