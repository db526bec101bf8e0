"""Run verl's own start-up validation on CPU for composed override lists (test helper; a subprocess).

``python tests/verlvalidate.py <version> <batches.json>`` reads ``[{"id", "module", "config_dir",
"config_name", "overrides"}, ...]``, composes each under one Hydra initialisation per config tree and runs, with
verl's OWN code from the wheel under ``.cache/verl/<version>``, what verl runs before any worker starts:

* ``verl.utils.config.validate_config`` (main_ppo's entry points: ``trainer/main_ppo.py`` main), which also
  converts the actor config with ``omega_conf_to_dataclass`` and runs ``ActorConfig.validate``, and the
  critic's when verl's ``need_critic`` says there is one;
* ``omega_conf_to_dataclass`` on the rollout, reference, critic and algorithm configs and on the checkpoint
  engine config that the trainers build (``trainer_base.py``), and on ``hybrid_rollout`` (separate_async);
* the V1 ``get_trainer_cls`` registry (every ``@register_trainer`` name of ``verl/trainer/ppo/v1``);
* each mode's own asserts, executed from the verl source itself: the statements of the named function
  whose line range is given in :data:`MODE_ASSERTS` are compiled from the file and run against the config.

It prints ``{"id": null | "the error"}`` as JSON.

Nothing here needs a device, but verl's config modules import device libraries at module level; these
modules are STUBBED (:data:`STUBBED`, each with why): an attribute of a stub is an empty class, so an import
and a type annotation work and any real use fails. The model config (``HFModelConfig``) is NOT converted: its
``__post_init__`` loads the model and tokenizer with transformers from ``model.path``.
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import types
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: Top-level modules replaced by stubs, and why (none of them runs during the validation).
STUBBED: dict[str, str] = {
    "torch": "the device library: verl's config modules import it for annotations and nn.Module bases",
    "torch_npu": "the NPU plugin (verl/utils/device.py probes it)",
    "transformers": "model loading (workers/config/model.py); the model config is not converted here",
    "ray": "the trainers' cluster runtime, imported at module level",
    "tensordict": "tensor batches (verl/protocol.py)",
    "numpy": "arrays, imported by verl/protocol.py and metric helpers",
    "transfer_queue": "the V1 trainer's data plane (main_ppo TaskRunnerV1, trainer_separate_async.py)",
    "orjson": "tracking's JSON encoder (utils/tracking.py)",
    "codetiming": "timers (utils/debug)",
    "datasets": "dataset loading (utils/dataset)",
    "psutil": "process metrics",
    "pandas": "dataset helpers",
    "pyarrow": "dataset helpers",
    "PIL": "images of multimodal datasets (utils/dataset/rl_dataset.py)",
}


class _StubMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (), {})

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls

    def __getitem__(cls, key: Any) -> Any:
        return cls


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (), {})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        m = _StubModule(spec.name)
        m.__path__ = []
        m.__version__ = "999"  # a stub reports a version newer than any minimum verl checks at import
        return m

    def exec_module(self, module: types.ModuleType) -> None:
        return None


#: Per mode, the verl functions whose statements (the 1-based line range) are the mode's start-up asserts:
#: (path, function qualname, first line, last line, how the statements see the config: "config" or "self").
MODE_ASSERTS: dict[str, dict[str, tuple[tuple[str, str, int, int, str], ...]]] = {
    "0.9.1": {
        "v1": (
            # PPOTrainer.__init__: trainer_mode and parameter_sync_step; step(): the divisibility assert.
            ("verl/trainer/ppo/v1/trainer_base.py", "PPOTrainer.__init__", 129, 130, "self"),
            ("verl/trainer/ppo/v1/trainer_base.py", "PPOTrainer.step", 534, 538, "self"),
        ),
        "workers": (
            # ActorRolloutRefWorker.init_model: the reference model's config, aligned with the actor's and
            # converted (the engine workers of every 0.9.1 trainer; run where verl's need_reference_policy holds)
            ("verl/workers/engine_workers.py", "ActorRolloutRefWorker.init_model", 545, 553, "worker"),
        ),
        "separate_async": (
            ("verl/trainer/ppo/v1/trainer_separate_async.py", "PPOTrainerSeparateAsync.__init__", 56, 77, "config"),
        ),
        "fully_async": (
            # main(): async_training must exist; the rollout pool copied into actor_rollout_ref.rollout
            ("verl/experimental/fully_async_policy/fully_async_main.py", "main", 227, 228, "config"),
            ("verl/experimental/fully_async_policy/fully_async_main.py", "main", 235, 236, "config"),
            ("verl/experimental/fully_async_policy/fully_async_trainer.py", "FullyAsyncTrainer.__init__", 72, 76,
             "self"),
            ("verl/experimental/fully_async_policy/fully_async_rollouter.py", "FullyAsyncRollouter.__init__", 345, 365,
             "self"),
            ("verl/experimental/fully_async_policy/fully_async_rollouter.py", "FullyAsyncRollouter._validate_config",
             731, 733, "self"),
            # the trainer's resource pool (fully_async_main.py _create_trainer: the roles less Role.Rollout)
            ("verl/experimental/separation/utils.py", "create_resource_pool_manager", 33, 47, "config"),
        ),
        "one_step_off_policy": (
            ("verl/experimental/one_step_off_policy/ray_trainer.py", "OneStepOffRayTrainer.__init__", 85, 88, "self"),
        ),
    },
}


#: The first actor update's batch asserts, per version and strategy family ("*": every strategy): the
#: worker's normalisation of the mini batch by its data-parallel size, the dispatch of the batch to the DP
#: ranks, and the mini-batch iterator. Executed from verl's source (same statement picking as
#: :data:`MODE_ASSERTS`) with the trainer's device facts: its world size (``trainer.n_gpus_per_node`` x
#: ``trainer.nnodes``) and its data-parallel size as verl derives it (:func:`device_facts`).
UPDATE_ASSERTS: dict[str, dict[str, tuple[tuple[str, str, int, int], ...]]] = {
    "0.7.0": {
        "fsdp": (
            # ActorRolloutRefWorker.__init__: the (dp, sp) Ulysses mesh, then the mini/micro normalisation
            ("verl/workers/fsdp_workers.py", "ActorRolloutRefWorker.__init__", 171, 176),
            ("verl/workers/fsdp_workers.py", "ActorRolloutRefWorker.__init__", 240, 263),
            # the batch split over the DP ranks (DataProto.chunk: 'only support equal chunk')
            ("verl/protocol.py", "DataProto.chunk", 884, 887),
        ),
        "megatron": (
            ("verl/workers/megatron_workers.py", "ActorRolloutRefWorker.__init__", 333, 340),
            ("verl/protocol.py", "DataProto.chunk", 884, 887),
            # megatron_actor.py:369 update_policy -> data.make_iterator(mini_batch_size=ppo_mini_batch_size)
            ("verl/protocol.py", "DataProto.make_iterator", 827, 827),
        ),
    },
    "0.9.1": {
        "*": (
            ("verl/utils/tensordict_utils.py", "chunk_tensordict", 341, 343),
            # engine_workers.py update_actor -> train_mini_batch: mini batch per DP rank, then the iterator
            ("verl/workers/engine_workers.py", "TrainingWorker.train_mini_batch", 261, 270),
            ("verl/utils/tensordict_utils.py", "make_iterator", 588, 588),
        ),
    },
}


def _function(tree: ast.Module, qualname: str) -> ast.FunctionDef:
    body: list[ast.stmt] = tree.body
    node: Any = None
    for part in qualname.split("."):
        node = next(n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == part)
        body = node.body
    assert isinstance(node, ast.FunctionDef), qualname
    return node


def statements(root: Path, path: str, qualname: str, first: int, last: int) -> types.CodeType:
    """The statements of ``qualname`` in ``path`` that lie within lines [first, last], compiled from the source."""
    src = (root / path).read_text(encoding="utf-8")
    fn = _function(ast.parse(src), qualname)
    picked: list[ast.stmt] = []

    def pick(body: list[ast.stmt]) -> None:
        for st in body:
            end = st.end_lineno or st.lineno
            if st.lineno >= first and end <= last:
                picked.append(st)  # wholly in range: taken as it is
            elif st.lineno <= last and end >= first:  # a block that overlaps the range: its inner statements
                for name in ("body", "orelse", "finalbody"):
                    pick(getattr(st, name, []) or [])

    pick(fn.body)
    assert picked, f"no statements of {qualname} in {path}:{first}-{last}"
    return compile(ast.Module(body=picked, type_ignores=[]), f"{root / path}", "exec")


def _cache_yaml_loads(omegaconf: Any) -> None:
    """Hydra reads and parses every YAML file of the config tree again on each compose; within this process
    the files do not change, so each is parsed once and handed out as a fresh copy (Hydra mutates it)."""
    import copy
    import functools

    load = omegaconf.load
    parsed: dict[str, Any] = {}

    @functools.wraps(load)
    def cached(file_: Any) -> Any:
        if not hasattr(file_, "read"):
            return load(file_)
        key = getattr(file_, "name", None)
        if not isinstance(key, str):
            return load(file_)
        if key not in parsed:
            parsed[key] = load(file_)
        return copy.deepcopy(parsed[key])

    omegaconf.load = cached


def registered_trainers(root: Path) -> set[str]:
    names = set()
    for p in (root / "verl" / "trainer" / "ppo" / "v1").glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for d in node.decorator_list:
                    if (isinstance(d, ast.Call) and getattr(d.func, "id", "") == "register_trainer"
                            and d.args and isinstance(d.args[0], ast.Constant)):
                        names.add(d.args[0].value)
    return names


def main(version: str, batches_path: str) -> int:
    root = Path(sys.argv[3]) if len(sys.argv) > 3 else ROOT / ".cache" / "verl" / version
    sys.meta_path.insert(0, _StubFinder())
    sys.path.insert(0, str(root))
    warnings.simplefilter("ignore")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    _cache_yaml_loads(OmegaConf)

    from verl.trainer.ppo.utils import need_critic, need_reference_policy, need_reward_model
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    batches = json.loads(Path(batches_path).read_text(encoding="utf-8"))
    trainers = registered_trainers(root)
    code = {
        mode: [(statements(root, p, q, a, b), how) for p, q, a, b, how in rows]
        for mode, rows in MODE_ASSERTS.get(version, {}).items()
    }
    update = {
        family: [(statements(root, p, q, a, b), p, q) for p, q, a, b in rows]
        for family, rows in UPDATE_ASSERTS.get(version, {}).items()
    }
    search = f"hydra.searchpath=[file://{root / 'verl' / 'trainer' / 'config'}]"
    results: dict[str, str | None] = {}
    by_dir: dict[str, list[dict[str, Any]]] = {}
    for b in batches:
        by_dir.setdefault(b["config_dir"], []).append(b)
    import io
    from contextlib import redirect_stdout

    for config_dir, items in by_dir.items():
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            for b in items:
                try:
                    with redirect_stdout(io.StringIO()):
                        cfg = compose(config_name=b["config_name"], overrides=[*b["overrides"], search])
                        OmegaConf.resolve(cfg)
                        _validate(cfg, b, trainers, code, omega_conf_to_dataclass, validate_config, need_critic,
                                  need_reference_policy, need_reward_model, open_dict)
                        _first_update(cfg, b["mode"], update, omega_conf_to_dataclass, open_dict)
                    results[b["id"]] = None
                except Exception as exc:  # every failure is reported by the test, with its text
                    results[b["id"]] = f"{type(exc).__name__}: {exc}"[:2000]
    print(json.dumps(results))
    return 0


def _validate(cfg: Any, b: dict[str, Any], trainers: set[str], code: dict[str, Any], to_dc: Any, validate_config: Any,
              need_critic: Any, need_reference_policy: Any, need_reward_model: Any, open_dict: Any) -> None:
    module, mode = b["module"], b["mode"]
    # One object stands for the trainer instance across the blocks of a mode (``__init__`` sets what a later
    # method reads); ``config`` is the composed config itself.
    self_ns = types.SimpleNamespace(config=cfg)
    if module == "recipe.one_step_off_policy.main_ppo":
        # 0.7.0 recipe/one_step_off_policy/main_ppo.py:153 validates the config as main_ppo does
        validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    if module == "verl.trainer.main_ppo":
        # main_ppo.py main(): validate_config(config, need_reference_policy(config), need_critic(config))
        validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        if cfg.trainer.get("use_v1", False):
            mode_name = cfg.trainer.v1.trainer_mode
            if mode_name not in trainers:  # trainer_base.get_trainer_cls
                raise ValueError(f"Unknown trainer '{mode_name}'. Available trainers: {sorted(trainers)}.")
            # the trainer class's own __init__ asserts run before PPOTrainer.__init__ (super()) and step()
            _run(code.get(mode_name, ()), cfg, self_ns, need_reward_model, open_dict)
            _run(code.get("v1", ()), cfg, self_ns, need_reward_model, open_dict)
    else:
        _run(code.get(mode, ()), cfg, self_ns, need_reward_model, open_dict)
    ar = cfg.actor_rollout_ref
    to_dc(ar.rollout)
    if need_reference_policy(cfg) and "workers" in code:
        worker = types.SimpleNamespace(config=copy.deepcopy(ar))
        _run(code["workers"], cfg, worker, need_reward_model, open_dict, to_dc)
    if need_critic(cfg):
        to_dc(cfg.critic)
    to_dc(cfg.algorithm)
    if "checkpoint_engine" in ar.rollout:
        to_dc(ar.rollout.checkpoint_engine)
    if mode == "separate_async":
        to_dc(cfg.trainer.v1.separate_async.hybrid_rollout)


def _run(codes: Any, cfg: Any, self_ns: Any, need_reward_model: Any, open_dict: Any, to_dc: Any = None) -> None:
    for c, _how in codes:
        env = {"config": cfg, "self": self_ns, "need_reward_model": need_reward_model, "tokenizer": None,
               "processor": None, "device_name": None, "roles": [_Roles.Actor], "Role": _Roles,
               "omega_conf_to_dataclass": to_dc, "open_dict": open_dict}
        with open_dict(cfg):
            exec(c, env)  # verl's own statements, compiled from its source file


class _Batch:
    """A batch of ``rows`` sequences as verl's dispatch and iterators see it: its length and batch size only."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.batch = types.SimpleNamespace(batch_size=[rows])
        self.batch_size = [rows]

    def __len__(self) -> int:
        return self.rows

    def is_padding_enabled(self) -> bool:  # DataProto.chunk: no auto-padding on the update's dispatch
        return False


class _MeshDouble:
    """DEVICE DOUBLE of torch's DeviceMesh / init_device_mesh: a mesh over the trainer's devices, whose shape must
    cover the world exactly (torch raises otherwise: 'mesh_shape ... does not match the world size')."""

    def __init__(self, world: int) -> None:
        self.world = world

    def size(self) -> int:
        return self.world

    def init_device_mesh(self, device: Any, mesh_shape: tuple[int, ...], mesh_dim_names: Any = None) -> Any:
        n = 1
        for d in mesh_shape:
            n *= d
        if n != self.world:
            raise RuntimeError(f"init_device_mesh: mesh_shape {tuple(mesh_shape)} ({n} devices) does not match the "
                               f"world size {self.world} (torch DeviceMesh)")
        return types.SimpleNamespace(shape=tuple(mesh_shape))


def device_facts(cfg: Any, to_dc: Any) -> tuple[int, int]:
    """The trainer's (world size, data-parallel size) as verl's workers get them on the devices: the world is
    ``trainer.n_gpus_per_node`` x ``trainer.nnodes`` (the trainer pool); DP is megatron-core's
    ``world // (TP*PP*CP)`` for Megatron (``mpu.get_data_parallel_world_size``, a DEVICE DOUBLE here), and
    ``world // ulysses SP`` for FSDP (0.9.1 ``engine/fsdp/transformer_impl.py`` ``get_data_parallel_size``; SP
    as verl's ``FSDPActorConfig.__post_init__`` settles it; 0.7.0's worker computes it itself below). 0 when the
    divisor does not divide the world."""
    world = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    actor = cfg.actor_rollout_ref.actor
    if actor.strategy == "megatron":
        m = actor.megatron
        div = int(m.tensor_model_parallel_size) * int(m.pipeline_model_parallel_size) * int(
            m.get("context_parallel_size", 1) or 1)
    else:
        dc = to_dc(actor)
        fsdp = getattr(dc, "fsdp_config", None)
        div = max(int(getattr(dc, "ulysses_sequence_parallel_size", 1) or 1),
                  int(getattr(fsdp, "ulysses_sequence_parallel_size", 1) or 1))
    return world, (world // div if div and world % div == 0 else 0)


def _first_update(cfg: Any, mode: str, update: dict[str, Any], to_dc: Any, open_dict: Any) -> None:
    """The first actor update's batch asserts (:data:`UPDATE_ASSERTS`), verl's statements run with the device
    facts of :func:`device_facts` and the batch the mode's trainer hands the actor: ``train_batch_size`` prompts
    (fully_async: ``ppo_mini_batch_size * async_training.require_batches``, fully_async_trainer.py:159), times
    ``rollout.n`` responses."""
    ar = cfg.actor_rollout_ref
    rows = update.get(ar.actor.strategy.replace("fsdp2", "fsdp")) or update.get("*")
    if not rows:
        return
    world, dp = device_facts(cfg, to_dc)
    n = int(ar.rollout.n)
    prompts = (int(ar.actor.ppo_mini_batch_size) * int(cfg.async_training.require_batches)
               if mode == "fully_async" else int(cfg.data.train_batch_size))
    seqs = prompts * n
    mesh = _MeshDouble(world)
    worker = types.SimpleNamespace(config=copy.deepcopy(ar), device_mesh=mesh, _is_actor=True, _is_ref=False,
                                   _is_rollout=True)
    mpu = types.SimpleNamespace(get_data_parallel_world_size=lambda: dp)  # DEVICE DOUBLE of megatron-core's mpu
    env: dict[str, Any] = {"world_size": world, "device_name": "npu", "init_device_mesh": mesh.init_device_mesh,
                           "mpu": mpu}
    for c, _path, qualname in rows:
        if qualname == "ActorRolloutRefWorker.__init__":
            env["self"] = worker
        elif qualname == "DataProto.chunk":
            env.update(self=_Batch(seqs), chunks=env.get("dp", dp) or 1)
        elif qualname == "chunk_tensordict":
            env.update(td=_Batch(seqs), chunks=dp or 1, TensorDict=_Batch)
        elif qualname == "DataProto.make_iterator":  # per DP rank: its share, the normalised mini batch
            env.update(self=_Batch(seqs // (env.get("dp", dp) or 1)),
                       mini_batch_size=worker.config.actor.ppo_mini_batch_size)
        elif qualname == "TrainingWorker.train_mini_batch":  # trainer: mini_batch_size = ppo_mini * n (global)
            env.update(self=types.SimpleNamespace(engine=types.SimpleNamespace(get_data_parallel_size=lambda: dp)),
                       mini_batch_size=int(ar.actor.ppo_mini_batch_size) * n, num_mini_batch=None,
                       batch_size_per_dp=seqs // (dp or 1))
        elif qualname == "make_iterator":
            env.update(tensordict=_Batch(env["batch_size_per_dp"]), mini_batch_size=env["mini_batch_size_per_gpu"])
        with open_dict(worker.config):
            exec(c, env)  # verl's own statements, compiled from its source file (path, qualname)


class _Roles:
    """verl.trainer.ppo.utils.Role names used by create_resource_pool_manager (the trainer's roles: Actor)."""

    Actor, ActorRollout, Critic, RefPolicy, Rollout, RewardModel = ("actor", "actor_rollout", "critic", "ref",
                                                                    "rollout", "rm")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
