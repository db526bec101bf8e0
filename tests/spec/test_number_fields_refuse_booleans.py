"""A number field of the spec takes no true/false (pydantic would take them as 1/0): `train.lr=true` is a
mistake, not a rate of 1.0. Every number field of the model, found by walking it, is one line naming the field."""

from __future__ import annotations

import typing
from pathlib import Path

from pydantic import BaseModel

from conftest import run_cli_many
from fault_support import one_line_error, write_base


def _number_fields(model: type[BaseModel], prefix: str = "") -> dict[str, str]:
    """path -> "a number" / "a whole number" for each field whose type is float or int (optional or not)."""
    out: dict[str, str] = {}
    for name, info in model.model_fields.items():
        t = info.annotation
        if typing.get_origin(t) is typing.Annotated:
            t = typing.get_args(t)[0]
        args = [typing.get_args(a)[0] if typing.get_origin(a) is typing.Annotated else a
                for a in (typing.get_args(t) if typing.get_origin(t) is not None else (t,))]
        if isinstance(t, type) and issubclass(t, BaseModel):
            out.update(_number_fields(t, f"{prefix}{name}."))
        elif bool not in args and int in args:
            out[prefix + name] = "a whole number"
        elif bool not in args and float in args:
            out[prefix + name] = "a number"
    return out


def test_every_number_field_refuses_true_and_false(tmp_path: Path) -> None:
    from verlctl.spec.model import RunSpec

    fields = _number_fields(RunSpec)
    floats = sorted(p for p, kind in fields.items() if kind == "a number")
    assert {"train.lr", "train.rollout_memory_utilization", "cluster.host_memory_gib"} <= set(floats), floats
    base = write_base(tmp_path)
    cases = [(path, value) for path in sorted(fields) for value in ("true", "false")]
    results = run_cli_many([["plan", "-c", str(base), "--set", f"{path}={value}"] for path, value in cases])
    for (path, value), res in zip(cases, results, strict=True):
        line = one_line_error(res)
        assert line.startswith(f"error: {path}: ") and f"must be {fields[path]}, not {value}" in line, line


def test_numbers_are_still_taken(tmp_path: Path) -> None:
    base = write_base(tmp_path)
    res = run_cli_many([["plan", "-c", str(base), "--set", "train.lr=1e-6", "--set",
                         "train.rollout_memory_utilization=0.5", "--json"]])[0]
    assert res.code == 0, res.err
