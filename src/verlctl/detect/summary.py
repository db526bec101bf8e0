"""Human-readable (rich) rendering of the probe results for ``verlctl detect`` without ``--json``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from verlctl.detect.common import Unavailable
from verlctl.detect.datasets import DatasetInfo
from verlctl.detect.docker_probe import DockerInfo
from verlctl.detect.gpu import GpuInfo
from verlctl.detect.machine import MachineState, SystemInfo
from verlctl.detect.network import NetworkInfo
from verlctl.detect.npu import NpuInfo
from verlctl.detect.scan import ScanResult
from verlctl.detect.system import CannInfo, DiskSpace


def _mb(used: int | None, total: int | None) -> str:
    if used is None and total is None:
        return "-"
    return f"{'?' if used is None else used}/{'?' if total is None else total}"


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.1f} GiB"


def _health(h: str | None) -> str:
    if h is None:
        return "?"
    return f"[green]{h}[/]" if h == "OK" else f"[bold red]{h}[/]"


def _missing(console: Console, u: Unavailable) -> None:
    console.print(f"[yellow]{u.probe}[/]: unavailable: {u.reason}")


def _warnings(console: Console, warnings: list[str]) -> None:
    for w in warnings:
        console.print(f"  [yellow]warning:[/] {w}")


def render_npu(console: Console, info: NpuInfo | Unavailable) -> None:
    if isinstance(info, Unavailable):
        _missing(console, info)
        return
    title = f"NPUs: {info.npu_count} NPU(s), {info.chip_count} chip(s)"
    if info.tool_version:
        title += f" — npu-smi {info.tool_version}, driver {info.driver_version}"
    t = Table(title=title, title_justify="left")
    for col in ("NPU", "Chip", "Name", "Health", "HBM MB", "Memory MB", "AICore %", "Power W", "Temp C"):
        t.add_column(col)
    for d in info.devices:
        chip = "?" if d.chip is None else str(d.chip) + (f" (phy {d.phy_id})" if d.phy_id is not None else "")
        t.add_row(
            str(d.id),
            chip,
            d.name or "?",
            _health(d.health),
            _mb(d.hbm_used_mb, d.hbm_total_mb),
            _mb(d.memory_used_mb, d.memory_total_mb),
            "-" if d.aicore_util is None else str(d.aicore_util),
            "-" if d.power_w is None else f"{d.power_w:g}",
            "-" if d.temp_c is None else f"{d.temp_c:g}",
        )
    console.print(t)
    if info.processes:
        p = Table(title="NPU processes", title_justify="left")
        for col in ("NPU", "Chip", "PID", "Name", "Memory MB"):
            p.add_column(col)
        for pr in info.processes:
            p.add_row(
                str(pr.device),
                "-" if pr.chip is None else str(pr.chip),
                str(pr.pid),
                pr.name,
                "-" if pr.memory_mb is None else str(pr.memory_mb),
            )
        console.print(p)
    elif info.process_table_seen:
        console.print("  no processes on the NPUs")
    for b in info.boards:
        console.print(
            f"  board NPU {b.npu_id}: software {b.software_version}, firmware {b.firmware_version}, "
            f"chip {b.chip_name or '?'}, PCI device {b.pci_device_id or '?'}"
        )
    _warnings(console, info.warnings)


def render_gpu(console: Console, info: GpuInfo | Unavailable) -> None:
    if isinstance(info, Unavailable):
        _missing(console, info)
        return
    title = f"GPUs: {info.gpu_count}"
    if info.driver_version:
        title += f" — driver {info.driver_version}" + (
            f", CUDA {info.cuda_version}" if info.cuda_version else ""
        )
    t = Table(title=title, title_justify="left")
    for col in ("GPU", "Name", "Memory MiB", "Util %", "Temp C", "Power W"):
        t.add_column(col)
    for d in info.devices:
        t.add_row(
            str(d.id),
            d.name or "?",
            _mb(d.memory_used_mb, d.memory_total_mb),
            "-" if d.util is None else str(d.util),
            "-" if d.temp_c is None else f"{d.temp_c:g}",
            "-" if d.power_w is None else f"{d.power_w:g}",
        )
    console.print(t)
    if info.processes:
        p = Table(title="GPU processes", title_justify="left")
        for col in ("GPU", "PID", "Name", "Memory MiB"):
            p.add_column(col)
        for pr in info.processes:
            p.add_row(
                "?" if pr.device is None else str(pr.device),
                str(pr.pid),
                pr.name,
                "-" if pr.memory_mb is None else str(pr.memory_mb),
            )
        console.print(p)
    _warnings(console, info.warnings)


def render_docker(console: Console, info: DockerInfo | Unavailable) -> None:
    if isinstance(info, Unavailable):
        _missing(console, info)
        return
    which = "all" if not info.filtered else "matching " + "/".join(info.patterns)
    console.print(
        f"[bold]Docker[/] engine {info.server_version} (API {info.api_version}): "
        f"{info.total_containers} container(s), {info.total_images} image(s); showing {which}"
    )
    if info.containers:
        t = Table(title="Containers", title_justify="left")
        for col in ("Name", "Image", "State", "Status"):
            t.add_column(col)
        for c in info.containers:
            t.add_row(c.name, c.image, c.state, c.status or "")
        console.print(t)
    if info.images:
        t = Table(title="Images", title_justify="left")
        for col in ("Tags", "ID", "Size"):
            t.add_column(col)
        for im in info.images:
            t.add_row(", ".join(im.tags) or "<none>", im.id, _gib(im.size_bytes))
        console.print(t)
    if not info.containers and not info.images:
        console.print(f"  no {which} containers or images")


def render_scan(console: Console, result: ScanResult | Unavailable, models: bool, datasets: bool) -> None:
    if isinstance(result, Unavailable):
        _missing(console, result)
        return
    if models:
        if result.models and console.width < 110:
            # Narrow: one block per model, lines broken between words (a table would fold every word).
            from rich.markup import escape

            console.print("[bold]Models[/]", highlight=False)
            for m in result.models:
                params = "" if m.param_count is None else f", {m.param_count / 1e9:.2f}B params ({m.param_count_source})"
                status = "[green]ok[/]" if m.is_model else "[yellow]" + escape("; ".join(m.missing)) + "[/]"
                console.print(f"  [bold]{escape(m.name)}[/]  {status}", highlight=False)
                console.print(f"    {escape(m.architecture or '?')}, {m.num_layers or '?'} layers, "
                              f"{m.num_attention_heads or '?'}/{m.num_kv_heads or '?'} heads/KV, hidden "
                              f"{m.hidden_size or '?'}{escape(params)}", highlight=False)
                console.print(f"    {escape(m.path)}", highlight=False, soft_wrap=True)
        elif result.models:
            t = Table(title="Models", title_justify="left")
            t.add_column("Model", no_wrap=True)
            for col in ("Architecture", "Layers", "Heads/KV", "Hidden", "Params", "Status", "Path"):
                t.add_column(col, overflow="fold")
            for m in result.models:
                params = (
                    "-" if m.param_count is None else f"{m.param_count / 1e9:.2f}B ({m.param_count_source})"
                )
                status = "[green]ok[/]" if m.is_model else "[yellow]" + "; ".join(m.missing) + "[/]"
                t.add_row(
                    m.name,
                    m.architecture or "?",
                    str(m.num_layers or "?"),
                    f"{m.num_attention_heads or '?'}/{m.num_kv_heads or '?'}",
                    str(m.hidden_size or "?"),
                    params,
                    status,
                    m.path,
                )
            console.print(t)
        else:
            console.print("[bold]Models[/]: no model directories found", highlight=False)
    if datasets:
        if result.parquet_files:
            console.print(f"[bold]Parquet files[/]: {len(result.parquet_files)}")
            for f in result.parquet_files[:20]:
                console.print(f"  {f.path}")
            if len(result.parquet_files) > 20:
                console.print(f"  … and {len(result.parquet_files) - 20} more")
        else:
            console.print("[bold]Parquet files[/]: none found", highlight=False)
    line = (
        f"  scanned {', '.join(result.roots)} to depth {result.max_depth}: {result.dirs_listed} dirs in "
        f"{result.elapsed_s:.2f} s"
    )
    console.print(line + (" [yellow](budget spent)[/]" if result.timed_out else ""))
    if result.missing_roots:
        console.print(f"  not present: {', '.join(result.missing_roots)}")
    for path in result.unfinished:
        console.print(f"  [yellow]not finished (stalled?):[/] {path}")
    if result.unreached_count:
        console.print(
            f"  [yellow]not reached:[/] {result.unreached_count} dir(s), e.g. {', '.join(result.unreached[:3])}"
        )
    for u in result.unreadable[:10]:
        console.print(f"  [yellow]unreadable:[/] {u.path} ({u.error})")


def render_datasets(console: Console, checks: list[DatasetInfo | Unavailable]) -> None:
    for c in checks:
        if isinstance(c, Unavailable):
            _missing(console, c)
            continue
        verdict = "[green]verl format[/]" if c.verl_ok else "[red]not verl format[/]"
        console.print(f"  {c.path}: {c.num_rows} rows, {verdict}")
        for f in c.findings:
            if f.severity.value != "info":
                console.print(f"    {f.line()}")


def render_network(console: Console, info: NetworkInfo | Unavailable) -> None:
    if isinstance(info, Unavailable):
        _missing(console, info)
        return
    console.print(
        f"[bold]Network[/]: host {info.hostname}, default route via {info.default_interface or '?'}"
        f" ({info.default_gateway or 'no gateway'}), primary IPv4 {info.primary_ipv4 or '?'}"
    )
    console.print(f"  hostname -I: {' '.join(info.host_ips) or '(none)'}")
    for i in info.interfaces:
        if i.is_loopback:
            continue
        state = "up" if i.is_up else ("down" if i.is_up is False else "?")
        console.print(f"  {i.name}: {state}, {' '.join(i.ipv4) or 'no IPv4'}")
    _warnings(console, info.warnings)


def render_system(console: Console, info: SystemInfo | Unavailable) -> None:
    if isinstance(info, Unavailable):
        _missing(console, info)
        return
    console.print(f"[bold]System[/]: {info.cpu_count} CPUs, {_gib(info.memory_total_bytes)} RAM")
    if isinstance(info.shm, DiskSpace):
        console.print(f"  /dev/shm: {_gib(info.shm.total_bytes)} ({_gib(info.shm.free_bytes)} free)")
    for d in info.disks:
        if isinstance(d, DiskSpace):
            console.print(
                f"  free at {d.path}: {_gib(d.free_bytes)} of {_gib(d.total_bytes)} (measured at {d.checked_path})"
            )
    if isinstance(info.cann, CannInfo):
        if info.cann.present:
            console.print(f"  CANN: {info.cann.toolkit_set_env} (version {info.cann.toolkit_version or '?'})")
        else:
            console.print(f"  CANN: not installed ({'; '.join(info.cann.notes)})")


def render_machine(console: Console, state: MachineState) -> None:
    """Every probe's section, then one list of what is not available (each said once)."""
    if isinstance(state.npu, NpuInfo):
        render_npu(console, state.npu)
    if isinstance(state.gpu, GpuInfo):
        render_gpu(console, state.gpu)
    if isinstance(state.docker, DockerInfo):
        render_docker(console, state.docker)
    if isinstance(state.scan, ScanResult):
        render_scan(console, state.scan, models=True, datasets=True)
        render_datasets(console, [d for d in state.datasets if isinstance(d, DatasetInfo)])
    if isinstance(state.network, NetworkInfo):
        render_network(console, state.network)
    if isinstance(state.system, SystemInfo):
        render_system(console, state.system)
    missing = state.unavailable()
    if missing:
        console.print("[bold]Not available on this machine:[/]")
        for u in missing:
            console.print(f"  {u.probe}: {u.reason}")
