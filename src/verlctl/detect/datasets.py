"""Parquet datasets: schema and row count, checked against what verl's RLHFDataset reads.

verl reads, per row: ``prompt`` as a chat list (``list<struct<role: string, content: string>>``),
``data_source`` (a string, which picks the reward function), ``reward_model`` (a struct with
``ground_truth``), and optionally ``ability`` and ``extra_info``.

pyarrow is optional. The schema is read by :data:`PARQUET_CHECK_SNIPPET`, a self-contained
program (stdlib + pyarrow) that prints JSON; :func:`inspect_parquet` runs the same code in this
process when pyarrow is importable, and the launch code can run it inside the training container
(``python3 -c SNIPPET FILE...``, see :func:`parquet_check_argv`) and read its output back with
:func:`parse_parquet_check_output`. Both paths end in the same :class:`DatasetInfo`.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from verlctl.checks.findings import Finding, Severity, error, info, warning
from verlctl.detect.common import ProbeModel, Unavailable, UnavailableCode, unavailable

PARQUET_CHECK_SNIPPET = r"""
import json, os, stat, sys

def _describe_type(t):
    import pyarrow as pa
    d = {"type": str(t), "kind": "other"}
    if pa.types.is_struct(t):
        d["kind"] = "struct"
        d["fields"] = [dict(name=t.field(i).name, **_describe_type(t.field(i).type)) for i in range(t.num_fields)]
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        d["kind"] = "list"
        d["item"] = dict(name="item", **_describe_type(t.value_type))
    elif pa.types.is_dictionary(t):
        inner = _describe_type(t.value_type)
        d["kind"] = inner["kind"]
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _t: False)(t):
        d["kind"] = "string"
    elif pa.types.is_integer(t):
        d["kind"] = "int"
    elif pa.types.is_floating(t):
        d["kind"] = "float"
    elif pa.types.is_boolean(t):
        d["kind"] = "bool"
    elif pa.types.is_map(t):
        d["kind"] = "map"
    elif pa.types.is_null(t):
        d["kind"] = "null"
    return d

def describe(path):
    out = {"path": path}
    try:
        st = os.stat(path)
    except OSError as e:
        out["error"] = "cannot stat: %s" % (e.strerror or e)
        return out
    if not stat.S_ISREG(st.st_mode):
        out["error"] = "not a regular file"
        return out
    out["size_bytes"] = st.st_size
    try:
        import pyarrow.parquet as pq
    except ImportError:
        out["error"] = "pyarrow not installed"
        out["error_code"] = "missing_dependency"
        return out
    try:
        pf = pq.ParquetFile(path)
        schema = pf.schema_arrow
        out["num_rows"] = pf.metadata.num_rows
        out["num_row_groups"] = pf.metadata.num_row_groups
        out["columns"] = [dict(name=f.name, **_describe_type(f.type)) for f in schema]
    except Exception as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    return out

if __name__ == "__main__":
    print(json.dumps([describe(p) for p in sys.argv[1:]]))
"""

ColumnKind = Literal["struct", "list", "string", "int", "float", "bool", "map", "null", "other"]


class ParquetColumn(BaseModel):
    name: str
    type: str  # the Arrow type as pyarrow prints it
    kind: ColumnKind = "other"
    fields: list[ParquetColumn] = []  # struct children
    item: ParquetColumn | None = None  # list element

    def field(self, name: str) -> ParquetColumn | None:
        return next((f for f in self.fields if f.name == name), None)


class DatasetInfo(ProbeModel):
    path: str
    size_bytes: int | None = None
    num_rows: int | None = None
    num_row_groups: int | None = None
    columns: list[ParquetColumn] = []
    findings: list[Finding] = []
    checked_in: Literal["host", "container"] = "host"

    @property
    def verl_ok(self) -> bool:
        return not any(f.severity is Severity.ERROR for f in self.findings)

    def column(self, name: str) -> ParquetColumn | None:
        return next((c for c in self.columns if c.name == name), None)


class DatasetFile(BaseModel):
    path: str
    size_bytes: int | None = None


def _is_chat_list(col: ParquetColumn) -> bool:
    if col.kind != "list" or col.item is None or col.item.kind != "struct":
        return False
    role, content = col.item.field("role"), col.item.field("content")
    return role is not None and content is not None and role.kind == "string" and content.kind == "string"


def check_verl_schema(columns: list[ParquetColumn], num_rows: int | None) -> list[Finding]:
    """What verl's RLHFDataset and its default reward functions need from a parquet file."""
    by_name = {c.name: c for c in columns}
    found: list[Finding] = []
    prompt = by_name.get("prompt")
    if prompt is None:
        found.append(
            error(
                "dataset.prompt_missing",
                "no 'prompt' column; verl reads the prompt from it (data.prompt_key)",
                field="prompt",
                hint="convert the data with verl's examples/data_preprocess scripts",
            )
        )
    elif prompt.kind == "string":
        found.append(
            error(
                "dataset.prompt_not_chat",
                "'prompt' is a plain string; verl expects a chat list [{role, content}, …]",
                field="prompt",
                hint="wrap each prompt as [{'role': 'user', 'content': text}]",
            )
        )
    elif not _is_chat_list(prompt):
        found.append(
            error(
                "dataset.prompt_not_chat",
                f"'prompt' is {prompt.type}; verl expects list<struct<role: string, content: string>>",
                field="prompt",
            )
        )
    source = by_name.get("data_source")
    if source is None:
        found.append(
            error(
                "dataset.data_source_missing",
                "no 'data_source' column; verl's reward function is chosen by it",
                field="data_source",
            )
        )
    elif source.kind != "string":
        found.append(
            warning(
                "dataset.data_source_type", f"'data_source' is {source.type}, not a string", "data_source"
            )
        )
    reward = by_name.get("reward_model")
    if reward is None:
        found.append(
            error(
                "dataset.reward_model_missing",
                "no 'reward_model' column; the rule-based reward reads reward_model.ground_truth",
                field="reward_model",
            )
        )
    elif reward.kind != "struct":
        found.append(
            error(
                "dataset.reward_model_not_struct",
                f"'reward_model' is {reward.type}; verl expects a struct with 'ground_truth'",
                field="reward_model",
            )
        )
    elif reward.field("ground_truth") is None:
        found.append(
            error(
                "dataset.ground_truth_missing",
                "'reward_model' has no 'ground_truth' field",
                field="reward_model.ground_truth",
            )
        )
    if "ability" not in by_name:
        found.append(info("dataset.ability_missing", "no 'ability' column (optional)", "ability"))
    if "extra_info" not in by_name:
        found.append(info("dataset.extra_info_missing", "no 'extra_info' column (optional)", "extra_info"))
    if num_rows == 0:
        found.append(error("dataset.empty", "the file has no rows"))
    return found


def _from_snippet_record(
    record: dict[str, Any], where: Literal["host", "container"]
) -> DatasetInfo | Unavailable:
    path = str(record.get("path", ""))
    if record.get("error_code") == "missing_dependency":
        return unavailable("datasets", UnavailableCode.MISSING_DEPENDENCY, f"{path}: pyarrow not installed")
    info_ = DatasetInfo(
        path=path,
        size_bytes=record.get("size_bytes"),
        num_rows=record.get("num_rows"),
        num_row_groups=record.get("num_row_groups"),
        columns=[ParquetColumn.model_validate(c) for c in record.get("columns") or []],
        checked_in=where,
    )
    if record.get("error"):
        info_.findings = [error("dataset.unreadable", f"cannot read the parquet schema: {record['error']}")]
    else:
        info_.findings = check_verl_schema(info_.columns, info_.num_rows)
    return info_


def parse_parquet_check_output(
    text: str, where: Literal["host", "container"] = "container"
) -> list[DatasetInfo | Unavailable]:
    """Read the JSON printed by :data:`PARQUET_CHECK_SNIPPET` (e.g. run inside a container)."""
    try:
        records = json.loads(text.strip().splitlines()[-1] if text.strip() else "")
    except (json.JSONDecodeError, IndexError) as exc:
        return [unavailable("datasets", UnavailableCode.FAILED, f"the parquet check printed no JSON: {exc}")]
    if not isinstance(records, list):
        return [
            unavailable(
                "datasets", UnavailableCode.FAILED, "the parquet check printed JSON that is not a list"
            )
        ]
    return [_from_snippet_record(r, where) for r in records if isinstance(r, dict)]


def parquet_check_argv(paths: list[str], python: str = "python3") -> list[str]:
    """The command that runs the check elsewhere (e.g. ``docker exec <c> …``) on ``paths``."""
    return [python, "-c", PARQUET_CHECK_SNIPPET, *paths]


_SNIPPET_NS: dict[str, Any] | None = None


def _snippet_namespace() -> dict[str, Any]:
    global _SNIPPET_NS
    if _SNIPPET_NS is None:
        ns: dict[str, Any] = {"__name__": "verlctl_parquet_check"}
        exec(compile(PARQUET_CHECK_SNIPPET, "<verlctl parquet check>", "exec"), ns)
        _SNIPPET_NS = ns
    return _SNIPPET_NS


def pyarrow_available() -> bool:
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def inspect_parquet(path: str) -> DatasetInfo | Unavailable:
    """Schema, row count and verl compatibility of one parquet file, read in this process.

    Without pyarrow: ``Unavailable(code=missing_dependency)`` (run :data:`PARQUET_CHECK_SNIPPET`
    in the training container instead).
    """
    if not pyarrow_available():
        return unavailable("datasets", UnavailableCode.MISSING_DEPENDENCY, "pyarrow not installed")
    record = _snippet_namespace()["describe"](path)
    return _from_snippet_record(record, "host")
