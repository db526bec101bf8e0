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

import contextlib
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verlctl.detect.check_probes import VERSIONS_SNIPPET, TargetLookup, parse_versions
from verlctl.runtime.executor import Executor, FileSpec, HostExecutor
from verlctl.verl.compose import TrainingCommand
from verlctl.verl.entrypoints import CORE_CONFIG_LOCATOR, IMPORT_HINTS, RECIPE_HINT
from verlctl.verl.packages import package_checks

SCRIPT = "verlctl_preflight.py"
PAYLOAD = "preflight.json"

_BODY = r'''
import importlib
import importlib.util
import subprocess

spec = json.load(open(sys.argv[1], encoding="utf-8"))
workdir = spec["workdir"]
try:
    os.chdir(workdir)  # run_training.sh: cd -- "$WORKDIR"
except OSError as exc:
    print("VERLCTL_PREFLIGHT_FAIL the work dir %s is not usable: %s" % (workdir, exc))
    sys.exit(3)
sys.path.insert(0, os.getcwd())  # python3 -m puts the working directory first

if spec.get("source_file") and not os.path.isfile(spec["source_file"]):
    print("VERLCTL_PREFLIGHT_FAIL_SOURCE no %s in %s: %s" % (spec["source_file"], workdir, spec["source_hint"]))
    sys.exit(3)
# Packages that an override value needs (verl/packages.py), looked up without importing them (fast: first).
for need in spec.get("packages", []):
    if importlib.util.find_spec(need["module"]) is None:
        print("VERLCTL_PREFLIGHT_MISSING " + json.dumps(need))
        sys.exit(3)


def check_imports():
    # The entry's imports (slow: they load torch), after the fast composition.
    print("VERLCTL_PREFLIGHT_STEP the imports of the entry point", flush=True)
    for name in spec.get("imports", []):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001
            text = " ".join(("%s: %s" % (type(exc).__name__, exc)).split())
            print("VERLCTL_PREFLIGHT_FAIL %s does not import (%s): %s" % (name, text, spec["imports_hint"].get(name, "")))
            sys.exit(3)


print("VERLCTL_PREFLIGHT_STEP the Hydra composition of the overrides", flush=True)
try:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
except Exception as exc:  # noqa: BLE001
    check_imports()
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
check_imports()

# verl's own validator, where the entry point calls it and verl imports here.
if not spec.get("validate"):
    print("VERLCTL_PREFLIGHT_VALIDATE skipped: %s does not call validate_config" % spec["module"])
else:
    print("VERLCTL_PREFLIGHT_STEP importing verl for its validate_config", flush=True)
    try:
        from verl.utils.config import validate_config
    except Exception as exc:  # noqa: BLE001
        why = " ".join(("%s: %s" % (type(exc).__name__, exc)).split())[:300]
        print("VERLCTL_PREFLIGHT_VALIDATE skipped: verl does not import here (%s)" % why)
    else:
        print("VERLCTL_PREFLIGHT_STEP verl's validate_config", flush=True)
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

#: The look-up script: the stack's versions first (one line, ``VERLCTL_PREFLIGHT_VERSIONS {json}``), then the
#: preflight, fastest steps first (the work dir, the recipe file, the packages an override needs, the Hydra
#: composition, then what imports torch: the entry's imports, verl's validate_config), each announced by a ``VERLCTL_PREFLIGHT_STEP``
#: line so that a look-up ended by its time bound says how far it got.
SOURCE = (
    '"""verlctl preflight: compose the training command exactly as run_training.sh runs it, from its work dir."""\n'
    + "import glob, json, os, sys\n"
    + "sys.stdout.write('VERLCTL_PREFLIGHT_VERSIONS ')\n"
    + VERSIONS_SNIPPET
    + "sys.stdout.flush()\n"
    + _BODY
)


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
    return json.dumps(doc, sort_keys=True).encode()


def payload_sha(command: TrainingCommand, workdir: str) -> str:
    """What a look-up looked up: launch does not look again for the same command in the same target."""
    import hashlib

    return hashlib.sha256(payload(command, workdir)).hexdigest()[:16]


#: What interpret() gives (kept as a name: the preflight's outcome is the look-up's fact).
Outcome = TargetLookup

_KEY_IN_MESSAGE = re.compile(r"(?:override|append to config)[^']*'([^']+)'|at '([^']+)'|key '([^']+)'", re.I)


def interpret(code: int, output: str, overrides: list[str], where: str = "the target",
              timed_out_s: float | None = None) -> TargetLookup:
    """The look-up's output as a fact. ``timed_out_s``: the script was ended by its time bound after that many
    seconds (what it printed until then still counts: the versions, how far it got)."""
    validation, step, versions = "", "", None
    for line in output.splitlines():
        if line.startswith("VERLCTL_PREFLIGHT_VERSIONS "):
            versions = parse_versions(line.split(" ", 1)[1], where)
            continue
        if line.startswith("VERLCTL_PREFLIGHT_STEP "):
            step = line.split(" ", 1)[1].strip()
            continue
        if line.startswith("VERLCTL_PREFLIGHT_VALIDATE"):
            validation = line.split(" ", 1)[1] if " " in line else ""
            continue
        if line.startswith("VERLCTL_PREFLIGHT_OK"):
            return TargetLookup(where=where, ok=True, message=line, validation=validation, versions=versions)
        if line.startswith("VERLCTL_PREFLIGHT_SKIP"):
            return TargetLookup(where=where, ok=True, skipped=True, versions=versions,
                                message=line.split(" ", 1)[1] if " " in line else "")
        if line.startswith("VERLCTL_PREFLIGHT_MISSING "):
            try:
                need = json.loads(line.split(" ", 1)[1])
                return TargetLookup(where=where, kind="package", message=str(need["message"]),
                                    hint=str(need["hint"]), field=str(need["field"]), versions=versions)
            except (ValueError, KeyError, TypeError):
                pass
        if line.startswith("VERLCTL_PREFLIGHT_FAIL"):
            source = line.startswith("VERLCTL_PREFLIGHT_FAIL_SOURCE")
            message = line.split(" ", 1)[1] if " " in line else "composition failed"
            return TargetLookup(where=where, kind="source" if source else "failed", message=message,
                                override=None if source else offending_override(message, overrides),
                                versions=versions)
    if timed_out_s is not None:
        doing = f" (it was at {step})" if step else ""
        return TargetLookup(where=where, ok=True, finished=False, versions=versions,
                            message=f"the look-up did not finish within {timed_out_s:g} s{doing}")
    tail = " ".join(output.split())[-300:]
    return TargetLookup(where=where, kind="failed", versions=versions,
                        message=f"the preflight script failed (exit {code}): {tail}")


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


# ------------------------------------------------------------------------------------------ running it

#: Where ``check`` puts the script in a running container (removed afterwards); launch uses the run's dir.
LOOKUP_DIR_PREFIX = "/tmp/verlctl-lookup-"


def _timed(where: str, command: TrainingCommand, workdir: str, timeout: float,
           run: Callable[[list[str]], tuple[int, str]], files_dir: str) -> TargetLookup:
    """Run the script (``run(argv)`` -> exit code, output) under ``timeout`` and read what it printed."""
    t0 = time.monotonic()
    argv = ["timeout", "--kill-after=5", str(int(max(1, timeout))), "python3", "-u", f"{files_dir}/{SCRIPT}",
            f"{files_dir}/{PAYLOAD}"]
    code, out = run(argv)
    took = time.monotonic() - t0
    look = interpret(code, out, command.override_texts(), where,
                     timed_out_s=timeout if code in (124, 137) else None)
    return look.model_copy(update={"payload_sha": payload_sha(command, workdir), "seconds": round(took, 2)})


def files(command: TrainingCommand, workdir: str) -> dict[str, FileSpec]:
    return {PAYLOAD: FileSpec(payload(command, workdir), 0o644), SCRIPT: FileSpec(SOURCE.encode(), 0o644)}


def look_up(ex: Executor, command: TrainingCommand, workdir: str, files_dir: str | None = None,
            timeout: float = 180.0) -> TargetLookup:
    """The look-up through an executor (a running container, or this host with ``container.python_env``).
    ``files_dir``: where the script goes (launch: the run's scripts dir, kept); None: a temp dir, removed."""
    import secrets
    import shutil
    import tempfile

    temp = files_dir is None
    here = isinstance(ex, HostExecutor)
    if files_dir is not None:
        where_files = files_dir
    elif here:
        where_files = tempfile.mkdtemp(prefix="verlctl-lookup-")
    else:
        where_files = f"{LOOKUP_DIR_PREFIX}{secrets.token_hex(6)}"
    try:
        ex.put_files(where_files, files(command, workdir))

        def run(argv: list[str]) -> tuple[int, str]:
            if isinstance(ex, HostExecutor):
                return _run_here(argv[3:], ex.environ(), timeout)
            res = ex.run(argv[3:], timeout=timeout)  # the executor bounds it with the same `timeout` command
            return res.code, res.out + res.err

        return _timed(_where(ex), command, workdir, timeout, run, where_files)
    finally:
        if temp and here:
            shutil.rmtree(where_files, ignore_errors=True)
        elif temp:
            with contextlib.suppress(Exception):
                ex.run(["rm", "-rf", "--", where_files], timeout=30)


def _run_here(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run on this host in its own session, bounded; on the bound, that session is killed and what it printed
    until then is kept (exit 124, as ``timeout`` gives)."""
    import signal
    import subprocess

    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    except OSError as exc:
        return 127, f"{argv[0]}: {exc.strerror or exc}"
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the session this call started, nothing else
        out, _ = proc.communicate()
        return 124, out.decode(errors="replace")


def _where(ex: Executor) -> str:
    return "this host's python3" if ex.kind == "host" else ex.describe()


def look_up_in_image(client: Any, image: str, mounts: list[tuple[str, str]], command: TrainingCommand,
                     workdir: str, timeout: float) -> TargetLookup:
    """The look-up in a throw-away container of ``image`` (removed afterwards, whatever happens), with the
    mounts launch would give its container (read-only, those that exist here), no network."""
    import shutil
    import tempfile

    where = f"image {image} (a throw-away container)"
    d = tempfile.mkdtemp(prefix="verlctl-lookup-")
    try:
        os.chmod(d, 0o755)
        for name, spec in files(command, workdir).items():
            Path(d, name).write_bytes(spec.content)
            os.chmod(Path(d, name), spec.mode)
        volumes = {host: {"bind": target, "mode": "ro"} for host, target in mounts if os.path.exists(host)}
        volumes[d] = {"bind": d, "mode": "ro"}

        def run(argv: list[str]) -> tuple[int, str]:
            c = client.containers.run(image, entrypoint=argv[:1], command=argv[1:], detach=True,
                                      working_dir=workdir, network_mode="none", volumes=volumes,
                                      labels={"io.verlctl.lookup": "1"})
            try:
                try:
                    code = int(c.wait(timeout=timeout + 30).get("StatusCode", 1))
                except Exception:  # noqa: BLE001 - the engine did not say it ended: count it as the bound
                    code = 124
                return code, c.logs(stdout=True, stderr=True).decode(errors="replace")
            finally:
                with contextlib.suppress(Exception):
                    c.remove(force=True)

        return _timed(where, command, workdir, timeout, run, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
