"""TEST DOUBLE of the accelerator for the real-verl tests: verlctl's demo device layer
(src/verlctl/demo/device_layer.py, installed in the real-verl image as ``verlctl_demo_device``) plus two knobs
that only tests need. Loaded through verl's plugin hook (``VERL_USE_EXTERNAL_MODULES=verl_cpu_device_double``).

The knobs (read in the worker processes):
  ``VERLCTL_TEST_DOUBLE_OOM_AT_STEP=N`` raise torch's real ``torch.OutOfMemoryError`` in the actor update of
  global step N, unless the actor's parameters or optimizer are offloaded (the first rung of verlctl's OOM
  ladder), as a too small device would.
  ``VERLCTL_TEST_DOUBLE_OOM_CURE=offload|recompute|none`` what spares the actor from that out-of-memory:
  ``offload`` (the default: an offloaded actor, as above), ``recompute`` (gradient checkpointing on: a device
  on which offloading alone is not enough, so the OOM ladder must climb to its second rung) or ``none`` (a
  device too small for the model whatever the memory features: the OOM comes in every attempt; the OOM ladder
  must climb to its end and give up). The error, and the line printed when a cure spares the step, name the
  actor's offload and gradient checkpointing states, as verl's engine received them.
  ``VERLCTL_TEST_DOUBLE_HOLD_AT_STEP=N`` (for the two-runs test): in an attempt that did not resume from a
  checkpoint, the actor update of global step N takes long, as a device busy with a long kernel would: it
  prints ``verl_cpu_device_double: holding at step N`` once and waits (at most 30 min, then goes on), so a stop
  always lands mid-run, after the checkpoints of steps 1..N-1, however fast the machine is. A resumed attempt
  never holds. ``VERLCTL_TEST_DOUBLE_HOLD_RELEASE=PATH`` ends the hold as soon as the file PATH exists (the
  long kernel ends): a test lets the run go on, and finish, once it has made its point.
  ``VERLCTL_TEST_DOUBLE_HOLD_AFTER_ROLLOUT_AT_STEP=N`` (for the DAPO test's kill of vLLM's server): the rollout of
  global step N ends late, as on a device still busy: verl 0.9.1's sync trainer (``PPOTrainerSync``, in the
  TaskRunner) has the step's samples and has not yet put the rollout servers to sleep; it prints
  ``verl_cpu_device_double: holding after the rollout of step N`` once and waits (at most 30 min, or until
  ``VERLCTL_TEST_DOUBLE_HOLD_RELEASE``'s file exists). A test kills a server there and knows verl's next call to
  it is that sleep.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
from verlctl_demo_device import patch_on_import

OOM_KNOB = "VERLCTL_TEST_DOUBLE_OOM_AT_STEP"
CURE_KNOB = "VERLCTL_TEST_DOUBLE_OOM_CURE"
CURES = ("offload", "recompute", "none")
HOLD_KNOB = "VERLCTL_TEST_DOUBLE_HOLD_AT_STEP"
RELEASE_KNOB = "VERLCTL_TEST_DOUBLE_HOLD_RELEASE"
HOLD_ROLLOUT_KNOB = "VERLCTL_TEST_DOUBLE_HOLD_AFTER_ROLLOUT_AT_STEP"
HOLD_MAX_S = 1800


def _hold(where: str, knob: str) -> None:
    """Print that the double holds ``where`` and wait until the release file exists (at most HOLD_MAX_S)."""
    import time

    print(f"verl_cpu_device_double: holding {where} ({knob}, at most {HOLD_MAX_S} s)", flush=True)
    release = os.environ.get(RELEASE_KNOB, "").strip()
    deadline = time.monotonic() + HOLD_MAX_S
    while time.monotonic() < deadline and not (release and os.path.exists(release)):
        time.sleep(1.0)
    if release and os.path.exists(release):
        print(f"verl_cpu_device_double: released {where} ({RELEASE_KNOB})", flush=True)


# ---- the OOM and hold knobs -----------------------------------------------------------------------------------------
def _patch_engine_for_oom(engine_cls: Any) -> None:
    """Count the actor's optimizer steps (one per global step with one mini-batch) from the step it resumed
    at, and raise torch's real out-of-memory error at step ``VERLCTL_TEST_DOUBLE_OOM_AT_STEP`` unless the
    engine offloads its parameters or optimizer; hold the step ``VERLCTL_TEST_DOUBLE_HOLD_AT_STEP`` of an
    attempt that did not resume."""
    import re

    if getattr(engine_cls, "_verlctl_double_oom", False):
        return
    step_orig = engine_cls.optimizer_step
    load_orig = engine_cls.load_checkpoint

    @functools.wraps(load_orig)
    def load_checkpoint(self: Any, local_path: Any, *a: Any, **k: Any) -> Any:
        m = re.search(r"global_step_(\d+)", str(local_path or ""))
        if m:
            self._verlctl_double_step = int(m.group(1))
            self._verlctl_double_resumed = True
        return load_orig(self, local_path, *a, **k)

    @functools.wraps(step_orig)
    def optimizer_step(self: Any, *a: Any, **k: Any) -> Any:
        step = getattr(self, "_verlctl_double_step", 0) + 1
        self._verlctl_double_step = step
        cfg = self.engine_config
        param_off, optim_off = bool(getattr(cfg, "param_offload", False)), bool(getattr(cfg, "optimizer_offload", False))
        checkpointing = bool(getattr(self.model_config, "enable_gradient_checkpointing", False))
        cure = os.environ.get(CURE_KNOB, "").strip() or "offload"
        if cure not in CURES:
            raise ValueError(f"{CURE_KNOB}={cure!r}: expected one of {', '.join(CURES)}")
        spared = (cure == "offload" and (param_off or optim_off)) or (cure == "recompute" and checkpointing)
        states = f"param_offload={param_off} optimizer_offload={optim_off} gradient_checkpointing={checkpointing}"
        if str(step) == os.environ.get(OOM_KNOB, "").strip():
            if not spared:
                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 0 bytes "
                    f"(raised by verl_cpu_device_double at step {step}: {OOM_KNOB}, {CURE_KNOB}={cure}, {states})"
                )
            print(f"verl_cpu_device_double: step {step} spared by {CURE_KNOB}={cure} ({states})", flush=True)
        resumed = getattr(self, "_verlctl_double_resumed", False)
        if str(step) == os.environ.get(HOLD_KNOB, "").strip() and not resumed:
            _hold(f"at step {step}", HOLD_KNOB)
        return step_orig(self, *a, **k)

    engine_cls.load_checkpoint = load_checkpoint
    engine_cls.optimizer_step = optimizer_step
    engine_cls._verlctl_double_oom = True


FSDP_ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
if os.environ.get(OOM_KNOB) or os.environ.get(HOLD_KNOB):
    patch_on_import(FSDP_ENGINE_MODULE, lambda mod: _patch_engine_for_oom(mod.FSDPEngine))


def _patch_sync_trainer_for_hold(trainer_cls: Any) -> None:
    """Hold the end of the rollout of global step ``VERLCTL_TEST_DOUBLE_HOLD_AFTER_ROLLOUT_AT_STEP`` (once): the
    sync trainer's ``on_sample_end``, before it puts the rollout servers to sleep."""
    if getattr(trainer_cls, "_verlctl_double_hold", False):
        return
    orig = trainer_cls.on_sample_end

    @functools.wraps(orig)
    def on_sample_end(self: Any, *a: Any, **k: Any) -> Any:
        step = getattr(self, "global_steps", None)
        if str(step) == os.environ.get(HOLD_ROLLOUT_KNOB, "").strip() and not getattr(self, "_verlctl_held", False):
            self._verlctl_held = True
            _hold(f"after the rollout of step {step}", HOLD_ROLLOUT_KNOB)
        return orig(self, *a, **k)

    trainer_cls.on_sample_end = on_sample_end
    trainer_cls._verlctl_double_hold = True


SYNC_TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_sync"
if os.environ.get(HOLD_ROLLOUT_KNOB):
    patch_on_import(SYNC_TRAINER_MODULE, lambda mod: _patch_sync_trainer_for_hold(mod.PPOTrainerSync))
