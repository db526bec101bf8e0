"""Turn a resolved spec into the training command: feature states, the ordered override list, env."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from verlctl.checks.findings import Finding, error, info, warning
from verlctl.spec.model import RunSpec
from verlctl.spec.resolve import ResolvedSpec
from verlctl.verl import base, environment
from verlctl.verl.entrypoints import DEFAULT_VERSION, Entry, entry_for
from verlctl.verl.features import (
    BY_BIT,
    BY_NAME,
    CONFLICTS,
    FEATURES,
    MASK_BITS,
    canonical_name,
)
from verlctl.verl.hydra_syntax import hydra_value
from verlctl.verl.modes import MODES, version_problem
from verlctl.verl.table import Ctx


@dataclass
class FeatureState:
    name: str
    on: bool
    reason: str
    explicit_on: bool = False  # the user asked for it (mask bit 1, enable list)
    explicit_off: bool = False  # the user turned it off by name (disable list)
    applicable: bool = True
    verl_default: str = ""  # off was asked for, but the target verl cannot turn it off: what stands instead

    @property
    def emits_off(self) -> bool:
        """"Off" is written only when the user turned the feature off; otherwise verl's default stands."""
        return not self.on and self.explicit_off and not self.verl_default

    def label(self) -> str:
        if not self.applicable:
            return "n/a"
        if self.verl_default:
            return "verl default"
        return "on" if self.on else "off"


@dataclass
class OverrideLine:
    key: str
    value: Any
    prefix: str
    section: str  # "data", "model", ..., "feature:<name>", "extra"
    note: str | None = None
    raw: str | None = None  # extra overrides are passed exactly as the user wrote them

    @property
    def text(self) -> str:
        if self.raw is not None:
            return self.raw
        return f"{self.prefix}{self.key}={hydra_value(self.value)}"


@dataclass
class TrainingCommand:
    version: str
    entry: Entry
    overrides: list[OverrideLine]
    features: dict[str, FeatureState]
    env: dict[str, str]  # exported by start_verl.sh (no secrets)
    env_file: dict[str, str]  # the 0600 env file beside the scripts (may hold secrets)
    findings: list[Finding] = field(default_factory=list)

    def override_texts(self) -> list[str]:
        return [o.text for o in self.overrides]

    def argv(self) -> list[str]:
        return [
            "python3",
            "-m",
            self.entry.module,
            "--config-name",
            self.entry.config_name,
            *self.override_texts(),
        ]


def effective_version(resolved: ResolvedSpec, container_version: str | None = None) -> tuple[str, list[Finding]]:
    """The verl version the command is built for: the spec's, or for ``auto`` the one installed in the image
    (``container_version``, read by check and launch). Without it, ``auto`` plans for a default and warns: the
    image decides, and its verl may compose the command differently (F4-8)."""
    v = resolved.spec.verl_version
    if v != "auto":
        return v, []
    if container_version:
        return container_version, []
    mode = MODES.get(resolved.spec.mode)
    planned = mode.versions[-1] if mode is not None and DEFAULT_VERSION not in mode.versions else DEFAULT_VERSION
    why = f" (mode {mode.name} exists there only)" if planned != DEFAULT_VERSION and mode is not None else ""
    return planned, [
        warning(
            "verl_version_auto",
            f"verl_version is auto and the image's verl is not known here: planned for {planned}{why}; check "
            "and launch take the version installed in the image",
            "verl_version",
            "run verlctl check (it reads the image's verl), or set verl_version: 0.7.0 or 0.9.1",
        )
    ]


# --------------------------------------------------------------------------------------------------
# Features


def resolve_features(resolved: ResolvedSpec, version: str) -> tuple[dict[str, FeatureState], list[Finding]]:
    spec = resolved.spec
    fs = spec.features
    findings: list[Finding] = []
    states: dict[str, FeatureState] = {}
    for f in FEATURES:
        if f.default_on:
            why = f"default ({f.category.value} feature)"
        elif f.category.value == "memory":
            why = "default off (memory feature, added on out-of-memory)"
        else:
            why = "default off (optional feature)"
        states[f.name] = FeatureState(f.name, f.default_on, why)

    if fs.mask is not None:
        src = resolved.origin("features.mask")
        for i in range(MASK_BITS):
            feat = BY_BIT[i]
            bit = fs.mask[i] == "1"
            # A 0 bit turns a default-on feature off; for a default-off one it leaves verl's default (seed 1
            # deletes the line).
            states[feat.name] = FeatureState(
                feat.name,
                bit,
                f"mask {fs.mask} bit {i} = {int(bit)} ({src})",
                explicit_on=bit,
                explicit_off=not bit and feat.default_on,
            )

    def names(field_name: str, values: list[str]) -> list[str]:
        out = []
        for raw in values:
            name = canonical_name(raw)
            if name is None:
                close = difflib.get_close_matches(raw.lower(), sorted(BY_NAME), n=1, cutoff=0.5)
                hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(BY_NAME))}"
                findings.append(
                    error("unknown_feature", f"unknown feature {raw!r}", f"features.{field_name}", hint)
                )
                continue
            out.append(name)
        return out

    enabled = names("enable", fs.enable)
    disabled = names("disable", fs.disable)
    for name in sorted(set(enabled) & set(disabled)):
        findings.append(
            error(
                "feature_enable_disable",
                f"feature {name!r} is both enabled and disabled",
                "features",
                "remove it from one of features.enable / features.disable",
            )
        )
    for name in names("verl_default", fs.verl_default):
        if name not in enabled and name not in disabled:
            src = resolved.origin("features.verl_default")
            states[name] = FeatureState(name, False, f"verl's default, nothing written ({src})")
    for name, raw in zip(enabled, [r for r in fs.enable if canonical_name(r) is not None]):
        src = resolved.origin(f"features.enable.{raw}")
        states[name] = FeatureState(name, True, f"enabled ({src})", explicit_on=True)
    for name, raw in zip(disabled, [r for r in fs.disable if canonical_name(r) is not None]):
        st = states[name]
        if fs.mask is not None and BY_NAME[name].bit is not None and st.explicit_on and name not in enabled:
            findings.append(
                error(
                    "feature_mask_disable",
                    f"feature {name!r} is on in the mask {fs.mask} but listed in features.disable",
                    "features",
                    "make the mask bit 0 or remove the name from features.disable",
                )
            )
        src = resolved.origin(f"features.disable.{raw}")
        states[name] = FeatureState(name, False, f"disabled ({src})", explicit_off=True)

    ctx = Ctx(spec, version, {n: s.on for n, s in states.items()})
    for f in FEATURES:
        st = states[f.name]
        if not f.applies.matches(ctx):
            st.applicable = False
            st.reason = f"n/a: {f.not_applicable}"
            if st.explicit_on:
                findings.append(info("feature_not_applicable", f"{f.name}: {f.not_applicable}", "features"))
            continue
        if st.explicit_off and f.cannot_turn_off is not None and f.cannot_turn_off.matches(ctx):
            st.verl_default = f.cannot_turn_off_why
            st.reason = f"{st.reason}; {f.cannot_turn_off_why}"
            findings.append(
                warning(
                    "feature_cannot_turn_off",
                    f"{f.name} stays at {f.cannot_turn_off_why}",
                    "features",
                    "drop it from features.disable, or use a verl version that can turn it off",
                )
            )
        elif not st.on and not st.explicit_off and f.verl_default_on:
            st.verl_default = "verl's default (on): nothing is written"
            st.reason = f"{st.reason}; {st.verl_default}"
        if st.on:
            for req in f.requires:
                if not req.ok.matches(ctx):
                    findings.append(error("feature_prerequisite", req.message, req.field, req.hint))
    for conflict in CONFLICTS:
        a, b = conflict.features
        if states[a].on and states[b].on and states[a].applicable and states[b].applicable:
            findings.append(warning("feature_conflict", conflict.notice, "features"))
    return states, findings


# --------------------------------------------------------------------------------------------------
# Overrides


def build_overrides(resolved: ResolvedSpec, version: str, states: dict[str, FeatureState]) -> list[OverrideLine]:
    spec = resolved.spec
    ctx = Ctx(spec, version, {n: s.on and s.applicable for n, s in states.items()})
    lines: list[OverrideLine] = []
    for row in base.ROWS:
        if row.when.matches(ctx):
            for ov in row.overrides:
                lines.append(OverrideLine(ov.key, ov.resolve(ctx), ov.prefix, row.section, row.note))
    for f in FEATURES:
        st = states[f.name]
        if not st.applicable or not (st.on or st.emits_off):
            continue  # off by default: nothing is written, verl's default stands
        for emit in f.emits:
            if not emit.when.matches(ctx) or st.on not in emit.states:
                continue
            for ov in emit.overrides:
                lines.append(OverrideLine(ov.key, ov.resolve(ctx, st.on), ov.prefix, f"feature:{f.name}", emit.note))
            if not emit.overrides and emit.note:
                # A note-only row (e.g. a seed key that this version lacks) joins the feature's own lines.
                own = [line for line in lines if line.section == f"feature:{f.name}"]
                if own:
                    own[-1].note = f"{own[-1].note}; {emit.note}" if own[-1].note else emit.note
                else:
                    lines.append(OverrideLine("", None, "", f"feature:{f.name}", emit.note, raw=""))
    if spec.verl_defaults:
        lines = _leave_to_verl(lines, spec.verl_defaults, {n for n, on in ctx.features.items() if on})
    for raw in spec.extra_overrides:
        key = raw.split("=", 1)[0].lstrip("+~")
        lines.append(OverrideLine(key, None, "", "extra", None, raw=raw))
    return _dedupe(lines)


def _leave_to_verl(lines: list[OverrideLine], keys: list[str], features_on: set[str]) -> list[OverrideLine]:
    """Drop verlctl's preset lines for the spec's ``verl_defaults`` keys (verl's default stands); a key that
    presets.py does not allow to be left to verl keeps its line (``verl_defaults_key`` says so)."""
    from verlctl.verl.presets import leave_to_verl

    left = {k for k in keys if leave_to_verl(k, features_on)}
    return [line for line in lines if line.key not in left]


def _dedupe(lines: list[OverrideLine]) -> list[OverrideLine]:
    """Later settings of the same key win (features over base rows, extra overrides over all)."""
    last: dict[str, int] = {}
    for i, line in enumerate(lines):
        if line.key:
            last[line.key] = i
    out: list[OverrideLine] = []
    pending_note: str | None = None
    pending_section = ""
    for i, line in enumerate(lines):
        if not line.key:
            pending_note, pending_section = line.note, line.section
            continue
        if line.section != pending_section:
            pending_note = None  # a note stays within its own section
        if last[line.key] != i:
            continue
        if pending_note and line.note is None:
            line.note = pending_note
        elif pending_note and line.note:
            line.note = f"{line.note}; {pending_note}"
        pending_note = None
        out.append(line)
    return out


# --------------------------------------------------------------------------------------------------
# Whole command


def build_command(resolved: ResolvedSpec, container_version: str | None = None) -> TrainingCommand:
    version, findings = effective_version(resolved, container_version)
    states, ffind = resolve_features(resolved, version)
    findings += ffind
    mode = resolved.spec.mode
    problem = version_problem(mode, version)
    if problem:
        findings.append(
            error(
                "mode_version",
                problem if MODES[mode].recipe_only else f"{problem} (verl 0.7.0 has no V1 trainer; it ships in the "
                "0.9.1 wheel)",
                "mode",
                f"set verl_version: {MODES[mode].versions[-1]} (an image with that verl), or mode: sync / "
                "one_step_off_policy",
            )
        )
        mode = "sync"  # a placeholder entry: the error keeps the plan from being rendered
    entry = entry_for(version, resolved.spec.algorithm, mode, resolved.spec.strategy)
    overrides = [OverrideLine(g.split("=", 1)[0], None, "", "config group", raw=g) for g in entry.group_overrides]
    overrides += build_overrides(resolved, version, states)
    ctx = Ctx(resolved.spec, version, {n: s.on and s.applicable for n, s in states.items()})
    env = {**environment.device_env(ctx), **environment.proxy_env(ctx), **resolved.spec.env}
    env_file = environment.swanlab_env(ctx)
    if resolved.spec.logging.swanlab.enabled and resolved.spec.logging.swanlab.mode != "cloud":
        api = resolved.spec.logging.swanlab.api_key
        if api is not None and api.get_secret_value():
            findings.append(
                info(
                    "swanlab_key_unused",
                    f"SwanLab mode {resolved.spec.logging.swanlab.mode}: the API key is not exported "
                    "(verl would try to log in with it)",
                    "logging.swanlab.api_key",
                )
            )
    findings += _verl_defaults_findings(resolved.spec, {n for n, s in states.items() if s.on and s.applicable})
    return TrainingCommand(version, entry, overrides, states, env, env_file, findings)


def _verl_defaults_findings(spec: RunSpec, features_on: set[str]) -> list[Finding]:
    from verlctl.verl.presets import LEAVE_TO_VERL, leave_to_verl

    out = []
    for key in spec.verl_defaults:
        if leave_to_verl(key, features_on):
            continue
        known = LEAVE_TO_VERL.get(key)
        why = (f"only with the {known.needs_feature} feature on" if known is not None and known.needs_feature
               else "verlctl needs its own value for it")
        out.append(error("verl_defaults_key", f"verl_defaults: {key} cannot be left at verl's default ({why})",
                         "verl_defaults", f"remove {key} from verl_defaults (left to verl: "
                         f"{', '.join(sorted(LEAVE_TO_VERL)[:4])}, ...: see verlctl/verl/presets.py)"))
    return out
