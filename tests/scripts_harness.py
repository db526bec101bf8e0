"""Render scripts from flags and execute them with the test doubles in tests/doubles/bin (test helper)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlctl.plan import make_plan
from verlctl.render.render import Rendered
from verlctl.spec.resolve import load_spec

DOUBLES = Path(__file__).resolve().parent / "doubles" / "bin"


def _free_port() -> int:
    """A free port that Ray does not reserve for itself (its client server, worker range and dashboard agent:
    the spec's ray_port rule refuses those, as `ray start` does)."""
    import socket

    while True:
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = int(sock.getsockname()[1])
        if not (10001 <= port <= 19999 or port == 52365):
            return port


_DIRS = tempfile.TemporaryDirectory(prefix="verlctl-scripts-")  # removed when the test process ends


def render_from(flags: dict[str, Any]) -> Rendered:
    # Checkpoints and logs of its own for every render (not the default under the current directory): the
    # start script locks its checkpoint directory, and tests run in parallel.
    own = tempfile.mkdtemp(dir=_DIRS.name)
    flags = {"cluster.ray_port": _free_port(), "paths.checkpoints": f"{own}/ckpt", "paths.logs": f"{own}/logs",
             **flags}
    plan = make_plan(load_spec(None, flags=flags, environ={}))
    assert plan.ok, [f.line() for f in plan.findings if f.severity.value == "error"]
    return plan.render()


@dataclass
class Recorded:
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.CompletedProcess[str]


def run_start_script(script_dir: Path, record: Path, env_names: list[str], extra_env: dict[str, str] | None = None,
                     timeout: float = 60) -> Recorded:
    env = {
        "PATH": f"{DOUBLES}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": os.environ.get("HOME", "/root"),
        "VERLCTL_TEST_RECORD": str(record),
        "VERLCTL_TEST_ENV_NAMES": " ".join(env_names),
        "VERLCTL_RAY_TMP": str(script_dir / "raytmp"),
        "VERLCTL_TEST_PYTHON": sys.executable,
        **(extra_env or {}),
    }
    proc = subprocess.run(
        ["bash", str(script_dir / "start_verl.sh")], capture_output=True, text=True, env=env, timeout=timeout
    )
    argv: list[str] = []
    rec_env: dict[str, str] = {}
    if record.exists():
        parts = record.read_bytes().decode("utf-8", "surrogateescape").split("\0")
        assert parts[0] == "ARGV"
        i = parts.index("ENV")
        argv = parts[1:i]
        for item in parts[i + 1 :]:
            if item:
                k, v = item.split("=", 1)
                rec_env[k] = v
    return Recorded(argv, rec_env, proc)
