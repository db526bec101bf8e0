"""Preflight: the training command composed with the target's own verl + Hydra, before Ray starts.

The script runs inside the container (or on the host) and does what ``run_training.sh`` does: it changes to
the work dir, checks the recipe source file and the extra imports the entry point needs, finds the primary
config next to the module ``python3 -m`` would run, and composes exactly the script's override list (plus
the same computed ``hydra.searchpath`` where the script adds one), so it cannot say OK for a command that
fails to compose. Then, where the entry point calls it and verl imports, verl's own ``validate_config`` runs
on the composed config ("skipped: <why>" otherwise). Key errors surface in seconds instead of after Ray and
model loading.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from verlctl.verl.compose import TrainingCommand
from verlctl.verl.entrypoints import CORE_CONFIG_LOCATOR, IMPORT_HINTS, RECIPE_HINT
from verlctl.verl.packages import package_checks

SCRIPT = "verlctl_preflight.py"
PAYLOAD = "preflight.json"

SOURCE = r'''"""verlctl preflight: compose the training command exactly as run_training.sh runs it, from its work dir."""
import importlib
import importlib.util
import json
import os
import subprocess
import sys

spec = json.load(open(sys.argv[1], encoding="utf-8"))
workdir = spec["workdir"]
try:
    os.chdir(workdir)  # run_training.sh: cd -- "$WORKDIR"
except OSError as exc:
    print("VERLCTL_PREFLIGHT_FAIL the work dir %s is not usable: %s" % (workdir, exc))
    sys.exit(3)
sys.path.insert(0, os.getcwd())  # python3 -m puts the working directory first

if spec.get("source_file") and not os.path.isfile(spec["source_file"]):
    print("VERLCTL_PREFLIGHT_FAIL no %s in %s: %s" % (spec["source_file"], workdir, spec["source_hint"]))
    sys.exit(3)
for name in spec.get("imports", []):
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        text = " ".join(("%s: %s" % (type(exc).__name__, exc)).split())
        print("VERLCTL_PREFLIGHT_FAIL %s does not import (%s): %s" % (name, text, spec["imports_hint"].get(name, "")))
        sys.exit(3)
# Packages that an override value needs (verl/packages.py), looked up without importing them.
for need in spec.get("packages", []):
    if importlib.util.find_spec(need["module"]) is None:
        print("VERLCTL_PREFLIGHT_MISSING " + json.dumps(need))
        sys.exit(3)

try:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
except Exception as exc:  # noqa: BLE001
    print("VERLCTL_PREFLIGHT_SKIP hydra is not importable here: %s" % exc)
    sys.exit(0)

# The primary config sits next to the module that python3 -m runs (hydra.main(config_path="config")).
if spec["config_dir"].startswith("verl/"):
    found = importlib.util.find_spec("verl")  # the package python3 -m would import, located without importing it
    if found is None or not found.submodule_search_locations:
        print("VERLCTL_PREFLIGHT_FAIL python3 finds no verl package from %s" % workdir)
        sys.exit(3)
    cfg_dir = os.path.join(os.path.dirname(list(found.submodule_search_locations)[0]), spec["config_dir"])
else:
    cfg_dir = os.path.join(os.getcwd(), spec["config_dir"])
if not os.path.isdir(cfg_dir):
    print("VERLCTL_PREFLIGHT_FAIL config directory %s not found (is %s the verl work dir?)" % (cfg_dir, workdir))
    sys.exit(3)

overrides = list(spec["overrides"])
if spec.get("core_searchpath"):
    # The same locator, run the same way, as run_training.sh.
    core = subprocess.run([sys.executable, "-c", spec["locator"]], capture_output=True, text=True).stdout.strip()
    if not core or not os.path.isdir(core):
        print("VERLCTL_PREFLIGHT_FAIL python3 finds no installed verl package (its trainer/config) from %s" % workdir)
        sys.exit(3)
    overrides.append("hydra.searchpath=['file://%s']" % core)
try:
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        cfg = compose(config_name=spec["config_name"], overrides=overrides)
    OmegaConf.to_container(cfg, resolve=True)
except Exception as exc:  # noqa: BLE001
    text = " ".join(str(exc).split())
    print("VERLCTL_PREFLIGHT_FAIL %s: %s" % (type(exc).__name__, text))
    sys.exit(3)

# verl's own validator, where the entry point calls it and verl imports here.
if not spec.get("validate"):
    print("VERLCTL_PREFLIGHT_VALIDATE skipped: %s does not call validate_config" % spec["module"])
else:
    try:
        from verl.utils.config import validate_config
    except Exception as exc:  # noqa: BLE001
        why = " ".join(("%s: %s" % (type(exc).__name__, exc)).split())[:300]
        print("VERLCTL_PREFLIGHT_VALIDATE skipped: verl does not import here (%s)" % why)
    else:
        try:
            try:
                from verl.trainer.ppo.utils import need_critic
                use_critic = bool(need_critic(cfg))
            except ImportError:
                use_critic = cfg.algorithm.adv_estimator == "gae"
            use_ref = bool(cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward)
            validate_config(config=cfg, use_reference_policy=use_ref, use_critic=use_critic)
        except Exception as exc:  # noqa: BLE001
            text = " ".join(str(exc).split())
            print("VERLCTL_PREFLIGHT_FAIL verl validate_config: %s: %s" % (type(exc).__name__, text))
            sys.exit(3)
        print("VERLCTL_PREFLIGHT_VALIDATE ok: verl validate_config passed")
print("VERLCTL_PREFLIGHT_OK %d overrides" % len(overrides))
'''


def payload(command: TrainingCommand, workdir: str) -> bytes:
    entry = command.entry
    doc = {
        "workdir": workdir,
        "module": entry.module,
        "config_dir": entry.config_dir,
        "config_name": entry.config_name,
        "overrides": command.override_texts(),
        "source_file": entry.source_file,
        "source_hint": RECIPE_HINT,
        "imports": list(entry.imports),
        "imports_hint": {name: IMPORT_HINTS.get(name, "") for name in entry.imports},
        "packages": [c.as_payload() for c in package_checks(command)],
        "core_searchpath": entry.core_searchpath,
        "locator": CORE_CONFIG_LOCATOR,
        "validate": entry.module == "verl.trainer.main_ppo",
    }
    return json.dumps(doc).encode()


@dataclass
class Outcome:
    ok: bool
    skipped: bool
    message: str
    override: str | None = None
    validation: str = ""  # verl's validate_config: "ok: ..." or "skipped: <why>"
    hint: str | None = None  # the fix, where the preflight knows it (a missing package)
    field: str | None = None  # the spec field it is about


_KEY_IN_MESSAGE = re.compile(r"(?:override|append to config)[^']*'([^']+)'|at '([^']+)'|key '([^']+)'", re.I)


def interpret(code: int, output: str, overrides: list[str]) -> Outcome:
    validation = ""
    for line in output.splitlines():
        if line.startswith("VERLCTL_PREFLIGHT_VALIDATE"):
            validation = line.split(" ", 1)[1] if " " in line else ""
            continue
        if line.startswith("VERLCTL_PREFLIGHT_OK"):
            return Outcome(True, False, line, validation=validation)
        if line.startswith("VERLCTL_PREFLIGHT_SKIP"):
            return Outcome(True, True, line.split(" ", 1)[1] if " " in line else "")
        if line.startswith("VERLCTL_PREFLIGHT_MISSING "):
            try:
                need = json.loads(line.split(" ", 1)[1])
                return Outcome(False, False, str(need["message"]), hint=str(need["hint"]), field=str(need["field"]))
            except (ValueError, KeyError, TypeError):
                pass
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
