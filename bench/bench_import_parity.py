"""Official-script parity of ``verlctl import``: verl's own NPU launch scripts -> spec -> verlctl's command.

For every fixture under ``tests/fixtures/official-scripts/<version>/`` (verl's NPU/Ascend launch scripts of
v0.7.0 and v0.9.0 and one of ``main``, see ``parity.yaml`` there): import it, build verlctl's command for the imported spec,
compose the script's own override list and verlctl's against the same verl config tree (0.7.0, or 0.9.1 for
the v0.9.0 scripts; Hydra's compose API, as in the tests) and compare the composed configs on every key the
script sets. Outcome per script: equivalent / differs (which keys; the reason, reviewed, is data in
``parity.yaml``) / cannot import (why). Prints the table and the share of in-scope scripts that are
equivalent or differ only for a recorded reason; and every key verlctl ADDS whose composed value differs from
what verl would use for the script anyway, split into the ones verlctl declares and shows in the plan
(verlctl/verl/presets.py DECLARED) and unmarked ones (goal 0).

    .venv/bin/python bench/bench_import_parity.py [--json]
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "official-scripts"
PARITY = FIXTURES / "parity.yaml"
sys.path.insert(0, str(ROOT / "tests"))

#: The verl config tree each fixture folder is composed against (v0.9.0 scripts: the cached 0.9.1 tree).
TREE = {"0.7.0": "0.7.0", "0.9.0": "0.9.1", "main": "0.9.1"}
#: Values for the variables the scripts read from their environment (the same for both commands).
ENVIRON = {"HOME": "/home/verl", "PWD": "/verl"}
#: Where each entry point's Hydra config lives (relative to the verl tree), and its default config name.
ENTRY_CONFIG = {
    "verl.trainer.main_ppo": ("verl/trainer/config", "ppo_trainer"),
    "recipe.dapo.main_dapo": ("recipe/dapo/config", "dapo_trainer"),
    "recipe.one_step_off_policy.main_ppo": ("recipe/one_step_off_policy/config", "one_step_off_ppo_trainer"),
    "verl.experimental.one_step_off_policy.main_ppo": (
        "verl/experimental/one_step_off_policy/config",
        "one_step_off_ppo_trainer",
    ),
    "verl.experimental.fully_async_policy.fully_async_main": (
        "verl/experimental/fully_async_policy/config",
        "fully_async_ppo_trainer",
    ),
}
_MISSING = object()
#: Keys whose composed value verl itself replaces at start-up, so a difference there is not one at run time:
#: key -> (verlctl's value, why).
RUNTIME_SET = {
    "trainer.device": ("npu", "verl/utils/device.py auto_set_device (main_ppo.py main): on an NPU host every "
                              "trainer.device other than cpu becomes npu"),
}


@dataclass
class Outcome:
    script: str  # relative to FIXTURES
    status: str  # equivalent | differs | cannot_import
    reason: str = ""
    differing: dict[str, str] = field(default_factory=dict)  # key -> "script X, verlctl Y"
    compared: int = 0
    extras: int = 0
    seconds: float = 0.0
    # Keys verlctl ADDS (the script does not set them) whose composed value differs from what verl would use
    # for the script anyway: key -> "verl X, verlctl Y". Goal: none.
    added_changes: dict[str, str] = field(default_factory=dict)
    added: int = 0  # keys verlctl adds
    # Of added_changes: the ones verlctl makes on purpose and shows in the plan (verlctl/verl/presets.py DECLARED,
    # "verlctl sets on purpose ... [code]"): key -> code. The rest are unmarked changes (goal 0).
    declared: dict[str, str] = field(default_factory=dict)

    @property
    def unmarked(self) -> dict[str, str]:
        return {k: v for k, v in self.added_changes.items() if k not in self.declared}


def load_expectations() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(PARITY.read_text(encoding="utf-8"))


def fixtures() -> list[str]:
    """The fixtures measured on their own: every script but the ones another hands over to (``helpers``)."""
    helpers = set(load_expectations().get("helpers") or {})
    return sorted(rel for p in FIXTURES.rglob("*.sh") if (rel := str(p.relative_to(FIXTURES))) not in helpers)


def _get(tree: Any, key: str) -> Any:
    node = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return bool(a == b)


def run_one(rel: str) -> Outcome:
    from verlctl.errors import VerlctlError
    from verlctl.importer import import_script
    from verlctl.inputs.shell_script import UNRESOLVED
    from verlctl.inputs.verl_script import split_override

    import verlcompose

    t0 = time.perf_counter()
    folder = rel.split("/", 1)[0]
    tree = TREE[folder]
    # What the user gives where the script reads it from its environment (parity.yaml `vars`: e.g. a variable
    # an `if` tests that the script never sets; import refuses rather than guess it).
    # `device`: the user's --device for a script that does not show its device (import asks rather than guess).
    recorded = load_expectations()["in_scope"].get(rel) or {}
    given = recorded.get("vars") or {}
    try:
        result = import_script(FIXTURES / rel, tree, {**ENVIRON, **given}, recorded.get("device"))
    except VerlctlError as exc:
        return Outcome(rel, "cannot_import", exc.message.replace(str(FIXTURES / rel) + ": ", ""),
                       seconds=time.perf_counter() - t0)
    cmd = result.parsed.command
    cfg_dir, default_name = ENTRY_CONFIG[cmd.module]
    name = (cmd.config_name or default_name).removesuffix(".yaml")
    unresolved = [o for o in cmd.overrides if UNRESOLVED in o]
    original = [o for o in cmd.overrides if UNRESOLVED not in o]
    ours_name, ours = _split_argv(result.command_argv)
    original = [o for o in original if not o.startswith("hydra.")]  # Hydra's own settings, not config keys
    if cmd.module.startswith("recipe.") and tree != "0.7.0":
        return Outcome(rel, "cannot_import", f"{cmd.module} is not part of verl {tree} (recipe/ moved to the "
                       "verl-recipe repository): no config tree to compose the script's command against",
                       seconds=time.perf_counter() - t0)
    try:
        orig_cfg, failing = _compose_dropping(tree, cfg_dir, name, original)
    except Exception as exc:  # noqa: BLE001 - Hydra raises many types; the message is the result
        return Outcome(rel, "cannot_import", f"the script's own command does not compose against verl {tree}: "
                       f"{_first_line(exc)[:160]}", seconds=time.perf_counter() - t0)
    try:
        our_cfg = verlcompose.compose(tree, result.config_dir, ours_name, ours)
    except Exception as exc:  # noqa: BLE001
        return Outcome(rel, "differs", "verlctl's command does not compose", {"(compose)": _first_line(exc)[:200]},
                       seconds=time.perf_counter() - t0)
    differing: dict[str, str] = dict(failing)
    compared = len(failing)
    for raw in original:
        ov = split_override(raw)
        if ov is None or ov.key in failing:
            continue
        a, b = _get(orig_cfg, ov.key), _get(our_cfg, ov.key)
        if ov.prefix == "~":
            compared += 1
            if (a is _MISSING) != (b is _MISSING):
                differing[ov.key] = "deleted by the script, not by verlctl"
            continue
        if a is _MISSING and b is _MISSING:
            continue  # a config-group selection (e.g. model_engine=megatron), not a key of the config
        compared += 1
        if a is _MISSING or b is _MISSING or not _same(a, b):
            show = (lambda v: "(absent)" if v is _MISSING else json.dumps(v, default=str)[:80])  # noqa: E731
            differing[ov.key] = f"script {show(a)}, verlctl {show(b)}"
    for raw in unresolved:
        ov = split_override(raw)
        key = ov.key if ov else raw.split("=", 1)[0]
        differing[key] = "value needs a command's output (not run by import)"
    status = "differs" if differing else "equivalent"
    script_keys = {ov.key for ov in map(split_override, cmd.overrides) if ov is not None}
    added_changes: dict[str, str] = {}
    added = 0
    for raw in ours:
        ov = split_override(raw)
        if ov is None or ov.key in script_keys:
            continue
        added += 1
        a, b = _get(orig_cfg, ov.key), _get(our_cfg, ov.key)
        if a is _MISSING and b is _MISSING:
            continue  # a config-group selection
        if ov.key in RUNTIME_SET and _same(b, RUNTIME_SET[ov.key][0]):
            continue
        if a is _MISSING or b is _MISSING or not _same(a, b):
            show = (lambda v: "(absent)" if v is _MISSING else json.dumps(v, default=str)[:80])  # noqa: E731
            added_changes[ov.key] = f"verl {show(a)}, verlctl {show(b)}"
    from verlctl.verl.presets import DECLARED

    declared = {k: DECLARED[k].code for k in added_changes if k in DECLARED}
    return Outcome(rel, status, "", differing, compared, len(result.extras), time.perf_counter() - t0,
                   added_changes, added, declared)


def _split_argv(argv: list[str]) -> tuple[str, list[str]]:
    """verlctl's ``python3 -m MODULE [--config-path P] --config-name N overrides...`` -> (N, overrides).
    ``hydra.*`` overrides (e.g. a search path) are left to the compose helper, which sets its own."""
    rest = argv[argv.index("-m") + 2 :]
    name = ""
    overrides: list[str] = []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in ("--config-name", "-cn", "--config-path", "-cp"):
            if a in ("--config-name", "-cn"):
                name = rest[i + 1]
            i += 2
            continue
        if a.startswith(("--config-name=", "-cn=")):
            name = a.split("=", 1)[1]
        elif not a.startswith("-") and not a.startswith("hydra."):
            overrides.append(a)
        i += 1
    return name, overrides


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _compose_dropping(tree: str, cfg_dir: str, name: str, overrides: list[str]) -> tuple[Any, dict[str, str]]:
    """Compose the script's overrides; one that verl's config rejects (a key this verl lacks, a value Hydra
    cannot parse) is left out and reported, and the rest composed again (at most 10 times)."""
    import re

    from verlctl.inputs.verl_script import split_override

    import verlcompose

    todo = list(overrides)
    failing: dict[str, str] = {}
    for _ in range(10):
        try:
            return verlcompose.compose(tree, cfg_dir, name, todo), failing
        except Exception as exc:  # noqa: BLE001
            msg = _first_line(exc)
            m = re.search(r"(?:override|at|parsing override) '([^']+)'", msg)
            culprit = None
            if m:
                for raw in todo:
                    ov = split_override(raw)
                    if raw == m.group(1) or (ov is not None and ov.key == m.group(1)):
                        culprit = raw
                        break
            if culprit is None:
                raise
            todo.remove(culprit)
            ov = split_override(culprit)
            failing[ov.key if ov else culprit] = f"the script's override fails in verl {tree}: {msg[:120]}"
    raise RuntimeError("too many failing overrides")


def classify(outcome: Outcome, expected: dict[str, Any]) -> str:
    """equivalent | justified (differs only where parity.yaml records why) | differs | cannot import
    | refused (cannot import a script whose command verl itself cannot run on the target version)."""
    if outcome.status == "equivalent":
        return "equivalent"
    if outcome.status == "cannot_import":
        if (expected or {}).get("runs_on_target_verl") is False:
            return "refused"
        return "cannot import"
    reasons = (expected or {}).get("differs", {}) or {}
    return "justified" if set(outcome.differing) <= set(reasons) else "differs"


def main(argv: list[str]) -> int:
    data = load_expectations()
    scope = data["in_scope"]
    rows = []
    t0 = time.perf_counter()
    for rel in fixtures():
        if rel not in scope:
            continue
        out = run_one(rel)
        rows.append((out, classify(out, scope[rel])))
    total = len(rows)
    good = sum(1 for _, c in rows if c in ("equivalent", "justified"))
    if "--json" in argv:
        doc = {
            "scripts": [
                {"script": o.script, "result": c, "reason": o.reason, "differing": o.differing,
                 "keys_compared": o.compared, "extra_overrides": o.extras, "keys_added": o.added,
                 "adds_that_change_behaviour": o.added_changes, "declared_adds": o.declared}
                for o, c in rows
            ],
            "in_scope": total,
            "equivalent_or_justified": good,
            "percent": round(100.0 * good / max(1, total), 1),
            "refused_runs_nowhere": sum(1 for _, c in rows if c == "refused"),
            "scripts_with_behaviour_changing_adds": sum(1 for o, _ in rows if o.added_changes),
            "behaviour_changing_adds": sum(len(o.added_changes) for o, _ in rows),
            "declared_adds": sum(len(o.declared) for o, _ in rows),
            "unmarked_behaviour_changing_adds": sum(len(o.unmarked) for o, _ in rows),
            "out_of_scope": data.get("out_of_scope", {}),
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    print(f"{'script':<86} {'result':<14} keys  extra  added  changing")
    for o, c in rows:
        print(f"{o.script:<86} {c:<14} {o.compared:>4}  {o.extras:>5}  {o.added:>5}  {len(o.added_changes):>8}")
        for key, what in o.added_changes.items():
            mark = f"  (declared: {o.declared[key]})" if key in o.declared else ""
            print(f"    added {key}: {what}{mark}")
        reasons = (scope.get(o.script) or {}).get("differs", {}) or {}
        for key, what in o.differing.items():
            why = reasons.get(key)
            print(f"    {key}: {what}" + (f"\n      why: {why}" if why else "  (no recorded reason)"))
        if o.reason:
            print(f"    {o.reason}")
            expected = (scope.get(o.script) or {}).get("cannot_import")
            if expected:
                print(f"      why: {expected[1]}")
    print(f"\nout of scope ({len(data.get('out_of_scope', {}))}):")
    for rel, why in sorted((data.get("out_of_scope") or {}).items()):
        print(f"  {rel}: {why}")
    counts: dict[str, int] = {}
    for _, c in rows:
        counts[c] = counts.get(c, 0) + 1
    refused = counts.get("refused", 0)
    print(f"\nin scope: {total} scripts; " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"equivalent or justified: {good}/{total} = {100.0 * good / max(1, total):.1f} %")
    changing = [o for o, _ in rows if o.added_changes]
    print(f"adds that change behaviour: {sum(len(o.added_changes) for o in changing)} keys in {len(changing)} of "
          f"{total} scripts")
    declared = [o for o in changing if o.declared]
    unmarked = [o for o in changing if o.unmarked]
    codes: dict[str, int] = {}
    for o in declared:
        for code in o.declared.values():
            codes[code] = codes.get(code, 0) + 1
    print(f"  declared by verlctl and shown in the plan: {sum(len(o.declared) for o in declared)} keys in "
          f"{len(declared)} scripts (" + ", ".join(f"{c} {n}" for c, n in sorted(codes.items())) + ")")
    print(f"  unmarked: {sum(len(o.unmarked) for o in unmarked)} keys in {len(unmarked)} scripts (goal 0)")
    print(f"of the {total - refused} whose command verl itself can run on the target version: "
          f"{good}/{total - refused} = {100.0 * good / max(1, total - refused):.1f} % ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
