"""Checks that need the machine: paths, devices, the model's shape against the parallel layout, the network
interface, the image and the container.

Two halves:

* the ``check_*`` functions are pure: a spec plus probe results (a :class:`MachineState` built by
  ``detect_machine`` or by hand from parsed captures, a :class:`ModelInfo`, file and checkpoint probes,
  :class:`DockerFacts`) in, findings out. ``field`` is always the spec path the finding is about.
* :func:`collect_facts` runs the probes, each bounded by a time budget, and the in-container fallbacks
  (the parquet schema check and the checkpoint probe) when the spec's container exists and runs. It only
  reads, except for the write test of the checkpoint directory (a temp file, created and removed).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel

from verlctl.checks.findings import Finding, error, info, warning
from verlctl.checks.storage import StorageFacts, check_checkpoint_storage, collect_storage
from verlctl.detect.common import (
    CallTimeout,
    Unavailable,
    UnavailableCode,
    call_with_timeout,
    run_probes_concurrently,
    unavailable,
)
from verlctl.detect.datasets import (
    DatasetInfo,
    inspect_parquet,
    parquet_check_argv,
    parse_parquet_check_output,
)
from verlctl.detect.gpu import GpuInfo
from verlctl.detect.machine import MachineState
from verlctl.detect.models import ModelInfo, inspect_model
from verlctl.detect.network import NetInterface, NetworkInfo
from verlctl.detect.npu import NpuDevice, NpuInfo
from verlctl.spec.model import RunSpec
from verlctl.spec.resolve import ResolvedSpec

#: Bytes per parameter of one actor checkpoint: bf16 weights (2) + fp32 master weights (4) + Adam m (4)
#: + Adam v (4). GRPO/DAPO have no critic; the reference model is never saved.
CHECKPOINT_BYTES_PER_PARAM = 2 + 4 + 4 + 4
CHECKPOINT_FORMULA = "params × (2 + 4 + 4 + 4) bytes: bf16 weights + fp32 master weights + Adam m and v"
#: Below this many checkpoints of free space: a warning (verl keeps every checkpoint unless told otherwise).
COMFORTABLE_CHECKPOINTS = 3
DEFAULT_BUDGET_S = 20.0

#: Overrides that set an uneven pipeline layout: the even-split rule of layers over PP does not apply.
UNEVEN_PP_KEYS = (
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "pipeline_num_transformer_layers",
)
PARQUET_INSTALL_HINT = "pip install 'verlctl[parquet]' (pyarrow) on this host"

# --------------------------------------------------------------------------------------------------
# Probe results the checks read (besides MachineState and ModelInfo)
# --------------------------------------------------------------------------------------------------

FileProblem = Literal["ok", "missing", "not_file", "unreadable", "not_parquet"]


class FileProbe(BaseModel):
    """A host-side look at one dataset file: does it exist, can it be read, does it start like parquet."""

    path: str
    problem: FileProblem = "ok"
    detail: str | None = None
    size_bytes: int | None = None


class DatasetCheck(BaseModel):
    """One dataset file of the spec: the file probe and, when it could be read, its schema check."""

    field: str  # paths.train_files / paths.val_files
    path: str
    file: FileProbe | Unavailable
    verl_schema: DatasetInfo | Unavailable | None = None  # None: not attempted (the file itself failed)


class CheckpointProbe(BaseModel):
    """The checkpoint directory (or its nearest existing parent): writable for real, and free space."""

    path: str
    checked_path: str
    exists: bool  # the checkpoint directory itself exists
    is_dir: bool = True
    writable: bool = False
    error: str | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None
    checked_in: str = "host"  # "host" or "container <name>"


class DockerFacts(BaseModel):
    """The engine, the spec's image and the spec's container, as the Docker engine reports them."""

    image: str
    container: str
    engine_version: str | None = None
    error: str | None = None  # why the engine could not be asked (None: it answered every question)
    image_present: bool | None = None
    exists: bool = False
    state: str | None = None
    container_image: str | None = None
    image_note: str | None = None  # the container runs another image than the spec's
    missing_mounts: list[tuple[str, str]] = []  # (spec field, path) the existing container does not mount

    @property
    def running(self) -> bool:
        return self.exists and self.state == "running"


class CheckFacts(BaseModel):
    """Everything ``verlctl check`` learned about this machine for one spec."""

    machine: MachineState
    model: ModelInfo | Unavailable | None = None
    datasets: list[DatasetCheck] = []
    checkpoint: CheckpointProbe | Unavailable | None = None
    docker: DockerFacts | None = None  # None with container.runtime: host
    master_ips: list[str] = []  # cluster.master_addr resolved to IPv4 addresses
    storage: StorageFacts | None = None  # multi-node: where the checkpoint directory lives
    recipe_missing: str | None = None  # the recipe entry file the work dir lacks (0.7.0 DAPO / one-step-off)


# --------------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------------


def _ids(values: list[int]) -> str:
    return ", ".join(str(v) for v in values) if values else "none"


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _valid(limit: int, ok: Callable[[int], bool]) -> list[int]:
    return [t for t in range(1, max(1, limit) + 1) if ok(t)]


def params_text(n: int) -> str:
    """``7615616512`` -> ``'7.62B'``; ``494032768`` -> ``'494.0M'``; small counts as they are."""
    if n >= 10**9:
        return f"{n / 1e9:.2f}B"
    if n >= 10**6:
        return f"{n / 1e6:.1f}M"
    return str(n)


def checkpoint_bytes(param_count: int) -> int:
    """Size of one actor checkpoint (see :data:`CHECKPOINT_BYTES_PER_PARAM`)."""
    return param_count * CHECKPOINT_BYTES_PER_PARAM


def total_devices(spec: RunSpec) -> int:
    return max(1, len(spec.cluster.nodes)) * len(spec.cluster.devices)


# --------------------------------------------------------------------------------------------------
# paths.model
# --------------------------------------------------------------------------------------------------


def check_model_path(spec: RunSpec, model: ModelInfo | Unavailable | None) -> list[Finding]:
    """``paths.model`` is a readable Hugging Face model directory (config.json, weights, tokenizer)."""
    path = spec.paths.model
    if path is None or model is None:
        return []
    field = "paths.model"
    if isinstance(model, Unavailable):
        return [warning("model_unchecked", f"{path} was not checked: {model.reason}", field)]
    missing = model.missing
    if "does not exist" in missing:
        return [
            error(
                "model_missing",
                f"{path} does not exist",
                field,
                "download the model there (e.g. `huggingface-cli download ORG/NAME --local-dir DIR`) or fix "
                "paths.model",
            )
        ]
    if "not a directory" in missing:
        return [error("model_not_dir", f"{path} is not a directory (a Hugging Face model is a directory)", field)]
    listing = [m for m in missing if m.startswith("cannot be listed")]
    if listing:
        return [error("model_unreadable", f"{path} {listing[0]}", field, "fix the directory's permissions")]
    out: list[Finding] = []
    if missing:
        out.append(
            error(
                "model_incomplete",
                f"{path} is not a complete Hugging Face model directory: {'; '.join(missing)}",
                field,
                "a model directory needs config.json, the weights (*.safetensors or pytorch_model*.bin) and the "
                "tokenizer files",
            )
        )
    if model.warnings:
        out.append(warning("model_warnings", f"{path}: {'; '.join(model.warnings)}", field))
    return out


# --------------------------------------------------------------------------------------------------
# paths.train_files / paths.val_files
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# paths.checkpoints
# --------------------------------------------------------------------------------------------------


def check_checkpoints(
    spec: RunSpec, probe: CheckpointProbe | Unavailable | None, model: ModelInfo | Unavailable | None
) -> list[Finding]:
    """The checkpoint directory can be written and has room for one checkpoint (three to be comfortable)."""
    field = "paths.checkpoints"
    path = spec.paths.checkpoints
    if probe is None or path is None:
        return []
    if isinstance(probe, Unavailable):
        hint = (
            "checkpoints under the container work dir live in the container (lost with it): set "
            "paths.checkpoints to a host directory, which is mounted at the same path"
            if probe.code is UnavailableCode.NOT_PRESENT
            else None
        )
        return [warning("checkpoint_unchecked", f"{path} was not checked: {probe.reason}", field, hint)]
    where = "" if probe.checked_in == "host" else f" (in {probe.checked_in})"
    target = path if probe.exists else f"{probe.checked_path}, the nearest existing parent of {path},"
    if not probe.is_dir:
        return [error("checkpoint_not_dir", f"{probe.checked_path} is not a directory{where}", field)]
    if not probe.writable:
        return [
            error(
                "checkpoint_not_writable",
                f"{target} is not writable{where}: {probe.error or 'permission denied'}",
                field,
                "choose a writable paths.checkpoints, or fix the directory's permissions / mount",
            )
        ]
    return _checkpoint_space(spec, probe, model, where)


def _checkpoint_space(
    spec: RunSpec, probe: CheckpointProbe, model: ModelInfo | Unavailable | None, where: str
) -> list[Finding]:
    field = "paths.checkpoints"
    if spec.train.save_freq == -1:
        return []  # no checkpoints are saved (spec_checks warns about that)
    params = model.param_count if isinstance(model, ModelInfo) else None
    if probe.free_bytes is None:
        return [warning("checkpoint_space_unknown", f"free space at {probe.checked_path} is unknown{where}", field)]
    if params is None:
        return [
            info(
                "checkpoint_size_unknown",
                f"{_size(probe.free_bytes)} free at {probe.checked_path}{where}; the checkpoint size is unknown "
                "(no parameter count for the model)",
                field,
            )
        ]
    one = checkpoint_bytes(params)
    fits = probe.free_bytes // one if one else COMFORTABLE_CHECKPOINTS
    size = f"one checkpoint of a {params_text(params)}-parameter model is about {_size(one)} ({CHECKPOINT_FORMULA})"
    free = f"{_size(probe.free_bytes)} free at {probe.checked_path}{where}"
    if fits < 1:
        return [
            error(
                "checkpoint_space",
                f"{free}: not enough for a single checkpoint; {size}",
                field,
                f"free at least {_size(one - probe.free_bytes)} or choose a larger disk for paths.checkpoints",
            )
        ]
    if fits < COMFORTABLE_CHECKPOINTS:
        return [
            warning(
                "checkpoint_space_low",
                f"{free}: room for {fits} checkpoint(s) only; {size}",
                field,
                "verl keeps every checkpoint: free space, or set trainer.max_actor_ckpt_to_keep in extra_overrides",
            )
        ]
    return []


# --------------------------------------------------------------------------------------------------
# cluster.devices
# --------------------------------------------------------------------------------------------------


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


def _npu_findings(spec: RunSpec, npu: NpuInfo) -> list[Finding]:
    by_id: dict[int, list[NpuDevice]] = {}
    for d in npu.devices:
        by_id.setdefault(npu_logical_id(d), []).append(d)
    out: list[Finding] = []
    for dev in spec.cluster.devices:
        chips = by_id.get(dev)
        if not chips:
            out.append(_device_missing("NPU", "npu-smi info", dev, sorted(by_id)))
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
        procs = [p for p in npu.processes if any(p.device == c.id and p.chip in (None, c.chip) for c in chips)]
        if procs:
            out.append(_device_busy("NPU", dev, [(p.pid, p.name) for p in procs]))
    return out


def _gpu_findings(spec: RunSpec, gpu: GpuInfo) -> list[Finding]:
    out: list[Finding] = []
    for dev in spec.cluster.devices:
        if dev not in gpu.gpu_ids:
            out.append(_device_missing("GPU", "nvidia-smi", dev, gpu.gpu_ids))
            continue
        procs = [(p.pid, p.name) for p in gpu.processes if p.device == dev]
        if procs:
            out.append(_device_busy("GPU", dev, procs))
    return out


def _device_missing(kind: str, tool: str, dev: int, present: list[int]) -> Finding:
    return error(
        "device_missing",
        f"{kind} {dev} is not in the output of {tool} (it shows {kind} {_ids(present)})",
        "cluster.devices",
        f"choose cluster.devices from: {_ids(present)}",
    )


def _device_busy(kind: str, dev: int, procs: list[tuple[int, str]]) -> Finding:
    from verlctl.runtime.holders import describe_device_holder

    listed = ", ".join(f"{pid} ({name or '?'})" for pid, name in procs)
    # Whose they are (an earlier run still holding the devices, Ascend's EJ0001): verlctl offers to stop
    # only the processes of runs it recorded.
    holders = "; ".join(describe_device_holder(pid) for pid, _ in procs[:4])
    return warning(
        "device_busy",
        f"{kind} {dev} is in use by {len(procs)} process(es): {listed}",
        "cluster.devices",
        "stop those processes, or choose free devices: training on a busy device runs out of memory. " + holders,
    )


def device_tool_findings(spec: RunSpec) -> list[Finding]:
    """The missing-tool finding of ``check`` for ``launch`` (which runs no other machine check)."""
    import shutil

    tool = "npu-smi" if spec.device == "npu" else "nvidia-smi"
    if shutil.which(tool) is not None:
        return []
    return [_tool_unavailable(spec, Unavailable(probe=tool, code=UnavailableCode.NOT_FOUND, reason=f"{tool} not found"))]


def check_devices(spec: RunSpec, machine: MachineState) -> list[Finding]:
    """The chosen devices exist, are healthy (NPU health OK) and are not busy."""
    result: NpuInfo | GpuInfo | Unavailable | None = machine.npu if spec.device == "npu" else machine.gpu
    if result is None:
        return []
    if isinstance(result, Unavailable):
        return [_tool_unavailable(spec, result)]
    if isinstance(result, NpuInfo):
        return _npu_findings(spec, result)
    return _gpu_findings(spec, result)


# --------------------------------------------------------------------------------------------------
# The model's shape against TP / PP / VPP
# --------------------------------------------------------------------------------------------------


def megatron_tp_ok(heads: int, kv: int, tp: int) -> bool:
    """Megatron: num_attention_heads and num_query_groups are multiples of the TP size."""
    return heads % tp == 0 and kv % tp == 0


def vllm_tp_ok(heads: int, kv: int, tp: int) -> bool:
    """vLLM: heads divisible by TP; KV heads divisible by TP, or (fewer KV heads than TP) replicated evenly."""
    return heads % tp == 0 and (kv % tp == 0 if kv >= tp else tp % kv == 0)


def _train_tp(spec: RunSpec, model: ModelInfo, heads: int, kv: int) -> list[Finding]:
    tp = spec.train.tensor_parallel
    if megatron_tp_ok(heads, kv, tp):
        return []
    which = f"{heads} attention heads" if heads % tp else f"{kv} key/value heads (query groups)"
    choices = _valid(total_devices(spec), lambda t: megatron_tp_ok(heads, kv, t))
    return [
        error(
            "model_tp_heads",
            f"{model.name or model.path} has {which}, not divisible by the training TP {tp} (Megatron requires "
            "num_attention_heads and num_query_groups to be multiples of tensor_model_parallel_size)",
            "train.tensor_parallel",
            f"valid training TP for this model: {_ids(choices)}",
        )
    ]


def _rollout_tp(spec: RunSpec, model: ModelInfo, heads: int, kv: int) -> list[Finding]:
    rtp = spec.train.rollout_tensor_parallel or spec.train.tensor_parallel
    if vllm_tp_ok(heads, kv, rtp):
        return []
    engine = spec.train.rollout_engine
    if heads % rtp:
        why = f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({rtp})"
    else:
        why = f"{kv} key/value heads can be neither split nor replicated evenly over tensor parallel size {rtp}"
    choices = _valid(total_devices(spec), lambda t: vllm_tp_ok(heads, kv, t))
    return [
        error(
            "model_rollout_tp_heads",
            f"{model.name or model.path}: the rollout ({engine}) fails with '{why}'",
            "train.rollout_tensor_parallel",
            f"valid rollout TP for this model: {_ids(choices)}",
        )
    ]


def _layers(spec: RunSpec, model: ModelInfo, layers: int, vpp_on: bool, recompute_on: bool = False) -> list[Finding]:
    pp = spec.train.pipeline_parallel
    name = model.name or model.path
    if layers % pp:
        choices = _valid(min(layers, total_devices(spec)), lambda p: layers % p == 0)
        return [
            error(
                "model_layers_pp",
                f"{name} has {layers} layers, which do not split evenly over PP {pp} pipeline stages",
                "train.pipeline_parallel",
                f"valid PP for this model: {_ids(choices)} (or an uneven layout with "
                "num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage)",
            )
        ]
    vpp = spec.features.vpp_size
    recompute = spec.features.recompute_num_layers
    if recompute_on and spec.features.recompute_method == "uniform" and layers % (pp * (vpp if vpp_on else 1)) == 0:
        # Megatron's uniform recompute splits each pipeline stage's (model chunk's) layers into groups of
        # recompute_num_layers (verl v0.9.0 docs/ascend_tutorial/feature_support/npu_advance_features.md:219).
        chunk = layers // pp // (vpp if vpp_on else 1)
        if chunk % recompute:
            where = f"{chunk} per pipeline stage (PP {pp})" + (f", per virtual stage (vpp {vpp})" if vpp_on else "")
            return [
                error(
                    "model_recompute_layers",
                    f"{name} has {layers} layers, {where}: recompute_method uniform needs recompute_num_layers "
                    f"({recompute}) to divide them",
                    "features.recompute_num_layers",
                    f"valid recompute_num_layers: {_ids([d for d in range(1, chunk + 1) if chunk % d == 0])}, "
                    "or recompute_method block",
                )
            ]
    if vpp_on and layers % (pp * vpp):
        sizes = [v for v in range(2, layers // pp + 1) if (layers // pp) % v == 0]
        pps = _valid(min(layers, total_devices(spec)), lambda p: layers % (p * vpp) == 0)
        return [
            error(
                "model_layers_vpp",
                f"{name} has {layers} layers: {layers // pp} per pipeline stage (PP {pp}) do not split into "
                f"{vpp} virtual stages (layers must be divisible by PP × vpp_size = {pp * vpp})",
                "features.vpp_size",
                f"valid vpp_size with PP {pp}: {_ids(sizes)}; valid PP with vpp_size {vpp}: {_ids(pps)}; or turn vpp off",
            )
        ]
    return []


def check_model_fit(
    spec: RunSpec, model: ModelInfo | Unavailable | None, vpp_on: bool = False, recompute_on: bool = False
) -> list[Finding]:
    """Heads and KV heads divisible by the training TP (Megatron) and the rollout TP (vLLM); layers by PP
    (by PP × vpp_size with the vpp feature on). Nothing when the model's shape is unknown."""
    if not isinstance(model, ModelInfo):
        return []
    out: list[Finding] = []
    heads, kv, layers = model.num_attention_heads, model.num_kv_heads or model.num_attention_heads, model.num_layers
    megatron = spec.strategy == "megatron"
    if heads and kv:
        if megatron:
            out += _train_tp(spec, model, heads, kv)
        out += _rollout_tp(spec, model, heads, kv)
    uneven = any(k in o for o in spec.extra_overrides for k in UNEVEN_PP_KEYS)
    if megatron and layers and not uneven:
        out += _layers(spec, model, layers, vpp_on, recompute_on)
    return out


# --------------------------------------------------------------------------------------------------
# cluster.socket_ifname / cluster.master_addr
# --------------------------------------------------------------------------------------------------


def local_ipv4(network: NetworkInfo) -> set[str]:
    addrs = {a for i in network.interfaces for a in i.ipv4_addresses}
    return addrs | {a for a in network.host_ips if ":" not in a}


def is_head(spec: RunSpec, network: NetworkInfo, master_ips: list[str]) -> bool:
    """As start_verl.sh decides: a single node is the head; otherwise the node that has master_addr."""
    if len(spec.cluster.nodes) <= 1:
        return True
    return bool(set(master_ips) & local_ipv4(network))


def _find_interface(network: NetworkInfo, name: str) -> NetInterface | None:
    return network.interface(name) or next((i for i in network.interfaces if name in i.altnames), None)


def _interface_choices(network: NetworkInfo) -> str:
    usable = [i for i in network.interfaces if not i.is_loopback and i.is_up is not False]
    listed = [f"{i.name} ({', '.join(i.ipv4_addresses) or 'no IPv4'})" for i in usable]
    return ", ".join(listed) or "none up"


def _check_ifname(spec: RunSpec, network: NetworkInfo) -> tuple[list[Finding], NetInterface | None]:
    name = spec.cluster.socket_ifname
    if not name:
        return [], None
    iface = _find_interface(network, name)
    if iface is None:
        return [
            error(
                "socket_ifname_unknown",
                f"network interface {name} does not exist on this machine",
                "cluster.socket_ifname",
                f"interfaces here: {_interface_choices(network)}",
            )
        ], None
    if iface.is_up is False:
        return [
            error(
                "socket_ifname_down",
                f"network interface {name} is down",
                "cluster.socket_ifname",
                f"bring it up (`ip link set {name} up`) or choose another: {_interface_choices(network)}",
            )
        ], iface
    return [], iface


def _check_master(
    spec: RunSpec, network: NetworkInfo, iface: NetInterface | None, master_ips: list[str]
) -> list[Finding]:
    master = spec.cluster.master_addr
    if not master:
        return []
    field = "cluster.master_addr"
    if not master_ips:
        return [error("master_addr_unresolved", f"master_addr {master} does not resolve to an IPv4 address", field)]
    local = local_ipv4(network)
    if not is_head(spec, network, master_ips):
        return [info("not_head", f"this machine is not the Ray head {master}: it was checked as a worker node", field)]
    if not set(master_ips) & local:
        return [
            error(
                "master_addr_not_local",
                f"master_addr {master} is not an address of this machine, which is the Ray head "
                "(`ray start --head --node-ip-address` fails)",
                field,
                f"addresses here: {', '.join(sorted(local)) or 'none'}",
            )
        ]
    if iface is not None and not set(master_ips) & set(iface.ipv4_addresses):
        carrier = next((i.name for i in network.interfaces if set(master_ips) & set(i.ipv4_addresses)), "?")
        return [
            error(
                "master_addr_not_on_ifname",
                f"master_addr {master} is on interface {carrier}, not on socket_ifname {iface.name} "
                f"({', '.join(iface.ipv4_addresses) or 'no IPv4'})",
                field,
                f"set socket_ifname: {carrier}, or a master_addr of {iface.name}",
            )
        ]
    return []


def check_network(
    spec: RunSpec, network: NetworkInfo | Unavailable | None, master_ips: list[str] | None = None
) -> list[Finding]:
    """socket_ifname exists and is up; on the head, master_addr is this machine's and on that interface."""
    c = spec.cluster
    if not c.socket_ifname and not c.master_addr:
        return []
    if network is None:
        return []
    if isinstance(network, Unavailable):
        field = "cluster.socket_ifname" if c.socket_ifname else "cluster.master_addr"
        return [warning("network_unchecked", f"the network interfaces were not checked: {network.reason}", field)]
    ips = master_ips if master_ips is not None else _literal_ipv4(c.master_addr)
    found, iface = _check_ifname(spec, network)
    return found + _check_master(spec, network, iface, ips)


def _literal_ipv4(addr: str | None) -> list[str]:
    if not addr:
        return []
    try:
        return [str(ipaddress.IPv4Address(addr))]
    except ValueError:
        return []


# --------------------------------------------------------------------------------------------------
# container.image / container.name / the engine
# --------------------------------------------------------------------------------------------------


def check_docker(spec: RunSpec, docker: DockerFacts | None, image_explicit: bool = False) -> list[Finding]:
    """The engine answers; the image is local (or pulling is configured); the container's state and mounts."""
    c = spec.container
    if c.runtime != "docker" or docker is None:
        return []
    if docker.error is not None:
        return [
            error(
                "docker_engine",
                f"container.runtime is docker but {docker.error}",
                "container.runtime",
                "start dockerd (or set DOCKER_HOST), or use container.runtime: host",
            )
        ]
    if docker.exists:
        return _existing_container(spec, docker, image_explicit)
    out = [
        info(
            "container_absent",
            f"container {c.name} does not exist: launch creates it from {c.image}",
            "container.name",
        )
    ]
    return out + _image(spec, docker)


def _image(spec: RunSpec, docker: DockerFacts) -> list[Finding]:
    c = spec.container
    if docker.image_present is None or docker.image_present:
        return []
    if c.pull:
        return [info("image_pull", f"image {c.image} is not present locally: launch pulls it (container.pull)", "container.image")]
    return [
        error(
            "image_missing",
            f"image {c.image} is not present locally and pulling is not configured",
            "container.image",
            f"`docker pull {c.image}`, set container.pull: true (or launch --pull), or choose a local image",
        )
    ]


def _existing_container(spec: RunSpec, docker: DockerFacts, image_explicit: bool) -> list[Finding]:
    c = spec.container
    out = [
        info(
            "container_state",
            f"container {c.name} exists ({docker.state}, image {docker.container_image}): launch reuses it"
            + ("" if docker.running else " and starts it"),
            "container.name",
        )
    ]
    if docker.image_note:
        make = error if image_explicit else warning
        out.append(
            make(
                "container_image",
                docker.image_note,
                "container.image",
                "choose another container.name to get a new container of the spec's image",
            )
        )
    for field, path in docker.missing_mounts:
        out.append(
            error(
                "container_mount_missing",
                f"container {c.name} does not mount {path}, so training in it cannot see {field}",
                field,
                "mounts cannot be added to an existing container: use another container.name (a new container gets "
                "every mount), or recreate it with the mount",
            )
        )
    return out


# --------------------------------------------------------------------------------------------------
# All machine checks
# --------------------------------------------------------------------------------------------------


def _recompute_on(resolved: ResolvedSpec) -> bool:
    from verlctl.verl.compose import effective_version, resolve_features

    states, _ = resolve_features(resolved, effective_version(resolved)[0])
    st = states.get("recompute")
    return bool(st and st.on and st.applicable)


def machine_findings(resolved: ResolvedSpec, facts: CheckFacts, vpp_on: bool = False) -> list[Finding]:
    """Every machine check of one spec, from the facts :func:`collect_facts` gathered (or a test built)."""
    spec = resolved.spec
    out: list[Finding] = []
    out += check_model_path(spec, facts.model)
    out += check_datasets(facts.datasets, facts.docker, spec.container.runtime)
    out += check_checkpoints(spec, facts.checkpoint, facts.model)
    out += check_devices(spec, facts.machine)
    out += check_model_fit(spec, facts.model, vpp_on, _recompute_on(resolved))
    out += check_network(spec, facts.machine.network, facts.master_ips)
    out += check_docker(spec, facts.docker, resolved.explicit("container.image"))
    out += check_checkpoint_storage(spec, facts.storage)
    out += check_recipe(spec, facts.recipe_missing)
    return out


# ==================================================================================================
# Collecting the facts (runs the probes)
# ==================================================================================================

CHECKPOINT_PROBE_SNIPPET = r"""
import json, os, sys, tempfile

def probe(path):
    target = os.path.abspath(path)
    cur = target
    while not os.path.lexists(cur):
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    out = {"path": path, "checked_path": cur, "exists": cur == target, "is_dir": os.path.isdir(cur)}
    if not out["is_dir"]:
        out["writable"] = False
        out["error"] = "not a directory"
        return out
    try:
        fd, tmp = tempfile.mkstemp(prefix=".verlctl-write-check-", dir=cur)
    except OSError as e:
        out["writable"] = False
        out["error"] = e.strerror or str(e)
    else:
        os.close(fd)
        os.unlink(tmp)
        out["writable"] = True
    try:
        st = os.statvfs(cur)
        out["free_bytes"] = st.f_bavail * st.f_frsize
        out["total_bytes"] = st.f_blocks * st.f_frsize
    except OSError as e:
        out["error"] = out.get("error") or ("statvfs: %s" % (e.strerror or e))
    return out

if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1])))
"""

_CHECKPOINT_NS: dict[str, Any] | None = None


def probe_checkpoint_dir(path: str, timeout: float = DEFAULT_BUDGET_S) -> CheckpointProbe | Unavailable:
    """Really try to write in ``path`` (or its nearest existing parent) and measure its free space, here."""
    global _CHECKPOINT_NS
    if _CHECKPOINT_NS is None:
        ns: dict[str, Any] = {"__name__": "verlctl_checkpoint_probe"}
        exec(compile(CHECKPOINT_PROBE_SNIPPET, "<verlctl checkpoint probe>", "exec"), ns)
        _CHECKPOINT_NS = ns
    fn = _CHECKPOINT_NS["probe"]
    try:
        record = call_with_timeout(lambda: fn(path), timeout, "verlctl-checkpoint")
    except CallTimeout:
        return unavailable("checkpoints", UnavailableCode.TIMEOUT, f"{path} did not answer within {timeout:g} s")
    except OSError as exc:
        return unavailable("checkpoints", UnavailableCode.FAILED, f"{path}: {exc.strerror or exc}")
    return CheckpointProbe.model_validate(record)


def parse_checkpoint_probe(text: str, where: str) -> CheckpointProbe | Unavailable:
    import json

    try:
        record = json.loads(text.strip().splitlines()[-1])
        probe = CheckpointProbe.model_validate(record)
    except (ValueError, IndexError) as exc:
        return unavailable("checkpoints", UnavailableCode.FAILED, f"the probe in {where} printed no result: {exc}")
    probe.checked_in = where
    return probe


_PARQUET_MAGIC = b"PAR1"


def probe_file(path: str) -> FileProbe:
    """Exists, is a regular file, can be read, starts with the parquet magic (never opens a FIFO)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return FileProbe(path=path, problem="missing")
    except OSError as exc:
        return FileProbe(path=path, problem="unreadable", detail=exc.strerror or str(exc))
    if stat.S_ISDIR(st.st_mode):
        return FileProbe(path=path, problem="not_file", detail="a directory")
    if not stat.S_ISREG(st.st_mode):
        return FileProbe(path=path, problem="not_file", detail="not a regular file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_PARQUET_MAGIC))
    except OSError as exc:
        return FileProbe(path=path, problem="unreadable", detail=exc.strerror or str(exc))
    if head != _PARQUET_MAGIC:
        return FileProbe(path=path, problem="not_parquet", detail=f"starts with {head!r}, not {_PARQUET_MAGIC!r}")
    return FileProbe(path=path, size_bytes=st.st_size)


def check_dataset_file(field: str, path: str, timeout: float) -> DatasetCheck:
    """The file probe, then the schema check with this host's pyarrow (each bounded)."""
    check = DatasetCheck(field=field, path=path, file=_bounded(lambda: probe_file(path), timeout, "datasets", path))
    if isinstance(check.file, FileProbe) and check.file.problem == "ok":
        check.verl_schema = _bounded(lambda: inspect_parquet(path), timeout, "datasets", path)
    return check


def _bounded(fn: Callable[[], Any], timeout: float, probe: str, what: str) -> Any:
    try:
        return call_with_timeout(fn, timeout, f"verlctl-{probe}")
    except CallTimeout:
        return unavailable(probe, UnavailableCode.TIMEOUT, f"{what} did not answer within {timeout:g} s")
    except Exception as exc:  # an OS error on a broken mount: a result, never a traceback
        return unavailable(probe, UnavailableCode.ERROR, f"{what}: {type(exc).__name__}: {exc}")


def dataset_paths(spec: RunSpec) -> list[tuple[str, str]]:
    p = spec.paths
    return [("paths.train_files", f) for f in p.train_files or []] + [("paths.val_files", f) for f in p.val_files or []]


class _Docker:
    """The Docker side of the collection: the facts, and the running container (for in-container checks)."""

    def __init__(self, facts: DockerFacts, client: Any = None, container_id: str | None = None) -> None:
        self.facts = facts
        self.client = client
        self.container_id = container_id

    def executor(self) -> Any:
        if self.client is None or self.container_id is None or not self.facts.running:
            return None
        from verlctl.runtime.executor import DockerExecutor

        return DockerExecutor(self.client, self.container_id, self.facts.container)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def collect_docker(spec: RunSpec, timeout: float) -> _Docker:
    from verlctl.errors import VerlctlError
    from verlctl.runtime import containers

    c = spec.container
    facts = DockerFacts(image=c.image, container=c.name)
    try:
        client = containers.connect(timeout)
    except VerlctlError as exc:
        facts.error = exc.message
        return _Docker(facts)
    found = _Docker(facts, client)
    try:
        facts.engine_version = client.version().get("Version")
        facts.image_present = containers.image_present(client, c.image)
        existing = containers.find_container(client, c.name)
        if existing is not None:
            plan = containers.plan_container(client, spec, allow_pull=True, image_explicit=False)
            facts.exists, facts.state = True, plan.state
            # the reference the container was created from (an image's first tag may be another alias)
            facts.container_image = existing.attrs.get("Config", {}).get("Image") or plan.existing_image
            facts.image_note = plan.notes[0] if plan.notes else None
            facts.missing_mounts = [_split_mount_note(m) for m in plan.missing_mounts]
            found.container_id = existing.id
    except VerlctlError as exc:
        facts.error = exc.message
    except Exception as exc:  # transport errors of the SDK are not all DockerException
        facts.error = f"the Docker engine failed: {' '.join(str(exc).split())[:200]}"
    return found


def _split_mount_note(note: str) -> tuple[str, str]:
    """``'paths.model (/mnt/models/x)'`` -> ``('paths.model', '/mnt/models/x')``."""
    field, _, rest = note.partition(" (")
    return field, rest.rstrip(")")


def _container_datasets(checks: list[DatasetCheck], docker: _Docker, timeout: float) -> None:
    """Schema checks that failed for want of pyarrow here: run them in the running container instead."""
    ex = docker.executor()
    todo = [
        c
        for c in checks
        if isinstance(c.verl_schema, Unavailable) and c.verl_schema.code is UnavailableCode.MISSING_DEPENDENCY
    ]
    if ex is None or not todo:
        return
    unmounted = {path for _, path in docker.facts.missing_mounts}
    for c in [c for c in todo if any(c.path == p or c.path.startswith(p.rstrip("/") + "/") for p in unmounted)]:
        c.verl_schema = unavailable(
            "datasets", UnavailableCode.NOT_PRESENT, f"no pyarrow here, and container {ex.name} does not mount it"
        )
        todo.remove(c)
    if not todo:
        return
    from verlctl.errors import VerlctlError

    try:
        res = ex.run(parquet_check_argv([c.path for c in todo]), timeout=timeout)
    except VerlctlError as exc:
        for c in todo:
            c.verl_schema = unavailable("datasets", UnavailableCode.FAILED, f"in container {ex.name}: {exc.message}")
        return
    results = parse_parquet_check_output(res.out, "container") if res.ok else []
    if len(results) != len(todo):
        reason = (res.err or res.out).strip()[-200:] or f"exit {res.code}"
        for c in todo:
            c.verl_schema = unavailable("datasets", UnavailableCode.FAILED, f"the check in container {ex.name} failed: {reason}")
        return
    for c, r in zip(todo, results):
        c.verl_schema = r


def _checkpoint_inside_container(spec: RunSpec) -> bool:
    """Paths under the container's work dir are not mounted: they live in the container."""
    path, workdir = spec.paths.checkpoints, spec.container.workdir.rstrip("/")
    return spec.container.runtime == "docker" and path is not None and (path == workdir or path.startswith(workdir + "/"))


def _collect_checkpoint(spec: RunSpec, docker: _Docker | None, timeout: float) -> CheckpointProbe | Unavailable | None:
    path = spec.paths.checkpoints
    if path is None:
        return None
    if not _checkpoint_inside_container(spec):
        return probe_checkpoint_dir(path, timeout)
    ex = docker.executor() if docker is not None else None
    if ex is None:
        return unavailable(
            "checkpoints",
            UnavailableCode.NOT_PRESENT,
            f"{path} is under the container work dir {spec.container.workdir} (inside container "
            f"{spec.container.name}), and that container is not running",
        )
    from verlctl.errors import VerlctlError

    try:
        res = ex.run(["python3", "-c", CHECKPOINT_PROBE_SNIPPET, path], timeout=timeout)
    except VerlctlError as exc:
        return unavailable("checkpoints", UnavailableCode.FAILED, exc.message)
    return parse_checkpoint_probe(res.out, f"container {ex.name}")


def collect_recipe(resolved: ResolvedSpec, docker: _Docker | None, timeout: float) -> str | None:
    """The recipe entry file (e.g. recipe/dapo/main_dapo.py) when the work dir lacks it; None when present,
    not needed, or not checkable (the container is not running)."""
    from verlctl.verl.compose import effective_version
    from verlctl.verl.entrypoints import entry_for

    spec = resolved.spec
    entry = entry_for(effective_version(resolved)[0], spec.algorithm, spec.mode, spec.strategy)
    if entry.source_file is None:
        return None
    path = f"{spec.container.workdir.rstrip('/')}/{entry.source_file}"
    if spec.container.runtime == "host":
        return None if os.path.isfile(path) else entry.source_file
    ex = docker.executor() if docker is not None else None
    if ex is None:
        return None
    from verlctl.errors import VerlctlError

    try:
        res = ex.run(["test", "-f", path], timeout=timeout)
    except VerlctlError:
        return None
    return None if res.ok else entry.source_file


def check_recipe(spec: RunSpec, missing: str | None) -> list[Finding]:
    from verlctl.verl.entrypoints import RECIPE_HINT

    if missing is None:
        return []
    return [error("recipe_missing", f"no {missing} in the work dir {spec.container.workdir}", "container.workdir",
                  RECIPE_HINT)]


def _resolve_ipv4(addr: str | None, timeout: float) -> list[str]:
    if not addr:
        return []
    literal = _literal_ipv4(addr)
    if literal:
        return literal

    def lookup() -> list[str]:
        infos = socket.getaddrinfo(addr, None, socket.AF_INET, socket.SOCK_STREAM)
        return sorted({str(i[4][0]) for i in infos})

    result = _bounded(lookup, timeout, "network", f"resolving {addr}")
    return result if isinstance(result, list) else []


def _as_result(value: object, probe: str) -> Any:
    if isinstance(value, CallTimeout):
        return unavailable(probe, UnavailableCode.TIMEOUT, f"the {probe} check did not finish in time")
    if isinstance(value, BaseException):
        return unavailable(probe, UnavailableCode.ERROR, f"the {probe} check failed: {type(value).__name__}: {value}")
    return value


def _machine_result(spec: RunSpec, value: object) -> MachineState:
    """The probes' MachineState; if detect_machine itself failed, say so in the fields the checks read."""
    if isinstance(value, MachineState):
        return value
    failed = _as_result(value if isinstance(value, BaseException) else CallTimeout(), "machine")
    if spec.device == "npu":
        return MachineState(npu=failed, network=failed)
    return MachineState(gpu=failed, network=failed)


def _dataset_results(spec: RunSpec, value: object) -> list[DatasetCheck]:
    if isinstance(value, list):
        return value
    failed = _as_result(value if isinstance(value, BaseException) else CallTimeout(), "datasets")
    return [DatasetCheck(field=f, path=p, file=failed) for f, p in dataset_paths(spec)]


def collect_facts(resolved: ResolvedSpec, budget_s: float = DEFAULT_BUDGET_S) -> CheckFacts:
    """Run every probe ``check`` needs, at the same time, each within ``budget_s``; then the in-container
    fallbacks (parquet schemas without pyarrow here, checkpoints under the container work dir)."""
    from verlctl.detect.machine import DetectOptions, detect_machine

    spec = resolved.spec
    probes: list[Any] = ["npu" if spec.device == "npu" else "gpu", "network", "system"]
    options = DetectOptions(
        probes=probes, npu_timeout_s=budget_s, gpu_timeout_s=budget_s, system_timeout_s=min(budget_s, 5.0)
    )
    calls: dict[str, tuple[Callable[[], object], float]] = {
        "machine": (lambda: detect_machine(options), 2 * budget_s + 5),
        "datasets": (lambda: [check_dataset_file(f, p, budget_s) for f, p in dataset_paths(spec)], budget_s * 2 + 2),
        "ips": (lambda: _resolve_ipv4(spec.cluster.master_addr, budget_s), budget_s + 1),
    }
    if spec.paths.model:
        model_path = spec.paths.model
        calls["model"] = (lambda: inspect_model(model_path), budget_s)
    if spec.container.runtime == "docker":
        calls["docker"] = (lambda: collect_docker(spec, budget_s), 3 * budget_s + 5)
    got = run_probes_concurrently(calls)
    machine = _machine_result(spec, got["machine"])
    docker = got.get("docker")
    docker = docker if isinstance(docker, _Docker) else None
    if spec.container.runtime == "docker" and docker is None:
        docker = _Docker(DockerFacts(image=spec.container.image, container=spec.container.name,
                                     error=f"the Docker engine did not answer within {budget_s:g} s"))
    datasets = _dataset_results(spec, got["datasets"])
    try:
        if docker is not None:
            _container_datasets(datasets, docker, budget_s)
        checkpoint = _collect_checkpoint(spec, docker, budget_s)
        recipe_missing = collect_recipe(resolved, docker, budget_s)
    finally:
        if docker is not None:
            docker.close()
    return CheckFacts(
        machine=machine,
        model=_as_result(got["model"], "model") if "model" in got else None,
        datasets=datasets,
        checkpoint=checkpoint,
        docker=docker.facts if docker is not None else None,
        master_ips=got["ips"] if isinstance(got["ips"], list) else [],
        storage=collect_storage(spec),
        recipe_missing=recipe_missing,
    )


# --------------------------------------------------------------------------------------------------
# The machine summary of `check --json`
# --------------------------------------------------------------------------------------------------


def _accelerator_summary(spec: RunSpec, machine: MachineState) -> dict[str, Any]:
    result = machine.npu if spec.device == "npu" else machine.gpu
    tool = "npu-smi" if spec.device == "npu" else "nvidia-smi"
    if isinstance(result, Unavailable):
        return {"tool": tool, "status": "unavailable", "reason": result.reason}
    if isinstance(result, NpuInfo):
        busy: dict[int, list[int]] = {}
        for p in result.processes:
            busy.setdefault(p.device, []).append(p.pid)
        devices = [
            {"id": npu_logical_id(d), "npu": d.id, "chip": d.chip, "name": d.name, "health": d.health,
             "pids": busy.get(d.id, [])}
            for d in result.devices
        ]
        return {"tool": tool, "status": "ok", "version": result.tool_version, "devices": devices}
    if isinstance(result, GpuInfo):
        devices = [
            {"id": d.id, "name": d.name, "pids": [p.pid for p in result.processes if p.device == d.id]}
            for d in result.devices
        ]
        return {"tool": tool, "status": "ok", "version": result.driver_version, "devices": devices}
    return {"tool": tool, "status": "not_checked"}


def _network_summary(spec: RunSpec, network: NetworkInfo | Unavailable | None, master_ips: list[str]) -> dict[str, Any]:
    if not isinstance(network, NetworkInfo):
        return {"status": "unavailable", "reason": network.reason if network else "not checked"}
    name = spec.cluster.socket_ifname
    iface = _find_interface(network, name) if name else None
    return {
        "status": "ok",
        "default_interface": network.default_interface,
        "socket_ifname": name,
        "socket_ifname_up": iface.is_up if iface else None,
        "socket_ifname_ipv4": iface.ipv4_addresses if iface else [],
        "master_addr": spec.cluster.master_addr,
        "master_ips": master_ips,
        "is_head": is_head(spec, network, master_ips),
    }


def _model_summary(model: ModelInfo | Unavailable | None) -> dict[str, Any] | None:
    if model is None:
        return None
    if isinstance(model, Unavailable):
        return {"status": "unavailable", "reason": model.reason}
    return model.model_dump(
        include={"path", "is_model", "missing", "num_layers", "num_attention_heads", "num_kv_heads",
                 "param_count", "param_count_source"}
    )


def _dataset_summary(check: DatasetCheck) -> dict[str, Any]:
    out: dict[str, Any] = {"field": check.field, "path": check.path}
    out["file"] = check.file.problem if isinstance(check.file, FileProbe) else check.file.reason
    s = check.verl_schema
    if isinstance(s, DatasetInfo):
        out.update(checked_in=s.checked_in, num_rows=s.num_rows, verl_ok=s.verl_ok)
    elif isinstance(s, Unavailable):
        out.update(schema="unavailable", reason=s.reason)
    return out


def summarize(resolved: ResolvedSpec, facts: CheckFacts) -> dict[str, Any]:
    """A compact, JSON-ready view of what was found (``check --json``'s ``machine``)."""
    spec = resolved.spec
    machine = facts.machine
    model = facts.model if isinstance(facts.model, ModelInfo) else None
    ckpt: dict[str, Any] | None = None
    if isinstance(facts.checkpoint, CheckpointProbe):
        ckpt = facts.checkpoint.model_dump()
        ckpt["checkpoint_bytes"] = checkpoint_bytes(model.param_count) if model and model.param_count else None
    elif isinstance(facts.checkpoint, Unavailable):
        ckpt = {"status": "unavailable", "reason": facts.checkpoint.reason}
    return {
        "hostname": machine.hostname,
        "collected_at": machine.collected_at,
        "device": spec.device,
        "accelerator": _accelerator_summary(spec, machine),
        "network": _network_summary(spec, machine.network, facts.master_ips),
        "docker": facts.docker.model_dump() if facts.docker else {"status": "not_used (container.runtime: host)"},
        "model": _model_summary(facts.model),
        "datasets": [_dataset_summary(c) for c in facts.datasets],
        "checkpoints": ckpt,
        "unavailable": [u.line() for u in machine.unavailable()],
    }


def describe_machine(resolved: ResolvedSpec, facts: CheckFacts) -> list[str]:
    """A few lines for people: what was looked at, before the findings."""
    s = summarize(resolved, facts)
    acc = s["accelerator"]
    lines = [f"host {s['hostname'] or '?'}"]
    if acc["status"] == "ok":
        lines.append(f"{acc['tool']}: {len(acc['devices'])} device(s)")
    else:
        lines.append(f"{acc['tool']}: {acc.get('reason', acc['status'])}")
    d = facts.docker
    if d is None:
        lines.append("docker: not used (container.runtime: host)")
    elif d.error:
        lines.append(f"docker: {d.error}")
    else:
        state = f"{d.state}" if d.exists else "absent"
        present = "present" if d.image_present else "not present"
        lines.append(f"docker {d.engine_version}: image {d.image} {present}; container {d.container} {state}")
    m = facts.model
    if isinstance(m, ModelInfo) and m.param_count:
        lines.append(
            f"model {m.name}: {params_text(m.param_count)} params, {m.num_layers} layers, "
            f"{m.num_attention_heads} heads / {m.num_kv_heads} KV heads"
        )
    return lines
