"""``verlctl import``: an existing verl launch script -> a run spec that reproduces its command.

The script is parsed (never run: :mod:`verlctl.inputs.shell_script`), its overrides are mapped onto spec
fields and features (:mod:`verlctl.inputs.verl_script`), and verlctl's own command for that spec is built.
Every script override whose key verlctl does not emit with the same value is kept, exactly as the script
passes it, in ``extra_overrides`` (appended last, so it wins); every exported variable that verlctl does
not set to the same value is kept in ``env``. What verlctl adds that the script did not set is listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlctl.errors import SpecError, VerlctlError
from verlctl.inputs.shell_script import UNRESOLVED, ParsedScript, ScriptError, parse_file
from verlctl.inputs.verl_script import (
    ABSENT,
    ABSENT_IN_ENTRY,
    NAME_FIELDS,
    ImportFailure,
    Mapped,
    ScriptOverride,
    map_script,
    parse_value,
    same_value,
    split_override,
)


@dataclass
class ImportResult:
    parsed: ParsedScript
    mapped: Mapped
    document: dict[str, Any]  # the spec to write
    covered: list[ScriptOverride]  # reproduced by verlctl's command from spec fields
    extras: list[str]  # kept verbatim in extra_overrides
    unresolved: list[ScriptOverride]  # values that need a command the import does not run
    env_kept: dict[str, str]
    env_covered: list[str]
    added: list[str] = field(default_factory=list)  # keys verlctl sets that the script does not
    notes: list[str] = field(default_factory=list)
    command_argv: list[str] = field(default_factory=list)
    config_dir: str = ""
    # (finding code, KEY=VALUE, why): what verlctl sets on purpose that the script does not (verl/presets.py)
    declared: list[tuple[str, str, str]] = field(default_factory=list)


def _resolved(tree: dict[str, Any], sources: dict[str, str]) -> Any:
    from verlctl.spec.resolve import ResolvedSpec, derive, validate_tree
    from verlctl.spec.sources import Layer, Source, flatten, merge_layers

    layer = Layer(Source.FILE, tree, {p: sources.get(p, "imported script") for p in flatten(tree)})
    merged, origins = merge_layers([layer])
    spec = validate_tree(merged, origins)
    resolved = ResolvedSpec(spec, dict(origins))
    derive(resolved)
    return resolved


def _drop(tree: dict[str, Any], path: str) -> bool:
    node: Any = tree
    parts = path.split(".")
    for p in parts[:-1]:
        if not isinstance(node, dict) or p not in node:
            return False
        node = node[p]
    if isinstance(node, dict) and parts[-1] in node:
        del node[parts[-1]]
        return True
    return False


def _validated(mapped: Mapped) -> Any:
    """Resolve the mapped tree; a value the spec rejects is left out (its override then stays extra)."""
    tree = mapped.tree
    for _ in range(64):
        try:
            return _resolved(tree, mapped.sources)
        except SpecError as exc:
            path = exc.field or ""
            candidates = [p for p in mapped.sources if p == path or p.startswith(path + ".")] if path else []
            if not candidates or not any(_drop(tree, p) for p in candidates):
                raise ImportFailure(
                    f"{mapped.module}: the script's values do not make a valid spec: {exc.message}"
                ) from None
            for p in candidates:
                for ov in mapped.overrides:
                    if ov.mapped_to == p:
                        ov.mapped_to = None
                        if p in NAME_FIELDS:
                            mapped.dropped[ov.raw] = f"not a valid name for verlctl ({exc.message}): verlctl's is used"
                if not any(raw == mapped.sources[p] for raw in mapped.dropped):
                    mapped.notes.append(f"{p} not set from `{mapped.sources[p]}`: {exc.message}")
    raise ImportFailure(f"{mapped.module}: the script's values do not make a valid spec")


def _leave_default_features(mapped: Mapped) -> None:
    """G2: a default-on feature whose keys the script does not set stays at verl's default: it is listed in
    ``features.verl_default`` (nothing written), never turned on by verlctl's defaults."""
    from verlctl.inputs.verl_script import FEATURE_KEYS
    from verlctl.verl.features import FEATURES

    feats = mapped.tree.setdefault("features", {})
    mentioned = set(feats.get("enable", [])) | set(feats.get("disable", []))
    mentioned |= {FEATURE_KEYS[o.key] for o in mapped.overrides if o.key in FEATURE_KEYS}
    left = [f.name for f in FEATURES if f.default_on and f.name not in mentioned]
    if left:
        feats["verl_default"] = left
        mapped.sources["features.verl_default"] = "the script does not set them: verl's defaults stand"
    if not feats:
        del mapped.tree["features"]


def _spec_defaults_from_verl(mapped: Mapped) -> None:
    """G3: a spec field whose verlctl default differs from verl's takes verl's where the script does not set the
    key (e.g. verl trains on 1024 prompts a step unless told otherwise: verl/presets.py SPEC_FROM_VERL)."""
    from verlctl.verl.presets import SPEC_FROM_VERL

    keys = {o.key for o in mapped.overrides}
    for key, (path, default) in SPEC_FROM_VERL.items():
        if key not in keys:
            *parents, leaf = path.split(".")
            node = mapped.tree
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = default
            mapped.sources[path] = f"verl's default (the script does not set {key})"


def _emitted_value(text: str) -> Any:
    ov = split_override(text)
    return None if ov is None else parse_value(ov.value_text)


def keep_entry(name: str, module: str, algorithm: str, mode: str, strategy: str, version: str,
                notes: list[str]) -> str:
    """The algorithm whose verlctl entry point is the script's own on every verl the spec may run on (the version,
    or each supported one for ``auto``): an import never moves a script to another entry point, config and work
    dir. DAPO's reward manager on ``verl.trainer.main_ppo`` (verl's PPO trainer, without the recipe's dynamic
    sampling) stays there as ``grpo`` with the script's DAPO overrides; another mismatch is refused."""
    from verlctl.verl.entrypoints import SUPPORTED_VERSIONS, entry_for

    versions = SUPPORTED_VERSIONS if version == "auto" else (version,)

    def modules(alg: str) -> set[str]:
        out: set[str] = set()
        for v in versions:
            try:
                out.add(entry_for(v, alg, mode, strategy).module)
            except ValueError:
                continue  # the mode does not exist on that version: the plan says so
        return out

    ours = modules(algorithm)
    if ours <= {module}:
        return algorithm
    if module == "recipe.dapo.main_dapo" and version == "0.9.1":
        notes.append(
            "recipe.dapo.main_dapo is not part of verl 0.9.1 (recipe/ moved to the verl-recipe repository): the "
            "plan runs DAPO on verl.trainer.main_ppo, whose core trainer does DAPO's dynamic sampling "
            "(algorithm.filter_groups); its config is ppo_trainer, not dapo_trainer"
        )
        return algorithm
    if algorithm == "dapo" and module == "verl.trainer.main_ppo" and modules("grpo") <= {module}:
        notes.append(
            "the script runs DAPO's reward manager on verl.trainer.main_ppo (verl's PPO trainer with its "
            "ppo_trainer config; no dynamic sampling): imported as algorithm grpo so that the plan keeps that entry "
            f"point (verlctl's dapo would run {', '.join(sorted(ours - {module}))}: another entry point, config "
            "and work dir); the script's DAPO settings (reward manager, clip ratios, overlong buffer) stay its "
            "own overrides"
        )
        return "grpo"
    raise ImportFailure(
        f"{name}: verlctl would run this {algorithm} / {mode} / {strategy} script on {', '.join(sorted(ours))}, "
        f"not on its own {module}: not imported"
    )


def _commands(resolved: Any) -> list[Any]:
    """verlctl's command for the spec on each verl it may run on: its version, or (``auto``) every supported
    version that has its mode, since the image decides at check/launch time (F4-8)."""
    from verlctl.verl.compose import build_command
    from verlctl.verl.entrypoints import SUPPORTED_VERSIONS
    from verlctl.verl.modes import MODES

    if resolved.spec.verl_version != "auto":
        return [build_command(resolved)]
    mode = MODES.get(resolved.spec.mode)
    return [build_command(resolved, v) for v in SUPPORTED_VERSIONS if mode is None or v in mode.versions]


def import_script(path: str | Path, version: str | None = None, environ: dict[str, str] | None = None,
                  device: str | None = None) -> ImportResult:
    """Parse, map and reconcile a launch script. Raises ScriptError/ImportFailure with one line.

    ``device`` (npu / gpu) is the user's answer where the script does not show its device."""
    from verlctl.verl.compose import build_command
    from verlctl.verl.modes import V1_SUCCESSOR, legacy_trainer_note

    parsed = parse_file(path, environ)
    mapped = map_script(parsed, version, device)
    tree = mapped.tree
    tree["algorithm"] = keep_entry(parsed.name, mapped.module, tree["algorithm"], tree["mode"], tree["strategy"],
                                   mapped.version, mapped.notes)
    _leave_default_features(mapped)
    _spec_defaults_from_verl(mapped)
    resolved = _validated(mapped)
    commands = _commands(resolved)
    # An override counts as reproduced only where every command the spec may run emits it with that value.
    per_command = [{line.key: line for line in c.overrides if line.key} for c in commands]

    covered: list[ScriptOverride] = []
    extras: list[str] = []
    unresolved: list[ScriptOverride] = []
    notes = list(mapped.notes)
    absent = {**ABSENT.get(mapped.version, {}), **ABSENT_IN_ENTRY.get((mapped.version, mapped.module), {})}
    last = {ov.key: i for i, ov in enumerate(mapped.overrides)}
    for i, ov in enumerate(mapped.overrides):
        if last[ov.key] != i:
            # Hydra applies a script's overrides in order: a key set again later (e.g. by a wrapper's "$@")
            # takes the later value; this one must not come back as an extra override after it.
            notes.append(f"{ov.raw} not imported: the script sets {ov.key} again later (the last one counts)")
            continue
        if ov.unresolved:
            unresolved.append(ov)
            continue
        if ov.key in absent:
            mapped.dropped[ov.raw] = absent[ov.key]
        elif mapped.version == "auto":
            for v, why in _absent_elsewhere(ov.key, mapped.module):
                notes.append(f"{ov.raw} kept (verl_version auto), but {why}: on an image with verl {v} the launch's "
                             f"compose check stops there; import with --verl-version {v} to leave it out")
        if ov.raw in mapped.dropped:
            notes.append(f"{ov.raw} not imported: {mapped.dropped[ov.raw]}")
            continue
        lines = [e.get(ov.key) for e in per_command]
        if all(line is not None and same_value(_emitted_value(line.text), parse_value(ov.value_text))
               for line in lines):
            covered.append(ov)
            continue
        if "\n" in ov.raw:
            notes.append(f"{ov.key}: a value with a line break cannot be passed as an extra override; not imported")
            continue
        extras.append(ov.raw)
    env_kept: dict[str, str] = {}
    env_covered: list[str] = []
    for name, value in mapped.env.items():
        if all(c.env.get(name) == value for c in commands):
            env_covered.append(name)
        else:
            env_kept[name] = value

    document = dict(mapped.tree)
    left = sorted({k for c in commands for k in _left_to_verl(c, {o.key for o in mapped.overrides})})
    if left:
        document["verl_defaults"] = left
        mapped.sources["verl_defaults"] = "the script does not set them: verl's defaults stand"
    if env_kept:
        document["env"] = env_kept
    if extras:
        document["extra_overrides"] = extras
    final = _validated(Mapped(document, mapped.overrides, {}, mapped.version, mapped.module, mapped.config_name,
                              notes, mapped.sources))
    final_command = build_command(final)
    script_keys = {o.key for o in mapped.overrides}
    finals = _commands(final)
    added = list(dict.fromkeys(line.text for c in finals for line in c.overrides
                               if line.key and line.key not in script_keys))
    declared = list(dict.fromkeys(d for c in finals for d in _declared(c, script_keys)))
    notes += [f"verlctl sets {text} because {why} [{code}]" for code, text, why in declared]
    legacy = legacy_trainer_note(final.spec.mode, final_command.version)
    if legacy:
        notes.append(f"{legacy} (verlctl plan --set mode={V1_SUCCESSOR} plans it)")
    for ov in unresolved:
        shown = ov.raw.replace(UNRESOLVED, "")
        notes.append(f"{ov.key} not imported: `{shown[:100]}` needs a command's output (verlctl runs nothing)")
    return ImportResult(
        parsed, mapped, document, covered, extras, unresolved, env_kept, env_covered, added, notes,
        final_command.argv(), final_command.entry.config_dir, declared,
    )


def _absent_elsewhere(key: str, module: str) -> list[tuple[str, str]]:
    """(version, why) for each supported verl whose config lacks a key the script sets (``auto`` keeps it)."""
    from verlctl.verl.entrypoints import SUPPORTED_VERSIONS

    out = []
    for v in SUPPORTED_VERSIONS:
        gone = {**ABSENT.get(v, {}), **ABSENT_IN_ENTRY.get((v, module), {})}
        if key in gone:
            out.append((v, gone[key]))
    return out


def _left_to_verl(command: Any, script_keys: set[str]) -> list[str]:
    """G3: the preset keys verlctl's command writes that the script leaves to verl (verl/presets.py)."""
    from verlctl.verl.presets import leave_to_verl

    on = {n for n, s in command.features.items() if s.on and s.applicable}
    return sorted({line.key for line in command.overrides
                   if line.key and line.section != "extra" and line.key not in script_keys
                   and leave_to_verl(line.key, on)})


def _declared(command: Any, script_keys: set[str]) -> list[tuple[str, str, str]]:
    """(code, KEY=VALUE, why) for each setting verlctl makes on purpose that the script does not."""
    from verlctl.verl.presets import declared_settings

    return declared_settings([(line.key, line.text) for line in command.overrides
                              if line.key and line.section != "extra" and line.key not in script_keys])


# --------------------------------------------------------------------------------------------------
# Writing the spec


def spec_text(result: ImportResult, source: str) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def represent_list(dumper: Any, data: list[Any]) -> Any:
        flow = bool(data) and all(isinstance(v, int) and not isinstance(v, bool) for v in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)

    Dumper.add_representer(list, represent_list)
    header = [
        f"# verlctl run spec imported from {' '.join(source.split())[:200]} by `verlctl import`.",
        "# Script overrides that verlctl's command does not reproduce are kept verbatim in extra_overrides",
        "# (appended last); `verlctl plan -c FILE` shows the command and every value's source.",
    ]
    body = yaml.dump(result.document, Dumper=Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True,
                     width=4096)
    return "\n".join(header) + "\n" + body


def write_atomic(path: Path, text: str, force: bool) -> None:
    """Write ``text`` to ``path`` via a new temporary file and rename: a planted symlink is replaced, never
    followed; an existing file is replaced only with ``force``."""
    from verlctl.files import name_problem, shown_name, write_file

    problem = name_problem(path)
    if problem:
        raise VerlctlError(f"cannot write {shown_name(path)}: {problem}")
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir() and not path.is_symlink():
        raise VerlctlError(f"{path} is a directory: give a file name, e.g. {path / 'run.yaml'}")
    if not parent.is_dir():
        raise VerlctlError(f"cannot write {path}: directory {parent} does not exist")
    if (path.exists() or path.is_symlink()) and not force:
        raise VerlctlError(f"{path} exists: nothing was written (pass --force to replace it)")
    try:
        write_file(path, text.encode("utf-8"), 0o644)  # the one atomic, no-follow writer
    except OSError as exc:
        raise VerlctlError(f"cannot write {path}: {exc.strerror or exc}") from None


__all__ = ["ImportFailure", "ImportResult", "ScriptError", "import_script", "spec_text", "write_atomic"]
