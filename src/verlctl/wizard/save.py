"""Write the answers as a run spec YAML that ``verlctl launch -c FILE --yes`` repeats.

The file holds every value that did not come from a default or a derivation (typed, detected, file, env,
flag), so it does not depend on this machine's detection or this shell's variables. It never holds the
SwanLab API key (the launcher writes that only into the run's 0600 env file; a later launch reads it from
``SWANLAB_API_KEY``), nor a proxy URL with credentials in it. Written with mode 0644, atomically, and an
existing file is replaced only when ``overwrite`` says so.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

from verlctl.errors import VerlctlError
from verlctl.spec.resolve import ResolvedSpec
from verlctl.spec.sources import Source, set_path

SECRET_PATHS = frozenset({"logging.swanlab.api_key"})
PROXY_PATHS = frozenset({"container.proxy.http", "container.proxy.https", "container.proxy.no_proxy"})
KEPT_SOURCES = (Source.TYPED, Source.DETECTED, Source.FILE, Source.ENV, Source.FLAG)


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
        if origin.source not in KEPT_SOURCES:
            continue
        if path in SECRET_PATHS or isinstance(value, SecretStr):
            if isinstance(value, SecretStr) and value.get_secret_value():
                notes.append(f"{path} is not written: export SWANLAB_API_KEY before `verlctl launch`")
            continue
        if path in PROXY_PATHS and _has_credentials(value):
            notes.append(f"{path} holds credentials and is not written: export it as "
                         f"{path.rsplit('.', 1)[-1]}_proxy instead")
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
        "# Values left at their defaults are not listed; `verlctl plan -c FILE` shows every value and its source.",
    ]
    header += [f"# note: {n}" for n in notes]
    body = yaml.dump(doc, Dumper=dumper_cls, sort_keys=False, default_flow_style=False, allow_unicode=True) if doc else "{}\n"
    return "\n".join(header) + "\n" + body, notes


def save_spec(path: Path, resolved: ResolvedSpec, overwrite: Callable[[Path], bool] | None = None) -> list[str]:
    """Write the spec to ``path`` (mode 0644). An existing file is replaced only if ``overwrite(path)`` is
    true; otherwise nothing is written and a one-line error is raised. Returns the notes."""
    path = Path(path)
    if path.is_dir():
        raise VerlctlError(f"{path} is a directory: give a file name, e.g. {path / 'run.yaml'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise VerlctlError(f"cannot write {path}: directory {parent} does not exist")
    exists = path.exists() or path.is_symlink()
    if exists and (overwrite is None or not overwrite(path)):
        raise VerlctlError(f"{path} exists: nothing was written (choose another file with -o, or agree to "
                           "overwrite it)")
    text, notes = spec_yaml(resolved, path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise VerlctlError(f"cannot write {path}: {exc.strerror or exc}") from None
    return notes
