"""Human output shared by plan, check, launch and the wizard: the checklist and the findings.

Secrets are shown masked; every value is shown with its source.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: `list` / `status` print through this module and must start fast
    from verlctl.checks.findings import Finding
    from verlctl.spec.resolve import ResolvedSpec
    from verlctl.verl.compose import TrainingCommand

MASK = "**********"

#: Checklist sections: title -> spec path prefixes.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Hardware", ("device", "cluster.")),
    ("verl", ("verl_version", "algorithm", "mode", "strategy")),
    ("Container", ("container.",)),
    ("Paths", ("paths.",)),
    ("Hyperparameters", ("train.",)),
    ("Features", ("features.",)),
    ("Logging", ("logging.",)),
    ("Recovery", ("recovery.",)),
    ("Extra", ("env", "extra_overrides", "verl_defaults")),
    ("Kubernetes export", ("kubernetes.",)),
)

#: Rows shown per checklist section (a spec with a huge ``env`` map would print for minutes).
MAX_SECTION_ROWS = 60


def masked_env(env: dict[str, str]) -> dict[str, str]:
    from verlctl.verl.environment import SECRET_ENV

    return {k: (MASK if k in SECRET_ENV and v else v) for k, v in env.items()}


def display(value: Any) -> str:
    from pydantic import SecretStr

    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else "(empty)"
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) if value else "[]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) if value else "{}"
    return str(value)


def plan_json(resolved: ResolvedSpec, command: TrainingCommand, findings: list[Finding]) -> dict[str, Any]:
    return {
        "verl_version": command.version,
        "entrypoint": command.entry.module,
        "config_name": command.entry.config_name,
        "overrides": command.override_texts(),
        "command": command.argv(),
        "env": masked_env({**command.env, **command.env_file}),
        "features": {
            n: {"on": s.on and s.applicable, "state": s.label(), "reason": s.reason} for n, s in command.features.items()
        },
        "findings": [f.model_dump(mode="json") for f in findings],
        "values": {
            path: {"value": _json_value(value), "source": str(resolved.origin(path))}
            for path, value in resolved.leaves().items()
        },
    }


def _json_value(value: Any) -> Any:
    from pydantic import SecretStr

    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else None
    try:
        json.dumps(value)
    except TypeError:
        return str(value)
    return value


def print_findings(console: Any, findings: list[Finding]) -> None:
    from rich.markup import escape

    from verlctl.checks.findings import REASSURING

    findings = [f for f in findings if f.code not in REASSURING]
    if not findings:
        console.print("[green]no findings[/green]")
        return
    from rich.text import Text

    from verlctl.checks.findings import Severity

    style = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
    for f in findings:
        where = f" [dim]{escape(f.field)}[/dim]" if f.field else ""
        print_wrapped(console, Text.from_markup(f"[{style[f.severity]}]{f.severity.value}[/] {escape(f.code)}{where}: "
                                                f"{escape(f.message)}"), 0, 2)
        if f.hint:
            print_wrapped(console, Text.from_markup(f"[dim]hint:[/dim] {escape(f.hint)}"), 4, 6)


def print_not_checked(console: Any, lines: list[str]) -> None:
    """The verdict's rules that could not run, one line per reason (``Verdict.not_checked_lines``)."""
    from rich.text import Text

    for line in lines:
        print_wrapped(console, Text(line, style="dim"), 0, 2)


def print_words(console: Any, text: str, first: int = 0, rest: int = 2) -> None:
    """Print plain ``text`` (no markup) as :func:`print_wrapped` does."""
    from rich.text import Text

    print_wrapped(console, Text(text), first, rest)


def print_wrapped(console: Any, text: Any, first: int = 0, rest: int = 2) -> None:
    """Print rich ``text`` wrapped between words only, with a hanging indent: a word longer than the line (a
    path, an image name) stays whole on its own line, never cut or broken (the terminal may fold it)."""
    import re

    from rich.text import Text

    width = max(20, console.width - rest)
    offsets, col = [], 0
    for m in re.finditer(r"\S+\s*", text.plain):
        if col and col + len(m.group().rstrip()) > width:
            offsets.append(m.start())
            col = 0
        col += len(m.group())
    for i, line in enumerate(text.divide(offsets)):
        line.rstrip()
        console.print(Text(" " * (rest if i else first)) + line, highlight=False, crop=False, no_wrap=True,
                      overflow="ignore")


def device_split_line(resolved: ResolvedSpec) -> str | None:
    """The trainer / rollout device split of a disaggregated mode, as one checklist line (None: colocated)."""
    from verlctl.verl.modes import is_disaggregated

    spec = resolved.spec
    if not is_disaggregated(spec.mode):
        return None
    t = spec.train
    nodes = spec.cluster.node_count
    if t.rollout_nodes:
        return (f"device split ({spec.mode}): {nodes - t.rollout_nodes} trainer node(s) x {t.trainer_devices} + "
                f"{t.rollout_nodes} rollout node(s) x {t.rollout_devices} devices "
                f"(train.rollout_nodes: {resolved.origin('train.rollout_nodes')})")
    return (f"device split ({spec.mode}): {t.trainer_devices} trainer + {t.rollout_devices} rollout devices per node "
            f"of {len(spec.cluster.devices)} (train.trainer_devices: {resolved.origin('train.trainer_devices')}; "
            f"train.rollout_devices: {resolved.origin('train.rollout_devices')})")


def print_checklist(console: Any, resolved: ResolvedSpec, command: TrainingCommand | None) -> None:
    """The full checklist (``--verbose``): every value with its source, by section, and every feature with its
    state and why. Lines break between words only: a long path stays whole (on its own line when needed)."""
    from rich.text import Text

    leaves = resolved.leaves()
    split = device_split_line(resolved)
    if split:
        console.print(split, highlight=False)
    for title, prefixes in SECTIONS:
        rows = [(path, value) for path, value in leaves.items() if path.startswith(prefixes) or path in prefixes]
        if not rows:
            continue
        console.print(Text(title, style="bold"))
        width = max(len(p) for p, _ in rows[:MAX_SECTION_ROWS])
        for path, value in rows[:MAX_SECTION_ROWS]:
            print_words(console, f"  {path:<{width}}  {display(value)}  ← {resolved.origin(path)}", 0, 6)
        if len(rows) > MAX_SECTION_ROWS:
            print_words(console, f"  … {len(rows) - MAX_SECTION_ROWS} more (every value is in spec.resolved.yaml "
                        "and in --json)", 0, 6)
    if command is not None:
        console.print(Text("Features", style="bold"))
        width = max((len(n) for n in command.features), default=0)
        for name, st in command.features.items():
            print_words(console, f"  {name:<{width}}  {st.label()}: {st.reason}", 0, width + 4)
        print_words(console, f"verl {command.version}: {command.entry.module} --config-name "
                    f"{command.entry.config_name} ({len(command.overrides)} overrides)", 0, 4)


def print_memory(console: Any, est: Any) -> None:
    """The memory-fit table of plan / check (see verlctl.checks.memory)."""
    from rich.markup import escape

    from verlctl.checks.memory import table_lines

    console.print("[bold]memory fit (worst case: every sequence at max prompt + response)[/bold]", highlight=False)
    for line in table_lines(est):
        console.print("  " + escape(line), highlight=False)


# ------------------------------------------------------------------------------- the checklist at a glance

#: The at-a-glance checklist leaves these out while SwanLab is off (derived paths of a logger that is not used).
_OFF_WHEN_SWANLAB_OFF = ("logging.swanlab.",)


def changed_rows(resolved: ResolvedSpec, skip: tuple[str, ...] = ()) -> list[tuple[str, str, str, str]]:
    """(section, setting, value, source) of every value that differs from the spec's default, in checklist
    order. What equals its default is only in the full table (``--verbose``) and in spec.resolved.yaml."""
    from pydantic import SecretStr

    from verlctl.spec.model import RunSpec
    from verlctl.spec.sources import flatten

    defaults = flatten(RunSpec().model_dump(mode="python"))
    leaves = resolved.leaves()
    swanlab_on = resolved.spec.logging.swanlab.enabled
    rows: list[tuple[str, str, str, str]] = []
    marker = object()
    for title, prefixes in SECTIONS:
        for path, value in leaves.items():
            if not (path.startswith(prefixes) or path in prefixes) or path in skip:
                continue
            if defaults.get(path, marker) == value and not isinstance(value, SecretStr):
                continue
            if isinstance(value, SecretStr) and not value.get_secret_value():
                continue
            if not swanlab_on and path.startswith(_OFF_WHEN_SWANLAB_OFF) and path != "logging.swanlab.enabled":
                continue
            rows.append((title, path, display(value), str(resolved.origin(path))))
    return rows


def _presets_lines(command: TrainingCommand, verl_defaults: list[str]) -> list[str]:
    """What verlctl sets on purpose where verl's default differs (verl/presets.py DECLARED, with its code), and
    the keys the spec leaves at verl's default (``verl_defaults``, e.g. from `verlctl import`)."""
    from verlctl.verl.presets import declared_settings

    out = []
    declared = declared_settings([(o.key, o.text) for o in command.overrides if o.section != "extra"])
    if declared:
        out.append("verlctl sets on purpose (verl's default differs): "
                   + "; ".join(f"{text} [{code}]" for code, text, _why in declared))
    if verl_defaults:
        out.append(f"left at verl's default (verl_defaults): {', '.join(verl_defaults)}")
    return out


def glance_lines(resolved: ResolvedSpec, command: TrainingCommand | None, skip: tuple[str, ...] = ()) -> list[str]:
    """The checklist at a glance, as plain lines (wrapped by the caller between words): verl's entry point,
    the values that differ from the defaults with their source, and the features in one line each."""
    lines: list[str] = []
    spec = resolved.spec
    if command is not None:
        lines.append(f"verl {command.version} ({spec.algorithm}, {spec.mode}, {spec.strategy}): "
                     f"{command.entry.module} --config-name {command.entry.config_name} "
                     f"({len(command.overrides)} overrides)")
        lines += _presets_lines(command, spec.verl_defaults)
    rows = changed_rows(resolved, skip)
    width = max((len(r[1]) for r in rows), default=0)
    section = None
    lines.append("Settings that differ from the defaults" + (", besides the Summary's" if skip else "")
                 + " (every value with its source: --verbose, and spec.resolved.yaml):")
    for title, path, value, source in rows:
        if title != section:
            section = title
            lines.append(f"  {title}")
        lines.append(f"    {path:<{width}}  {value}  ← {source}")
    if not rows:
        lines.append("  none: every value is its default" + (" or in the Summary" if skip else ""))
    if command is not None:
        groups: dict[str, list[str]] = {}
        for name, st in command.features.items():
            groups.setdefault(st.label(), []).append(name)
        lines.append("Features: " + "; ".join(f"{label}: {', '.join(names)}" for label, names in groups.items()))
    return lines


def print_glance(console: Any, resolved: ResolvedSpec, command: TrainingCommand | None,
                 skip: tuple[str, ...] = ()) -> None:
    """The default checklist (``--verbose``: :func:`print_checklist`, the full table); ``skip``: settings shown
    elsewhere (the Summary)."""
    for line in glance_lines(resolved, command, skip):
        indent = len(line) - len(line.lstrip(" "))
        if line.startswith("    "):  # a setting: its continuation lines under the value
            print_words(console, line, 0, indent + 4)
        elif indent == 2 or line.startswith(("Settings", "Features")):
            from rich.text import Text

            head, _, rest = line.partition(":") if line.startswith("Features") else (line, "", "")
            text = Text(head, style="bold") + (Text(":" + rest) if rest else Text(""))
            print_wrapped(console, text, 0, 4)
        else:
            print_words(console, line, 0, 4)
