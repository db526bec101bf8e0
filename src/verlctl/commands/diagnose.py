"""``verlctl diagnose LOG``: root-cause a verl training log (streams the file; fast on huge logs)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, BinaryIO

import typer

from verlctl.commands.options import JsonOut

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from verlctl.monitor.diagnose import Diagnosis, StepSink
    from verlctl.monitor.events import Number

LogArg = Annotated[
    str, typer.Argument(metavar="LOG", help="The training log (a file, or - for stdin).", show_default=False)
]

#: shown first in the text summary when present
_KEY_METRICS = (
    "critic/score/mean",
    "critic/rewards/mean",
    "actor/pg_loss",
    "actor/entropy",
    "actor/entropy_loss",
    "actor/grad_norm",
    "actor/ppo_kl",
    "response_length/mean",
    "response_length/clip_ratio",
    "timing_s/step",
    "perf/throughput",
    "perf/max_memory_allocated_gb",
)
_SHOWN_METRICS = 12

#: logs at least this big are converted to JSON by a second process (on another core, when one is idle)
PIPELINE_MIN_BYTES = 32 << 20


def diagnose(log: LogArg, as_json: JsonOut = False) -> int:
    """Find the root cause of a failed run (with a hint), the last progress and the last step metrics.

    Exit 0 when no known failure is in the log, 1 when one is. With --json: one object with "steps" (every
    step line; streamed, so it comes first), "progress" and "findings" (root cause first)."""
    from verlctl.errors import VerlctlError
    from verlctl.monitor.diagnose import LastStep

    try:
        stream: BinaryIO = sys.stdin.buffer if log == "-" else open(log, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise VerlctlError(f"cannot read {log}: {exc.strerror or exc}") from None
    try:
        if stream is not sys.stdin.buffer:
            _require_log_file(stream, log)
        if as_json:
            out = sys.stdout.buffer
            out.write(b'{"steps": [')
            out.flush()
            diag = _run(stream, _json_writer(stream, out), log)
            out.write(b"\n],\n" + _tail_json(diag).encode() + b"\n")
            out.flush()
        else:
            keeper = LastStep()
            diag = _run(stream, keeper, log)
            _print_text(diag, keeper.last())
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        _silence_stdout()
        return 1
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if diag.cut_lines:
        from verlctl.monitor.diagnose import MAX_CARRIED_LINE

        sys.stderr.write(
            f"note: {diag.cut_lines} line(s) longer than {MAX_CARRIED_LINE >> 20} MiB: only their first "
            f"{MAX_CARRIED_LINE >> 20} MiB were read (is {log} a text log?)\n"
        )
    return 1 if diag.findings else 0


def _require_log_file(stream: BinaryIO, log: str) -> None:
    """A log is a file or a pipe: a device such as /dev/zero would be read forever."""
    import os
    import stat

    from verlctl.errors import VerlctlError

    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError):
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise VerlctlError(f"cannot read {log}: it is a device, not a log file; pass a file, or - for stdin")


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _json_writer(stream: BinaryIO, out: BinaryIO) -> StepSink:
    import multiprocessing
    import os
    import stat

    from verlctl.monitor.diagnose import JsonStepWriter, PipelinedJsonWriter

    try:
        st = os.fstat(stream.fileno())
        big = stat.S_ISREG(st.st_mode) and st.st_size >= PIPELINE_MIN_BYTES
    except (OSError, ValueError):
        big = False
    forced = os.environ.get("VERLCTL_DIAGNOSE_PIPELINE")  # "1" / "0": always / never (benchmarks, busy hosts)
    wanted = forced == "1" or (forced != "0" and big and _idle_core())
    if wanted and "fork" in multiprocessing.get_all_start_methods():
        return PipelinedJsonWriter(out.fileno())
    return JsonStepWriter(out)


def _idle_core() -> bool:
    """A second process only pays off when a core is free for it (it costs ~15 % more CPU in all)."""
    import os

    cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return cpus > 1 and load <= cpus - 1


def _run(stream: BinaryIO, sink: StepSink, log: str) -> Diagnosis:
    from verlctl.errors import VerlctlError
    from verlctl.monitor.diagnose import diagnose_stream

    try:
        return diagnose_stream(stream, sink)
    except BrokenPipeError:
        raise
    except OSError as exc:  # e.g. EISDIR on read, EIO
        raise VerlctlError(f"cannot read {log}: {exc.strerror or exc}") from None


def _tail_json(diag: Diagnosis) -> str:
    import json

    doc = {"progress": diag.progress, "findings": [f.to_dict() for f in diag.findings]}
    return json.dumps(doc, ensure_ascii=False)[1:-1] + "}"


def _print_text(diag: Diagnosis, last: tuple[int, dict[str, Number]] | None) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False)
    with console.capture() as captured:  # rendered first, written below: a closed pipe is then ours to handle
        _summary(console, escape, diag, last)
    sys.stdout.write(captured.get())
    sys.stdout.flush()


def _summary(
    console: Console,
    escape: Callable[[str], str],
    diag: Diagnosis,
    last: tuple[int, dict[str, Number]] | None,
) -> None:
    if not diag.findings:
        console.print(f"[green]no known failure[/green] in {diag.lines} lines")
    else:
        root = diag.findings[0]
        times = f", x{root.count}" if root.count > 1 else ""
        console.print(
            f"[bold red]root cause:[/bold red] [bold]{root.category}[/bold] (line {root.line}{times}): "
            f"{escape(root.message)}"
        )
        console.print(f"  [dim]{escape(root.excerpt)}[/dim]")
        console.print(f"  [bold]hint:[/bold] {escape(root.hint)}")
        if len(diag.findings) > 1:
            console.print("also found (often consequences of the root cause):")
            for f in diag.findings[1:]:
                times = f", x{f.count}" if f.count > 1 else ""
                console.print(f"  - {f.category} (line {f.line}{times}): {escape(f.message)}")
    if diag.step is None:
        console.print("progress: no step seen")
    else:
        total = f"/{diag.total}" if diag.total else ""
        console.print(f"progress: step {diag.step}{total} ({diag.steps} step lines)")
    if last is not None:
        step, metrics = last
        keys = [k for k in _KEY_METRICS if k in metrics]
        keys += [k for k in metrics if k not in keys][: max(0, _SHOWN_METRICS - len(keys))]
        shown = "  ".join(f"{escape(k)}={metrics[k]:.4g}" for k in keys)
        more = f"  (+{len(metrics) - len(keys)} more)" if len(metrics) > len(keys) else ""
        console.print(f"last step {step}: {shown}{more}")
