"""Map a parsed verl launch script onto run-spec values (``verlctl import``).

The script's Hydra overrides are read one by one: those that correspond to a spec field or a feature set
that field; every override is also remembered, so that :mod:`verlctl.importer` can keep, verbatim, each
one that verlctl's own command does not reproduce (``extra_overrides``). Exported variables become
``cluster.devices`` / ``device`` / ``container.proxy`` where they mean that, and ``env`` otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from verlctl.errors import VerlctlError
from verlctl.inputs.shell_script import UNRESOLVED, ParsedScript
from verlctl.spec.model import DISAGGREGATED_MODES
from verlctl.spec.sources import SEED_ENV

AR = "actor_rollout_ref"
MT = f"{AR}.actor.megatron"
OTC = f"{MT}.override_transformer_config"

#: The entry points verlctl runs: module -> (mode, verl versions it exists in).
ENTRIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "verl.trainer.main_ppo": ("sync", ("0.7.0", "0.9.1")),
    "recipe.dapo.main_dapo": ("sync", ("0.7.0",)),
    "recipe.one_step_off_policy.main_ppo": ("one_step_off_policy", ("0.7.0",)),
    "verl.experimental.one_step_off_policy.main_ppo": ("one_step_off_policy", ("0.9.1",)),
    "verl.experimental.fully_async_policy.fully_async_main": ("fully_async", ("0.9.1",)),
}

#: The Hydra configs each entry point ships (its --config-name choices).
KNOWN_CONFIGS: dict[str, tuple[str, ...]] = {
    "verl.trainer.main_ppo": ("ppo_trainer", "ppo_megatron_trainer"),
    "recipe.dapo.main_dapo": ("dapo_trainer", "dapo_megatron_trainer"),
    "recipe.one_step_off_policy.main_ppo": ("one_step_off_ppo_trainer", "one_step_off_ppo_megatron_trainer"),
    "verl.experimental.one_step_off_policy.main_ppo": ("one_step_off_ppo_trainer", "one_step_off_ppo_megatron_trainer"),
    "verl.experimental.fully_async_policy.fully_async_main": ("fully_async_ppo_trainer", "fully_async_ppo_megatron_trainer"),
}

#: Hydra key -> (spec path, kind). Kinds: int, float, str, files, bool.
FIELDS: dict[str, tuple[str, str]] = {
    "data.train_files": ("paths.train_files", "files"),
    "data.val_files": ("paths.val_files", "files"),
    "data.max_prompt_length": ("train.max_prompt_length", "int"),
    "data.max_response_length": ("train.max_response_length", "int"),
    "data.train_batch_size": ("train.train_batch_size", "int"),
    "data.gen_batch_size": ("train.gen_batch_size", "int"),
    f"{AR}.model.path": ("paths.model", "str"),
    f"{AR}.actor.optim.lr": ("train.lr", "float"),
    f"{AR}.actor.optim.lr_warmup_steps": ("train.warmup_steps", "int"),
    f"{AR}.actor.ppo_mini_batch_size": ("train.mini_batch_size", "int"),
    f"{AR}.actor.ppo_micro_batch_size_per_gpu": ("train.micro_batch_size_per_device", "int"),
    f"{AR}.rollout.n": ("train.responses_per_prompt", "int"),
    f"{AR}.rollout.tensor_model_parallel_size": ("train.rollout_tensor_parallel", "int"),
    f"{AR}.rollout.name": ("train.rollout_engine", "str"),
    f"{AR}.rollout.gpu_memory_utilization": ("train.rollout_memory_utilization", "float"),
    f"{MT}.tensor_model_parallel_size": ("train.tensor_parallel", "int"),
    f"{MT}.pipeline_model_parallel_size": ("train.pipeline_parallel", "int"),
    f"{MT}.context_parallel_size": ("train.context_parallel", "int"),
    "trainer.total_training_steps": ("train.steps", "int"),
    "trainer.save_freq": ("train.save_freq", "int"),
    "trainer.test_freq": ("train.test_freq", "int"),
    "trainer.val_before_train": ("train.val_before_train", "bool"),
    "trainer.default_local_dir": ("paths.checkpoints", "str"),
    "trainer.project_name": ("logging.project", "str"),
    "trainer.experiment_name": ("logging.experiment", "str"),
    # verl 0.9.1's async trainers (V1 trainer_mode; fully async)
    "trainer.v1.separate_async.parameter_sync_step": ("train.parameter_sync_step", "int"),
    "trainer.v1.separate_async.num_warmup_batches": ("train.num_warmup_batches", "float"),
    "trainer.v1.colocate_async.num_warmup_batches": ("train.num_warmup_batches", "float"),
    f"{AR}.rollout.checkpoint_engine.backend": ("train.checkpoint_engine", "str"),
    "async_training.staleness_threshold": ("train.staleness_threshold", "float"),
}

#: Keys (or key prefixes, ending in '.') that only verl 0.9 has: a script that sets one targets verl 0.9.1 (G7).
V091_ONLY = ("reward.", "trainer.use_v1", "trainer.v1.", "transfer_queue.", f"{AR}.rollout.checkpoint_engine.",
             f"{AR}.rollout.nnodes", f"{AR}.rollout.n_gpus_per_node", "skip.", "distillation.")

#: Hydra key -> feature whose on/off state the key's boolean value gives.
FEATURE_KEYS: dict[str, str] = {
    f"{AR}.model.use_remove_padding": "remove_padding",
    f"{AR}.actor.use_dynamic_bsz": "dynamic_batch",
    f"{AR}.model.enable_gradient_checkpointing": "gradient_checkpointing",
    f"{AR}.rollout.enable_chunked_prefill": "chunked_prefill",
    f"{AR}.rollout.enable_prefix_caching": "prefix_cache",
    f"{OTC}.swap_optimizer": "swap_optimizer",
    f"{OTC}.use_flash_attn": "flash_attn",
}

#: Environment variables with a spec field of their own.
ENV_FIELDS = {name: path for name, path in SEED_ENV.items() if path.startswith("container.proxy.")}
SECRET_ENV = {"SWANLAB_API_KEY"}

#: Keys an older script may set that the target verl no longer has (the command would fail to compose):
#: not imported, with the reason. verl version -> key -> reason.
ABSENT: dict[str, dict[str, str]] = {
    "0.9.1": {
        f"{MT}.grad_offload": "verl 0.9.1 has no actor.megatron.grad_offload (verl/trainer/config/engine/"
        "megatron.yaml:4-8: param_offload also releases the gradient buffers); the offload feature covers it",
        f"{AR}.ref.megatron.grad_offload": "verl 0.9.1 has no ref.megatron.grad_offload "
        "(verl/trainer/config/engine/megatron.yaml:4-8)",
    },
}
#: The same, for the keys one entry point's config lacks although another's has them: (verl version, module)
#: -> key -> reason.
ABSENT_IN_ENTRY: dict[tuple[str, str], dict[str, str]] = {
    ("0.9.1", "verl.trainer.main_ppo"): {
        # verl's own separate_async ascend CI script at commit b0135c24 sets it; the merged version (#7357) does not.
        f"{AR}.actor.use_rollout_log_probs": "verl 0.9.1's ppo_trainer config has no actor.use_rollout_log_probs "
        "(verl/trainer/config/actor/actor.yaml; only the fully_async configs add it: fully_async_policy/config/"
        "fully_async_ppo_trainer.yaml:87), so the override fails to compose ('Could not override'); the "
        "ActorConfig field (verl/workers/config/actor.py:279) is read by no 0.9.1 code: the V1 trainer takes the "
        "rollout's log-probs when algorithm.rollout_correction.bypass_mode=True "
        "(trainer/ppo/v1/trainer_separate_async.py:197-200)",
    },
}

#: Spec fields verlctl requires to be safe names (they become directory and run names): a script value
#: that is not one is replaced by verlctl's (derived) value instead of being kept as an extra override.
NAME_FIELDS = {"logging.experiment", "logging.project"}


class ImportFailure(VerlctlError):
    """The script is a launch script, but not of a run verlctl can describe (one line: why)."""


@dataclass
class ScriptOverride:
    prefix: str  # "", "+", "++", "~"
    key: str
    value_text: str  # as written after "=" (expanded)
    raw: str  # the whole override as the script passes it
    mapped_to: str | None = None  # the spec path or feature it set

    @property
    def unresolved(self) -> bool:
        return UNRESOLVED in self.raw


@dataclass
class Mapped:
    """What the script says, in spec terms, before verlctl's command is compared with it."""

    tree: dict[str, Any]
    overrides: list[ScriptOverride]
    env: dict[str, str]  # exported variables without a spec field of their own
    version: str
    module: str
    config_name: str | None
    notes: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # spec path -> the override/env that set it
    dropped: dict[str, str] = field(default_factory=dict)  # script override -> why it is not imported


# --------------------------------------------------------------------------------------------------
# Hydra values (enough of the override grammar to compare and map values; never to execute anything)


def split_override(raw: str) -> ScriptOverride | None:
    m = re.match(r"(\+\+|\+|~)?([A-Za-z0-9_./@-]+)=(.*)\Z", raw, re.S)
    if not m:
        return None
    return ScriptOverride(m.group(1) or "", m.group(2), m.group(3), raw)


def parse_value(text: str) -> Any:
    """A Hydra override value as Python (quoted strings unquoted, lists split, numbers typed)."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        body = t[1:-1]
        return re.sub(r"\\(['\"\\])", r"\1", body)
    if t.startswith("[") and t.endswith("]"):
        return [parse_value(x) for x in _split_top(t[1:-1])] if t[1:-1].strip() else []
    low = t.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low in ("null", "~"):
        return None
    if re.fullmatch(r"[-+]?[0-9]+", t):
        return int(t)
    if re.fullmatch(r"[-+]?(\.[0-9]+|[0-9]+\.[0-9]*|[0-9]+)([eE][-+]?[0-9]+)?|[-+]?(inf|nan)", low):
        return float(t)
    return t


def _split_top(text: str) -> list[str]:
    out: list[str] = []
    depth = 0
    quote = ""
    cur: list[str] = []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return [x.strip() for x in out]


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return bool(a == b)


# --------------------------------------------------------------------------------------------------


def _convert(kind: str, value: Any) -> Any:
    if kind == "files":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        if isinstance(value, str):
            return [value]
        raise ValueError("not a path or a list of paths")
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("not an integer")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("not a number")
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError("not a boolean")
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    node = tree
    parts = path.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


#: The most devices one node carries (an Ascend A3 server: 16 NPU dies; GPU servers: 8, at most 16): a trainer
#: and a rollout pool per node that add up to more cannot share a node.
MAX_DEVICES_PER_NODE = 16


def _whole_node_split(per_node: int, rollout_per_node: int, nnodes: Any, rollout_nnodes: Any) -> tuple[int, int] | None:
    """(trainer nodes, rollout nodes) where a script's trainer and rollout pools cannot share a node, so must be
    separate nodes (verlctl's whole-node split); None where they fit on each node (a per-node split)."""
    if per_node + rollout_per_node <= MAX_DEVICES_PER_NODE:
        return None
    train_nodes = nnodes if isinstance(nnodes, int) and nnodes > 0 else 1
    roll_nodes = rollout_nnodes if isinstance(rollout_nnodes, int) and rollout_nnodes > 0 else 1
    return train_nodes, roll_nodes


#: Exported variables only an Ascend (NPU) or only a CUDA (GPU) stack reads: a script that sets them was written for
#: that device (prefixes, or names holding the marker).
NPU_ENV_HINTS = ("ASCEND_", "HCCL_", "VLLM_ASCEND_", "PYTORCH_NPU_", "TORCH_NPU_", "NPU_")
GPU_ENV_HINTS = ("NCCL_", "PYTORCH_CUDA_", "CUDA_VISIBLE_DEVICES", "VLLM_ATTENTION_BACKEND")
#: The script's own variable naming its device (verl's 0.9 examples: DEVICE=npu|gpu, see examples/grpo_trainer).
DEVICE_VARIABLES = ("DEVICE", "device")
_DEVICE_WORDS = {"npu": "npu", "ascend": "npu", "gpu": "gpu", "cuda": "gpu"}
#: Words of a script's name or folders that name a device family (verl's run_*_npu.sh, *_h800_*.sh, special_npu/).
PATH_WORDS = {
    "npu": frozenset({"npu", "ascend", "910b", "910c"}),
    "gpu": frozenset({"gpu", "cuda", "nvidia", "a100", "a800", "h100", "h800", "h20", "h200", "b200", "gb200"}),
}


def script_device(parsed: ParsedScript, value_of: Any, exported: dict[str, str], given: str | None,
                  notes: list[str]) -> tuple[str, str]:
    """(device, what says so): ``--device``, else the strongest evidence in the script: ``trainer.device=`` or the
    script's ``DEVICE`` variable, then which of ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES it exports, then
    variables and values only an Ascend (vllm-ascend, HCCL, CANN) or a CUDA stack reads. A script without any, or
    whose evidence disagrees, is refused: the user says which (verl itself runs such a script on either)."""
    levels: list[list[tuple[str, str]]] = [[], [], [], []]
    td = value_of("trainer.device")
    if isinstance(td, str) and td.lower() in _DEVICE_WORDS:
        levels[0].append((_DEVICE_WORDS[td.lower()], f"trainer.device={td}"))
    for var in DEVICE_VARIABLES:
        v = parsed.variables.get(var)
        if isinstance(v, str) and UNRESOLVED not in v and v.strip().lower() in _DEVICE_WORDS:
            levels[0].append((_DEVICE_WORDS[v.strip().lower()], f"the script's {var}={v.strip()}"))
    for name in exported:
        if name == "ASCEND_RT_VISIBLE_DEVICES":
            levels[1].append(("npu", f"export {name}"))
        elif name == "CUDA_VISIBLE_DEVICES":
            levels[1].append(("gpu", f"export {name}"))
        elif name.startswith(NPU_ENV_HINTS) or "ASCEND" in name:
            levels[2].append(("npu", f"export {name}"))
        elif name.startswith(GPU_ENV_HINTS) or name.endswith("CUDA_VISIBLE_DEVICES"):
            levels[2].append(("gpu", f"export {name}"))
    for path in parsed.sourced:  # CANN's environment (/usr/local/Ascend/ascend-toolkit/set_env.sh) is Ascend's
        if "ascend" in path.lower():
            levels[2].append(("npu", f"source {path}"))
    for raw in parsed.command.overrides:
        ov = split_override(raw)
        if ov is None:
            continue
        value = parse_value(ov.value_text)
        if (ov.key.endswith("attention_backend") and value == "ascend") or (
                ov.key.endswith("profiler.tool") and value == "npu") or ".tool_config.npu." in ov.key:
            levels[2].append(("npu", ov.raw))  # vllm-ascend / sglang's Ascend backend, the NPU profiler
    # Weakest: the script's own name and folders (verl's run_*_npu.sh, tests/special_npu/, ascend_extras/).
    for part in reversed(parsed.name.replace("\\", "/").split("/")[-3:]):
        words = set(re.split(r"[^a-z0-9]+", part.lower()))
        if words & PATH_WORDS["npu"]:
            levels[3].append(("npu", f"the script's path ({part})"))
        if words & PATH_WORDS["gpu"]:
            levels[3].append(("gpu", f"the script's path ({part})"))
    if given is not None:
        against = [why for level in levels for d, why in level if d != given]
        if against:
            notes.append(f"device {given} (--device), although the script says otherwise: {', '.join(against[:3])}")
        return given, "--device"
    for level in levels:
        if not level:
            continue
        found = {d for d, _ in level}
        if len(found) == 1:
            whys = list(dict.fromkeys(why for _, why in level))
            return level[0][0], ", ".join(whys[:3]) + (f" (and {len(whys) - 3} more)" if len(whys) > 3 else "")
        shown = "; ".join(f"{why} ({d})" for d, why in level[:4])
        raise ImportFailure(f"{parsed.name}: the script names both devices ({shown}): pass --device npu or "
                            "--device gpu")
    raise ImportFailure(
        f"{parsed.name}: the device is not evident from the script (no trainer.device, DEVICE variable, "
        "ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES, or Ascend / CUDA settings; verl runs it on either): "
        "pass --device npu or --device gpu"
    )


def map_script(parsed: ParsedScript, version: str | None = None, given_device: str | None = None) -> Mapped:
    """The spec values a script's command and exports mean. Raises ImportFailure for runs verlctl cannot
    describe (another algorithm, entry point or training engine)."""
    cmd = parsed.command
    notes = list(parsed.notes)
    if parsed.unset:
        notes.append(
            f"read but never set by the script, so expanded empty: {', '.join(parsed.unset[:10])} "
            "(give values with --var NAME=VALUE)"
        )
    module = cmd.module
    if module not in ENTRIES:
        raise ImportFailure(
            f"{parsed.name}: entry point {module} is not one verlctl runs "
            f"(supported: {', '.join(sorted(ENTRIES))})"
        )
    mode, versions = ENTRIES[module]
    overrides: list[ScriptOverride] = []
    for raw in cmd.overrides:
        ov = split_override(raw)
        if ov is None:
            raise ImportFailure(f"{parsed.name}: line {cmd.line}: {raw[:80]!r} is not a Hydra override (key=value)")
        overrides.append(ov)
    by_key = {o.key: o for o in overrides}

    def value_of(key: str) -> Any:
        o = by_key.get(key)
        return None if o is None or o.unresolved else parse_value(o.value_text)

    # What kind of run this is.
    adv = value_of("algorithm.adv_estimator")
    if adv is not None and adv != "grpo":
        raise ImportFailure(
            f"{parsed.name}: algorithm.adv_estimator={adv} is not GRPO/DAPO: verlctl runs GRPO and DAPO "
            "(group-relative advantages, no critic)"
        )
    engine = value_of("model_engine")
    actor_strategy = value_of(f"{AR}.actor.strategy")
    config_name = (cmd.config_name or "").removesuffix(".yaml") or None
    if config_name is not None and config_name not in KNOWN_CONFIGS.get(module, ()):
        raise ImportFailure(
            f"{parsed.name}: --config-name {config_name} is not one of verl's configs for {module} "
            f"({', '.join(KNOWN_CONFIGS[module])}): verlctl composes from verl's own config"
        )
    if cmd.config_path is not None and cmd.config_path.rstrip("/") not in ("config", "./config"):
        raise ImportFailure(
            f"{parsed.name}: --config-path {cmd.config_path}: a config directory of your own cannot be imported "
            "(verlctl composes from the entry point's own config, next to the module)"
        )
    if engine not in (None, "megatron", "dp", "fsdp"):
        gone = (
            "; verl 0.9.1 has no such engine either (the MindSpeed-LLM backend was removed upstream, verl #7374)"
            if engine == "mindspeed" and version in (None, "0.9.1")
            else ""
        )
        raise ImportFailure(
            f"{parsed.name}: model_engine={engine} has no verlctl strategy (megatron, fsdp, fsdp2 only){gone}"
        )
    if actor_strategy not in (None, "megatron", "fsdp", "fsdp2"):
        raise ImportFailure(
            f"{parsed.name}: actor strategy {actor_strategy} has no verlctl strategy (megatron, fsdp, fsdp2 only)"
        )
    if engine == "megatron" or actor_strategy == "megatron" or (config_name and "megatron" in config_name):
        strategy = "megatron"
    elif actor_strategy == "fsdp2":
        strategy = "fsdp2"
    else:
        strategy = "fsdp"
    if version is None:
        if module.startswith("verl.experimental.") or engine is not None or any(
            o.key == k or (k.endswith(".") and o.key.startswith(k)) for o in overrides for k in V091_ONLY
        ):
            version = "0.9.1"
        elif module.startswith("recipe."):
            version = "0.7.0"
        else:
            # F4-8: main_ppo is in every verl; nothing in the script says which one it was written for. The spec
            # then takes the version installed in the image (check and launch read it), never a silent guess.
            version = "auto"
            notes.append(
                "verl version not evident from the script: verl_version is auto (check and launch take the verl "
                "installed in the image; plan warns until then); pass --verl-version 0.7.0 or 0.9.1 to fix it"
            )
    if version != "auto" and version not in versions \
            and not (module == "recipe.dapo.main_dapo" and version == "0.9.1"):
        raise ImportFailure(
            f"{parsed.name}: {module} is not an entry point of verl {version} "
            f"(it is in verl {', '.join(versions)}): pass --verl-version {versions[0]}"
        )
    reward_dapo = value_of("reward_model.reward_manager") == "dapo" or value_of("reward.reward_manager.name") == "dapo"
    algorithm = (
        "dapo"
        if module == "recipe.dapo.main_dapo" or reward_dapo or value_of("algorithm.filter_groups.enable") is True
        else "grpo"
    )

    v1_mode = value_of("trainer.v1.trainer_mode")
    if module == "verl.trainer.main_ppo" and v1_mode in ("colocate_async", "separate_async") \
            and value_of("trainer.use_v1") is not False:
        mode = v1_mode  # verl 0.9.1's V1 trainer, selected by trainer.v1.trainer_mode
    tree: dict[str, Any] = {"verl_version": version, "algorithm": algorithm, "mode": mode, "strategy": strategy}
    sources: dict[str, str] = {}

    def put(path: str, value: Any, source: str) -> None:
        _set(tree, path, value)
        sources[path] = source

    # Devices and the rest of the environment.
    env: dict[str, str] = {}
    exported = {**parsed.exports, **cmd.env}
    device, device_source = script_device(parsed, value_of, exported, given_device, notes)
    for name, value in exported.items():
        if UNRESOLVED in value:
            notes.append(f"env {name} not imported: its value needs a command the import does not run")
            continue
        if name.upper() in SECRET_ENV:
            notes.append(f"env {name} not imported (a secret): export it when you run verlctl launch")
            continue
        if name in ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") and re.fullmatch(r"[0-9]+(,[0-9]+)*", value):
            ids = [int(x) for x in value.split(",")]
            if len(set(ids)) == len(ids):
                put("cluster.devices", ids, f"export {name}")
                continue
        if name in ENV_FIELDS:
            if "@" in value.split("://", 1)[-1].split("/", 1)[0]:
                notes.append(f"env {name} not imported: the proxy URL holds credentials; export {name} yourself")
            else:
                put(ENV_FIELDS[name], value, f"export {name}")
            continue
        env[name] = value
    put("device", device, device_source)

    enable: list[str] = []
    disable: list[str] = []
    for ov in overrides:
        if ov.unresolved or ov.prefix == "~":
            continue
        value = parse_value(ov.value_text)
        if ov.key in FIELDS:
            path, kind = FIELDS[ov.key]
            try:
                put(path, _convert(kind, value), ov.raw)
                ov.mapped_to = path
            except ValueError:
                pass
            continue
        feature = FEATURE_KEYS.get(ov.key)
        if feature and isinstance(value, bool):
            if feature == "gradient_checkpointing" and strategy == "megatron":
                continue
            (enable if value else disable).append(feature)
            ov.mapped_to = f"feature {feature}"
            continue
        if ov.key == f"{MT}.virtual_pipeline_model_parallel_size" and isinstance(value, int) and value >= 2:
            enable.append("vpp")
            put("features.vpp_size", value, ov.raw)
            ov.mapped_to = "feature vpp"
        elif ov.key == f"{OTC}.recompute_granularity" and value == "full":
            enable.append("recompute")
            ov.mapped_to = "feature recompute"
        elif ov.key == f"{OTC}.recompute_method" and value in ("block", "uniform"):
            put("features.recompute_method", value, ov.raw)
            ov.mapped_to = "features.recompute_method"
        elif ov.key == f"{OTC}.recompute_num_layers" and isinstance(value, int) and value > 0:
            put("features.recompute_num_layers", value, ov.raw)
            ov.mapped_to = "features.recompute_num_layers"
        elif ov.key == "trainer.logger":
            loggers = value if isinstance(value, list) else [value]
            put("logging.console", "console" in loggers, ov.raw)
            put("logging.swanlab.enabled", "swanlab" in loggers, ov.raw)
            ov.mapped_to = "logging"

    if mode == "fully_async":
        # The rollouter streams prompts (data.train_batch_size=0, fully_async_rollouter.py asserts it) and the trainer
        # syncs weights every trigger_parameter_sync_step steps: verlctl's train_batch_size is the prompts between two
        # syncs, parameter_sync_step x mini-batch (verlctl emits data.train_batch_size=0 itself).
        pss = value_of("async_training.trigger_parameter_sync_step")
        mini = value_of(f"{AR}.actor.ppo_mini_batch_size")
        if isinstance(pss, int) and pss >= 1 and not isinstance(pss, bool):
            by_key["async_training.trigger_parameter_sync_step"].mapped_to = "train.parameter_sync_step"
            put("train.parameter_sync_step", pss, by_key["async_training.trigger_parameter_sync_step"].raw)
            if value_of("data.train_batch_size") == 0 and isinstance(mini, int) and mini >= 1:
                put("train.train_batch_size", pss * mini,
                    "async_training.trigger_parameter_sync_step x actor.ppo_mini_batch_size (fully_async: "
                    "data.train_batch_size=0, prompts streamed)")

    # Devices per node: the trainer's (and, one-step-off, the rollout's).
    per_node = value_of("trainer.n_gpus_per_node")
    rollout_key = f"{AR}.rollout.n_gpus_per_node" if mode == "separate_async" else "rollout.n_gpus_per_node"
    rollout_per_node = value_of(rollout_key)
    nnodes = value_of("trainer.nnodes")
    rollout_nodes_key = rollout_key.replace("n_gpus_per_node", "nnodes")
    rollout_nnodes = value_of(rollout_nodes_key)
    if mode in DISAGGREGATED_MODES and isinstance(per_node, int) and isinstance(rollout_per_node, int):
        put("train.trainer_devices", per_node, "trainer.n_gpus_per_node")
        put("train.rollout_devices", rollout_per_node, rollout_key)
        whole = _whole_node_split(per_node, rollout_per_node, nnodes, rollout_nnodes)
        if whole is not None and "devices" not in tree.get("cluster", {}):
            # verl asks Ray for two pools, trainer.nnodes x n_gpus_per_node and rollout nnodes x n_gpus_per_node
            # (fully_async_main.py create_resource_pool_manager; one-step-off and separate_async alike): pools
            # that cannot share a node are separate nodes, verlctl's whole-node split (train.rollout_nodes).
            train_nodes, roll_nodes = whole
            put("train.rollout_nodes", roll_nodes, rollout_nodes_key)
            put("cluster.devices", list(range(max(per_node, rollout_per_node))),
                "the larger of trainer.n_gpus_per_node and the rollout's (a node of each side)")
            nnodes = train_nodes + roll_nodes
            put("cluster.nnodes", nnodes, f"trainer.nnodes + {rollout_nodes_key}")
            notes.append(
                f"trainer and rollout pools of {per_node} + {rollout_per_node} devices per node do not fit one node "
                f"(at most {MAX_DEVICES_PER_NODE}): imported as a whole-node split, {train_nodes} trainer node(s) + "
                f"train.rollout_nodes={roll_nodes} rollout node(s) (cluster.nnodes={nnodes}); "
                "if your nodes have room for both pools, set train.rollout_nodes: null and cluster.devices instead; "
                f"list the {nnodes} node addresses in cluster.nodes (the first is the Ray head) before `verlctl "
                "launch`, or let Slurm pick them (`verlctl export slurm`)"
            )
            nnodes = None  # cluster.nnodes is set: no G6 note below
        elif "cluster" not in tree or "devices" not in tree["cluster"]:
            put("cluster.devices", list(range(per_node + rollout_per_node)), "trainer + rollout devices per node")
    elif isinstance(per_node, int) and per_node > 0 and ("cluster" not in tree or "devices" not in tree["cluster"]):
        put("cluster.devices", list(range(per_node)), "trainer.n_gpus_per_node")
    if isinstance(nnodes, int) and nnodes > 1:
        # G6: a multi-node script: the spec spans that many nodes (trainer.nnodes is then verlctl's own).
        put("cluster.nnodes", nnodes, "trainer.nnodes")
        notes.append(
            f"trainer.nnodes={nnodes}: cluster.nnodes is {nnodes}; list the {nnodes} node addresses in cluster.nodes "
            "(the first is the Ray head) before `verlctl launch`, or let Slurm pick them (`verlctl export slurm`)"
        )
    if strategy == "megatron" and f"{MT}.tensor_model_parallel_size" not in by_key:
        put("train.tensor_parallel", 1, "verl's default (the script sets no Megatron TP)")
    if strategy == "megatron" and f"{MT}.pipeline_model_parallel_size" not in by_key:
        put("train.pipeline_parallel", 1, "verl's default (the script sets no Megatron PP)")

    features: dict[str, Any] = tree.setdefault("features", {})
    on = list(dict.fromkeys(enable))
    off = [f for f in dict.fromkeys(disable) if f not in on]
    if on:
        features["enable"] = on
    if off:
        features["disable"] = off
    if not features:
        del tree["features"]
    if "trainer.val_before_train" not in by_key:
        # G3: verl validates before training unless told otherwise (ppo_trainer.yaml trainer.val_before_train: True)
        put("train.val_before_train", True, "verl's default (the script does not set trainer.val_before_train)")
    if "trainer.total_training_steps" not in by_key:
        # G1: the script trains by trainer.total_epochs (verl's default or its own): so does the spec.
        put("train.steps", None, "the script sets no trainer.total_training_steps: trainer.total_epochs decides")
        notes.append(
            "the script sets no trainer.total_training_steps: train.steps is left unset (null), so verl trains "
            "for trainer.total_epochs as the script does"
        )
    return Mapped(tree, overrides, env, version, module, config_name, notes, sources)
