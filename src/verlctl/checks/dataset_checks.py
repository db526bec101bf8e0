"""``paths.train_files`` / ``paths.val_files``: each file exists, is readable, is parquet, and has the columns
verl reads (checked here with pyarrow, or in the spec's running container)."""

from __future__ import annotations

from verlctl.checks.findings import Finding, error, warning
from verlctl.detect.check_probes import DatasetCheck, DockerFacts, FileProblem
from verlctl.detect.common import Unavailable, UnavailableCode

PARQUET_INSTALL_HINT = "pip install 'verlctl[parquet]' (pyarrow) on this host"


def _file_findings(check: DatasetCheck) -> list[Finding]:
    probe = check.file
    if isinstance(probe, Unavailable):
        return [error("dataset_unreadable", f"{check.path} could not be read: {probe.reason}", check.field)]
    messages: dict[FileProblem, tuple[str, str, str | None]] = {
        "missing": ("dataset_missing", f"{check.path} does not exist", "fix the path or create the parquet file"),
        "not_file": ("dataset_not_file", f"{check.path} is {probe.detail}, not a parquet file", None),
        "unreadable": ("dataset_unreadable", f"{check.path} cannot be read: {probe.detail}", "fix its permissions"),
        "not_parquet": (
            "dataset_not_parquet",
            f"{check.path} is not a parquet file ({probe.detail})",
            "convert the data with verl's examples/data_preprocess scripts",
        ),
    }
    if probe.problem == "ok":
        return []
    code, message, hint = messages[probe.problem]
    return [error(code, message, check.field, hint)]


def _schema_findings(check: DatasetCheck, container_note: str | None) -> list[Finding]:
    schema = check.verl_schema
    if schema is None:
        return []
    if isinstance(schema, Unavailable):
        if schema.code is UnavailableCode.MISSING_DEPENDENCY:
            return []  # reported once for all files (see _schema_skipped)
        return [warning("dataset_schema_unchecked", f"{check.path}: schema not checked: {schema.reason}", check.field)]
    where = "" if schema.checked_in == "host" else f" (checked in {container_note or 'the container'})"
    out = []
    for f in schema.findings:
        column = f" [column {f.field}]" if f.field else ""
        out.append(
            Finding(
                code=f.code,
                severity=f.severity,
                field=check.field,
                message=f"{check.path}{column}: {f.message}{where}",
                hint=f.hint,
            )
        )
    return out


def _schema_skipped(checks: list[DatasetCheck], docker: DockerFacts | None, runtime: str) -> list[Finding]:
    """One warning when the schemas could not be read anywhere (no pyarrow here, and no usable container)."""
    skipped = [
        c
        for c in checks
        if isinstance(c.verl_schema, Unavailable) and c.verl_schema.code is UnavailableCode.MISSING_DEPENDENCY
    ]
    if not skipped:
        return []
    if runtime == "docker" and docker is not None and docker.running:
        why = f"pyarrow is installed neither on this host nor in container {docker.container}"
        hint = f"{PARQUET_INSTALL_HINT}, or install pyarrow in the container"
    elif runtime == "docker" and docker is not None and docker.exists:
        why = f"pyarrow is not installed on this host and container {docker.container} is not running ({docker.state})"
        hint = f"{PARQUET_INSTALL_HINT}, or start the container and run check again"
    elif runtime == "docker":
        why = "pyarrow is not installed on this host and the spec's container does not exist yet"
        hint = f"{PARQUET_INSTALL_HINT}, or run check again once the container exists"
    else:
        why = "pyarrow is not installed on this host"
        hint = PARQUET_INSTALL_HINT
    files = ", ".join(c.path for c in skipped)
    return [
        warning(
            "dataset_schema_skipped",
            f"the verl columns (prompt, data_source, reward_model.ground_truth) of {files} were not checked: {why}",
            skipped[0].field,
            hint,
        )
    ]


def check_datasets(
    checks: list[DatasetCheck], docker: DockerFacts | None = None, runtime: str = "docker"
) -> list[Finding]:
    """Every dataset file exists, is readable, is parquet, and has the columns verl reads."""
    note = f"container {docker.container}" if docker is not None else None
    out: list[Finding] = []
    for c in checks:
        out += _file_findings(c)
        out += _schema_findings(c, note)
    return out + _schema_skipped(checks, docker, runtime)
