"""``spec.resolved.yaml``: every value of the spec, with its source as a comment; secrets masked.

The file is itself a valid spec (secret values are written as ``null``), so a run can be repeated from it.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import SecretStr

from verlctl.spec.resolve import ResolvedSpec
from verlctl.verl.compose import TrainingCommand


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000).strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    if text.endswith("..."):
        text = text[:-3].rstrip()
    return text


def resolved_yaml(resolved: ResolvedSpec, command: TrainingCommand) -> str:
    lines = [
        "# verlctl resolved spec: every value and where it came from (default / detected / file / env / flag /",
        "# typed / derived). Secrets are never written (null here); the file is itself a valid spec.",
        f"# verl {command.version}: {command.entry.module} --config-name {command.entry.config_name}",
        "# features: "
        + ", ".join(f"{n}={s.label()}" for n, s in command.features.items()),
    ]
    data = resolved.spec.model_dump(mode="python")
    _emit(data, "", 0, resolved, lines)
    return "\n".join(lines) + "\n"


def _emit(node: dict[str, Any], prefix: str, indent: int, resolved: ResolvedSpec, lines: list[str]) -> None:
    pad = "  " * indent
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key != "env":
            lines.append(f"{pad}{key}:")
            _emit(value, path + ".", indent + 1, resolved, lines)
            continue
        if key == "env" and isinstance(value, dict) and value:
            # Keys are variable names (data, not spec fields): one line each, with its own source.
            lines.append(f"{pad}{key}:")
            for name, text in value.items():
                comment = _comment(str(resolved.origin(f"{path}.{name}")))
                lines.append(f"{pad}  {_scalar(name)}: {_scalar(text)}  # {comment}")
            continue
        origin = resolved.origin(path)
        if isinstance(value, SecretStr):
            shown = "null"
            comment = f"{origin}; secret: {'set, not written' if value.get_secret_value() else 'empty'}"
        else:
            shown = _scalar(value)
            comment = str(origin)
        lines.append(f"{pad}{_scalar(key)}: {shown}  # {_comment(comment)}")


def _comment(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")
