"""The run spec: one typed model of everything a user can choose for a verl run.

The model is the single source of truth for configuration: the YAML file, the environment variables,
the CLI flags and the wizard all produce values for these fields, and ``verlctl schema`` publishes its
JSON schema. Unknown keys are rejected (``extra="forbid"``).

Values left as ``None`` are *derived* from other values when the spec is resolved (see
:mod:`verlctl.spec.resolve`), e.g. the rollout TP defaults to the training TP.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
)

VerlVersion = Literal["0.7.0", "0.9.1", "auto"]
Algorithm = Literal["dapo", "grpo"]
Mode = Literal["sync", "one_step_off_policy", "colocate_async", "separate_async", "fully_async"]
#: The modes whose trainer and rollout run on separate devices (they take a device split). The verl knowledge
#: of each mode is :mod:`verlctl.verl.modes` (its ``is_disaggregated``); tests/verl/test_async_modes.py checks that
#: this set is that table's.
DISAGGREGATED_MODES = frozenset({"one_step_off_policy", "separate_async", "fully_async"})
Strategy = Literal["megatron", "fsdp", "fsdp2"]
Device = Literal["npu", "gpu", "cpu"]
#: ``device: cpu`` is verlctl's demo device layer (src/verlctl/demo/device_layer.py): real verl on the CPU, for
#: ``verlctl demo`` and trying verlctl without an accelerator. verl sees a CUDA-family device (trainer.device=cuda,
#: its platform ``cpu`` registered by the layer), so verl knowledge treats it as ``gpu``: :func:`device_family`.


def device_family(device: str) -> str:
    """The device family verl's own code sees: ``npu`` or ``gpu`` (the demo's ``cpu`` runs verl's CUDA path)."""
    return "npu" if device == "npu" else "gpu"

Runtime = Literal["docker", "host"]
SwanlabMode = Literal["cloud", "local", "offline", "disabled"]

DEFAULT_IMAGE = "quay.io/ascend/verl:verl-8.3.rc1-910b-ubuntu22.04-py3.11-v0.7.0"
#: logging.project when none is given (also the middle level of the default checkpoint/log directories).
DEFAULT_PROJECT = "verlctl"

#: Upper bound of every count/size/step field: larger values are typos (``train.steps=10**30``) that would
#: overflow the int32/int64 fields they reach in verl, Ray or torch.
MAX_INT = 2**31 - 1
PositiveInt = Annotated[int, Field(gt=0, le=MAX_INT)]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_INT)]
Port = Annotated[int, Field(ge=1, le=65535)]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


#: Control characters (all of C0 but TAB, and DEL): a NUL is dropped by bash, a newline splits a line of
#: a script or of the env file, a CR hides text on a terminal. No path, name or value needs one.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_CONTROL_NAMES = {"\x00": "a NUL byte", "\n": "a newline", "\r": "a carriage return"}


def _control_char(value: object) -> str | None:
    """A description of the first control character in a string (or in a list/dict of strings)."""
    if isinstance(value, str):
        found = _CONTROL_RE.search(value)
        if found is None:
            return None
        ch = found.group()
        return _CONTROL_NAMES.get(ch, f"the control character {ch!r}")
    if isinstance(value, dict):
        for key, item in value.items():
            bad = _control_char(key) or _control_char(item)
            if bad:
                return f"{bad} (in {key!r})"
        return None
    if not isinstance(value, list):
        return None
    for item in value:
        bad = _control_char(item)
        if bad:
            return bad
    return None


def _number_kind(annotation: object) -> str | None:
    """What number a field of this annotation takes, when it takes no bool: "a whole number" (``int``,
    ``int | None``), "a number" (``float``, ``float | None``), else None."""
    import typing

    def base(t: object) -> object:  # Annotated[int, ...] -> int
        return typing.get_args(t)[0] if typing.get_origin(t) is typing.Annotated else t

    t = base(annotation)
    args = [base(a) for a in typing.get_args(t)] if typing.get_origin(t) is not None else [t]
    if bool in args:
        return None
    return "a whole number" if int in args else "a number" if float in args else None


#: Longest container name / logging name: each becomes a path component, a label or part of one (NAME_MAX 255).
MAX_NAME_LEN = 128

#: A Docker image reference (distribution/reference grammar): [host[:port]/]path[:tag][@digest].
_IMAGE_RE = re.compile(
    r"(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?))*"
    r"(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_int(cls, v: object, info: ValidationInfo) -> object:
        # pydantic takes true/false for a number field as 1/0: `train.steps: true` or `train.lr: true` is a
        # mistake, not a count or a rate
        field = cls.model_fields.get(info.field_name or "")
        kind = _number_kind(field.annotation) if isinstance(v, bool) and field is not None else None
        if kind:
            raise ValueError(f"must be {kind}, not {str(v).lower()}")
        return v

    @field_validator("*")
    @classmethod
    def _no_control_characters(cls, v: object) -> object:
        bad = _control_char(v)
        if bad:
            raise ValueError(f"must not contain {bad}: remove it (write the value on one line)")
        return v


def _csv_list(value: object) -> object:
    """Accept ``"0,1,2"`` (the seeds' form) as well as a YAML list."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        return [p for p in parts if p]
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return value


class FabricSpec(_Strict):
    """The collective fabric test before training (`launch`, `check --fabric`): an all-reduce and a point-to-point
    ring across every node and device, inside the run's containers, with the run's own collective environment."""

    enabled: bool = Field(
        default=True,
        description="Run it before training when the run has more than one device (`launch --skip-fabric` skips it).",
    )
    backend: Literal["auto", "hccl", "nccl", "gloo"] = Field(
        default="auto", description="torch.distributed backend: auto = hccl on NPU, nccl on GPU.",
    )
    min_link_gbps: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Slowest point-to-point link allowed, GB/s. Default: half the per-device line rate of the "
        "usual scale-out network, 12.5 on NPU (one 200GE RoCE port per NPU on Atlas 800T A2) and 25 on GPU (one "
        "400 Gb/s NIC per GPU on DGX H100); not checked on the CPU.",
    )
    min_busbw_gbps: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Lowest all-reduce bus bandwidth allowed at the largest size, GB/s (default: as min_link_gbps).",
    )
    sizes_mib: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [1, 16, 64], min_length=1, max_length=8,
        description="Message sizes of the sweep, MiB (the last is the point-to-point size).",
    )
    port: Port = Field(default=29555, description="The test's rendezvous port on the head node.")
    timeout_s: Annotated[int, Field(ge=5, le=3600)] = Field(
        default=120, description="Seconds the whole test may take before its nodes are named as not answering.",
    )


class ClusterSpec(_Strict):
    """Machines and devices. A single-node run leaves ``nodes`` empty."""

    nodes: list[str] = Field(
        default_factory=list,
        description="Node addresses for a multi-node run; the first is the Ray head. Empty: this machine only.",
    )
    devices: list[NonNegInt] = Field(
        default_factory=lambda: list(range(8)),
        description="Visible device ids on every node (ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES).",
    )
    nnodes: PositiveInt | None = Field(
        default=None,
        description="Number of nodes. Default: the number of cluster.nodes (1 when none are listed). Give it "
        "alone when a scheduler picks the nodes (`verlctl export slurm --nodes N`).",
    )
    master_addr: str | None = Field(
        default=None, description="Ray head address. Default: the first node, else this machine's address."
    )
    socket_ifname: str | None = Field(
        default=None, description="Network interface for HCCL/GLOO/TP sockets (e.g. eth0). Default: detected."
    )
    ray_port: Port = Field(default=6766, description="Ray GCS port (verl's Ascend docs use 6766).")
    dashboard_port: Port = Field(default=8260, description="Ray dashboard port (verl's Ascend docs use 8260).")
    join_timeout_s: PositiveInt = Field(
        default=600, description="How long the head waits for every node's devices to join Ray."
    )
    ssh_user: str | None = Field(
        default=None, description="SSH user for the other nodes (default: your ssh config / current user)."
    )
    ssh_port: Port | None = Field(default=None, description="SSH port of the other nodes (default: your ssh config).")
    ssh_config: str | None = Field(
        default=None, description="An ssh config file for reaching the other nodes (ssh -F); default: ~/.ssh/config."
    )
    remote_docker_socket: str = Field(
        default="/var/run/docker.sock", description="The Docker engine socket on the other nodes (reached over SSH)."
    )
    ray_start_args: list[str] = Field(
        default_factory=list, description="Extra arguments for `ray start` on every node (e.g. --num-cpus=64)."
    )
    device_memory_gib: Annotated[float, Field(gt=0, le=65536)] | None = Field(
        default=None,
        description="Memory of one NPU/GPU in GiB, for the memory-fit estimate when planning away from the machine "
        "(default: detected by `check`).",
    )
    host_memory_gib: Annotated[float, Field(gt=0, le=1048576)] | None = Field(
        default=None,
        description="RAM of one node in GiB, for the host-memory estimate (default: detected by `check`).",
    )
    fabric: FabricSpec = Field(
        default_factory=FabricSpec, description="The collective fabric test before training.",
    )
    allow_busy_devices: bool = Field(
        default=False,
        description="Train on devices that another process holds (another job, or another live verlctl run of "
        "yours). `check` and `launch` refuse busy devices unless this is true; the memory fit then counts only "
        "the memory those devices have free.",
    )

    @field_validator("nodes", "devices", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        return _csv_list(v)

    @field_validator("ray_start_args")
    @classmethod
    def _ray_args(cls, v: list[str]) -> list[str]:
        for a in v:
            if not a.startswith("--") or "\n" in a:
                raise ValueError(f"invalid ray start argument {a!r}: expected --name[=value]")
            if a.split("=", 1)[0] in ("--head", "--block", "--address", "--port", "--temp-dir", "--resources"):
                raise ValueError(f"{a.split('=', 1)[0]} is set by verlctl; it cannot be given in ray_start_args")
        return v

    @field_validator("devices")
    @classmethod
    def _devices_unique(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("at least one device id is needed")
        if len(set(v)) != len(v):
            raise ValueError(f"device ids repeat: {v}")
        return v

    @field_validator("nodes")
    @classmethod
    def _nodes_unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            twice = next(n for n in v if v.count(n) > 1)
            raise ValueError(f"nodes repeat: {twice!r} is listed {v.count(twice)} times; list each host once")
        return v

    @field_validator("nnodes")
    @classmethod
    def _nnodes_matches_nodes(cls, v: int | None, info: ValidationInfo) -> int | None:
        listed = info.data.get("nodes") or []
        if v is not None and listed and v != len(listed):
            more = "more" if v > len(listed) else "fewer"
            raise ValueError(
                f"{v} is {more} nodes than the {len(listed)} hosts listed in cluster.nodes: list {v} hosts, "
                f"or give {len(listed)} (or leave nnodes out)"
            )
        return v

    @property
    def node_count(self) -> int:
        """The number of nodes the run spans: ``nnodes``, else the listed nodes, else 1."""
        return self.nnodes or max(1, len(self.nodes))

    @field_validator("nodes", "master_addr")
    @classmethod
    def _hosts(cls, v: list[str] | str | None) -> list[str] | str | None:
        # These reach `ssh` and `ray start`: a host name or an IP address, never an option (`-oProxyCommand=`).
        for host in [v] if isinstance(v, str) else v or []:
            if not _is_host(host):
                raise ValueError(f"{host!r} is not a host name or IP address")
        return v

    @field_validator("ssh_user")
    @classmethod
    def _ssh_user(cls, v: str | None) -> str | None:
        if v is not None and not _SSH_USER.fullmatch(v):
            raise ValueError(f"{v!r} is not a user name (letters, digits, '_', '.', '-'; not starting with '-')")
        return v


_HOST_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_SSH_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def _is_host(host: str) -> bool:
    """A DNS name / ssh host alias (labels of letters, digits, '_' and inner '-') or an IPv4/IPv6 address."""
    import ipaddress

    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    return 0 < len(name) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in name.split("."))


class PathsSpec(_Strict):
    """Paths as seen by the training process (bind-mounted at the same path in the container).

    The output directories default to host directories under the directory verlctl runs in (the layout of
    verl's own ``trainer.default_local_dir``: ``checkpoints/<project>/<experiment>``), mounted into the
    container at the same path, so that removing the container never removes checkpoints or logs.
    """

    model: str | None = Field(default=None, description="Hugging Face model directory (required).")
    train_files: list[str] | None = Field(default=None, description="Training parquet file(s) (required).")
    val_files: list[str] | None = Field(default=None, description="Validation parquet file(s) (required).")
    checkpoints: str | None = Field(
        default=None,
        description="Checkpoint directory (trainer.default_local_dir), a host directory mounted at the same path. "
        "Default: <current directory>/checkpoints/<project>/<experiment>. Multi-node: storage every node mounts "
        "at this path (e.g. NFS), or resuming after a restart cannot work.",
    )
    logs: str | None = Field(
        default=None,
        description="Directory for training logs, a host directory mounted at the same path. "
        "Default: <current directory>/logs/<project>/<experiment>.",
    )

    @field_validator("train_files", "val_files", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        if isinstance(v, str):
            return [v]
        return v

    @field_validator("model", "checkpoints", "logs")
    @classmethod
    def _not_blank(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must not be empty")
        if v is not None and not v.startswith("/"):
            raise ValueError(_relative(v))
        return v

    @field_validator("train_files", "val_files")
    @classmethod
    def _files_not_blank(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            if not v:
                raise ValueError("at least one file is needed")
            if any(not s.strip() for s in v):
                raise ValueError("file paths must not be empty")
            for s in v:
                if not s.startswith("/"):
                    raise ValueError(_relative(s))
        return v


def _relative(path: str) -> str:
    # The paths are bind-mounted at the same path in the container and read by processes whose working
    # directory is the verl work dir (or another node), so a relative path would point elsewhere there.
    return (
        f"must be an absolute path, got {path!r} (it is used as is in the container and on every node); "
        f"give the full path, e.g. $PWD/{path}"
    )


class ProxySpec(_Strict):
    http: str | None = Field(default=None, description="http_proxy inside the container.")
    https: str | None = Field(default=None, description="https_proxy inside the container.")
    no_proxy: str | None = Field(default=None, description="no_proxy inside the container.")

    @field_validator("http", "https")
    @classmethod
    def _no_credentials(cls, v: str | None) -> str | None:
        # A proxy URL is written into start_verl.sh, spec.resolved.yaml and the plan: a password in it would be
        # a secret in files and output. The message never repeats the value.
        if v and "@" in v.split("://", 1)[-1].split("/", 1)[0]:
            raise ValueError("a user name or password in the proxy URL would be written into the run's scripts, "
                             "spec.resolved.yaml and output: give the proxy as scheme://host:port, without "
                             "credentials (verlctl has no secret channel for proxy passwords yet)")
        return v


class ContainerSpec(_Strict):
    """Where training runs: an existing or new Docker container (or the host, with ``runtime: host``)."""

    runtime: Runtime = Field(default="docker", description="docker: run in a container; host: run on this machine.")
    name: str = Field(default="verlctl", description="Container name to reuse or create.")
    image: str = Field(default=DEFAULT_IMAGE, description="Image for a new container.")
    workdir: str = Field(default="/verl", description="verl work dir (source checkout) inside the container.")
    mounts: list[str] = Field(
        default_factory=list,
        description="Extra bind mounts 'HOST:CONTAINER[:ro]'. Paths of the spec are mounted automatically.",
    )
    shm_size: str = Field(default="64g", description="Size of /dev/shm in a new container.")
    privileged: bool = Field(
        default=False, description="Run a new container --privileged (verl's documented form) instead of per-device nodes."
    )
    pull: bool = Field(default=False, description="Pull the image when it is not present locally.")
    proxy: ProxySpec = Field(default_factory=ProxySpec)
    python_env: str | None = Field(
        default=None,
        description="runtime: host only: a Python environment (venv or conda env directory) whose bin/ goes first "
        "on PATH for every command verlctl runs on this host (python3, ray). Default: the PATH verlctl runs with.",
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        if len(v) > MAX_NAME_LEN:
            raise ValueError(f"a container name of {len(v)} characters is too long: at most {MAX_NAME_LEN}")
        if not _NAME_RE.fullmatch(v):
            raise ValueError(f"invalid container name {v!r}: use letters, digits, '_', '.', '-'")
        return v

    @field_validator("image")
    @classmethod
    def _valid_image(cls, v: str) -> str:
        if len(v) > 512 or not _IMAGE_RE.fullmatch(v):
            shown = v if len(v) <= 80 else v[:80] + "..."
            raise ValueError(f"{shown!r} is not a Docker image reference: give [registry/]name[:tag][@digest] "
                             "(lower-case name, e.g. quay.io/ascend/verl:TAG)")
        return v

    @field_validator("workdir")
    @classmethod
    def _abs_workdir(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"must be an absolute path, got {v!r}")
        return v

    @field_validator("python_env")
    @classmethod
    def _abs_python_env(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or "\n" in v or ":" in v):
            shown = v if len(v) <= 80 else v[:80] + "..."
            raise ValueError(f"must be an absolute directory path without ':' (it goes on PATH), got {shown!r}")
        return v

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, v: str) -> str:
        if not re.fullmatch(r"[0-9]+[bkmgBKMG]?", v):
            raise ValueError(f"invalid size {v!r} (e.g. 64g, 512m)")
        return v

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, v: list[str]) -> list[str]:
        for m in v:
            parts = m.split(":")
            if len(parts) not in (2, 3) or not parts[0].startswith("/") or not parts[1].startswith("/"):
                raise ValueError(f"invalid mount {m!r}: expected '/host/path:/container/path[:ro]'")
            if len(parts) == 3 and parts[2] not in ("ro", "rw"):
                raise ValueError(f"invalid mount mode in {m!r}: use ro or rw")
        return v


class TrainSpec(_Strict):
    """Training hyperparameters (defaults are the seeds')."""

    steps: PositiveInt | None = Field(
        default=4,
        description="trainer.total_training_steps; null: not set, so verl's trainer.total_epochs decides (what an "
        "imported script that trains by epochs does).",
    )
    train_batch_size: PositiveInt = Field(default=32, description="Prompts per step (data.train_batch_size).")
    mini_batch_size: PositiveInt | None = Field(
        default=None, description="PPO mini batch in prompts (actor.ppo_mini_batch_size). Default: train_batch_size."
    )
    micro_batch_size_per_device: PositiveInt = Field(
        default=1, description="Micro batch per device (ppo/log-prob micro batch size per GPU/NPU)."
    )
    gen_batch_size: PositiveInt | None = Field(
        default=None, description="DAPO generation batch (data.gen_batch_size). Default: verl's (= train batch)."
    )
    lr: Annotated[float, Field(gt=0)] = Field(default=1e-6, description="Actor learning rate.")
    warmup_steps: NonNegInt | None = Field(default=None, description="Actor LR warmup steps (verl default when unset).")
    responses_per_prompt: PositiveInt = Field(default=8, description="Rollout samples per prompt (rollout.n).")
    max_prompt_length: PositiveInt = Field(default=2048, description="data.max_prompt_length")
    max_response_length: PositiveInt = Field(default=8192, description="data.max_response_length")
    tensor_parallel: PositiveInt = Field(default=4, description="Megatron training TP.")
    pipeline_parallel: PositiveInt = Field(default=2, description="Megatron training PP.")
    context_parallel: PositiveInt = Field(default=1, description="Megatron training CP.")
    rollout_tensor_parallel: PositiveInt | None = Field(
        default=None, description="Rollout (vLLM) TP. Default: the training TP."
    )
    rollout_engine: Literal["vllm", "sglang"] = Field(default="vllm", description="actor_rollout_ref.rollout.name")
    rollout_memory_utilization: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.6, description="actor_rollout_ref.rollout.gpu_memory_utilization"
    )
    save_freq: int = Field(default=10, ge=-1, le=MAX_INT, description="Checkpoint every N steps (-1: never).")
    test_freq: int = Field(default=10, ge=-1, le=MAX_INT, description="Validate every N steps (-1: never).")
    val_before_train: bool = Field(default=False, description="Validate before the first step.")
    trainer_devices: PositiveInt | None = Field(
        default=None, description="one_step_off_policy / separate_async / fully_async: training devices per node (seed "
        "TRAINER_GPUS, default half of cluster.devices)."
    )
    rollout_devices: PositiveInt | None = Field(
        default=None, description="one_step_off_policy / separate_async / fully_async: rollout devices per node (seed "
        "ROLLOUT_GPUS, default the other half)."
    )
    rollout_nodes: PositiveInt | None = Field(
        default=None,
        description="disaggregated modes split by whole nodes: this many nodes run the rollout and the other nodes "
        "of cluster.nodes train (rollout.nnodes / trainer.nnodes; verl docs/advance/one_step_off.md). "
        "trainer_devices / rollout_devices then count per node of each side (default: all of cluster.devices).",
    )
    parameter_sync_step: PositiveInt | None = Field(
        default=None,
        description="separate_async / fully_async: mini-batch updates between two weight syncs to the rollout "
        "(trainer.v1.separate_async.parameter_sync_step / async_training.trigger_parameter_sync_step). verl requires "
        "train_batch_size == parameter_sync_step * mini_batch_size. Default: train_batch_size / mini_batch_size.",
    )
    num_warmup_batches: Annotated[float, Field(gt=0, le=MAX_INT)] | None = Field(
        default=None,
        description="colocate_async / separate_async: batches generated before training starts "
        "(trainer.v1.<mode>.num_warmup_batches; fractions allowed). Default: verl's (1).",
    )
    staleness_threshold: Annotated[float, Field(ge=0, le=MAX_INT)] | None = Field(
        default=None,
        description="fully_async: how stale a sample may be, as a fraction of a sync cycle "
        "(async_training.staleness_threshold). Default: verl's (0.1).",
    )
    checkpoint_engine: Literal["nccl", "nixl", "mooncake"] | None = Field(
        default=None,
        description="separate_async / fully_async: how weights reach the rollout "
        "(actor_rollout_ref.rollout.checkpoint_engine.backend; on NPU 'nccl' selects verl's HCCL engine). "
        "Default: nccl (verl's 'naive' is refused by separate_async).",
    )


class FeaturesSpec(_Strict):
    """Acceleration features: a 7-bit mask (seed form) and/or named enable/disable lists."""

    mask: str | None = Field(
        default=None,
        description="7 characters of 0/1, leftmost = bit 0: RmvPad DynBSZ Offload PfxCache Recompute SwapOpt VPP.",
    )
    enable: list[str] = Field(default_factory=list, description="Feature names to turn on.")
    disable: list[str] = Field(default_factory=list, description="Feature names to turn off.")
    verl_default: list[str] = Field(
        default_factory=list,
        description="Feature names left at verl's own default: neither turned on nor written (what an imported "
        "script that does not set them does).",
    )
    vpp_size: Annotated[int, Field(ge=2)] = Field(
        default=2, description="virtual_pipeline_model_parallel_size when the vpp feature is on."
    )
    recompute_method: Literal["block", "uniform"] = Field(default="block", description="Megatron recompute_method.")
    recompute_num_layers: PositiveInt = Field(default=8, description="Megatron recompute_num_layers.")

    @field_validator("mask", mode="before")
    @classmethod
    def _mask(cls, v: object) -> object:
        if v is None:
            return None
        if isinstance(v, int) and not isinstance(v, bool):
            # YAML reads 0000000 as an int: the leading zeros are lost, so the mask is ambiguous.
            raise ValueError(f"mask {v!r} was read as a number: quote it, e.g. mask: \"0000000\"")
        if not isinstance(v, str):
            raise ValueError("mask must be a string of 7 characters 0/1")
        if len(v) != 7 or any(c not in "01" for c in v):
            raise ValueError(f"invalid mask {v!r}: expected exactly 7 characters of 0/1 (leftmost = bit 0)")
        return v

    @field_validator("enable", "disable", "verl_default", mode="before")
    @classmethod
    def _names(cls, v: object) -> object:
        return _csv_list(v)


class SwanlabSpec(_Strict):
    enabled: bool | None = Field(
        default=None, description="Log to SwanLab. Default: on when a host is configured."
    )
    host: str | None = Field(default=None, description="SwanLab server, e.g. http://192.168.1.100:8000 (required).")
    api_key: SecretStr | None = Field(
        default=None, description="SwanLab API key (secret; prefer the SWANLAB_API_KEY environment variable)."
    )
    mode: SwanlabMode = Field(default="cloud", description="cloud | local | offline | disabled")
    workspace: str | None = Field(
        default=None, description="SwanLab workspace (organisation). Default: your own (SwanLab's default)."
    )
    log_dir: str | None = Field(
        default=None,
        description="SwanLab's local log directory (SWANLAB_LOG_DIR). Default: <paths.logs>/swanlog "
        "(verl's default name, under the run's host log directory).",
    )

    @field_validator("host")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if "@" in v.split("://", 1)[-1].split("/", 1)[0]:  # user-info: never repeat it (it may hold a password)
            raise ValueError("a user name or password in the SwanLab host URL would be written into the run's "
                             "scripts and output: give the host as http(s)://host[:port] and the key in "
                             "SWANLAB_API_KEY")
        if not re.fullmatch(r"https?://[^\s/:]+(:[0-9]{1,5})?(/[^\s]*)?", v):
            raise ValueError(f"invalid URL {v!r}: expected http(s)://host[:port]")
        return v.rstrip("/")


class LoggingSpec(_Strict):
    console: bool = Field(default=True, description="Log to the console (trainer.logger console).")
    project: str = Field(default=DEFAULT_PROJECT, description="trainer.project_name (also the SwanLab project).")
    experiment: str | None = Field(
        default=None, description="trainer.experiment_name. Default: <algorithm>_<model>_<strategy>."
    )
    swanlab: SwanlabSpec = Field(default_factory=SwanlabSpec)

    @field_validator("project", "experiment")
    @classmethod
    def _safe(cls, v: str | None) -> str | None:
        if v is not None and len(v) > MAX_NAME_LEN:
            raise ValueError(f"a name of {len(v)} characters is too long (it becomes a directory name): at most "
                             f"{MAX_NAME_LEN}")
        if v is not None and not _NAME_RE.fullmatch(v):
            raise ValueError(f"invalid name {v!r}: use letters, digits, '_', '.', '-'")
        return v


#: The health rules ``recovery.health.stop_on`` may name (verlctl.monitor.health.RULE_NAMES, checked by a test).
HEALTH_RULES = ("no_learning_signal", "filter_groups_evict_all", "lr_zero", "lr_pinned", "overlong",
                "entropy_collapse", "grad_norm_nonfinite", "logprob_drift")


class HealthSpec(_Strict):
    """Training-health warnings from verl's own step metrics (docs/recovery.md, "Training health"). They are
    shown by `status`, `report` and the watcher; none stops the run unless `stop_on` names it."""

    no_signal_steps: PositiveInt = Field(
        default=3, description="Steps in a row with every advantage 0 (or every score equal) before 'no learning "
        "signal'.",
    )
    window: PositiveInt = Field(
        default=3, description="Steps in a row the other bounds (overlong, entropy, log-prob drift, filter_groups "
        "evictions) must be crossed before a warning.",
    )
    overlong_ratio: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.9, description="Share of responses ending at max_response_length (response_length/clip_ratio) "
        "that is 'overlong'.",
    )
    min_entropy: Annotated[float, Field(ge=0)] = Field(
        default=0.01, description="actor/entropy below this is an entropy collapse (0: never).",
    )
    max_probs_diff_mean: Annotated[float, Field(gt=0)] = Field(
        default=0.05, description="training/rollout_probs_diff_mean above this is rollout-vs-actor log-prob drift.",
    )
    evicted_ratio: Annotated[float, Field(gt=0)] = Field(
        default=0.9, description="DAPO filter_groups evictions per step, as a share of train_batch_size x "
        "responses_per_prompt, that say most groups carry no signal.",
    )
    warmup_steps: NonNegInt | None = Field(
        default=None, description="Steps of learning-rate warm-up before actor/lr must be above 0; null: "
        "train.warmup_steps (0 when unset).",
    )
    stop_on: list[str] = Field(
        default_factory=list, description="Warnings that stop the run (the watcher stops it and gives up): rule "
        "names, or 'all'. Empty: warnings never stop a run.",
    )
    ignore: list[str] = Field(
        default_factory=list, description="Rules not judged for this run (rule names), e.g. overlong for a model "
        "that is meant to fill max_response_length.",
    )

    @field_validator("stop_on", "ignore", mode="before")
    @classmethod
    def _rules(cls, v: object) -> object:
        v = _csv_list(v)
        unknown = [r for r in v or [] if r not in (*HEALTH_RULES, "all")] if isinstance(v, list) else []
        if unknown:
            raise ValueError(f"unknown health rule(s) {', '.join(map(str, unknown))}: give some of "
                             f"{', '.join(HEALTH_RULES)}, or all")
        return v


class RecoverySpec(_Strict):
    max_oom_retries: NonNegInt = Field(default=2, description="OOM ladder rungs to climb (offload, then recompute).")
    restart_on: list[str] = Field(
        default_factory=list, description="Failure categories that trigger a bounded restart (besides OOM)."
    )
    max_restarts: NonNegInt = Field(default=0, description="Restart budget for the categories in restart_on.")
    stall_startup_s: PositiveInt = Field(
        default=1800, description="No progress for this long before the first step: stalled."
    )
    stall_step_factor: Annotated[float, Field(gt=1)] = Field(
        default=5.0, description="Once steps run: stalled after this many median step times without progress."
    )
    stall_min_s: PositiveInt = Field(default=600, description="Lower bound of the running-phase stall timeout.")
    restart_on_stall: bool = Field(default=False, description="Restart a stalled run (within max_restarts).")
    memory_release_timeout_s: PositiveInt = Field(
        default=120, description="How long to wait for device memory to be released before a relaunch."
    )
    health: HealthSpec = Field(
        default_factory=HealthSpec, description="Training-health warnings from verl's step metrics."
    )

    @field_validator("restart_on", mode="before")
    @classmethod
    def _cats(cls, v: object) -> object:
        return _csv_list(v)


#: Kubernetes object names (RFC 1123): a label (a PVC name here) and a subdomain (a Secret name).
_DNS1123_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
#: A Kubernetes extended resource: ``domain/name`` (the device plugin's name, e.g. huawei.com/Ascend910).
_EXTENDED_RESOURCE = re.compile(r"([a-z0-9.-]{1,253})/([A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")


class KubernetesSpec(_Strict):
    """`verlctl export rayjob` / `export volcano`: the Kubernetes objects the job uses (nothing else reads these)."""

    pvc: str | None = Field(
        default=None,
        description="PersistentVolumeClaim (ReadWriteMany) mounted at paths.checkpoints in every pod (required).",
    )
    device_resource: str | None = Field(
        default=None,
        description="The device plugin's resource per pod (default: nvidia.com/gpu, or huawei.com/Ascend910 on NPU; "
        "`kubectl describe node` lists yours).",
    )
    swanlab_secret: str = Field(
        default="verlctl-swanlab", description="Secret holding the SwanLab key under `api-key` (never its value)."
    )
    ttl_s: NonNegInt = Field(default=600, description="Seconds the finished RayCluster is kept (ttlSecondsAfterFinished).")
    retries: NonNegInt = Field(
        default=0,
        description="RayJob backoffLimit, Volcano Job maxRetry: each retry starts the job again, resuming from the "
        "last checkpoint (needs train.save_freq > 0).",
    )
    queue: str = Field(
        default="default",
        description="Volcano queue the job is submitted to (`export volcano`; `kubectl get queue` lists them).",
    )
    ring_controller: str = Field(
        default="ascend-910b",
        description="MindCluster's product label (`ring-controller.atlas`) on an NPU Volcano job and its "
        "rank-table ConfigMap: ascend-910b for Atlas A2, ascend-910 for Atlas 800 (910A); MindCluster's docs list "
        "the values.",
    )

    @field_validator("queue", "ring_controller")
    @classmethod
    def _label_value(cls, v: str) -> str:
        if not _DNS1123_LABEL.fullmatch(v):
            raise ValueError(
                f"{v!r} is not a Kubernetes name: lower-case letters, digits and inner '-', at most 63 characters"
            )
        return v

    @field_validator("pvc")
    @classmethod
    def _pvc(cls, v: str | None) -> str | None:
        if v is not None and not _DNS1123_LABEL.fullmatch(v):
            raise ValueError(
                f"{v!r} is not a PVC name: lower-case letters, digits and inner '-', at most 63 characters "
                "(a DNS-1123 label, e.g. verl-shared)"
            )
        return v

    @field_validator("device_resource")
    @classmethod
    def _resource(cls, v: str | None) -> str | None:
        if v is None:
            return v
        found = _EXTENDED_RESOURCE.fullmatch(v)
        domain = found.group(1) if found else ""
        native = domain == "kubernetes.io" or domain.endswith(".kubernetes.io") or v.startswith("requests.")
        if not found or not _DNS1123_SUBDOMAIN.fullmatch(domain) or native:
            raise ValueError(
                f"{v!r} is not a Kubernetes extended resource name: give the device plugin's domain/name, "
                "e.g. huawei.com/Ascend910 or nvidia.com/gpu"
            )
        return v

    @field_validator("swanlab_secret")
    @classmethod
    def _secret(cls, v: str) -> str:
        if len(v) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(v):
            raise ValueError(f"{v!r} is not a Secret name: lower-case letters, digits, '-' and '.' (DNS-1123)")
        return v


class RunSpec(_Strict):
    """Everything that defines a verl run. See examples/run.yaml for an annotated example."""

    verl_version: VerlVersion = Field(
        default="0.7.0", description="Target verl version (0.7.0: the default image's; 0.9.1; auto: the container's)."
    )
    algorithm: Algorithm = Field(default="dapo")
    mode: Mode = Field(
        default="sync",
        description="sync (colocated), one_step_off_policy (split devices); verl 0.9.1 only: colocate_async, "
        "separate_async (V1 trainer, split devices), fully_async (split devices).",
    )
    strategy: Strategy = Field(default="megatron")
    device: Device = Field(
        default="npu",
        description="npu (Ascend), gpu (NVIDIA), or cpu: the demo device layer (real verl on the CPU, for "
        "`verlctl demo`; container.runtime: host only; it cannot show NPU/CUDA kernels, HBM fit, HCCL/NCCL or speed).",
    )
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    paths: PathsSpec = Field(default_factory=PathsSpec)
    container: ContainerSpec = Field(default_factory=ContainerSpec)
    train: TrainSpec = Field(default_factory=TrainSpec)
    features: FeaturesSpec = Field(default_factory=FeaturesSpec)
    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    recovery: RecoverySpec = Field(default_factory=RecoverySpec)
    kubernetes: KubernetesSpec = Field(default_factory=KubernetesSpec)
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables exported before training."
    )
    extra_overrides: list[str] = Field(
        default_factory=list, description="Raw Hydra overrides appended last (validated like the rest)."
    )
    verl_defaults: list[str] = Field(
        default_factory=list,
        description="verl keys left at verl's own default: verlctl writes no preset of its own for them "
        "(`verlctl import` lists the ones the script leaves alone; verlctl/verl/presets.py names those allowed).",
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise ValueError(f"invalid environment variable name {k!r}")
            if k.upper() == "SWANLAB_API_KEY":
                raise ValueError("put the SwanLab key in logging.swanlab.api_key or SWANLAB_API_KEY, not env")
        return v

    @field_validator("extra_overrides", mode="before")
    @classmethod
    def _overrides(cls, v: object) -> object:
        if isinstance(v, str):
            return [v]
        return v

    @field_validator("extra_overrides")
    @classmethod
    def _override_form(cls, v: list[str]) -> list[str]:
        for o in v:
            if "=" not in o or o.startswith("=") or "\n" in o:
                raise ValueError(f"invalid override {o!r}: expected key=value")
        return v


def spec_json_schema() -> dict[str, object]:
    schema = RunSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "verlctl run spec"
    return schema
