"""``paths.checkpoints``: the directory can be written and has room for one checkpoint (three to be comfortable)."""

from __future__ import annotations

from verlctl.checks.findings import Finding, error, warning
from verlctl.checks.rules import V070, V091, Cite
from verlctl.checks.units import params_text, size_text
from verlctl.detect.check_probes import CheckpointProbe
from verlctl.detect.common import Unavailable, UnavailableCode
from verlctl.detect.models import ModelInfo
from verlctl.detect.system import DiskSpace
from verlctl.spec.model import RunSpec

#: Bytes per parameter of one actor checkpoint as verl saves it by default (``checkpoint.save_contents:
#: ['model', 'optimizer', 'extra']``), by strategy; GRPO/DAPO have no critic and the reference model is never
#: saved. Megatron: the model's bf16 weights (dist_checkpointing shards, or Hugging Face files through mbridge)
#: + the distributed optimizer's fp32 main weights and Adam m and v. FSDP/FSDP2: the actor's weights are fp32
#: (verl loads the actor in fp32) + AdamW's m and v in the weights' dtype. The ``extra`` state (LR scheduler,
#: RNG) and the Hugging Face config/tokenizer are megabytes. See :data:`CHECKPOINT_CITES`.
CHECKPOINT_LAYOUT: dict[str, tuple[int, int, str]] = {
    "megatron": (2, 12, "params × (2 + 4 + 4 + 4) bytes: bf16 weights + fp32 master weights + Adam m and v"),
    "fsdp": (4, 8, "params × (4 + 4 + 4) bytes: fp32 weights + Adam m and v (verl keeps the FSDP actor in fp32)"),
    "fsdp2": (4, 8, "params × (4 + 4 + 4) bytes: fp32 weights + Adam m and v (verl keeps the FSDP actor in fp32)"),
}
CHECKPOINT_BYTES_PER_PARAM = sum(CHECKPOINT_LAYOUT["megatron"][:2])  # Megatron, the default strategy
CHECKPOINT_FORMULA = CHECKPOINT_LAYOUT["megatron"][2]

#: What verl's checkpoint managers save by default, per version (checked against the source by
#: tests/checks/test_verdict_parity.py through the checkpoint_dir rule's citations).
CHECKPOINT_CITES = (
    Cite(V070, "verl/trainer/config/actor/actor.yaml", 124, "save_contents: ['model', 'optimizer', 'extra']"),
    Cite(V091, "verl/trainer/config/actor/actor.yaml", 135, "save_contents: ['model', 'optimizer', 'extra']"),
    Cite(V070, "verl/utils/checkpoint/fsdp_checkpoint_manager.py", 243,
         "optimizer_state_dict = self.optimizer.state_dict()"),
    Cite(V091, "verl/utils/checkpoint/fsdp_checkpoint_manager.py", 351,
         "optimizer_state_dict = self.optimizer.state_dict()"),
    Cite(V070, "verl/workers/fsdp_workers.py", 326, "torch_dtype = torch.float32 if self._is_actor else torch.bfloat16"),
    Cite(V091, "verl/trainer/config/engine/fsdp.yaml", 33, "model_dtype: fp32"),
    Cite(V070, "verl/utils/checkpoint/megatron_checkpoint_manager.py", 269,
         "optimizer_sharded_states = self.optimizer.sharded_state_dict(state_dict, is_loading=is_loading)"),
    Cite(V091, "verl/utils/checkpoint/megatron_checkpoint_manager.py", 408,
         'state_dict["optimizer"] = self.optimizer.sharded_state_dict('),
    Cite(V070, "verl/trainer/config/_generated_ppo_megatron_trainer.yaml", 41, "use_distributed_optimizer: true"),
    Cite(V091, "verl/trainer/config/engine/megatron.yaml", 32, "use_distributed_optimizer: True"),
    Cite(V070, "verl/trainer/config/_generated_ppo_megatron_trainer.yaml", 59, "dtype: bfloat16"),
    Cite(V091, "verl/trainer/config/engine/megatron.yaml", 120, "dtype: bfloat16"),
)

#: The run's logs (start_verl.sh's output and the trainer's tee) per training step, and once for the start-up:
#: a rough upper bound of what verl, vLLM and Ray print (a metrics line per step is a few KiB).
LOG_BYTES_START = 64 * 2**20
LOG_BYTES_PER_STEP = 256 * 2**10
LOG_STEPS_UNKNOWN = 1000  # train.steps unset (epochs decide): assume this many steps


#: Below this many checkpoints of free space: a warning (verl keeps every checkpoint unless told otherwise).
COMFORTABLE_CHECKPOINTS = 3


def checkpoint_bytes(param_count: int, strategy: str = "megatron") -> int:
    """Size of one actor checkpoint (see :data:`CHECKPOINT_LAYOUT`)."""
    weights, optimizer, _ = CHECKPOINT_LAYOUT.get(strategy, CHECKPOINT_LAYOUT["megatron"])
    return param_count * (weights + optimizer)


def log_bytes(spec: RunSpec) -> int:
    """A bound on the run's logs under paths.logs (see :data:`LOG_BYTES_PER_STEP`)."""
    steps = spec.train.steps if spec.train.steps is not None else LOG_STEPS_UNKNOWN
    return LOG_BYTES_START + steps * LOG_BYTES_PER_STEP


def model_params(model: ModelInfo | Unavailable | None, spec: RunSpec) -> int | None:
    """The model's parameter count: its safetensors (or config) as detected, else its config.json's shape."""
    if isinstance(model, ModelInfo) and model.param_count:
        return model.param_count
    if spec.paths.model:
        from verlctl.checks.memory import ModelShape

        shape = ModelShape.from_model_dir(spec.paths.model)
        if shape is not None and shape.params:
            return shape.params
    return None


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
    params = model_params(model, spec)
    if probe.free_bytes is None:
        return [warning("checkpoint_space_unknown", f"free space at {probe.checked_path} is unknown{where}: the "
                        "room for a checkpoint was not checked", field)]
    if params is None:
        return [
            warning(
                "checkpoint_size_unknown",
                f"{size_text(probe.free_bytes)} free at {probe.checked_path}{where}; the checkpoint size is unknown "
                "(no parameter count for the model): the room for a checkpoint was not checked",
                field,
                "set paths.model to a model directory with config.json (or safetensors) on this machine",
            )
        ]
    one = checkpoint_bytes(params, spec.strategy)
    fits = probe.free_bytes // one if one else COMFORTABLE_CHECKPOINTS
    formula = CHECKPOINT_LAYOUT.get(spec.strategy, CHECKPOINT_LAYOUT["megatron"])[2]
    size = (f"one {spec.strategy} checkpoint of a {params_text(params)}-parameter model is about {size_text(one)} "
            f"({formula})")
    free = f"{size_text(probe.free_bytes)} free at {probe.checked_path}{where}"
    if fits < 1:
        return [
            error(
                "checkpoint_space",
                f"{free}: not enough for a single checkpoint; {size}: the run would fail at its first save",
                field,
                f"free at least {size_text(one - probe.free_bytes)} or choose a larger disk for paths.checkpoints",
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


def check_log_space(spec: RunSpec, disk: DiskSpace | Unavailable | None, shared_with: int | None = None) -> list[Finding]:
    """paths.logs has room for the run's logs (:func:`log_bytes`); ``shared_with``: the bytes of one checkpoint
    when the checkpoints are on the same file system (both need the room)."""
    field = "paths.logs"
    if disk is None or spec.paths.logs is None:
        return []
    if isinstance(disk, Unavailable):
        return [warning("log_space_unknown", f"free space at {spec.paths.logs} is unknown ({disk.reason}): the room "
                        "for the run's logs was not checked", field)]
    need = log_bytes(spec)
    steps = spec.train.steps if spec.train.steps is not None else f"~{LOG_STEPS_UNKNOWN}"
    what = (f"the logs need about {size_text(need)} ({size_text(LOG_BYTES_START)} + {steps} steps × "
            f"{size_text(LOG_BYTES_PER_STEP)})")
    total = need + (shared_with or 0)
    if shared_with:
        what += f", and one checkpoint on the same file system {size_text(shared_with)}"
    if disk.free_bytes < total:
        return [error(
            "log_space",
            f"{size_text(disk.free_bytes)} free at {disk.checked_path} (paths.logs {spec.paths.logs}): {what}; the run "
            "would stop when its log cannot be written",
            field,
            f"free at least {size_text(total - disk.free_bytes)} or set paths.logs to a directory on a larger disk",
        )]
    return []
