"""``verlctl demo``: real verl 0.9.1 trains a tiny model on this machine's CPU, through verlctl's own launch."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

DEMO_HELP = "\n\n".join([
    "Watch real verl train, on a Linux x86-64 machine with no accelerator and no Docker engine.",
    "Prepares (once, then reuses) a Python environment of real verl 0.9.1 on the CPU (PyPI torch, vLLM's CPU "
    "build, Ray, TransferQueue: about 3.2 GB of downloads, 8 GiB on disk, under ~/.cache/verlctl/demo), makes a "
    "tiny model, tokenizer and dataset (nothing from a hub), writes an ordinary run spec DIR/run.yaml (device: cpu, "
    "the demo device layer; every CPU-only setting commented) and runs it with `verlctl launch --watch`: the "
    "checklist, training with its step metrics, a checkpoint every step, then the path of the run's report page.",
    "The run it leaves is an ordinary run: `verlctl status`, `logs`, `stop`, `report` and `export-hf` act on it, "
    "and `verlctl launch -c DIR/run.yaml --watch` resumes it.",
    "A CPU run cannot show NPU/CUDA kernels, whether a model fits in HBM, HCCL/NCCL collectives or speed. It needs "
    "10 GiB of free memory, 10 GiB of free disk the first time, and a Python 3.10-3.12.",
    "Examples:",
    "  verlctl demo                                  # DAPO, 2 steps, in ./demo",
    "  verlctl demo --algorithm grpo --steps 4 --yes",
    "  verlctl launch -c demo/run.yaml --watch       # resume it (more train.steps)",
])

MARKER = ".verlctl-demo"
TERMINAL = ("finished", "stopped")
#: How long the run and its watcher may both be gone before the demo stops following (a relaunch takes seconds).
GONE_S = 60.0


def demo(
    algorithm: Annotated[str, typer.Option("--algorithm", help="dapo (DAPO: clip-higher, dynamic sampling, overlong penalty) or grpo.")] = "dapo",
    steps: Annotated[int, typer.Option("--steps", help="Training steps (1-50).")] = 2,
    folder: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--dir", help="Folder for the spec, tiny model, checkpoints, logs and report.",
                     show_default="./demo"),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (the download, the launch's checklist).")] = False,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Start over: remove the checkpoints and logs of an earlier demo in DIR.")
    ] = False,
) -> int:
    import sys

    from rich.console import Console

    from verlctl.demo import environment as envmod
    from verlctl.errors import VerlctlError

    if algorithm not in ("dapo", "grpo"):
        raise VerlctlError(f"--algorithm {algorithm!r}: give dapo or grpo")
    if not 1 <= steps <= 50:
        raise VerlctlError(f"--steps {steps}: give 1 to 50 (each step takes about a minute on a CPU)")
    console = Console(stderr=False, highlight=False)
    here = (folder or Path("demo")).expanduser().absolute()
    if here.exists() and not here.is_dir():
        raise VerlctlError(f"--dir {here} is not a folder", hint="give a folder for the demo's files")
    if here.is_dir() and any(here.iterdir()) and not (here / MARKER).exists():
        raise VerlctlError(f"--dir {here} holds files that are not a demo's: nothing was written there",
                           hint="give an empty or new folder (--dir DIR)")
    console.print("[bold]verlctl demo[/]: real verl 0.9.1 on this machine's CPU, launched and watched by verlctl.")
    console.print("A CPU run shows verlctl's flow and verl's real training loop; it cannot show NPU/CUDA kernels, "
                  "HBM fit, HCCL/NCCL collectives or speed.", style="dim")

    cache = envmod.cache_root()
    env = envmod.find_env(cache, None)
    problem = envmod.host_problem(envmod.read_host(cache, here, env is not None))
    if problem is not None:
        raise problem
    if env is None:
        python, _ = envmod.find_python()
        assert python is not None  # host_problem refused a machine without one
        console.print(f"First run: a Python environment of real verl will be made in {cache / 'demo'} — about "
                      f"{envmod.DOWNLOAD_GB:.1f} GB of downloads, {envmod.ENV_DISK_GIB:.0f} GiB on disk, "
                      "5-15 minutes. It is reused afterwards.")
        if not yes and sys.stdin.isatty() and not typer.confirm("Download and build it now?", default=True):
            console.print("Nothing was downloaded.")
            return 1
        env = _with_status(console, "prepare the environment", lambda say: envmod.build_env(cache, python, say))
        console.print(f"[green]✓[/] environment ready in {env.info.get('built_in_s', '?')} s: {env.path}")
    else:
        console.print(f"[green]✓[/] reusing the environment {env.path}")
    envmod.install_layer(env)

    _prepare_folder(console, env, here, fresh)
    spec_path = here / "run.yaml"
    _write_spec(console, spec_path, env.path, algorithm, steps)

    run_id = _launch(console, spec_path, yes)
    if run_id is None:
        return 1
    state = _follow(console, run_id)
    report = here / "report.html"
    _run_verlctl(["report", run_id, "-o", str(report), "--force"], quiet=True)
    console.print()
    console.print(f"run [bold]{run_id}[/]: {state}")
    if report.exists():
        console.print(f"report: {report}")
    console.print(f"spec: {spec_path}   checkpoints: {here / 'checkpoints'}   logs: {here / 'logs'}")
    console.print(f"next: verlctl status {run_id} · verlctl logs {run_id} · verlctl export-hf {run_id} -o "
                  f"{here / 'hf'} · raise train.steps in run.yaml, then verlctl launch -c {spec_path} --watch")
    return 0 if state == "finished" else 1


def _with_status(console: Any, title: str, work: Any) -> Any:
    """Run ``work(say)`` under a spinner that shows the elapsed time and the latest line ``say`` got."""
    import time

    t0 = time.monotonic()
    with console.status(title) as status:
        def say(line: str) -> None:
            status.update(f"{title} [dim]({time.monotonic() - t0:.0f} s)[/]: {line}")

        return work(say)


def _prepare_folder(console: Any, env: Any, here: Path, fresh: bool) -> None:
    import os
    import shutil
    import subprocess

    from verlctl.demo.environment import demo_dir
    from verlctl.errors import VerlctlError
    from verlctl.files import write_file

    here.mkdir(parents=True, exist_ok=True)
    (here / MARKER).touch()
    ckpt = here / "checkpoints"
    earlier = sorted(ckpt.glob("global_step_*")) if ckpt.is_dir() else []
    if earlier and not fresh:
        raise VerlctlError(
            f"{here} holds an earlier demo run (checkpoints up to {earlier[-1].name})",
            hint=f"resume it with `verlctl launch -c {here / 'run.yaml'} --watch` (raise train.steps first), or "
                 "start over with `verlctl demo --fresh`")
    if fresh:
        _refuse_live_run(ckpt)
        for name in ("checkpoints", "logs", "report.html"):
            p = here / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
    write_file(here / "reward.py", (demo_dir() / "reward.py").read_bytes(), 0o644)
    tiny = here / "tiny"
    if not (tiny / "BUILD.json").is_file():
        console.print("make the tiny model (random 2-layer Qwen2), tokenizer and data ...")
        res = subprocess.run([str(env.python), str(demo_dir() / "tiny.py"), str(tiny)], capture_output=True,
                             text=True, timeout=900, check=False,
                             env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
        if res.returncode != 0:
            last = (res.stderr.strip().splitlines() or ["?"])[-1]
            raise VerlctlError(f"making the tiny model failed: {last[:200]}",
                               hint=f"run {env.python} {demo_dir() / 'tiny.py'} {tiny} to see why")
        console.print(f"[green]✓[/] {res.stdout.strip().splitlines()[-1] if res.stdout.strip() else tiny}")


def _refuse_live_run(ckpt: Path) -> None:
    """--fresh never removes the checkpoints of a run that is still going."""
    from verlctl.errors import VerlctlError
    from verlctl.orchestrator.runs import run_status
    from verlctl.runtime.records import scan_runs

    for record in scan_runs()[0]:
        if Path(record.checkpoints or "/nonexistent") == ckpt:
            try:
                state = str(run_status(record.run_id).get("state"))
            except VerlctlError:
                continue
            if state in ("running", "starting") or state.startswith("recovering"):
                raise VerlctlError(f"run {record.run_id} of this demo is {state}: its checkpoints are kept",
                                   hint=f"stop it first: verlctl stop {record.run_id}")


def _write_spec(console: Any, path: Path, env_path: Path, algorithm: str, steps: int) -> None:
    from verlctl.demo.spec import demo_spec
    from verlctl.files import write_file

    write_file(path, demo_spec(path.parent, env_path, algorithm, steps).encode(), 0o644)
    console.print(f"[green]✓[/] wrote {path} ({algorithm}, {steps} step(s))")


def _run_verlctl(args: list[str], quiet: bool = False) -> Any:
    import subprocess
    import sys

    argv = [sys.executable, "-m", "verlctl", *args]
    if quiet:
        return subprocess.run(argv, capture_output=True, text=True, check=False)
    return subprocess.run(argv, check=False)


def _launch(console: Any, spec_path: Path, yes: bool) -> str | None:
    """``verlctl launch -c SPEC --watch`` as the user would type it; the id of the run it recorded."""
    import time

    from verlctl.runtime.records import scan_runs

    before = {r.run_id for r in scan_runs()[0]}
    console.print(f"\n$ verlctl launch -c {spec_path} --watch{' --yes' if yes else ''}\n", style="bold")
    t0 = time.time()
    res = _run_verlctl(["launch", "-c", str(spec_path), "--watch", "--verify-timeout", "1200",
                        *(["--yes"] if yes else [])])
    mine = [r for r in scan_runs()[0] if r.run_id not in before and r.created_at >= t0 - 1
            and Path(r.checkpoints or "/nonexistent") == spec_path.parent / "checkpoints"]
    if res.returncode != 0 or not mine:
        return None
    return max(mine, key=lambda r: r.created_at).run_id


def _follow(console: Any, run_id: str, poll_s: float = 3.0) -> str:
    """A progress bar over the run's steps, with its last step's metrics, until the run ends."""
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from verlctl.errors import VerlctlError
    from verlctl.orchestrator.runs import run_status

    shown: set[int] = set()
    gone = 0.0
    with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=False) as bar:
        task = bar.add_task("starting", total=None)
        while True:
            try:
                doc = run_status(run_id)
            except VerlctlError as exc:
                return f"unknown ({exc.message})"
            prog = doc.get("progress") or {}
            last = doc.get("last_step") or {}
            if prog.get("total"):
                bar.update(task, total=prog["total"])
            if prog.get("step") is not None:
                bar.update(task, completed=prog["step"])
            step = last.get("step")
            if step is not None and step not in shown:
                # every step since the last poll (two can end between polls), from the trainer's log
                for n, metrics in _steps_since(_run_log_text(run_id), shown, step) or [(step, last.get("metrics") or {})]:
                    shown.add(n)
                    bar.console.print(f"step {n}: {_metrics_line(metrics or {})}")
            state = str(doc.get("state"))
            bar.update(task, description=state)
            if state in TERMINAL or state.startswith("failed"):
                return state
            gone = gone if doc.get("alive") or doc.get("watcher", {}).get("alive") else gone + poll_s
            if gone > GONE_S:  # neither the run nor its watcher for a while: say what status says
                return state
            time.sleep(poll_s)


def _steps_since(text: str | None, shown: set[int], upto: int) -> list[tuple[int, dict]]:
    """The steps up to ``upto`` not in ``shown``, with their metrics, in the run log's ``text`` ([] without it)."""
    from verlctl.monitor.summary import diagnose_text

    found = {s.step: s.metrics for s in diagnose_text(text, keep_steps=64).steps} if text else {}
    return [(n, found[n]) for n in sorted(found) if n <= upto and n not in shown]


def _run_log_text(run_id: str) -> str | None:
    """The current attempt's part of the run's host log (its last MiB), read as ``status`` reads it."""
    from verlctl.errors import VerlctlError
    from verlctl.orchestrator.runstate import read_host_log
    from verlctl.runtime.records import load_run

    try:
        record = load_run(run_id)
    except VerlctlError:
        return None
    return read_host_log(record, record.attempts[-1].log_offset if record.attempts else 0, 1 << 20)


METRICS = (("critic/score/mean", "score"), ("actor/pg_loss", "pg_loss"), ("actor/entropy", "entropy"),
           ("actor/grad_norm", "grad_norm"), ("response_length/mean", "response_len"), ("timing_s/step", "step_s"))


def _metrics_line(metrics: dict[str, Any]) -> str:
    parts = []
    for key, label in METRICS:
        v = metrics.get(key)
        if isinstance(v, (int, float)):
            parts.append(f"{label} {v:.3g}")
    return "  ".join(parts) or "(no metrics yet)"
