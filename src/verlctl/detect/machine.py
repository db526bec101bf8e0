"""The machine pre-check as one value: :class:`MachineState`, built by :func:`detect_machine`.

Every probe runs at the same time in its own daemon thread with its own timeout; a probe that
cannot run gives an :class:`~verlctl.detect.common.Unavailable` in its field, a probe not asked
for leaves its field ``None``. ``MachineState`` round-trips through JSON and can be built by hand
from parsed fixtures (``MachineState(npu=parse_npu_smi_info(text))``) without running anything.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import socket
import time
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from verlctl.detect.common import (
    CallTimeout,
    ProbeModel,
    Unavailable,
    UnavailableCode,
    run_probes_concurrently,
    start_bounded,
    unavailable,
)
from verlctl.detect.datasets import DatasetInfo, inspect_parquet
from verlctl.detect.docker_probe import DockerInfo, probe_docker
from verlctl.detect.gpu import GpuInfo, probe_gpu
from verlctl.detect.models import ModelInfo
from verlctl.detect.network import NetworkInfo, probe_network
from verlctl.detect.npu import NpuInfo, probe_npu
from verlctl.detect.scan import (
    DEFAULT_BUDGET_S,
    DEFAULT_MAX_DEPTH,
    DEFAULT_SCAN_ROOTS,
    ScanOptions,
    ScanResult,
    scan,
)
from verlctl.detect.system import DEFAULT_ASCEND_ROOT, CannInfo, DiskSpace, disk_space, probe_cann, shm_space

ProbeName = Literal["npu", "gpu", "docker", "models", "datasets", "network", "system"]
ALL_PROBES: tuple[ProbeName, ...] = ("npu", "gpu", "docker", "models", "datasets", "network", "system")


NpuResult = Annotated[NpuInfo | Unavailable, Field(discriminator="status")]
GpuResult = Annotated[GpuInfo | Unavailable, Field(discriminator="status")]
DockerResult = Annotated[DockerInfo | Unavailable, Field(discriminator="status")]
ScanOutcome = Annotated[ScanResult | Unavailable, Field(discriminator="status")]
DatasetResult = Annotated[DatasetInfo | Unavailable, Field(discriminator="status")]
NetworkResult = Annotated[NetworkInfo | Unavailable, Field(discriminator="status")]
DiskResult = Annotated[DiskSpace | Unavailable, Field(discriminator="status")]
CannResult = Annotated[CannInfo | Unavailable, Field(discriminator="status")]


class SystemInfo(ProbeModel):
    cpu_count: int | None = None
    memory_total_bytes: int | None = None
    shm: DiskResult | None = None
    disks: list[DiskResult] = []
    cann: CannResult | None = None


SystemResult = Annotated[SystemInfo | Unavailable, Field(discriminator="status")]


class DetectOptions(BaseModel):
    probes: list[ProbeName] = list(ALL_PROBES)
    scan_roots: list[str] = list(DEFAULT_SCAN_ROOTS)
    max_depth: int = DEFAULT_MAX_DEPTH
    budget_s: float = DEFAULT_BUDGET_S  # the model/dataset scan's time budget
    scan_workers: int = 8
    all_docker: bool = False
    board: bool = False  # also run `npu-smi info -t board -i N` per NPU
    disk_paths: list[str] = []  # free space at these paths (nearest existing parent)
    ascend_root: str = DEFAULT_ASCEND_ROOT
    dataset_check_limit: int = 20  # schema-check at most this many parquet files
    dataset_check_timeout_s: float = 10.0
    npu_timeout_s: float = 20.0
    gpu_timeout_s: float = 20.0
    docker_timeout_s: float = 10.0
    system_timeout_s: float = 5.0


class MachineState(BaseModel):
    """What verlctl knows about this machine. Fields are None when their probe was not run."""

    schema_version: int = 1
    hostname: str | None = None
    collected_at: str | None = None  # ISO 8601, UTC
    npu: NpuResult | None = None
    gpu: GpuResult | None = None
    docker: DockerResult | None = None
    scan: ScanOutcome | None = None  # model directories and parquet files
    datasets: list[DatasetResult] = []  # schema checks of (some of) the parquet files found
    network: NetworkResult | None = None
    system: SystemResult | None = None
    durations_s: dict[str, float] = {}

    @property
    def models(self) -> list[ModelInfo]:
        return self.scan.models if isinstance(self.scan, ScanResult) else []

    @property
    def accelerator(self) -> Literal["npu", "gpu"] | None:
        if isinstance(self.npu, NpuInfo) and self.npu.devices:
            return "npu"
        if isinstance(self.gpu, GpuInfo) and self.gpu.devices:
            return "gpu"
        return None

    def unavailable(self) -> list[Unavailable]:
        """Every probe that could not give its result (for a 'what is missing' list)."""
        out: list[Unavailable] = []
        for value in (self.npu, self.gpu, self.docker, self.scan, self.network, self.system):
            if isinstance(value, Unavailable):
                out.append(value)
        out.extend(d for d in self.datasets if isinstance(d, Unavailable))
        if isinstance(self.system, SystemInfo):
            for v in (self.system.shm, self.system.cann, *self.system.disks):
                if isinstance(v, Unavailable):
                    out.append(v)
        return out


def check_datasets(paths: list[str], timeout: float) -> list[DatasetInfo | Unavailable]:
    """Schema-check ``paths`` one after another in a daemon thread; those not reached in time are
    reported as timed out (a parquet file on a stalled mount cannot hang the caller)."""
    done: list[DatasetInfo | Unavailable] = []

    def work() -> None:
        for p in paths:
            done.append(inspect_parquet(p))
            if isinstance(done[-1], Unavailable) and done[-1].code is UnavailableCode.MISSING_DEPENDENCY:
                return

    thread, _box = start_bounded(work, "verlctl-datasets")
    thread.join(max(0.0, timeout))
    results = list(done)
    if (
        results
        and isinstance(results[-1], Unavailable)
        and results[-1].code is UnavailableCode.MISSING_DEPENDENCY
    ):
        return [
            unavailable(
                "datasets",
                UnavailableCode.MISSING_DEPENDENCY,
                "pyarrow not installed; the parquet schemas were not checked "
                "(install verlctl[parquet] or check inside the training container)",
            )
        ]
    for p in paths[len(results) :]:
        results.append(
            unavailable("datasets", UnavailableCode.TIMEOUT, f"{p}: not checked within {timeout:g} s")
        )
    return results


def _system(opt: DetectOptions) -> SystemInfo:
    import psutil

    info = SystemInfo(cpu_count=os.cpu_count())
    with contextlib.suppress(OSError):
        info.memory_total_bytes = psutil.virtual_memory().total
    info.shm = shm_space(opt.system_timeout_s)
    seen: set[str] = set()
    for path in opt.disk_paths:  # one entry per file system location actually measured
        d = disk_space(path, opt.system_timeout_s)
        key = d.checked_path if isinstance(d, DiskSpace) else path
        if key not in seen:
            seen.add(key)
            info.disks.append(d)
    info.cann = probe_cann(opt.ascend_root, opt.system_timeout_s)
    return info


def _scan_and_check(opt: DetectOptions) -> tuple[ScanResult, list[DatasetInfo | Unavailable]]:
    want_models = "models" in opt.probes
    want_data = "datasets" in opt.probes
    result = scan(
        ScanOptions(
            roots=opt.scan_roots,
            max_depth=opt.max_depth,
            budget_s=opt.budget_s,
            workers=opt.scan_workers,
            models=want_models,
            parquet=want_data,
        )
    )
    checks: list[DatasetInfo | Unavailable] = []
    if want_data and result.parquet_files and opt.dataset_check_limit > 0:
        paths = [f.path for f in result.parquet_files[: opt.dataset_check_limit]]
        checks = check_datasets(paths, opt.dataset_check_timeout_s)
    return result, checks


def detect_machine(options: DetectOptions | None = None) -> MachineState:
    """Run the asked-for probes concurrently; returns within about the largest probe timeout."""
    opt = options or DetectOptions()
    probes = set(opt.probes)
    calls: dict[str, tuple[object, float]] = {}
    margin = 2.0
    if "npu" in probes:
        calls["npu"] = (lambda: probe_npu(opt.npu_timeout_s, board=opt.board), opt.npu_timeout_s * 2 + margin)
    if "gpu" in probes:
        calls["gpu"] = (lambda: probe_gpu(opt.gpu_timeout_s), opt.gpu_timeout_s * 2 + margin)
    if "docker" in probes:
        calls["docker"] = (
            lambda: probe_docker(opt.all_docker, timeout=opt.docker_timeout_s),
            opt.docker_timeout_s * 3 + margin,
        )
    if "network" in probes:
        calls["network"] = (probe_network, opt.system_timeout_s + margin)
    if "system" in probes:
        calls["system"] = (lambda: _system(opt), opt.system_timeout_s * (3 + len(opt.disk_paths)) + margin)
    if probes & {"models", "datasets"}:
        calls["scan"] = (lambda: _scan_and_check(opt), opt.budget_s + opt.dataset_check_timeout_s + margin)

    started = time.monotonic()
    finished: dict[str, float] = {}

    def timed(name: str, fn: object) -> object:
        def run() -> object:
            value = fn()  # type: ignore[operator]
            finished[name] = round(time.monotonic() - started, 3)
            return value

        return run

    results = run_probes_concurrently({n: (timed(n, fn), t) for n, (fn, t) in calls.items()})  # type: ignore[misc]
    state = MachineState(
        hostname=socket.gethostname(),
        collected_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
    for name, value in results.items():
        probe = "models" if name == "scan" else name
        if isinstance(value, CallTimeout):
            value = unavailable(probe, UnavailableCode.TIMEOUT, f"the {probe} probe did not finish in time")
        elif isinstance(value, BaseException):
            value = unavailable(
                probe, UnavailableCode.ERROR, f"the {probe} probe failed: {type(value).__name__}: {value}"
            )
        if name == "scan":
            if isinstance(value, tuple):
                state.scan, state.datasets = value[0], list(value[1])
            else:
                state.scan = value  # type: ignore[assignment]
        else:
            setattr(state, name, value)
        state.durations_s[name] = finished.get(name, round(time.monotonic() - started, 3))
    return state
