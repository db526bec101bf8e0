"""Human output shared by plan, check, launch and the wizard: the checklist and the findings.

Secrets are shown masked; every value is shown with its source.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import SecretStr

from verlctl.checks.findings import Finding, Severity
from verlctl.spec.resolve import ResolvedSpec
from verlctl.verl.compose import TrainingCommand
from verlctl.verl.environment import SECRET_ENV

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
    ("Extra", ("env", "extra_overrides")),
)

#: Rows shown per checklist section (a spec with a huge ``env`` map would print for minutes).
MAX_SECTION_ROWS = 60


def masked_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if k in SECRET_ENV and v else v) for k, v in env.items()}


def display(value: Any) -> str:
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
    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else None
    try:
        json.dumps(value)
    except TypeError:
        return str(value)
    return value


def print_findings(console: Any, findings: list[Finding]) -> None:
    from rich.markup import escape

    if not findings:
        console.print("[green]no findings[/green]")
        return
    from rich.text import Text

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
    from rich.markup import escape
    from rich.table import Table

    leaves = resolved.leaves()
    split = device_split_line(resolved)
    if split:
        console.print(split, highlight=False)
    for title, prefixes in SECTIONS:
        table = Table(title=title, title_justify="left", show_header=True, header_style="bold", expand=False)
        table.add_column("setting")
        table.add_column("value", overflow="fold")
        table.add_column("source", style="dim")
        hidden = 0
        for path, value in leaves.items():
            if path.startswith(prefixes) or path in prefixes:
                if table.row_count >= MAX_SECTION_ROWS:
                    hidden += 1
                    continue
                table.add_row(escape(path), escape(display(value)), escape(str(resolved.origin(path))))
        if hidden:
            table.add_row(f"… {hidden} more", "(every value is in spec.resolved.yaml and in --json)", "")
        if table.row_count:
            console.print(table)
    if command is not None:
        table = Table(title="Features", title_justify="left", header_style="bold")
        table.add_column("feature")
        table.add_column("state")
        table.add_column("why", overflow="fold")
        for name, st in command.features.items():
            colour = "green" if st.on and st.applicable else "dim"
            table.add_row(escape(name), f"[{colour}]{escape(st.label())}[/]", escape(st.reason))
        console.print(table)
        console.print(
            f"verl {command.version}: [bold]{command.entry.module}[/bold] --config-name {command.entry.config_name} "
            f"({len(command.overrides)} overrides)",
            highlight=False,
        )


def print_memory(console: Any, est: Any) -> None:
    """The memory-fit table of plan / check (see verlctl.checks.memory)."""
    from rich.markup import escape

    from verlctl.checks.memory import table_lines

    console.print("[bold]memory fit (worst case: every sequence at max prompt + response)[/bold]", highlight=False)
    for line in table_lines(est):
        console.print("  " + escape(line), highlight=False)
