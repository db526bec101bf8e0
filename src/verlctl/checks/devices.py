"""``cluster.devices``: the chosen NPUs / GPUs exist, are healthy and are not busy."""

from __future__ import annotations

from collections.abc import Mapping

from verlctl.checks.findings import Finding, Severity, error, warning
from verlctl.checks.units import id_list
from verlctl.detect.common import Unavailable, UnavailableCode
from verlctl.detect.gpu import GpuInfo
from verlctl.detect.machine import MachineState
from verlctl.detect.npu import NpuDevice, NpuInfo
from verlctl.spec.model import RunSpec


def npu_logical_id(dev: NpuDevice) -> int:
    """The id ASCEND_RT_VISIBLE_DEVICES uses: the Phy-ID of an A3 chip, the 'Chip Device' of a 310, else the NPU id."""
    if dev.phy_id is not None:
        return dev.phy_id
    if dev.device_id is not None:
        return dev.device_id
    return dev.id


def _tool_unavailable(spec: RunSpec, result: Unavailable) -> Finding:
    tool = "npu-smi" if spec.device == "npu" else "nvidia-smi"
    kind = "NPU" if spec.device == "npu" else "GPU"
    if result.code is UnavailableCode.NOT_FOUND:
        hint = (
            "install the Ascend driver (npu-smi is in /usr/local/sbin or /usr/local/bin) and put it on PATH, or set "
            "device: gpu"
            if spec.device == "npu"
            else "install the NVIDIA driver (nvidia-smi) and put it on PATH, or set device: npu"
        )
        message = (f"device is {spec.device} but {tool} is not on PATH: the {kind} driver tool is missing, so the "
                   f"{kind}s cannot be checked")
        if spec.container.runtime == "docker":  # launch checks the container's own tool before training starts
            return warning(f"{tool.replace('-', '_')}_missing",
                           f"{message} here (launch checks {tool} inside the container)", "device", hint)
        return error(f"{tool.replace('-', '_')}_missing", message, "device", hint)
    return error(f"{tool.replace('-', '_')}_failed", f"{tool} did not give the {kind} list: {result.reason}", "device")


def _npu_findings(spec: RunSpec, npu: NpuInfo, holders: Mapping[int, str],
                  runs: Mapping[int, list[str]]) -> list[Finding]:
    by_id: dict[int, list[NpuDevice]] = {}
    for d in npu.devices:
        by_id.setdefault(npu_logical_id(d), []).append(d)
    out: list[Finding] = []
    missing = [dev for dev in spec.cluster.devices if dev not in by_id]
    if missing:
        out.append(_device_missing("NPU", "npu-smi info", missing, sorted(by_id)))
    for dev in spec.cluster.devices:
        chips = by_id.get(dev)
        if not chips:
            continue
        for chip in chips:
            if chip.health is not None and chip.health != "OK":
                out.append(
                    error(
                        "device_unhealthy",
                        f"NPU {dev} ({chip.name or 'NPU'}) health is {chip.health}, not OK",
                        "cluster.devices",
                        f"use healthy devices only; see `npu-smi info -t health -i {chip.id}`",
                    )
                )
    for dev, procs in _npu_busy(spec, npu).items():
        out.append(_device_busy(spec, "NPU", dev, procs, holders, runs))
    return out


def _npu_busy(spec: RunSpec, npu: NpuInfo) -> dict[int, list[tuple[int, str]]]:
    """cluster.devices (logical ids) -> the processes npu-smi shows on them, for the busy ones."""
    out: dict[int, list[tuple[int, str]]] = {}
    for dev in spec.cluster.devices:
        chips = [d for d in npu.devices if npu_logical_id(d) == dev]
        procs = [(p.pid, p.name) for p in npu.processes
                 if any(p.device == c.id and p.chip in (None, c.chip) for c in chips)]
        if procs:
            out[dev] = procs
    return out


def _gpu_busy(spec: RunSpec, gpu: GpuInfo) -> dict[int, list[tuple[int, str]]]:
    out: dict[int, list[tuple[int, str]]] = {}
    for dev in spec.cluster.devices:
        procs = [(p.pid, p.name) for p in gpu.processes if p.device == dev]
        if procs and dev in gpu.gpu_ids:
            out[dev] = procs
    return out


def busy_devices(spec: RunSpec, machine: MachineState) -> dict[int, list[tuple[int, str]]]:
    """The devices of cluster.devices another process holds, by the device tool: id -> [(pid, name)]. The one
    notion of "busy" that the device check and the memory fit (free, not total, memory) share."""
    result = machine.npu if spec.device == "npu" else machine.gpu if spec.device == "gpu" else None
    if isinstance(result, NpuInfo):
        return _npu_busy(spec, result)
    if isinstance(result, GpuInfo):
        return _gpu_busy(spec, result)
    return {}


def _gpu_findings(spec: RunSpec, gpu: GpuInfo, holders: Mapping[int, str],
                  runs: Mapping[int, list[str]]) -> list[Finding]:
    out: list[Finding] = []
    missing = [dev for dev in spec.cluster.devices if dev not in gpu.gpu_ids]
    if missing:
        out.append(_device_missing("GPU", "nvidia-smi", missing, gpu.gpu_ids))
    for dev, procs in _gpu_busy(spec, gpu).items():
        out.append(_device_busy(spec, "GPU", dev, procs, holders, runs))
    return out


def _device_missing(kind: str, tool: str, missing: list[int], present: list[int]) -> Finding:
    """One finding for every listed device the tool does not show (16 devices on an 8-device host: one)."""
    what = f"{kind} {missing[0]} is" if len(missing) == 1 else f"{len(missing)} {kind}s ({id_list(missing)}) are"
    return error(
        "device_missing",
        f"{what} not in the output of {tool} (it shows {kind} {id_list(present)})",
        "cluster.devices",
        f"choose cluster.devices from: {id_list(present)}",
    )


def device_tool_findings(spec: RunSpec) -> list[Finding]:
    """The missing-tool finding of ``check`` for ``launch`` (which runs no other machine check)."""
    import shutil

    if spec.device == "cpu":  # the demo device layer: no driver tool
        return []
    tool = "npu-smi" if spec.device == "npu" else "nvidia-smi"
    if shutil.which(tool) is not None:
        return []
    return [_tool_unavailable(spec, Unavailable(probe=tool, code=UnavailableCode.NOT_FOUND, reason=f"{tool} not found"))]


#: The opt-in that turns a busy device from an error into a warning.
ALLOW_BUSY = "cluster.allow_busy_devices"


def device_busy(spec: RunSpec, message: str, hint: str) -> Finding:
    """A busy device: an error unless the spec opts in (:data:`ALLOW_BUSY`), then a warning. Training there runs
    out of memory or slows the other job down: sharing is a decision, never a default."""
    found = error("device_busy", message, "cluster.devices", hint)
    if spec.cluster.allow_busy_devices:
        found = found.model_copy(update={"severity": Severity.WARNING})
    return found


def busy_hint(spec: RunSpec, whose: str = "") -> str:
    if spec.cluster.allow_busy_devices:
        return (f"{ALLOW_BUSY} is true: the run shares the device; the memory fit counts only its free memory. "
                + whose).strip()
    return ("stop those processes, or choose free devices in cluster.devices; to share the device deliberately set "
            f"{ALLOW_BUSY}: true (the memory fit then counts only its free memory). " + whose).strip()


def _device_busy(spec: RunSpec, kind: str, dev: int, procs: list[tuple[int, str]], holders: Mapping[int, str],
                 runs: Mapping[int, list[str]]) -> Finding:
    listed = ", ".join(f"{pid} ({name or '?'})" for pid, name in procs)
    # Whose they are (an earlier run still holding the devices, Ascend's EJ0001): verlctl offers to stop
    # only the processes of runs it recorded.
    # The lines come with the facts (``CheckFacts.holders``, collected by the caller from /proc and the run
    # records); a pid without one is listed above only.
    whose = "; ".join(holders[pid] for pid, _ in procs[:4] if pid in holders)
    mine = f"; your live verlctl run {', '.join(runs[dev])} uses it" if runs.get(dev) else ""
    return device_busy(spec, f"{kind} {dev} is in use by {len(procs)} process(es): {listed}{mine}",
                       busy_hint(spec, whose))


def busy_pids(spec: RunSpec, machine: MachineState) -> list[int]:
    """The pids the device tool shows on this machine (first seen first): whose they are is the fact
    :func:`check_devices` reports for a busy device (the caller collects it, see ``runtime.holders``)."""
    result = machine.npu if spec.device == "npu" else machine.gpu if spec.device == "gpu" else None
    if not isinstance(result, (NpuInfo, GpuInfo)):
        return []
    return list(dict.fromkeys(p.pid for p in result.processes))


def check_devices(spec: RunSpec, machine: MachineState, holders: Mapping[int, str] | None = None,
                  runs: Mapping[int, list[str]] | None = None) -> list[Finding]:
    """The chosen devices exist, are healthy (NPU health OK) and are not busy (an error unless
    ``cluster.allow_busy_devices``); ``holders``: pid -> who holds it (one line each, for the busy ones);
    ``runs``: device -> the user's live verlctl runs on it (named in the finding). ``device: cpu`` (the demo
    device layer) has no devices to check."""
    if spec.device == "cpu":
        return []
    result: NpuInfo | GpuInfo | Unavailable | None = machine.npu if spec.device == "npu" else machine.gpu
    if result is None:
        return []
    if isinstance(result, Unavailable):
        return [_tool_unavailable(spec, result)]
    found = (_npu_findings(spec, result, holders or {}, runs or {}) if isinstance(result, NpuInfo)
             else _gpu_findings(spec, result, holders or {}, runs or {}))
    if result.devices and not result.process_table_seen:  # no process list: "not busy" would be a guess
        lister = "npu-smi info" if isinstance(result, NpuInfo) else "nvidia-smi"
        found.append(warning(
            "device_busy_unchecked",
            f"{lister} showed no process list: whether another process holds cluster.devices "
            f"{id_list(list(spec.cluster.devices))} was not checked",
            "cluster.devices",
            f"run `{lister}` and look for processes on those devices before launching",
        ))
    return found


def run_devices_findings(spec: RunSpec, machine: MachineState, runs: Mapping[int, list[str]]) -> list[Finding]:
    """The devices of cluster.devices that a live verlctl run of this user's uses (``runs``: device -> run ids,
    from the run records), but that the device tool does not show busy (the run is still loading, or the tool
    did not answer): busy too, with the same severity and opt-in (O5: two runs on one device both started).
    The devices the tool shows busy are reported by :func:`check_devices`, naming the run."""
    if spec.device == "cpu":
        return []
    shown = set(busy_devices(spec, machine))
    out = []
    for dev in spec.cluster.devices:
        ids = runs.get(dev)
        if not ids or dev in shown:
            continue
        kind = "NPU" if spec.device == "npu" else "GPU"
        out.append(device_busy(
            spec, f"{kind} {dev} is used by your live verlctl run {', '.join(ids)} (its spec's cluster.devices)",
            busy_hint(spec, f"`verlctl stop {ids[0]}` frees it")))
    return out
