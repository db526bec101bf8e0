"""TEST DOUBLE: a stand-in for one verl training run. For verlctl's tests only; the product never uses it.

A real verl training step needs NPUs or GPUs, a model and a dataset, and none of them exist on the test
machines. This module imitates a verl run as far as a launcher can observe one from outside, and nothing
more. It trains no model. tests/image/build.sh installs it in the test image
(``/opt/verlctl-test/standin``, on ``sys.path`` through a ``.pth`` file). It also puts the entry wrapper
``tests/standin/entry.py`` at the four entry-module paths under ``/verl``:

* ``python3 -m verl.trainer.main_ppo`` (GRPO/PPO; config ``verl/trainer/config``, default ``ppo_trainer``)
* ``python3 -m recipe.dapo.main_dapo`` (DAPO; ``recipe/dapo/config``, default ``dapo_trainer``)
* ``python3 -m recipe.one_step_off_policy.main_ppo`` (``recipe/one_step_off_policy/config``,
  default ``one_step_off_ppo_trainer``)
* ``python3 -m verl.experimental.one_step_off_policy.main_ppo`` (0.9.x module path, same config)

What is real:

* Command line and config. The wrapper is a ``@hydra.main(config_path="config", ...)``, like verl's entry
  modules, run from ``/verl`` against the installed wheel's real config tree and the recipe overlay
  configs. A bad key, or a wrong ``+``/``++``, fails with the message Hydra prints in verl, and the exit
  status is 1. An exception during the run prints ``Error executing job with overrides: [...]``, the
  traceback and the HYDRA_FULL_ERROR hint, as verl does.
* Ray. The stand-in joins the running cluster with ``ray.init(address="auto")``. (Real verl calls
  ``ray.init()``, which would start a private local cluster if none were running. The stand-in fails
  instead, so a launcher that forgot to start Ray is caught.) It checks the cluster's ``NPU`` or ``GPU``
  total against the trainer's request, then does every step through a Ray actor, ``WorkerDict``. A
  fault-injected OOM is raised inside that actor, so the driver shows Ray's own
  ``ray.exceptions.RayTaskError(RuntimeError)`` wrapper.
* Environment. As in verl, logger back ends are set up inside a Ray worker (the stand-in's ``WorkerDict``
  actor, pinned to the driver's node). The SwanLab/W&B environment that counts is therefore the one the
  Ray cluster was started with (``ray start`` in the container), not the driver's. SwanLab really runs: set ``SWANLAB_MODE=offline`` and ``SWANLAB_LOG_DIR`` for runs with
  no network.
* Output. verl's formats: ``Total training steps: N``, per-step ``step:N - key:value - ...`` lines on stdout
  (``concat_dict_to_str``), tqdm-format ``Training Progress:`` lines on stderr (tqdm's stream; written
  here as whole lines), checkpoint/resume messages worded as in ``verl/trainer/ppo/ray_trainer.py`` 0.7.0,
  and ``'Final validation metrics: None'`` at the end. Every line is flushed.
* Checkpoints. With ``trainer.save_freq > 0``, a checkpoint is written every save_freq steps and at the
  last step: ``<default_local_dir>/global_step_N/actor/`` (a small JSON marker, not weights) and
  ``<default_local_dir>/latest_checkpointed_iteration.txt``. ``trainer.resume_mode`` ``auto`` /
  ``resume_path`` / ``disable`` resume as verl does, and the global step count continues.

Environment contract (the driver's environment is read first, then the Ray worker's):

=================================  ==========================================================================
``VERLCTL_STANDIN_STEP_SECONDS``   wall time of one step (default 0.5)
``VERLCTL_STANDIN_OOM_AT_STEP=K``  at step K, raise an NPU (or CUDA) out-of-memory RuntimeError in the Ray
                                   worker and exit 1, unless every item of ``VERLCTL_STANDIN_OOM_UNLESS`` is
                                   among the received overrides
``VERLCTL_STANDIN_OOM_UNLESS``     ``key=value;key=value``; items and overrides are compared after stripping
                                   a leading ``+``/``++`` and whitespace around key and value; values must
                                   match as strings, except true/false in any case. Empty: always.
``VERLCTL_STANDIN_OOM_ALWAYS=1``   OOM at step K even when the OOM_UNLESS overrides are present
``VERLCTL_STANDIN_STALL_AT_STEP=K`` at step K, print nothing more and sleep forever (a hung collective)
``VERLCTL_STANDIN_EXIT_AT_STEP=K`` at step K, raise a generic RuntimeError (exit 1)
``VERLCTL_STANDIN_TORCH_NPU``      ``1`` acts as if torch_npu were importable: verl's ``auto_set_device``
                                   then turns ``trainer.device`` into ``npu`` (the test image sets 1)
``VERLCTL_STANDIN_DEFAULT_STEPS``  steps to run when ``trainer.total_training_steps`` is null (default 4;
                                   there is no dataset from which to size an epoch)
``VERLCTL_STANDIN_ARGV_LOG``       where to append the received argv (default
                                   ``<trainer.default_local_dir>/../standin_argv.jsonl``)
``VERLCTL_STANDIN_RAY_TIMEOUT``    seconds to wait for the Ray worker actor (default 120)
=================================  ==========================================================================

The argv log gets one JSON object per run: ``entry``, ``argv`` (the received command line after the
module), ``cwd``, ``hostname``, ``pid``, ``time`` and ``env``. In ``env``, variables whose names contain
KEY, TOKEN, SECRET or PASSWORD are shown as ``sha256:<first 16 hex>``. The record is written before Hydra
composes the config when the directory is known from the command line or from VERLCTL_STANDIN_ARGV_LOG,
so runs rejected by Hydra are recorded as well. Otherwise it is written after composition.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pprint
import re
import socket
import sys
import time
from datetime import datetime, timezone
from typing import Any

# entry file suffix -> (module name, default config name of the real entry point)
ENTRIES: dict[str, tuple[str, str]] = {
    "verl/trainer/main_ppo.py": ("verl.trainer.main_ppo", "ppo_trainer"),
    "recipe/dapo/main_dapo.py": ("recipe.dapo.main_dapo", "dapo_trainer"),
    "recipe/one_step_off_policy/main_ppo.py": (
        "recipe.one_step_off_policy.main_ppo",
        "one_step_off_ppo_trainer",
    ),
    "verl/experimental/one_step_off_policy/main_ppo.py": (
        "verl.experimental.one_step_off_policy.main_ppo",
        "one_step_off_ppo_trainer",
    ),
}
ONE_STEP_OFF_MODULES = {
    "recipe.one_step_off_policy.main_ppo",
    "verl.experimental.one_step_off_policy.main_ppo",
}
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)
_recorded = False


def _entry(entry_file: str) -> tuple[str, str]:
    path = os.path.abspath(entry_file).replace(os.sep, "/")
    for suffix, value in ENTRIES.items():
        if path.endswith("/" + suffix):
            return value
    raise SystemExit(f"standin_trainer: {entry_file} is not one of the known entry paths {sorted(ENTRIES)}")


def default_config_name(entry_file: str) -> str:
    return _entry(entry_file)[1]


def _say(msg: str) -> None:
    """A line that the stand-in adds to verl's output, marked as such."""
    print(f"[verlctl stand-in] {msg}", flush=True)


def _strip_plus(item: str) -> str:
    item = item.strip().lstrip("+")
    key, sep, value = item.partition("=")
    value = value.strip()
    if value.lower() in ("true", "false"):  # Hydra reads True/true alike
        value = value.lower()
    return f"{key.strip()}{sep}{value}"


def _override_value(argv: list[str], key: str) -> str | None:
    value = None
    for arg in argv:
        k, sep, v = _strip_plus(arg).partition("=")
        if sep and k == key:
            value = v
    return value


def _argv_log_path(default_local_dir: str | None) -> str | None:
    explicit = os.environ.get("VERLCTL_STANDIN_ARGV_LOG")
    if explicit:
        return explicit
    if not default_local_dir:
        return None
    return os.path.normpath(os.path.join(os.path.abspath(default_local_dir), "..", "standin_argv.jsonl"))


def _env_snapshot() -> dict[str, str]:
    env = {}
    for name, value in sorted(os.environ.items()):
        if SECRET_NAME.search(name):
            value = "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:16]
        env[name] = value
    return env


def _record_argv(entry_file: str, default_local_dir: str | None) -> None:
    global _recorded
    path = _argv_log_path(default_local_dir)
    if _recorded or path is None:
        return
    record = {
        "time": datetime.now(timezone.utc).isoformat(),
        "entry": _entry(entry_file)[0],
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "env": _env_snapshot(),
    }
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    _recorded = True


def prepare(entry_file: str) -> None:
    """Called by the entry wrapper before Hydra parses the command line."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    _entry(entry_file)
    _record_argv(entry_file, _override_value(sys.argv[1:], "trainer.default_local_dir"))


# ---------------------------------------------------------------------------------------------------------
# The Ray actor: fake "update_actor" metrics, fault-injected OOM, and the logger back ends (as verl's Tracking
# does inside the TaskRunner actor, so the back ends see the Ray worker's environment).


def _oom_message(device: str, step: int) -> str:
    alloc = 1.5 + (step % 7) * 0.13
    if device == "npu":
        # torch_npu wording, as in /work/shared/fixtures/errors/npu-oom-runtimeerror-vllm-ascend-issue1987.txt
        return (
            f"NPU out of memory. Tried to allocate {alloc:.2f} GiB (NPU 0; 29.50 GiB total capacity; "
            "26.91 GiB already allocated; 26.91 GiB current active; 1.12 GiB free; 27.35 GiB reserved in "
            "total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to "
            "avoid fragmentation."
        )
    return (
        f"CUDA out of memory. Tried to allocate {alloc:.2f} GiB. GPU 0 has a total capacity of 79.14 GiB of "
        "which 1.12 GiB is free. Including non-PyTorch memory, this process has 78.01 GiB memory in use. Of "
        "the allocated memory 75.20 GiB is allocated by PyTorch, and 1.35 GiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def _fake_update_metrics(step: int) -> dict[str, float]:
    """Deterministic, plausible-looking values (no model is trained)."""
    s = float(step)
    return {
        "actor/entropy": round(0.62 - 0.18 * (1 - math.exp(-s / 20)), 6),
        "actor/pg_loss": round(-0.004 + 0.003 * math.sin(s), 6),
        "actor/pg_clipfrac": round(0.002 + 0.001 * math.cos(s), 6),
        "actor/ppo_kl": round(0.0001 * (1 + math.sin(s / 3)), 8),
        "actor/grad_norm": round(0.21 + 0.05 * math.cos(s / 2), 6),
        "actor/lr": 1e-06,
    }


class WorkerDict:
    """Stands in for verl's worker group actor; runs in a Ray worker process."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.backends: dict[str, Any] = {}

    def environ(self) -> dict[str, str]:
        return dict(os.environ)

    def init_tracking(self, project: str, experiment: str, backends: list[str], config: dict) -> list[str]:
        notes = []
        for backend in backends:
            if backend == "console":
                continue  # printed by the driver
            if backend == "swanlab":
                # verl 0.7.0 verl/utils/tracking.py, verbatim in substance
                import swanlab

                api_key = os.environ.get("SWANLAB_API_KEY", None)
                log_dir = os.environ.get("SWANLAB_LOG_DIR", "swanlog")
                mode = os.environ.get("SWANLAB_MODE", "cloud")
                if api_key:
                    swanlab.login(api_key)
                swanlab.init(
                    project=project,
                    experiment_name=experiment,
                    config={"FRAMEWORK": "verl", **config},
                    logdir=log_dir,
                    mode=mode,
                )
                self.backends["swanlab"] = swanlab
                notes.append(f"swanlab: mode={mode} logdir={log_dir} (Ray worker environment)")
            elif backend == "wandb":
                # wandb itself is not in the test image; reproduce the failure a real run has without credentials.
                mode = os.environ.get("WANDB_MODE", "")
                if not os.environ.get("WANDB_API_KEY") and mode not in ("offline", "disabled", "dryrun"):
                    raise RuntimeError(
                        "wandb: api_key not configured (no-tty). call wandb.login(key=[your_api_key]) "
                        "[verlctl stand-in: trainer.logger includes wandb, but the Ray worker environment has "
                        "neither WANDB_API_KEY nor WANDB_MODE=offline]"
                    )
                notes.append(f"wandb: not emulated (WANDB_MODE={mode or 'unset'}); nothing logged")
            else:
                notes.append(f"logger back end {backend!r}: not emulated; nothing logged")
        return notes

    def actor_rollout_update_actor(self, step: int, oom: bool) -> dict[str, float]:
        if oom:
            raise RuntimeError(_oom_message(self.device, step))
        return _fake_update_metrics(step)

    def log(self, data: dict[str, float], step: int) -> None:
        for backend in self.backends.values():
            backend.log(data, step=step)

    def finish(self) -> None:
        for backend in self.backends.values():
            backend.finish()
        self.backends.clear()


# ---------------------------------------------------------------------------------------------------------
# Driver side


def _progress_line(n: int, total: int, initial: int, elapsed: float) -> str:
    """A tqdm line as verl's `tqdm(total=..., initial=..., desc="Training Progress")` renders it (no TTY)."""
    frac = min(n / total, 1.0) if total else 0.0
    charset = " " + "".join(map(chr, range(0x258F, 0x2587, -1)))
    nsyms = len(charset) - 1
    bar_len, frac_len = divmod(int(frac * 10 * nsyms), nsyms)
    bar = charset[-1] * bar_len
    if bar_len < 10:
        bar += charset[frac_len] + charset[0] * (10 - bar_len - 1)

    def fmt(seconds: float) -> str:
        m, s = divmod(int(seconds), 60)
        h, m = divmod(m, 60)
        return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"

    done = n - initial
    if done <= 0 or elapsed <= 0:
        tail = f"{fmt(elapsed)}<?, ?it/s"
    else:
        rate = done / elapsed
        rate_fmt = f"{1 / rate:5.2f}s/it" if rate < 1 else f"{rate:5.2f}it/s"
        tail = f"{fmt(elapsed)}<{fmt((total - n) / rate)}, {rate_fmt}"
    return f"Training Progress: {frac * 100:3.0f}%|{bar}| {n}/{total} [{tail}]"


def concat_dict_to_str(data: dict[str, Any], step: int) -> str:
    """verl/utils/logger/aggregate_logger.py (0.7.0 and 0.9.1)."""
    output = [f"step:{step}"]
    for k, v in data.items():
        if isinstance(v, int | float):
            output.append(f"{k}:{pprint.pformat(v)}")
    return " - ".join(output)


def _int_env(env: dict[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"verlctl stand-in: {name}={raw!r} is not an integer") from None


def _required_devices(config: Any, module: str) -> tuple[int, str]:
    trainer = config.trainer
    required = int(trainer.nnodes) * int(trainer.n_gpus_per_node)
    what = f"trainer.nnodes * trainer.n_gpus_per_node = {trainer.nnodes} * {trainer.n_gpus_per_node}"
    rollout = config.get("rollout")
    if module in ONE_STEP_OFF_MODULES and rollout is not None and rollout.get("nnodes") is not None:
        required += int(rollout.nnodes) * int(rollout.n_gpus_per_node)
        what += f" + rollout.nnodes * rollout.n_gpus_per_node = {rollout.nnodes} * {rollout.n_gpus_per_node}"
    return required, what


def _find_latest_ckpt_path(path: str) -> str | None:
    """verl/utils/checkpoint/checkpoint_manager.py find_latest_ckpt_path (0.7.0), messages included."""
    tracker_file = os.path.join(path, "latest_checkpointed_iteration.txt")
    if not os.path.exists(tracker_file):
        print(f"Checkpoint tracker file does not exist: {tracker_file}", flush=True)
        return None
    with open(tracker_file, "rb") as f:
        iteration = int(f.read().decode())
    ckpt_path = os.path.join(path, f"global_step_{iteration}")
    if not os.path.exists(ckpt_path):
        print("Checkpoint does not exist: %s", ckpt_path, flush=True)
        return None
    print("Found checkpoint: %s", ckpt_path, flush=True)
    return ckpt_path


def _load_checkpoint(trainer: Any) -> int:
    """RayPPOTrainer._load_checkpoint (0.7.0): returns the global step to continue from."""
    if trainer.resume_mode == "disable":
        return 0
    checkpoint_folder = trainer.default_local_dir
    if not os.path.isabs(checkpoint_folder):
        checkpoint_folder = os.path.join(os.getcwd(), checkpoint_folder)
    global_step_folder = _find_latest_ckpt_path(checkpoint_folder)
    if trainer.resume_mode == "auto":
        if global_step_folder is None:
            print("Training from scratch", flush=True)
            return 0
    elif trainer.resume_mode == "resume_path":
        assert isinstance(trainer.resume_from_path, str), "resume ckpt must be str type"
        assert "global_step_" in trainer.resume_from_path, "resume ckpt must specify the global_steps"
        global_step_folder = trainer.resume_from_path
        if not os.path.isabs(global_step_folder):
            global_step_folder = os.path.join(os.getcwd(), global_step_folder)
    if global_step_folder is None:
        raise ValueError(
            f"verlctl stand-in: no checkpoint to resume from (resume_mode={trainer.resume_mode})"
        )
    print(f"Load from checkpoint folder: {global_step_folder}", flush=True)
    global_steps = int(global_step_folder.split("global_step_")[-1])
    print(f"Setting global step to {global_steps}", flush=True)
    print(f"Resuming from {global_step_folder}", flush=True)
    return global_steps


def _save_checkpoint(trainer: Any, global_steps: int, entry: str) -> None:
    """RayPPOTrainer._save_checkpoint (0.7.0) layout; the actor dir holds a marker, not weights."""
    folder = os.path.join(trainer.default_local_dir, f"global_step_{global_steps}")
    print(f"local_global_step_folder: {folder}", flush=True)
    actor = os.path.join(folder, "actor")
    os.makedirs(actor, exist_ok=True)
    with open(os.path.join(actor, "verlctl_standin_checkpoint.json"), "w", encoding="utf-8") as f:
        json.dump({"global_step": global_steps, "entry": entry, "note": "verlctl stand-in: no weights"}, f)
    with open(os.path.join(trainer.default_local_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(global_steps))


def run(config: Any, entry_file: str) -> None:
    """The body of the entry wrapper's @hydra.main function."""
    import ray
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    module, _ = _entry(entry_file)
    overrides = [str(o) for o in HydraConfig.get().overrides.task]
    config_name = HydraConfig.get().job.config_name

    # verl.utils.device.auto_set_device
    if os.environ.get("VERLCTL_STANDIN_TORCH_NPU") == "1" and config.trainer.device not in ("cpu", "npu"):
        print(
            f"Detect setting config.trainer.device to {config.trainer.device} for Ascend NPU, maybe"
            "from default value in config file, automatically set to `npu` instead.",
            file=sys.stderr,
            flush=True,
        )
        config.trainer.device = "npu"
    OmegaConf.resolve(config)  # as TaskRunner.run does; interpolation errors surface here
    trainer = config.trainer
    _record_argv(entry_file, trainer.default_local_dir)
    _say(
        f"TEST DOUBLE for `python3 -m {module}` (config {config_name}); no model is trained. "
        f"host={socket.gethostname()} pid={os.getpid()} device={trainer.device}"
    )

    ray.init(address="auto")
    device = str(trainer.device)
    resource = {"npu": "NPU", "cuda": "GPU", "gpu": "GPU"}.get(device)
    required, what = _required_devices(config, module)
    if resource is not None:
        available = int(ray.cluster_resources().get(resource, 0))
        if available < required:
            # verl's ResourcePoolManager._check_resource_available wording
            raise ValueError(
                f"Total available GPUs {available} is less than total desired GPUs {required} "
                f"[verlctl stand-in: Ray resource {resource!r}; {what}]"
            )
        if available > required:
            raise ValueError(
                f"verlctl stand-in: the Ray cluster has {available} {resource} but the job asks for {required} "
                f"({what}); a real run would leave {available - required} idle"
            )
        _say(f"Ray cluster: {available} {resource}, as requested ({what})")

    timeout = float(os.environ.get("VERLCTL_STANDIN_RAY_TIMEOUT", "120"))
    # Pinned to the driver's node so that its environment (and SwanLab's log dir) is the head container's.
    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    worker = ray.remote(num_cpus=0, scheduling_strategy=here)(WorkerDict).remote(device)
    worker_env = ray.get(worker.environ.remote(), timeout=timeout)
    env = {**{k: v for k, v in worker_env.items() if k.startswith("VERLCTL_STANDIN_")}, **os.environ}

    step_seconds = float(env.get("VERLCTL_STANDIN_STEP_SECONDS", "0.5"))
    oom_at = _int_env(env, "VERLCTL_STANDIN_OOM_AT_STEP")
    stall_at = _int_env(env, "VERLCTL_STANDIN_STALL_AT_STEP")
    exit_at = _int_env(env, "VERLCTL_STANDIN_EXIT_AT_STEP")
    oom_unless = [_strip_plus(i) for i in env.get("VERLCTL_STANDIN_OOM_UNLESS", "").split(";") if i.strip()]
    received = {_strip_plus(o) for o in overrides}
    oom_avoided = bool(oom_unless) and all(item in received for item in oom_unless)
    if env.get("VERLCTL_STANDIN_OOM_ALWAYS") == "1":
        oom_avoided = False

    backends = [trainer.logger] if isinstance(trainer.logger, str) else [str(b) for b in trainer.logger]
    for note in ray.get(
        worker.init_tracking.remote(
            str(trainer.project_name),
            str(trainer.experiment_name),
            backends,
            OmegaConf.to_container(config, resolve=True),
        ),
        timeout=timeout,
    ):
        _say(note)

    total = trainer.total_training_steps
    if total is None:
        total = int(env.get("VERLCTL_STANDIN_DEFAULT_STEPS", "4"))
        _say(f"trainer.total_training_steps is null; running {total} steps (no dataset to size an epoch)")
    total = int(total)
    print(f"Total training steps: {total}", flush=True)

    global_steps = _load_checkpoint(trainer)
    initial = global_steps
    loop_start = time.monotonic()
    print(_progress_line(global_steps, total, initial, 0.0), file=sys.stderr, flush=True)
    if global_steps >= total:
        _say(f"resumed at step {global_steps} >= trainer.total_training_steps={total}; nothing left to train")
    global_steps += 1
    while global_steps <= total:
        step_start = time.monotonic()
        is_last_step = global_steps >= total
        if stall_at == global_steps:
            while True:  # a hung collective: no output, no exit
                time.sleep(3600)
        if exit_at == global_steps:
            raise RuntimeError(
                f"verlctl stand-in: injected failure at step {global_steps} (VERLCTL_STANDIN_EXIT_AT_STEP)"
            )
        oom = oom_at == global_steps and not oom_avoided
        metrics: dict[str, Any] = ray.get(
            worker.actor_rollout_update_actor.remote(global_steps, oom), timeout=timeout
        )
        time.sleep(max(0.0, step_seconds - (time.monotonic() - step_start)))
        if trainer.save_freq > 0 and (is_last_step or global_steps % trainer.save_freq == 0):
            _save_checkpoint(trainer, global_steps, module)
        step_time = time.monotonic() - step_start
        score = 0.1 + 0.8 * (1 - math.exp(-global_steps / 10))
        resp_len = 220.0 + 3.5 * global_steps
        metrics.update(
            {
                "training/global_step": global_steps,
                "training/epoch": 0,
                "critic/score/mean": round(score, 6),
                "critic/score/max": 1.0,
                "critic/score/min": 0.0,
                "critic/rewards/mean": round(score, 6),
                "response_length/mean": round(resp_len, 3),
                "response_length/max": 1024.0,
                "response_length/min": 57.0,
                "response_length/clip_ratio": 0.0,
                "prompt_length/mean": 104.883,
                "timing_s/gen": round(step_time * 0.55, 6),
                "timing_s/update_actor": round(step_time * 0.3, 6),
                "timing_s/step": round(step_time, 6),
                "perf/total_num_tokens": int(256 * (resp_len + 104.883)),
                "perf/time_per_step": round(step_time, 6),
                "perf/throughput": round(256 * (resp_len + 104.883) / max(step_time, 1e-6) / required, 3),
            }
        )
        print(concat_dict_to_str(metrics, step=global_steps), flush=True)
        ray.get(worker.log.remote(metrics, global_steps), timeout=timeout)
        elapsed = time.monotonic() - loop_start
        print(_progress_line(global_steps, total, initial, elapsed), file=sys.stderr, flush=True)
        if is_last_step:
            pprint.pprint(f"Final validation metrics: {None}")
            sys.stdout.flush()
            break
        global_steps += 1
    ray.get(worker.finish.remote(), timeout=timeout)
