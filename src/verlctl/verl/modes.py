"""verl's trainer modes as data: which verl versions have each, which put the trainer and the rollout on
separate devices, and the processes (Ray actor class names, log prefixes) each one runs.

Sources (verl 0.9.1 wheel under ``.cache/verl/0.9.1``):

* ``sync``: the colocated trainer (0.7.0 ``RayPPOTrainer``; 0.9.1 V1 ``PPOTrainerSync``).
* ``one_step_off_policy``: 0.7.0 ``recipe/one_step_off_policy``; 0.9.1 ``verl/experimental/one_step_off_policy``.
* ``colocate_async``: 0.9.1 V1 trainer, ``trainer.v1.trainer_mode=colocate_async``
  (``verl/trainer/ppo/v1/trainer_colocate_async.py``: trainer and rollout colocated, partial rollout).
* ``separate_async``: 0.9.1 V1 trainer, ``trainer.v1.trainer_mode=separate_async``
  (``verl/trainer/ppo/v1/trainer_separate_async.py``: a standalone rollout pool of
  ``actor_rollout_ref.rollout.nnodes x n_gpus_per_node``; verl's CI successor of one-step-off, verl #7357).
* ``fully_async``: 0.9.1 ``verl/experimental/fully_async_policy`` (``fully_async_main.py``: a
  ``FullyAsyncRollouter`` and a ``FullyAsyncTrainer`` joined by a ``MessageQueue`` actor).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModeInfo:
    name: str
    versions: tuple[str, ...]  # the verl versions that have it
    disaggregated: bool  # the trainer and the rollout run on separate devices (a device split)
    v1_trainer_mode: str | None = None  # trainer.v1.trainer_mode it selects (0.9.1 V1 trainer)
    # Ray actor class names / log prefixes of the processes this mode runs besides the trainer's workers:
    # the watcher, stop and resume recognise them (a dead rollouter is a dead run).
    processes: tuple[str, ...] = ()
    log_prefixes: tuple[str, ...] = ()
    summary: str = ""


MODES: dict[str, ModeInfo] = {
    m.name: m
    for m in (
        ModeInfo("sync", ("0.7.0", "0.9.1"), False, summary="trainer and rollout colocated (hybrid engine)"),
        ModeInfo(
            "one_step_off_policy",
            ("0.7.0", "0.9.1"),
            True,
            processes=("OneStepTaskRunner",),
            summary="rollout one step ahead on its own devices",
        ),
        ModeInfo(
            "colocate_async",
            ("0.9.1",),
            False,
            "colocate_async",
            processes=("TaskRunnerV1",),
            summary="V1 async trainer, trainer and rollout colocated, partial rollout",
        ),
        ModeInfo(
            "separate_async",
            ("0.9.1",),
            True,
            "separate_async",
            processes=("TaskRunnerV1", "DetachActorWorker"),
            summary="V1 async trainer, a standalone rollout pool; weights synced every parameter_sync_step",
        ),
        ModeInfo(
            "fully_async",
            ("0.9.1",),
            True,
            processes=("FullyAsyncTaskRunner", "FullyAsyncRollouter", "FullyAsyncTrainer", "MessageQueue"),
            log_prefixes=("[ASYNC MAIN]", "[FullyAsyncRollouter]", "[FullyAsyncTrainer]", "[MessageQueue]"),
            summary="fully async: a rollouter streams samples through a message queue to the trainer",
        ),
    )
}

#: The disaggregated modes: trainer and rollout each get their own devices.
DISAGGREGATED: frozenset[str] = frozenset(n for n, m in MODES.items() if m.disaggregated)
#: The 0.9.1 V1 trainer's async modes (``trainer.v1.trainer_mode``).
V1_ASYNC: frozenset[str] = frozenset(n for n, m in MODES.items() if m.v1_trainer_mode)


def is_disaggregated(mode: str) -> bool:
    """True where the trainer and the rollout run on separate devices: the run needs a device split
    (``train.trainer_devices`` / ``train.rollout_devices``, or ``train.rollout_nodes``)."""
    info = MODES.get(mode)
    return bool(info and info.disaggregated)


def supports(mode: str, version: str) -> bool:
    info = MODES.get(mode)
    return bool(info and version in info.versions)


def version_problem(mode: str, version: str) -> str | None:
    """Why ``mode`` cannot run on verl ``version`` (None: it can)."""
    info = MODES.get(mode)
    if info is None or version in info.versions:
        return None
    return f"mode {mode} exists in verl {', '.join(info.versions)} only, not in verl {version}"


def process_names() -> tuple[str, ...]:
    """Every mode's own process names (Ray actor classes), for the watcher and stop."""
    seen: dict[str, None] = {}
    for m in MODES.values():
        for p in m.processes:
            seen[p] = None
    return tuple(seen)
