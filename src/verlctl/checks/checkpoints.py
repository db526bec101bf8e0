"""``paths.checkpoints``: the directory can be written and has room for one checkpoint (three to be comfortable)."""

from __future__ import annotations

from verlctl.checks.findings import Finding, error, info, warning
from verlctl.checks.units import params_text, size_text
from verlctl.detect.check_probes import CheckpointProbe
from verlctl.detect.common import Unavailable, UnavailableCode
from verlctl.detect.models import ModelInfo
from verlctl.spec.model import RunSpec

#: Bytes per parameter of one actor checkpoint: bf16 weights (2) + fp32 master weights (4) + Adam m (4)
#: + Adam v (4). GRPO/DAPO have no critic; the reference model is never saved.
CHECKPOINT_BYTES_PER_PARAM = 2 + 4 + 4 + 4


CHECKPOINT_FORMULA = "params × (2 + 4 + 4 + 4) bytes: bf16 weights + fp32 master weights + Adam m and v"


#: Below this many checkpoints of free space: a warning (verl keeps every checkpoint unless told otherwise).
COMFORTABLE_CHECKPOINTS = 3


def checkpoint_bytes(param_count: int) -> int:
    """Size of one actor checkpoint (see :data:`CHECKPOINT_BYTES_PER_PARAM`)."""
    return param_count * CHECKPOINT_BYTES_PER_PARAM


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
                f"{size_text(probe.free_bytes)} free at {probe.checked_path}{where}; the checkpoint size is unknown "
                "(no parameter count for the model)",
                field,
            )
        ]
    one = checkpoint_bytes(params)
    fits = probe.free_bytes // one if one else COMFORTABLE_CHECKPOINTS
    size = f"one checkpoint of a {params_text(params)}-parameter model is about {size_text(one)} ({CHECKPOINT_FORMULA})"
    free = f"{size_text(probe.free_bytes)} free at {probe.checked_path}{where}"
    if fits < 1:
        return [
            error(
                "checkpoint_space",
                f"{free}: not enough for a single checkpoint; {size}",
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
