"""``verlctl detect``: the machine pre-check (NPUs, GPUs, docker, models, datasets, network).

Only typer and the standard library are imported at module level (``verlctl --help`` start-up is
benchmarked); the probes, pydantic and rich are imported inside the command.
"""

from pathlib import Path
from typing import Annotated

import typer

WHATS = ("all", "npu", "gpu", "docker", "models", "datasets", "network")
FROM_FILE_WHATS = ("npu", "gpu", "network")
#: The largest saved output read (``npu-smi info`` of 16 NPUs is about 10 kB).
MAX_FROM_FILE_BYTES = 16 << 20


def detect(
    what: Annotated[
        str, typer.Argument(help="What to detect: all, npu, gpu, docker, models, datasets or network.")
    ] = "all",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a summary.")] = False,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file",
            help="Parse saved output instead of running the tool: npu-smi info (npu), nvidia-smi (gpu), ip addr (network).",
        ),
    ] = None,
    scan_root: Annotated[
        list[str] | None,
        typer.Option(
            "--scan-root",
            help="Directory to search for models/datasets (repeatable; default: /mnt/public, /mnt2, /mnt/project, /mnt).",
        ),
    ] = None,
    budget: Annotated[
        float, typer.Option("--budget", help="Time budget of the model/dataset scan, in seconds.")
    ] = 10.0,
    all_docker: Annotated[
        bool, typer.Option("--all-docker", help="List all containers and images, not only verl/ascend ones.")
    ] = False,
    board: Annotated[
        bool,
        typer.Option(
            "--board", help="Also read 'npu-smi info -t board -i N' (with --from-file: parse board output)."
        ),
    ] = False,
) -> None:
    """Check this machine: accelerators, docker, models, datasets and network (read-only)."""
    from verlctl.errors import VerlctlError

    what = what.strip().lower()
    if what not in WHATS:
        raise VerlctlError(f"unknown thing to detect {what!r}; use one of: {', '.join(WHATS)}")
    if not budget > 0 or budget == float("inf"):  # also nan
        raise VerlctlError(f"--budget must be a positive number of seconds, not {budget:g}")
    if from_file is not None:
        if what not in FROM_FILE_WHATS:
            raise VerlctlError(f"--from-file works with {', '.join(FROM_FILE_WHATS)}, not with {what!r}")
        _from_file(what, from_file, json_out, board)
        return
    for root in scan_root or []:  # a root given by hand must be there (the default ones may be missing)
        if not root.strip():
            raise VerlctlError("--scan-root: the path is empty; give a directory, e.g. --scan-root /mnt")
        why = _root_problem(root, budget)
        if why:
            raise VerlctlError(f"--scan-root {root}: {why}; give a directory to search for models and datasets")
    _live(what, json_out, scan_root or None, budget, all_docker, board)


def _read(path: Path) -> str:
    from verlctl.errors import VerlctlError

    if not path.exists():
        raise VerlctlError(f"--from-file: {path} does not exist")
    if not path.is_file():
        raise VerlctlError(f"--from-file: {path} is not a regular file")
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FROM_FILE_BYTES + 1)
        if len(raw) > MAX_FROM_FILE_BYTES:
            raise VerlctlError(
                f"--from-file: {path} is larger than {MAX_FROM_FILE_BYTES >> 20} MiB: not a saved tool output"
            )
    except OSError as exc:
        raise VerlctlError(f"--from-file: cannot read {path}: {exc.strerror or exc}") from exc
    from verlctl.detect.common import strip_provenance

    return strip_provenance(raw.decode("utf-8", errors="replace"))


def _from_file(what: str, path: Path, json_out: bool, board: bool) -> None:
    from rich.console import Console

    text = _read(path)
    console = Console()
    if what == "npu" and board:
        from verlctl.detect.npu_kv import parse_npu_board

        b = parse_npu_board(text)
        if not any(v is not None for k, v in b.model_dump().items() if k != "fields"):  # no known board field
            _nothing_parsed(path, "npu-smi info -t board -i N")
        if json_out:
            typer.echo(b.model_dump_json(indent=2))
        else:
            for key, value in b.fields.items():
                console.print(f"{key}: {value}", highlight=False, markup=False)
        return
    if what == "npu":
        from verlctl.detect.npu import parse_npu_smi_info
        from verlctl.detect.summary import render_npu

        info = parse_npu_smi_info(text)
        if not (info.devices or info.processes or info.tool_version or info.driver_version or info.process_table_seen):
            _nothing_parsed(path, "npu-smi info")
        if json_out:
            typer.echo(info.model_dump_json(indent=2))
        else:
            render_npu(console, info)
    elif what == "gpu":
        from verlctl.detect.gpu import parse_nvidia_smi
        from verlctl.detect.summary import render_gpu

        ginfo = parse_nvidia_smi(text)
        if not (ginfo.devices or ginfo.processes or ginfo.tool_version or ginfo.driver_version or "No devices were found" in text):
            _nothing_parsed(path, "nvidia-smi")
        if json_out:
            typer.echo(ginfo.model_dump_json(indent=2))
        else:
            render_gpu(console, ginfo)
    else:
        from verlctl.detect.network import NetworkInfo, host_ips, parse_ip_addr
        from verlctl.detect.summary import render_network

        interfaces, warnings = parse_ip_addr(text)
        if not interfaces:
            _nothing_parsed(path, "ip addr")
        ninfo = NetworkInfo(interfaces=interfaces, host_ips=host_ips(interfaces), warnings=warnings)
        if json_out:
            typer.echo(ninfo.model_dump_json(indent=2))
        else:
            render_network(console, ninfo)


def _nothing_parsed(path: Path, tool: str) -> None:
    from verlctl.errors import VerlctlError

    raise VerlctlError(f"--from-file {path}: nothing in it could be read as `{tool}` output; save that command's output there")


def _live(
    what: str, json_out: bool, roots: list[str] | None, budget: float, all_docker: bool, board: bool
) -> None:
    import json

    from rich.console import Console

    from verlctl.detect import summary
    from verlctl.detect.machine import ALL_PROBES, DetectOptions, detect_machine
    from verlctl.detect.scan import DEFAULT_SCAN_ROOTS

    scan_roots = list(roots) if roots else list(DEFAULT_SCAN_ROOTS)
    probes = list(ALL_PROBES) if what == "all" else [what]
    options = DetectOptions(
        probes=probes,  # type: ignore[arg-type]
        scan_roots=scan_roots,
        budget_s=budget,
        all_docker=all_docker,
        board=board,
        disk_paths=scan_roots if what == "all" else [],
    )
    state = detect_machine(options)
    console = Console()
    if json_out:
        if what == "all":
            typer.echo(state.model_dump_json(indent=2))
        elif what in ("models", "datasets"):
            payload: dict[str, object] = {
                "scan": state.scan.model_dump(mode="json") if state.scan is not None else None
            }
            if what == "datasets":
                payload["datasets"] = [d.model_dump(mode="json") for d in state.datasets]
            typer.echo(json.dumps(payload, indent=2))
        else:
            part = getattr(state, what)
            typer.echo(part.model_dump_json(indent=2))
        return
    if what == "all":
        summary.render_machine(console, state)
    elif what == "npu" and state.npu is not None:
        summary.render_npu(console, state.npu)
    elif what == "gpu" and state.gpu is not None:
        summary.render_gpu(console, state.gpu)
    elif what == "docker" and state.docker is not None:
        summary.render_docker(console, state.docker)
    elif what == "network" and state.network is not None:
        summary.render_network(console, state.network)
    elif state.scan is not None:
        summary.render_scan(console, state.scan, models=what == "models", datasets=what == "datasets")
        if what == "datasets":
            summary.render_datasets(console, state.datasets)


def _root_problem(root: str, budget: float) -> str | None:
    """Why ``root`` is not a directory to scan, None when it is or when the answer does not come within the budget
    (a stalled network mount: the scan then reports it as unfinished, in time)."""
    import threading

    answer: list[str | None] = []

    def look() -> None:
        p = Path(root)
        answer.append(None if p.is_dir() else ("does not exist" if not p.exists() else "is not a directory"))

    t = threading.Thread(target=look, daemon=True)  # a stat stuck in the kernel must not hold the process
    t.start()
    t.join(max(0.1, min(budget, 5.0)))
    return answer[0] if answer else None
