"""What the pre-check found, as the wizard needs it: the *detected* layer of pre-fills, and the rows of the
device, model, dataset, container and image lists (with what makes an entry unsuitable)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from verlctl.checks.devices import npu_logical_id
from verlctl.detect.datasets import DatasetInfo
from verlctl.detect.docker_probe import ContainerInfo, DockerInfo, ImageInfo
from verlctl.detect.gpu import GpuInfo
from verlctl.detect.machine import MachineState
from verlctl.detect.models import ModelInfo
from verlctl.detect.network import NetworkInfo
from verlctl.detect.npu import NpuInfo

_VAL_NAME = re.compile(r"(val|valid|test|eval|aime|dev)", re.I)
_TRAIN_NAME = re.compile(r"(train|dapo)", re.I)


@dataclass
class DeviceRow:
    id: int  # the id for ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES
    kind: str  # "NPU" / "GPU"
    label: str
    problem: str | None = None  # "busy: ..." / "health: ..."; None when free and healthy

    @property
    def free(self) -> bool:
        return self.problem is None


def device_rows(machine: MachineState) -> list[DeviceRow]:
    rows: list[DeviceRow] = []
    if isinstance(machine.npu, NpuInfo) and machine.npu.devices:
        busy: dict[int, int] = {}
        for p in machine.npu.processes:
            busy[p.device] = busy.get(p.device, 0) + 1
        for d in machine.npu.devices:
            # A3 NPUs have two chips, each its own device (Phy-ID); 310 cards list 'Chip Device'.
            ident = npu_logical_id(d)
            parts = [f"NPU {d.id}" + (f" chip {d.chip}" if d.chip is not None and machine.npu.family == "a3" else "")]
            if d.name:
                parts.append(d.name)
            if d.hbm_total_mb:
                parts.append(f"HBM {d.hbm_used_mb or 0}/{d.hbm_total_mb} MB")
            problem = None
            if d.health is not None and d.health != "OK":
                problem = f"health: {d.health}"
            elif d.id in busy:
                problem = f"busy: {busy[d.id]} process(es)"
            rows.append(DeviceRow(ident, "NPU", "  ".join(parts), problem))
    elif isinstance(machine.gpu, GpuInfo) and machine.gpu.devices:
        gbusy: dict[int, int] = {}
        for gp in machine.gpu.processes:
            if gp.device is not None:
                gbusy[gp.device] = gbusy.get(gp.device, 0) + 1
        for g in machine.gpu.devices:
            parts = [f"GPU {g.id}"]
            if g.name:
                parts.append(g.name)
            if g.memory_total_mb:
                parts.append(f"{g.memory_used_mb or 0}/{g.memory_total_mb} MiB")
            rows.append(DeviceRow(g.id, "GPU", "  ".join(parts), f"busy: {gbusy[g.id]} process(es)" if g.id in gbusy else None))
    seen: set[int] = set()
    unique = []
    for r in rows:
        if r.id not in seen:
            seen.add(r.id)
            unique.append(r)
    return unique


def models(machine: MachineState) -> list[ModelInfo]:
    return list(machine.models)


def model_title(m: ModelInfo) -> str:
    bits = [m.architecture or m.model_type or "?"]
    if m.params_billions is not None:
        bits.append(f"{m.params_billions:.1f}B")
    if m.num_attention_heads:
        bits.append(f"{m.num_attention_heads} heads/{m.num_kv_heads or m.num_attention_heads} KV")
    if m.num_layers:
        bits.append(f"{m.num_layers} layers")
    return f"{m.name}  {m.path}  ({', '.join(bits)})"


def datasets(machine: MachineState) -> list[tuple[str, DatasetInfo | None]]:
    """Every parquet file found, with its schema check when one was made."""
    checks = {d.path: d for d in machine.datasets if isinstance(d, DatasetInfo)}
    scan = machine.scan
    files = [f.path for f in scan.parquet_files] if scan is not None and hasattr(scan, "parquet_files") else []
    for p in checks:
        if p not in files:
            files.append(p)
    return [(p, checks.get(p)) for p in files]


def dataset_summary(info: DatasetInfo | None) -> str:
    if info is None:
        return "schema not checked"
    cols = ", ".join(c.name for c in info.columns[:6]) + (", …" if len(info.columns) > 6 else "")
    rows = f"{info.num_rows} rows" if info.num_rows is not None else "rows ?"
    verdict = "verl schema ok" if info.verl_ok else "verl schema problems"
    return f"{rows}; {cols}; {verdict}"


def dataset_description(info: DatasetInfo | None) -> str:
    if info is None:
        return "the schema of this file was not checked during detection (it is checked when chosen)"
    lines = [f"{c.name}: {c.type}" for c in info.columns]
    lines += [f"{f.severity.value}: {f.message}" for f in info.findings]
    return "; ".join(lines)


def dataset_problem(info: DatasetInfo | None) -> str | None:
    if info is None:
        return None
    from verlctl.checks.findings import Severity

    errors = [f for f in info.findings if f.severity is Severity.ERROR]
    return errors[0].message if errors else None


def docker(machine: MachineState) -> DockerInfo | None:
    return machine.docker if isinstance(machine.docker, DockerInfo) else None


def containers(machine: MachineState) -> list[ContainerInfo]:
    d = docker(machine)
    return list(d.containers) if d else []


def images(machine: MachineState) -> list[ImageInfo]:
    d = docker(machine)
    return [i for i in d.images if i.tags] if d else []


def image_tags(machine: MachineState) -> list[str]:
    return [t for i in images(machine) for t in i.tags]


def prefill(machine: MachineState) -> dict[str, Any]:
    """The detected layer: what the questions are pre-filled with (an accepted pre-fill stays 'detected')."""
    out: dict[str, Any] = {}
    if machine.accelerator is not None:
        out["device"] = machine.accelerator
    rows = device_rows(machine)
    if rows:
        free = [r.id for r in rows if r.free]
        out["cluster.devices"] = free or [r.id for r in rows]
    if isinstance(machine.network, NetworkInfo) and machine.network.default_interface:
        out["cluster.socket_ifname"] = machine.network.default_interface
    usable = [m for m in machine.models if m.is_model]
    if usable:
        out["paths.model"] = usable[0].path
    files = [(p, i) for p, i in datasets(machine) if dataset_problem(i) is None]
    train = next((p for p, _ in files if _TRAIN_NAME.search(p.rsplit("/", 1)[-1])), None)
    val = next((p for p, _ in files if p != train and _VAL_NAME.search(p.rsplit("/", 1)[-1])), None)
    if train is None and files:
        train = next((p for p, _ in files if p != val), None)
    if val is None and files:
        val = next((p for p, _ in files if p != train), train)
    if train:
        out["paths.train_files"] = [train]
    if val:
        out["paths.val_files"] = [val]
    # No container is pre-filled: the default is a new container created for this run. Reusing an existing
    # one (possibly a colleague's) is an explicit choice in round 2, which shows who created it.
    # No image is pre-filled either: the default stays the seeds' verl image (DEFAULT_IMAGE), whatever other
    # images this host holds (a local tag that sorts first may hold no verl at all); round 2 lists the local
    # ones after it.
    return out


VERLCTL_RUN_LABEL = "io.verlctl.run"


def container_owner(c: ContainerInfo) -> str:
    """Who created the container: a verlctl run (its label), or not verlctl."""
    run = c.labels.get(VERLCTL_RUN_LABEL)
    if run:
        exp = c.labels.get("io.verlctl.experiment")
        return f"created by verlctl, run {run}" + (f" ({exp})" if exp else "")
    return "not created by verlctl"


def container_mounts_text(c: ContainerInfo) -> str:
    return "mounts " + ", ".join(c.mounts) if c.mounts else "mounts nothing"


def container_title(c: ContainerInfo) -> str:
    return f"reuse {c.name}  (image {c.image or '?'}, {c.state}; {container_owner(c)}; {container_mounts_text(c)})"


def summary_line(machine: MachineState) -> str:
    parts: list[str] = []
    rows = device_rows(machine)
    if rows:
        free = sum(1 for r in rows if r.free)
        parts.append(f"{len(rows)} {rows[0].kind}(s), {free} free")
    else:
        parts.append("no NPU/GPU")
    d = docker(machine)
    parts.append(f"{len(d.containers)} verl container(s), {len(images(machine))} image(s)" if d else "no docker engine")
    parts.append(f"{sum(1 for m in machine.models if m.is_model)} model(s)")
    parts.append(f"{len(datasets(machine))} parquet file(s)")
    return ", ".join(parts)


def supported_version(installed: str | None) -> str | None:
    """The verl version verlctl targets that an installed distribution version is (0.7.0.post1 -> 0.7.0)."""
    from verlctl import SUPPORTED_VERL_VERSIONS

    m = re.match(r"(\d+\.\d+\.\d+)", installed or "")
    return m.group(1) if m and m.group(1) in SUPPORTED_VERL_VERSIONS else None


@functools.lru_cache(maxsize=16)
def image_verl_version(image: str, timeout: float = 60.0) -> str | None:
    """The verl distribution installed in the local ``image`` (read as ``check`` reads it in a container: the
    versions snippet of ``detect/check_probes.py``, here in a throw-away container of the image); None when
    the image is not local, has no verl, or the engine does not answer in time."""
    from verlctl.detect.check_probes import VERSIONS_SNIPPET, parse_versions
    from verlctl.errors import VerlctlError
    from verlctl.runtime import containers

    try:
        client = containers.connect(timeout)
    except VerlctlError:
        return None
    try:
        out = containers.run_in_image(client, image, ["python3", "-c", VERSIONS_SNIPPET], timeout)
    finally:
        client.close()
    versions = parse_versions(out, f"image {image}") if out else None
    return versions.stack.get("verl") if versions is not None else None
