"""Where verl resumes a run, per mode: a leaf module (launch, the verdict's facts, status and the watcher read
it; none of them imports the others for it).

verlctl writes ``trainer.resume_mode=auto`` (verl/base.py); a spec's ``extra_overrides`` come last and win, so
``trainer.resume_mode=disable`` (verl's own separate_async CI script sets it) starts every attempt fresh and
``resume_path`` resumes from ``trainer.resume_from_path``. What the checkpoint holds and what N counts differ by
mode (verl/modes.py RESUME: fully_async counts weight syncs, its rollouter writes the dataloader's state)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def resume_settings(spec: Any) -> tuple[str, str | None]:
    """(trainer.resume_mode, trainer.resume_from_path) of the run's command: verlctl's ``auto``, or what the
    spec's extra_overrides set (the last one of each, as Hydra applies them)."""
    mode, path = "auto", None
    for raw in getattr(spec, "extra_overrides", None) or []:
        key, sep, value = str(raw).partition("=")
        if not sep:
            continue
        key = key.lstrip("+")
        value = value.strip().strip("'\"")
        if key == "trainer.resume_mode":
            mode = value
        elif key == "trainer.resume_from_path":
            path = None if value in ("", "null", "None") else value
    return mode, path


def _read_local(path: str) -> bytes | None:
    """The first 64 bytes of a regular file, None otherwise: a FIFO or device planted as the tracker neither
    blocks nor is read whole (O_NONBLOCK, then fstat before reading)."""
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, 64)
    except OSError:
        return None
    finally:
        os.close(fd)


def _dir_local(path: str) -> bool:
    return Path(path).is_dir()


def resume_point(checkpoints: str | None, spec: Any = None, read: Callable[[str], bytes | None] | None = None,
                 is_dir: Callable[[str], bool] | None = None) -> str | None:
    """The checkpoint folder the trainer resumes from, None where it starts fresh. ``auto`` (verlctl's):
    verl reads ``<default_local_dir>/latest_checkpointed_iteration.txt`` and loads ``global_step_<N>`` if that
    folder exists (verl/utils/checkpoint/checkpoint_manager.py find_latest_ckpt_path, verl 0.7.0 and 0.9.1; every
    mode's trainer: verl/modes.py RESUME); ``disable``: none; ``resume_path``: trainer.resume_from_path. Read on
    this host by default (the checkpoint directory is mounted into the container at the same path); ``read`` /
    ``is_dir`` read elsewhere (the watcher: inside the run's target)."""
    read = read or _read_local
    is_dir = is_dir or _dir_local
    mode, from_path = resume_settings(spec) if spec is not None else ("auto", None)
    if mode == "disable":
        return None
    if mode == "resume_path":
        return from_path if from_path and "global_step_" in from_path and from_path.startswith("/") else None
    if not checkpoints:
        return None
    base = checkpoints.rstrip("/")
    data = read(f"{base}/latest_checkpointed_iteration.txt")
    step = (data or b"").decode(errors="replace").strip()
    if not step.isdigit() or not is_dir(f"{base}/global_step_{step}"):
        return None
    return f"{base}/global_step_{step}"


def resume_action(checkpoints: str | None, spec: Any = None) -> str:
    """What the next attempt does with the checkpoint directory, said for the run's mode."""
    from verlctl.verl.modes import resume_info

    mode, from_path = resume_settings(spec) if spec is not None else ("auto", None)
    where = checkpoints or "the checkpoint directory"
    if mode == "disable":
        return (f"training starts fresh: trainer.resume_mode=disable (extra_overrides) makes verl ignore the "
                f"checkpoints in {where}")
    point = resume_point(checkpoints, spec)
    if point is None:
        if mode == "resume_path":
            return (f"trainer.resume_mode=resume_path needs trainer.resume_from_path=<absolute path>/global_step_N "
                    f"(extra_overrides; got {from_path or 'none'}): verl's resume asserts 'global_step_' in it")
        return f"training starts fresh (no checkpoint in {where})"
    run_mode = getattr(spec, "mode", None) or "sync"
    info = resume_info(run_mode)
    n = point.rstrip("/").rsplit("global_step_", 1)[-1]
    have = [(name, what) for name, what in info.restores if Path(f"{point}/{name}").exists()]
    missing = [name for name, _what in info.restores if (name, _what) not in have]
    how = "trainer.resume_mode=auto finds it" if mode == "auto" else "trainer.resume_from_path"
    text = (f"training resumes from {point.rsplit('/', 1)[-1]} in {point.rsplit('/', 1)[0]} ({how}; {run_mode}: "
            f"N={n} counts {info.step}, training goes on from {info.restarts_at})")
    if have:
        text += "; verl restores " + ", ".join(f"{what} ({name})" for name, what in have)
    if missing:
        text += "; not there: " + ", ".join(missing) + (
            " (verl cannot load the weights: move the folder away)" if "actor" in missing else
            " (verl warns and starts that part from scratch)")
    if info.lost:
        text += f"; {info.lost}"
    if mode == "auto":
        text += ": move it away first to start fresh"
    return text
