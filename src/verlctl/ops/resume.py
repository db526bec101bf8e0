"""Where verl's ``trainer.resume_mode=auto`` resumes: a leaf module (launch, the verdict's facts and status read
it; none of them imports the others for it)."""

from __future__ import annotations

from pathlib import Path


def resume_point(checkpoints: str | None) -> str | None:
    """The checkpoint ``trainer.resume_mode=auto`` resumes from: verl reads
    ``<default_local_dir>/latest_checkpointed_iteration.txt`` and loads ``global_step_<N>``
    (``RayPPOTrainer._load_checkpoint`` -> ``find_latest_ckpt_path``, verl 0.7.0 and 0.9.1). Read on this
    host: the checkpoint directory is mounted into the container at the same path."""
    if not checkpoints:
        return None
    d = Path(checkpoints)
    try:
        step = (d / "latest_checkpointed_iteration.txt").read_text(encoding="utf-8", errors="replace").strip()
    except (OSError, ValueError):
        return None
    if not step.isdigit() or not (d / f"global_step_{step}").is_dir():
        return None
    return f"{checkpoints.rstrip('/')}/global_step_{step}"


def resume_action(checkpoints: str | None) -> str:
    point = resume_point(checkpoints)
    if point is not None:
        return (f"training resumes from {point.rsplit('/', 1)[-1]} in {checkpoints} (trainer.resume_mode=auto "
                "finds it): move it away first to start fresh")
    return f"training starts fresh (no checkpoint in {checkpoints or 'the checkpoint directory'})"
