"""Preflight compose: the exact override list composed with the target's own verl + Hydra, before Ray starts.

The script runs inside the container (or on the host) from the verl work dir, so recipe configs resolve.
It needs only the standard library, hydra-core and the verl config tree (verl itself is never imported:
its ``__init__`` loads torch). Key errors surface in seconds instead of after Ray and model loading.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from verlctl.verl.compose import TrainingCommand

SCRIPT = "verlctl_preflight.py"
PAYLOAD = "preflight.json"

SOURCE = r'''"""verlctl preflight: compose the training overrides with this machine's verl + Hydra."""
import importlib.util
import json
import os
import sys

spec = json.load(open(sys.argv[1], encoding="utf-8"))
try:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
except Exception as exc:  # noqa: BLE001
    print("VERLCTL_PREFLIGHT_SKIP hydra is not importable here: %s" % exc)
    sys.exit(0)

workdir = spec["workdir"]
core = os.path.join(workdir, "verl", "trainer", "config")
cfg_dir = os.path.join(workdir, spec["config_dir"])
if not os.path.isdir(cfg_dir) and spec["config_dir"].startswith("verl/"):
    found = importlib.util.find_spec("verl")  # locates the package without importing it
    if found is not None and found.submodule_search_locations:
        root = os.path.dirname(list(found.submodule_search_locations)[0])
        cfg_dir = os.path.join(root, spec["config_dir"])
        core = os.path.join(root, "verl", "trainer", "config")
if not os.path.isdir(cfg_dir):
    print("VERLCTL_PREFLIGHT_FAIL config directory %s not found (is %s the verl work dir?)" % (cfg_dir, workdir))
    sys.exit(3)
os.chdir(workdir)
overrides = list(spec["overrides"]) + ["hydra.searchpath=[file://%s]" % core]
try:
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        cfg = compose(config_name=spec["config_name"], overrides=overrides)
    OmegaConf.to_container(cfg, resolve=True)
except Exception as exc:  # noqa: BLE001
    text = " ".join(str(exc).split())
    print("VERLCTL_PREFLIGHT_FAIL %s: %s" % (type(exc).__name__, text))
    sys.exit(3)
print("VERLCTL_PREFLIGHT_OK %d overrides" % len(spec["overrides"]))
'''


def payload(command: TrainingCommand, workdir: str) -> bytes:
    doc = {
        "workdir": workdir,
        "config_dir": command.entry.config_dir,
        "config_name": command.entry.config_name,
        "overrides": command.override_texts(),
    }
    return json.dumps(doc).encode()


@dataclass
class Outcome:
    ok: bool
    skipped: bool
    message: str
    override: str | None = None


_KEY_IN_MESSAGE = re.compile(r"(?:override|append to config)[^']*'([^']+)'|at '([^']+)'|key '([^']+)'", re.I)


def interpret(code: int, output: str, overrides: list[str]) -> Outcome:
    for line in output.splitlines():
        if line.startswith("VERLCTL_PREFLIGHT_OK"):
            return Outcome(True, False, line)
        if line.startswith("VERLCTL_PREFLIGHT_SKIP"):
            return Outcome(True, True, line.split(" ", 1)[1] if " " in line else "")
        if line.startswith("VERLCTL_PREFLIGHT_FAIL"):
            message = line.split(" ", 1)[1] if " " in line else "composition failed"
            return Outcome(False, False, message, offending_override(message, overrides))
    tail = " ".join(output.split())[-300:]
    return Outcome(False, False, f"the preflight script failed (exit {code}): {tail}")


def offending_override(message: str, overrides: list[str]) -> str | None:
    """The override that Hydra's message names (by its key)."""
    for m in _KEY_IN_MESSAGE.finditer(message):
        key = next(g for g in m.groups() if g)
        for o in overrides:
            k = o.split("=", 1)[0].lstrip("+~")
            if k == key:
                return o
    for o in overrides:
        if o in message:
            return o
    return None
