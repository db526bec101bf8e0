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

import re
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
    # (version, where) for the verl versions that ship the mode only as a recipe verlctl does not run
    recipe_only: tuple[tuple[str, str], ...] = ()


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
            # the v0.7.0 source tree ships recipe/fully_async_policy (fully_async_main.py, its configs and
            # scripts); the wheel does not, and verlctl has no entry point or rules for that recipe
            recipe_only=(("0.7.0", "recipe/fully_async_policy"),),
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


#: The 0.9.1 modes whose trainer subclasses the legacy ``RayPPOTrainer`` (``experimental/separation/ray_trainer.py:52``
#: ``SeparateRayPPOTrainer(RayPPOTrainer)``), which verl marks for removal (``trainer/ppo/ray_trainer.py:285``):
#: mode -> its trainer class. verl's maintainers point to the V1 trainer's separate_async instead (PR #7567).
LEGACY_TRAINER: dict[str, str] = {"one_step_off_policy": "OneStepOffRayTrainer", "fully_async": "FullyAsyncTrainer"}
V1_SUCCESSOR = "separate_async"


def legacy_trainer_note(mode: str, version: str) -> str | None:
    """What a 0.9.1 plan (or import) of a mode on the legacy trainer says; None for any other mode/version."""
    trainer = LEGACY_TRAINER.get(mode)
    if trainer is None or version != "0.9.1":
        return None
    return (f"mode {mode} runs verl 0.9.1's {trainer}, a subclass of the legacy RayPPOTrainer that verl marks "
            "deprecated and for removal ('Legacy trainer is deprecated, and wil be removed ... Please use "
            "`trainer.use_v1=True`'); verl's maintainers point to the V1 trainer's separate_async instead "
            f"(trainer.use_v1=True trainer.v1.trainer_mode=separate_async, verl PR #7567): mode: {V1_SUCCESSOR}")


def version_problem(mode: str, version: str) -> str | None:
    """Why ``mode`` cannot run on verl ``version`` (None: it can)."""
    info = MODES.get(mode)
    if info is None or version in info.versions:
        return None
    recipe = dict(info.recipe_only).get(version)
    if recipe:
        return (f"mode {mode} is not supported by verlctl on verl {version} (verl {version} ships it as its "
                f"source tree's {recipe} recipe, which verlctl does not run); verlctl runs it on verl "
                f"{', '.join(info.versions)}")
    return f"mode {mode} exists in verl {', '.join(info.versions)} only, not in verl {version}"


@dataclass(frozen=True)
class Process:
    """A Ray actor a mode runs: its class name (the log prefix ``(Name pid=N)``, the process title
    ``ray::Name.method``), what it is, and whose devices it holds: ``trainer``, ``rollout``, or ``none`` (a
    driver or a queue that holds no device memory)."""

    name: str
    role: str
    side: str


#: What each mode process is (0.9.1 wheel: fully_async_main.py:36 FullyAsyncTaskRunner,
#: fully_async_rollouter.py:330 FullyAsyncRollouter, fully_async_trainer.py:54 FullyAsyncTrainer,
#: message_queue.py:27 MessageQueue, one_step_off_policy/main_ppo.py:34 OneStepTaskRunner, trainer/main_ppo.py
#: TaskRunnerV1, experimental/separation/engine_workers.py:36 DetachActorWorker; the rollout servers
#: workers/rollout/vllm_rollout/vllm_async_server.py:87 vLLMHttpServer and
#: workers/rollout/sglang_rollout/async_sglang_server.py:123 SGLangHttpServer, in every mode).
PROCESSES: dict[str, Process] = {
    p.name: p
    for p in (
        Process("OneStepTaskRunner", "one-step-off task runner (the driver)", "none"),
        Process("TaskRunnerV1", "V1 task runner (the driver)", "none"),
        Process("DetachActorWorker", "trainer worker (actor on its own devices)", "trainer"),
        Process("FullyAsyncTaskRunner", "fully async task runner (the driver)", "none"),
        Process("FullyAsyncRollouter", "rollouter", "rollout"),
        Process("FullyAsyncTrainer", "trainer", "trainer"),
        Process("MessageQueue", "message queue between rollouter and trainer", "none"),
        Process("vLLMHttpServer", "vLLM rollout server", "rollout"),
        Process("SGLangHttpServer", "SGLang rollout server", "rollout"),
    )
}
#: The rollout servers every 0.9.1 mode starts (their own Ray actors).
ROLLOUT_SERVERS: tuple[str, ...] = ("vLLMHttpServer", "SGLangHttpServer")

# A Ray actor named in a log line: its forwarded-output prefix or its task name in a RayTaskError.
_ACTOR_RE = re.compile(r"\((?P<p>[A-Za-z_][A-Za-z0-9_]*) pid=\d+|\bray::(?P<t>[A-Za-z_][A-Za-z0-9_]*)\.")


def process_names(mode: str | None = None) -> tuple[str, ...]:
    """The Ray actor classes of ``mode`` besides the trainer's workers (its own, then the rollout servers);
    every mode's when ``mode`` is None. For the watcher and stop."""
    infos = [MODES[mode]] if mode in MODES else [] if mode is not None else list(MODES.values())
    seen: dict[str, None] = {}
    for m in infos:
        for p in m.processes:
            seen[p] = None
    if mode in MODES and mode != "sync":
        for p in ROLLOUT_SERVERS:
            seen[p] = None
    return tuple(seen)


def process_in(mode: str, text: str) -> Process | None:
    """The first of ``mode``'s processes that ``text`` (a log line or excerpt) names as a Ray actor."""
    names = process_names(mode)
    for m in _ACTOR_RE.finditer(text):
        name = m.group("p") or m.group("t")
        if name in names:
            return PROCESSES[name]
    return None


def device_side(mode: str, text: str) -> str | None:
    """Whose devices the process named in ``text`` holds, where the mode gives trainer and rollout devices of
    their own (``trainer`` / ``rollout``); None in a colocated mode (both share every device) or when ``text``
    names no process of the mode that holds devices."""
    if not is_disaggregated(mode):
        return None
    proc = process_in(mode, text)
    return proc.side if proc is not None and proc.side in ("trainer", "rollout") else None


def describe_process(mode: str, text: str) -> str | None:
    """'the rollouter (FullyAsyncRollouter) of this fully_async run', for a process of the mode named in
    ``text``; None otherwise."""
    proc = process_in(mode, text)
    return None if proc is None else f"the {proc.role} ({proc.name}) of this {mode} run"


@dataclass(frozen=True)
class Resume:
    """What a mode saves in ``<trainer.default_local_dir>/global_step_<N>`` and restores from it when verl resumes
    (``trainer.resume_mode=auto``: the N in ``latest_checkpointed_iteration.txt``, the folder must exist:
    verl/utils/checkpoint/checkpoint_manager.py find_latest_ckpt_path; ``resume_path``: the folder named in
    ``trainer.resume_from_path``; ``disable``: nothing)."""

    step: str  # what N counts
    restores: tuple[tuple[str, str], ...]  # (entry of global_step_N, what verl restores from it)
    cite: str  # where verl 0.9.1 saves and loads it
    restarts_at: str = ""  # where training goes on from
    lost: str = ""  # what the checkpoint does not hold (redone after a resume)


_TRAINER = (("actor", "the actor's weights and optimizer"), ("data.pt", "the dataloader's position"))

#: Per mode (verl 0.9.1; 0.7.0's sync and one-step-off trainers save the same: verl/trainer/ppo/ray_trainer.py
#: _save_checkpoint / _load_checkpoint).
RESUME: dict[str, Resume] = {
    "sync": Resume("trainer steps", _TRAINER, "verl/trainer/ppo/ray_trainer.py:983-1110 (RayPPOTrainer)",
                   "the step after N"),
    "one_step_off_policy": Resume(
        "trainer steps", _TRAINER,
        "verl/experimental/one_step_off_policy/ray_trainer.py:285 (RayPPOTrainer._load_checkpoint, then the "
        "rollout gets the loaded weights)", "the step after N; the rollout's first batch is generated again"),
    "colocate_async": Resume(
        "global steps of the V1 trainer",
        (*_TRAINER, ("transfer_queue", "the TransferQueue: finished trajectories kept, pending prompts re-issued")),
        "verl/trainer/ppo/v1/trainer_base.py:850-907 _load_checkpoint, :948-1028 _save_checkpoint",
        "the step after N"),
    "separate_async": Resume(
        "global steps of the V1 trainer",
        (*_TRAINER, ("transfer_queue", "the TransferQueue: finished trajectories kept, pending prompts re-issued")),
        "verl/trainer/ppo/v1/trainer_base.py:850-907 _load_checkpoint, :948-1028 _save_checkpoint",
        "the step after N; the standalone rollout gets the loaded weights at its first sync"),
    "fully_async": Resume(
        "weight syncs (the trainer's parameter version), not trainer steps",
        (("actor", "the trainer's weights and optimizer (FullyAsyncTrainer)"),
         ("data.pt", "the rollouter's dataloader position (written by the FullyAsyncRollouter)")),
        "verl/experimental/fully_async_policy/fully_async_trainer.py:917-1017 (_save_checkpoint writes actor/, "
        "then the rollouter's data.pt, then the tracker), fully_async_rollouter.py:655-725",
        "parameter version N: the trainer's step N x trigger_parameter_sync_step + 1",
        "the samples in flight (in the message queue and the rollouter's queues) are not saved and are "
        "generated again (fully_async_rollouter.py:656-660)"),
}


def resume_info(mode: str) -> Resume:
    return RESUME.get(mode, RESUME["sync"])
