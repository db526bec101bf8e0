"""Write the answers as a run spec YAML that ``verlctl launch -c FILE --yes`` repeats.

The file holds every value that did not come from a default or a derivation (typed, detected, file, env,
flag), and every answer (also one equal to a default), so it does not depend on this machine's detection or this shell's variables. It never holds the
SwanLab API key (the launcher writes that only into the run's 0600 env file; a later launch reads it from
``SWANLAB_API_KEY``), nor a proxy URL with credentials in it. Written with mode 0644, atomically, and an
existing file is replaced only when ``overwrite`` says so.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

from verlctl.errors import VerlctlError
from verlctl.spec.resolve import ResolvedSpec
from verlctl.spec.sources import Source, get_path, set_path

SECRET_PATHS = frozenset({"logging.swanlab.api_key"})
PROXY_PATHS = frozenset({"container.proxy.http", "container.proxy.https", "container.proxy.no_proxy"})
KEPT_SOURCES = (Source.TYPED, Source.DETECTED, Source.FILE, Source.ENV, Source.FLAG)
#: Written whatever their source: what the run is (its verl, algorithm, mode, strategy, device) and where its
#: logs go (derived from the current directory: another directory at launch would put them elsewhere).
ALWAYS_PATHS = frozenset({"verl_version", "algorithm", "mode", "strategy", "device", "paths.logs"})


def _has_credentials(url: Any) -> bool:
    if not isinstance(url, str):
        return False
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:
        return True


def spec_document(resolved: ResolvedSpec) -> tuple[dict[str, Any], list[str]]:
    """The nested spec to write, and notes on what was left out (never the left-out values)."""
    doc: dict[str, Any] = {}
    notes: list[str] = []
    for path, value in resolved.leaves().items():
        origin = resolved.origin(path)
        if origin.source not in KEPT_SOURCES and path not in resolved.answered and not (
                path in ALWAYS_PATHS and value is not None):
            continue
        if path in SECRET_PATHS or isinstance(value, SecretStr):
            if isinstance(value, SecretStr) and value.get_secret_value():
                notes.append(f"{path} is not written: export SWANLAB_API_KEY before `verlctl launch`")
            continue
        if path in PROXY_PATHS and _has_credentials(value):
            notes.append(f"{path} holds credentials and is not written: give the proxy as scheme://host:port, "
                         "without credentials")
            continue
        set_path(doc, path, value)
    return doc, notes


def _dumper() -> Any:
    import yaml

    class Dumper(yaml.SafeDumper):
        """Short lists of numbers (device ids) on one line; everything else in block style."""

    def represent_list(dumper: Any, data: list[Any]) -> Any:
        flow = bool(data) and all(isinstance(v, int) and not isinstance(v, bool) for v in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)

    Dumper.add_representer(list, represent_list)
    return Dumper


def spec_yaml(resolved: ResolvedSpec, target: Path | None = None) -> tuple[str, list[str]]:
    import yaml

    doc, notes = spec_document(resolved)
    dumper_cls = _dumper()
    name = str(target) if target is not None else "FILE"
    header = [
        "# verlctl run spec (written by the verlctl wizard).",
        f"# Repeat this run with: verlctl launch -c {name} --yes",
        "# Every answer is listed (also one equal to a default), and what the run is (verl version, algorithm,",
        "# mode, strategy, device, logs); other defaults are not: `verlctl plan -c FILE --verbose` shows every value.",
    ]
    by_fix: dict[str, list[str]] = {}  # the values a fix the wizard offered set, not the person's own answers
    for path in resolved.leaves():
        origin = resolved.origin(path)
        if origin.source is Source.TYPED and origin.detail and get_path(doc, path) is not None:
            by_fix.setdefault(origin.detail, []).append(path)
    header += [f"# set by {label}: {', '.join(paths)}" for label, paths in by_fix.items()]
    header += [f"# note: {n}" for n in notes]
    body = yaml.dump(doc, Dumper=dumper_cls, sort_keys=False, default_flow_style=False, allow_unicode=True) if doc else "{}\n"
    return "\n".join(header) + "\n" + body, notes


class SpecFileExists(VerlctlError):
    """The file exists and overwriting it was declined: nothing was written."""


def target_problem(path: Path) -> str | None:
    """Why ``path`` cannot be the spec file (a name too long, a directory, a missing directory), or None."""
    from verlctl.files import name_problem, shown_name

    problem = name_problem(path)
    if problem:
        return f"cannot write {shown_name(path)}: {problem}"
    if path.is_dir():
        return f"{path} is a directory: give a file name, e.g. {path / 'run.yaml'}"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"cannot write {path}: directory {parent} does not exist"
    return None


def save_spec(path: Path, resolved: ResolvedSpec, overwrite: Callable[[Path], bool] | None = None) -> list[str]:
    """Write the spec to ``path`` (mode 0644). An existing file is replaced only if ``overwrite(path)`` is
    true; otherwise nothing is written and :class:`SpecFileExists` is raised. Any write error is a one-line
    :class:`VerlctlError`. Returns the notes."""
    path = Path(path)
    problem = target_problem(path)
    if problem:
        raise VerlctlError(problem)
    exists = path.exists() or path.is_symlink()
    if exists and (overwrite is None or not overwrite(path)):
        raise SpecFileExists(f"{path} exists: nothing was written (choose another file with -o, agree to "
                             "overwrite it, or pass --force)")
    text, notes = spec_yaml(resolved, path)
    _write_atomic(path, text, 0o644)
    return notes


def _write_atomic(path: Path, text: str, mode: int) -> None:
    from verlctl.files import write_file

    try:
        write_file(path, text.encode("utf-8"), mode)  # the one atomic writer: replaces a symlink, never follows it
    except OSError as exc:
        raise VerlctlError(f"cannot write {path}: {exc.strerror or exc}") from None


def recovery_dir() -> Path:
    from verlctl.runtime.records import state_root

    return state_root() / "wizard"


INTERRUPTED_NAME = "interrupted.yaml"


def interrupted_path() -> Path:
    """Where the answers of an interrupted wizard are kept (one file: the newest interruption)."""
    return recovery_dir() / INTERRUPTED_NAME


def save_interrupted(resolved: ResolvedSpec) -> Path:
    """Keep the answers given before Ctrl-C (a spec without secrets, mode 0600) for the next `verlctl init`."""
    text, _ = spec_yaml(resolved, None)
    d = recovery_dir()
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise VerlctlError(f"cannot create {d}: {exc.strerror or exc}") from None
    _write_atomic(d / INTERRUPTED_NAME, text, 0o600)
    return d / INTERRUPTED_NAME


def save_recovery(resolved: ResolvedSpec) -> Path:
    """Keep the answers when the spec file cannot be written: a spec (no secrets) in the state directory, or,
    when that cannot be written either, in the temporary directory. Raises VerlctlError if neither works."""
    import time

    text, _ = spec_yaml(resolved, None)
    name = f"answers-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.yaml"
    reasons = []
    for d in (recovery_dir(), Path(tempfile.gettempdir())):
        try:
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            _write_atomic(d / name, text, 0o600)
            return d / name
        except (OSError, VerlctlError) as exc:
            reasons.append(exc.message if isinstance(exc, VerlctlError) else f"{d}: {exc.strerror or exc}")
    raise VerlctlError("; ".join(reasons))
