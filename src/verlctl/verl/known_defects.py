"""The known-defect gate: a data table (``known_defects.yaml`` next to this module) of defects of the stack verl
runs on, matched against the versions read inside the image (``StackVersions``), the device, the mode, the
features and the spec's device list.

The table is data: a new entry needs no code change. ``VERLCTL_KNOWN_DEFECTS`` names another table file
(an updated one, between verlctl releases).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlctl.verl.requirements import version_tuple

TABLE = Path(__file__).with_name("known_defects.yaml")
#: The stack components a condition may name (the keys of the versions read in the image).
COMPONENTS = ("verl", "vllm", "vllm_ascend", "torch", "torch_npu", "cann", "ray", "sglang", "transfer_queue")
_CONDITIONS = {*COMPONENTS, "missing", "device", "modes", "strategy", "engine", "features", "devices_ascending",
               "env_contains", "unless_env", "unless_env_set", "override", "unless_override", "unless_set"}
#: Values of an override that leave verl's "not set" default in place (``unless_set`` does not count them).
_UNSET = ("", "-1", "null", "none", "~")
_OPS = ("==", "!=", ">=", "<=", ">", "<")


class DefectTableError(ValueError):
    """The table is malformed (the message names the entry and the field)."""


@dataclass(frozen=True)
class Defect:
    id: str
    issue: str
    effect: str
    fix: str
    severity: str  # "error" | "warning"
    when: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_versions(self) -> bool:
        """A version condition, or a ``missing`` one: only a stack read in the image can decide it."""
        return "missing" in self.when or any(c in self.when for c in COMPONENTS)


def _in_range(version: str, spec: str) -> bool | None:
    """``version`` within ``spec`` ("==0.9.0", ">=0.8.0,<0.9.1"); None: the version is unreadable."""
    v = version_tuple(version)
    if v is None:
        return None
    for part in spec.split(","):
        part = part.strip()
        op = next(o for o in _OPS if part.startswith(o))
        bound = version_tuple(part[len(op):]) or ()
        n = max(len(v), len(bound))
        a, b = v + (0,) * (n - len(v)), bound + (0,) * (n - len(bound))
        ok = {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]
        if not ok:
            return False
    return True


def _check_range(did: str, key: str, spec: object) -> None:
    if not isinstance(spec, str) or not spec.strip():
        raise DefectTableError(f"known defect {did}: when.{key} must be a version range such as '==0.9.0'")
    for part in spec.split(","):
        part = part.strip()
        op = next((o for o in _OPS if part.startswith(o)), None)
        if op is None or version_tuple(part[len(op):]) is None:
            raise DefectTableError(
                f"known defect {did}: when.{key} part {part!r} is not <op><version> (ops: {', '.join(_OPS)})"
            )


def load(path: Path | None = None) -> list[Defect]:
    """The table at ``path`` (default: ``VERLCTL_KNOWN_DEFECTS``, else the packaged one), validated."""
    import yaml

    p = path or Path(os.environ.get("VERLCTL_KNOWN_DEFECTS") or TABLE)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise DefectTableError(f"known-defect table {p}: {exc}") from None
    rows = doc.get("defects") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise DefectTableError(f"known-defect table {p}: a top-level 'defects:' list is needed")
    out: list[Defect] = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DefectTableError(f"known-defect table {p}: entry {i + 1} is not a mapping")
        did = str(row.get("id") or f"#{i + 1}")
        for k in ("id", "issue", "effect", "fix"):
            if not isinstance(row.get(k), str) or not row[k].strip():
                raise DefectTableError(f"known defect {did}: '{k}' is missing")
        if row.get("severity") not in ("error", "warning"):
            raise DefectTableError(f"known defect {did}: severity must be error or warning")
        when = row.get("when") or {}
        if not isinstance(when, dict):
            raise DefectTableError(f"known defect {did}: 'when' must be a mapping")
        unknown = set(when) - _CONDITIONS
        if unknown:
            raise DefectTableError(
                f"known defect {did}: unknown condition {sorted(unknown)[0]!r} (known: {', '.join(sorted(_CONDITIONS))})"
            )
        for c in COMPONENTS:
            if c in when:
                _check_range(did, c, when[c])
        for c in ("env_contains", "unless_env", "override", "unless_override"):
            if c in when and not isinstance(when[c], dict):
                raise DefectTableError(f"known defect {did}: when.{c} must be a mapping such as {{NAME: value}}")
        for c in ("device", "modes", "strategy", "engine", "features", "missing", "unless_set", "unless_env_set"):
            if c in when and not isinstance(when[c], list):
                raise DefectTableError(f"known defect {did}: when.{c} must be a list such as [npu]")
        unknown_parts = [c for c in when.get("missing", []) if c not in COMPONENTS]
        if unknown_parts:
            raise DefectTableError(
                f"known defect {did}: when.missing names {unknown_parts[0]!r}, not a component read in the image "
                f"(known: {', '.join(COMPONENTS)})"
            )
        out.append(Defect(row["id"], row["issue"], " ".join(row["effect"].split()), row["fix"], row["severity"], when))
    ids = [d.id for d in out]
    if len(set(ids)) != len(ids):
        raise DefectTableError(f"known-defect table {p}: an id repeats")
    return out


def _ascending(devices: list[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(devices))


def _override_values(overrides: list[str]) -> dict[str, str]:
    """``key=value`` extra overrides as the value each key ends with (the last one wins, as in Hydra)."""
    out: dict[str, str] = {}
    for raw in overrides:
        key, _, value = raw.partition("=")
        out[key.lstrip("+~").strip()] = value.strip().strip("'\"")
    return out


def matches(d: Defect, *, versions: dict[str, str | None], device: str, mode: str, features: set[str],
            devices: list[int], env: dict[str, str], engine: str = "vllm",
            overrides: list[str] | None = None, strategy: str | None = None) -> bool:  # fmt: skip
    w = d.when
    if "engine" in w and engine not in w["engine"]:
        return False
    if "strategy" in w and strategy not in w["strategy"]:
        return False
    if "env_contains" in w and not all(str(v) in env.get(k, "") for k, v in w["env_contains"].items()):
        return False
    given = _override_values(overrides or [])
    if "override" in w and not all(given.get(k, "").lower() == str(v).lower() for k, v in w["override"].items()):
        return False
    if "unless_override" in w and all(given.get(k, "").lower() == str(v).lower()
                                      for k, v in w["unless_override"].items()):
        return False
    if "unless_set" in w and any(given.get(k, "").lower() not in _UNSET for k in w["unless_set"]):
        return False
    for c in COMPONENTS:
        if c in w:
            v = versions.get(c)
            if not v or _in_range(v, w[c]) is not True:
                return False  # not read in the image, or outside the range: no claim
    # ``missing``: read in the image (the stack has the component's key) and not installed there. A stack
    # without the key (not read, or read by an older probe) makes no claim.
    if "missing" in w and not all(c in versions and not versions[c] for c in w["missing"]):
        return False
    if "device" in w and device not in w["device"]:
        return False
    if "modes" in w and mode not in w["modes"]:
        return False
    if "features" in w and not set(w["features"]) <= features:
        return False
    if "devices_ascending" in w and _ascending(devices) is not bool(w["devices_ascending"]):
        return False
    if "unless_env_set" in w and any(env.get(k, "").strip() for k in w["unless_env_set"]):
        return False
    return not ("unless_env" in w and all(env.get(k) == str(v) for k, v in w["unless_env"].items()))


def matching(defects: list[Defect], **facts: Any) -> list[Defect]:
    return [d for d in defects if matches(d, **facts)]
