"""``verlctl report``: one self-contained HTML page for a recorded run (spec, timeline, restarts, charts)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from verlctl.commands.options import ForceFile, RunArg, out_path
from verlctl.errors import VerlctlError

#: The most of a run's log that the report reads (the newest part).
LOG_CAP_BYTES = 256 * 1024 * 1024
SPEC_CAP_BYTES = 4 * 1024 * 1024


def _log_bytes(record: object, log: Path | None) -> tuple[bytes | None, str]:
    """The run's log (newest LOG_CAP_BYTES) and where it came from, or None and why not."""
    if log is not None:
        try:
            size = log.stat().st_size
            with open(log, "rb") as fh:
                if size > LOG_CAP_BYTES:
                    fh.seek(size - LOG_CAP_BYTES)
                return fh.read(LOG_CAP_BYTES), str(log)
        except OSError as exc:
            raise VerlctlError(f"--log {log}: {exc.strerror or exc}", hint="give a readable log file") from exc
    from verlctl.backends.docker import log_target, read_tail
    from verlctl.orchestrator import runstate

    host_text = runstate.read_host_log(record, 0, LOG_CAP_BYTES)  # type: ignore[arg-type]
    if host_text is not None:  # a host file (paths.logs): read also when the container is removed
        return host_text.encode(), record.run_log  # type: ignore[attr-defined]
    try:
        ex, container, _note = log_target(record)  # type: ignore[arg-type]
    except Exception as exc:  # an engine that cannot be reached: the report still shows the record
        return None, f"log not read: {exc}"
    if ex is None:
        return None, f"log not read: the run's container is {container.get('state')} (pass --log FILE)"
    run_log = record.run_log  # type: ignore[attr-defined]
    return read_tail(ex, run_log, LOG_CAP_BYTES).encode(), run_log


def redact_report(data: Any) -> tuple[Any, dict[str, int]]:
    """The report's data with every text through the one redaction of bundles and reports
    (:class:`verlctl.monitor.redact.Redactor`: the spec, log excerpts, events, facts, attempts); the kinds
    removed, with counts, are said on the page. Only the charts' numbers are not text."""
    import dataclasses

    from verlctl.monitor.redact import Redactor

    redact = Redactor.from_env()
    changes = {f.name: redact.tree(getattr(data, f.name)) for f in dataclasses.fields(data)
               if f.name != "series" and isinstance(getattr(data, f.name), (str, list, tuple, dict))}
    removed = redact.kinds()
    facts = dict(changes.get("facts", data.facts))
    facts["secrets removed"] = ", ".join(f"{k} ({n})" for k, n in removed.items()) or "none found"
    changes["facts"] = facts
    return dataclasses.replace(data, **changes), removed


def _write_atomic(path: Path, text: str, force: bool) -> None:
    """Write ``text`` to ``path`` atomically, never through a symlink planted there (:mod:`verlctl.files`)."""
    from verlctl.files import check_out_file, write_file

    check_out_file(path, force, example="report.html")
    try:
        write_file(path, text.encode("utf-8"), 0o644)
    except OSError as exc:
        raise VerlctlError(f"--out {path}: {exc.strerror or exc}", hint="write into an existing, writable directory") from exc


def report(
    run: RunArg = None,
    out: Path = typer.Option(None, "--out", "-o", help="HTML file to write (one self-contained page); default: "
                                                       "verlctl-report-RUN.html in this directory, RUN being the "
                                                       "run's id.", parser=out_path, show_default=False),
    log: Path = typer.Option(None, "--log", help="Read the run's log from this file instead of its target."),
    force: ForceFile = False,
    smooth: int = typer.Option(0, "--smooth", help="Also draw the moving average over this many steps (0: none)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (the file written, its state, "
                                                       "steps charted, findings)."),
) -> None:
    """Write one self-contained HTML page for a run: its spec, timeline, restarts, diagnosis and charts."""
    from verlctl.files import check_out_file
    from verlctl.monitor.charts import SeriesSink
    from verlctl.monitor.diagnose import diagnose_bytes
    from verlctl.monitor.report_html import ReportData, render
    from verlctl.runtime.records import resolve_run

    if smooth < 0:
        raise VerlctlError(f"--smooth {smooth}: give a number of steps, 0 for none")
    if out is not None:
        check_out_file(out, force, example="report.html")  # before any work: an existing file is kept
    record = resolve_run(run)
    if out is None:
        out = Path(f"verlctl-report-{record.run_id}.html")
        check_out_file(out, force, example="report.html")
    try:  # a plain file of the run's own directory, never through a symlink (the record is input)
        spec_yaml = record.read_file(record.spec_file, SPEC_CAP_BYTES).decode("utf-8", errors="replace")
    except (OSError, ValueError) as exc:
        why = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
        spec_yaml = f"(the resolved spec could not be read: {why})"
    from verlctl.monitor.diagnose import TeeSink
    from verlctl.monitor.health import HealthSink, evaluate, record_settings, run_warnings
    from verlctl.orchestrator import runstate

    data, source = _log_bytes(record, log)
    sink = SeriesSink()
    health_sink = HealthSink()
    findings: list[dict[str, object]] = []
    progress = None
    if data is not None:
        d = diagnose_bytes(data, TeeSink(sink, health_sink))
        progress = d.progress
        findings = [f.to_dict() for f in d.findings]
        offset = record.attempts[-1].log_offset if len(record.attempts) > 1 and log is None else 0
        if offset:  # the current attempt's errors: an earlier one's, dealt with by recovery, is listed as such
            from verlctl.monitor.summary import diagnose_text

            current = runstate.read_host_log(record, offset, LOG_CAP_BYTES)
            if current is not None:
                findings = [f.to_dict() for f in diagnose_text(current).findings]
    from verlctl.orchestrator.inspect import run_states

    events = record.events()
    failure = runstate.launch_failure(events)
    if not findings and failure is not None:  # the launch stopped before verl wrote an error (or a log)
        findings = [failure]
    for f in findings:  # what to do after what recovery did (not the rungs it tried; a give-up's advice)
        f["hint"] = runstate.hint_after_recovery(str(f.get("category")), str(f.get("hint") or ""), events)
    health = run_warnings(evaluate(health_sink.items(), record_settings(record)), events)
    run_state = run_states([record])[record.run_id]
    state = run_state.state
    facts = {
        "runtime": record.runtime,
        "container": record.container_name or record.container_id or "-",
        "image": record.image or "-",
        "verl version": record.verl_version,
        "checkpoints": record.checkpoints,
        "log": source,
        "state": f"{run_state.state}: {run_state.why}",
    }
    if record.swanlab_url:
        facts["SwanLab"] = record.swanlab_url
    data_in = ReportData(
            run_id=record.run_id,
            experiment=record.experiment,
            state=state,
            spec_yaml=spec_yaml,
            events=events,
            attempts=[a.model_dump() for a in record.attempts],
            series=sink.series(),
            findings=findings,
            progress=progress,
            facts=facts,
            generated_at=time.time(),
            markers=runstate.restart_markers(events),
            recovered=runstate.recoveries(events),
            restarts=[r.as_dict() for r in runstate.restarts(events)],
            gave_up=runstate.gave_up(events),
            health=health,
            smooth=smooth,
            log_read=data is not None,
        )
    report_data, removed = redact_report(data_in)
    findings = report_data.findings
    page = render(report_data)
    _write_atomic(out, page, force)
    if as_json:
        import json
        import sys

        sys.stdout.write(json.dumps({"written": str(out), "bytes": len(page), "run_id": record.run_id,
                                     "state": run_state.state, "state_why": run_state.why,
                                     "steps_charted": len(sink.steps), "log": report_data.facts["log"],
                                     "findings": findings, "secrets_removed": removed, "health": health}, indent=2,
                                    default=str) + "\n")
        return
    typer.echo(f"wrote {out} ({len(page) // 1024} KiB; {len(sink.steps)} steps charted)")


def bundle(
    run: RunArg = None,
    out: Path = typer.Option(..., "--out", "-o", help="Archive to write (.tar.gz).", parser=out_path),
    private: list[str] = typer.Option(
        [], "--private", help="Another host name or address to replace with <private-host-N> (repeatable); "
                              "this host's and the run's own names and addresses are replaced already."
    ),
    force: ForceFile = False,
    keep_hosts: bool = typer.Option(False, "--keep-host-names", help="Do not replace this host's and the run's "
                                                                     "own names and addresses."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (the file, its files, what was "
                                                       "unavailable, which host names were replaced)."),
) -> None:
    """Write a diagnostic bundle for a bug report, secrets and host names removed.

    It holds the spec, scripts, versions, log tail, diagnosis, device and Ray snapshots, events and image digest;
    secrets and home directories are removed, and this host's and the run's host names and addresses replaced
    (the manifest says which kinds were)."""
    from verlctl.backends.docker import target
    from verlctl.files import check_out_file
    from verlctl.monitor import bundle as b
    from verlctl.runtime.records import resolve_run

    check_out_file(out, force, example="bundle.tar.gz")
    record = resolve_run(run)
    try:
        ex, container = target(record)
    except VerlctlError as exc:
        ex, container = None, {"state": f"unreachable: {exc.message}"}
    digest = None
    if record.runtime != "host" and record.image:
        try:
            from verlctl.runtime import containers

            img = containers.connect().images.get(record.image)
            digest = (img.attrs.get("RepoDigests") or [img.id])[0]
        except Exception:  # docker.errors.ImageNotFound, an engine gone: recorded as unknown
            digest = None
    from verlctl.orchestrator import runstate

    host = runstate.read_host_log(record, 0, b.LOG_TAIL_BYTES)  # the log on the host: also without a container
    failure = runstate.launch_failure(record.events())
    data = b.collect(record, ex, container, digest, host_log=None if host is None else host.encode(),
                     event_findings=[failure] if failure else [])
    own = {} if keep_hosts else b.own_hosts(record, [data.files.get("log-tail.txt", "")])
    scrub = b.Scrubber.from_env(private, own=own)
    check_out_file(out, force, example="bundle.tar.gz")  # again: the collection took a while
    try:
        size = b.write(data, scrub, out, root=f"verlctl-bundle-{record.run_id}")
    except OSError as exc:
        raise VerlctlError(f"--out {out}: {exc.strerror or exc}", hint="write into an existing, writable directory") from exc
    if as_json:
        import json
        import sys

        sys.stdout.write(json.dumps({"written": str(out), "bytes": size, "files": sorted(data.files),
                                     "unavailable": data.unavailable, "replaced_hosts": scrub.replaced},
                                    indent=2) + "\n")
        return
    missing = f"; unavailable: {', '.join(sorted(data.unavailable))}" if data.unavailable else ""
    typer.echo(f"wrote {out} ({size // 1024} KiB, {len(data.files) + 1} files{missing})")
    if scrub.replaced:
        typer.echo("replaced host names and addresses: " + "; ".join(f"{k} = {v}" for k, v in scrub.replaced.items()))
    else:
        typer.echo("replaced no host name or address (none of this host's or the run's appears in the bundle)")
