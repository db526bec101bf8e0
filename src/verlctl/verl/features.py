"""The acceleration-feature registry: the only place that knows which verl keys a feature sets.

Categories follow the second seed (verl-async-dapo): *performance* features are on by default, *memory*
features are off and are added on out-of-memory, *optional* features are off. The 7-bit mask of the first
seed (verl-npu-launch) addresses seven of them: leftmost character = bit 0.

Where a seed's key is wrong for a verl version the table does what verl needs and says why in ``note``
(the note is written into the rendered script next to the override). Sources: ``reference/verl.md`` §1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from verlctl.verl.table import AR, FSDP, MEGATRON, STATE, Ctx, Ov, When, when


class Category(str, Enum):
    PERFORMANCE = "performance"
    MEMORY = "memory"
    OPTIONAL = "optional"


@dataclass(frozen=True)
class Emit:
    """Overrides a feature produces where ``when`` matches, in the listed ``states`` (on and/or off)."""

    when: When
    overrides: tuple[Ov, ...] = ()
    states: tuple[bool, ...] = (True, False)
    note: str | None = None


@dataclass(frozen=True)
class Requirement:
    """A prerequisite: when the feature is on and ``ok`` is false, the check reports ``message``."""

    ok: When
    message: str
    hint: str
    field: str = "features"


@dataclass(frozen=True)
class Conflict:
    """When both features are on, ``winner`` decides and the user sees ``notice``."""

    features: tuple[str, str]
    notice: str


@dataclass(frozen=True)
class Feature:
    name: str
    title: str
    category: Category
    default_on: bool
    description: str
    emits: tuple[Emit, ...]
    bit: int | None = None
    aliases: tuple[str, ...] = ()
    requires: tuple[Requirement, ...] = ()
    applies: When = field(default_factory=When)  # where the feature does anything at all
    not_applicable: str = ""  # why, when it does not apply
    # Where the target verl cannot turn the feature off (its default then stands): what the plan says instead.
    cannot_turn_off: When | None = None
    cannot_turn_off_why: str = ""
    verl_default_on: bool = False  # verl's own default is on: left off by default, verl's default stands


def _vllm(c: Ctx) -> bool:
    return c.spec.train.rollout_engine == "vllm"


SGLANG_NA = "verl's sglang server does not read this vLLM setting (rollout_engine is sglang)"
V070_VLLM_FALSE = (
    "vLLM's default (on): verl 0.7.0 passes only True flags to `vllm serve` and drops False "
    "(workers/rollout/vllm_rollout/vllm_async_server.py), so it cannot be turned off there"
)


def _megatron_offload(ctx: Ctx) -> bool:
    return ctx.on("offload")


def _optimizer_offload(ctx: Ctx) -> bool:
    # Swap optimizer keeps the optimizer state swapping between device and host itself.
    return ctx.on("offload") and not ctx.on("swap_optimizer")


MT = f"{AR}.actor.megatron"
OTC = f"{MT}.override_transformer_config"

FEATURES: tuple[Feature, ...] = (
    Feature(
        name="remove_padding",
        title="Remove Padding",
        bit=0,
        aliases=("rmvpad", "rmpad"),
        category=Category.PERFORMANCE,
        default_on=True,
        description="Pack sequences without padding (THD) to avoid computing on pad tokens.",
        emits=(
            Emit(when(strategies=FSDP), (Ov(f"{AR}.model.use_remove_padding", STATE),)),
            Emit(
                when(strategies=MEGATRON),
                (Ov(f"{AR}.model.use_remove_padding", STATE), Ov(f"{MT}.use_remove_padding", STATE)),
                note="verl 0.7.0's Megatron actor reads actor.megatron.use_remove_padding and ignores "
                "model.use_remove_padding; 0.9.1 reads model.use_remove_padding: both are set",
            ),
        ),
    ),
    Feature(
        name="dynamic_batch",
        title="Dynamic Batch Size",
        bit=1,
        aliases=("dynbsz", "dynamic_bsz"),
        category=Category.PERFORMANCE,
        default_on=True,
        description="Split micro batches by token count instead of a fixed number of sequences.",
        emits=(
            Emit(
                when(),
                (
                    Ov(f"{AR}.actor.use_dynamic_bsz", STATE),
                    Ov(f"{AR}.ref.log_prob_use_dynamic_bsz", STATE),
                    Ov(f"{AR}.rollout.log_prob_use_dynamic_bsz", STATE),
                ),
                note="0.9.1 asserts actor.use_dynamic_bsz == rollout.log_prob_use_dynamic_bsz: all three are set together",
            ),
            Emit(
                when(),
                (
                    Ov(f"{AR}.actor.ppo_max_token_len_per_gpu", lambda c: c.max_seq_len),
                    Ov(f"{AR}.ref.log_prob_max_token_len_per_gpu", lambda c: c.max_seq_len),
                    Ov(f"{AR}.rollout.log_prob_max_token_len_per_gpu", lambda c: c.max_seq_len),
                ),
                states=(True,),
            ),
        ),
    ),
    Feature(
        name="flash_attn",
        title="Flash Attention",
        aliases=("flash_attention", "fa"),
        category=Category.PERFORMANCE,
        default_on=True,
        description="Fused flash attention kernels.",
        emits=(
            Emit(
                when(strategies=MEGATRON, devices={"npu"}),
                (Ov(f"{OTC}.use_flash_attn", STATE, prefix="+"),),
                note="MindSpeed flag (verl does not define it): set with '+'",
            ),
            Emit(
                when(strategies=MEGATRON, devices={"gpu"}),
                (Ov(f"{OTC}.attention_backend", lambda c: "flash" if c.on("flash_attn") else "unfused"),),
            ),
            Emit(
                when(strategies=FSDP, devices={"gpu"}),
                (
                    Ov(
                        f"{AR}.model.override_config.attn_implementation",
                        lambda c: "flash_attention_2" if c.on("flash_attn") else "sdpa",
                        prefix="+",
                    ),
                ),
            ),
            Emit(
                when(strategies=FSDP, devices={"npu"}),
                (Ov(f"{AR}.model.override_config.attn_implementation", "eager", prefix="+"),),
                states=(False,),
                note="on NPU, FSDP attention goes through transformers' NPU flash-attention integration "
                "(verl's default); off selects eager attention",
            ),
        ),
    ),
    Feature(
        name="gradient_checkpointing",
        title="Gradient Checkpointing",
        aliases=("grad_ckpt",),
        category=Category.PERFORMANCE,
        default_on=True,
        description="Activation checkpointing of the HF model (FSDP).",
        emits=(Emit(when(strategies=FSDP), (Ov(f"{AR}.model.enable_gradient_checkpointing", STATE),)),),
        applies=when(strategies=FSDP),
        not_applicable="Megatron ignores model.enable_gradient_checkpointing: use the recompute feature",
    ),
    Feature(
        name="offload",
        title="Offload",
        bit=2,
        category=Category.MEMORY,
        default_on=False,
        description="Offload parameters, gradients and optimizer state to host memory between phases.",
        emits=(
            Emit(
                when(strategies=MEGATRON),
                (
                    Ov(f"{MT}.param_offload", _megatron_offload),
                    Ov(f"{MT}.optimizer_offload", _optimizer_offload),
                    Ov(f"{AR}.ref.megatron.param_offload", _megatron_offload),
                ),
            ),
            Emit(
                when(strategies=MEGATRON, versions={"0.7.0"}),
                (Ov(f"{MT}.grad_offload", _megatron_offload),),
            ),
            Emit(
                when(strategies=MEGATRON, versions={"0.9.1"}),
                (),
                note="verl 0.9.1 has no actor.megatron.grad_offload (that key would fail to compose); "
                "param_offload releases the gradient buffers there",
            ),
            Emit(
                when(strategies=FSDP),
                (
                    Ov(f"{AR}.actor.fsdp_config.param_offload", STATE),
                    Ov(f"{AR}.actor.fsdp_config.optimizer_offload", _optimizer_offload),
                    Ov(f"{AR}.ref.fsdp_config.param_offload", STATE),
                    Ov(f"{AR}.model.enable_activation_offload", STATE),
                ),
                note="FSDP has no gradient offload key; activation offload is added instead",
            ),
        ),
    ),
    Feature(
        name="prefix_cache",
        title="Prefix Cache",
        bit=3,
        aliases=("pfxcache", "prefix_caching"),
        category=Category.OPTIONAL,
        default_on=False,
        description="Reuse KV-cache prefixes across rollout requests (vLLM enable_prefix_caching).",
        emits=(
            Emit(
                when(),
                (Ov(f"{AR}.rollout.enable_prefix_caching", STATE),),
                note="verl's default is True: written only when the feature is set explicitly",
            ),
        ),
        applies=when(test=_vllm),
        not_applicable=SGLANG_NA,
        verl_default_on=True,
        cannot_turn_off=when(versions={"0.7.0"}),
        cannot_turn_off_why=V070_VLLM_FALSE,
    ),
    Feature(
        name="recompute",
        title="Recompute",
        bit=4,
        aliases=("recomputation",),
        category=Category.MEMORY,
        default_on=False,
        description="Recompute activations in the backward pass instead of keeping them.",
        emits=(
            Emit(
                when(strategies=MEGATRON),
                (
                    Ov(f"{OTC}.recompute_granularity", "full"),
                    Ov(f"{OTC}.recompute_method", lambda c: c.spec.features.recompute_method),
                    Ov(f"{OTC}.recompute_num_layers", lambda c: c.spec.features.recompute_num_layers),
                ),
                states=(True,),
                note="the keys exist with null defaults, so they are set without '+' (a typo then fails to compose)",
            ),
            Emit(
                when(strategies=FSDP),
                (
                    Ov(f"{AR}.model.enable_gradient_checkpointing", True),
                    Ov(f"{AR}.actor.entropy_checkpointing", True),
                ),
                states=(True,),
                note="FSDP recompute = gradient checkpointing plus entropy checkpointing",
            ),
        ),
    ),
    Feature(
        name="swap_optimizer",
        title="Swap Optimizer",
        bit=5,
        aliases=("swapopt",),
        category=Category.OPTIONAL,
        default_on=False,
        description="MindSpeed swaps optimizer state between NPU and host memory (NPU + Megatron only).",
        emits=(
            Emit(
                when(strategies=MEGATRON, devices={"npu"}),
                (
                    Ov(f"{OTC}.swap_optimizer", True, prefix="+"),
                    Ov(f"{MT}.use_distributed_optimizer", True),
                ),
                states=(True,),
                note="a MindSpeed flag, not a verl key: needs '+', and the distributed optimizer (verl's default); "
                "unverified outside verl's r1_ascend recipe (the only official user)",
            ),
        ),
        requires=(
            Requirement(
                when(devices={"npu"}),
                "swap_optimizer is a MindSpeed (Ascend) flag: it needs device npu",
                "turn swap_optimizer off on GPU",
                "device",
            ),
            Requirement(
                when(strategies=MEGATRON),
                "swap_optimizer needs the megatron strategy",
                "use strategy megatron or turn swap_optimizer off",
                "strategy",
            ),
        ),
    ),
    Feature(
        name="vpp",
        title="VPP",
        bit=6,
        aliases=("virtual_pipeline",),
        category=Category.OPTIONAL,
        default_on=False,
        description="Virtual (interleaved) pipeline parallelism.",
        emits=(
            Emit(
                when(strategies=MEGATRON),
                (Ov(f"{MT}.virtual_pipeline_model_parallel_size", lambda c: c.spec.features.vpp_size),),
                states=(True,),
            ),
            Emit(
                when(strategies=MEGATRON, devices={"npu"}, versions={"0.7.0"}),
                (Ov(f"{MT}.use_mbridge", False),),
                states=(True,),
                note="on Ascend, VPP and mbridge cannot be on together (verl Ascend docs); verl 0.7.0's "
                "Megatron worker then loads weights itself",
            ),
        ),
        requires=(
            Requirement(
                when(strategies=MEGATRON),
                "vpp needs the megatron strategy",
                "use strategy megatron or turn vpp off",
                "strategy",
            ),
            Requirement(
                when(test=lambda c: c.spec.train.pipeline_parallel > 1),
                "vpp needs pipeline parallelism > 1 (Megatron raises 'pipeline-model-parallel size should be "
                "greater than 1 with interleaved schedule')",
                "set train.pipeline_parallel to 2 or more, or turn vpp off",
                "train.pipeline_parallel",
            ),
        ),
    ),
    Feature(
        name="chunked_prefill",
        title="Chunked Prefill",
        category=Category.OPTIONAL,
        default_on=False,
        description="Split long prefills into chunks in the rollout engine.",
        emits=(
            Emit(
                when(),
                (Ov(f"{AR}.rollout.enable_chunked_prefill", STATE),),
                note="verl's default is True: written only when the feature is set explicitly",
            ),
            Emit(
                when(versions={"0.9.1"}),
                (
                    Ov(f"{AR}.rollout.max_model_len", lambda c: c.max_seq_len),
                    Ov(f"{AR}.rollout.max_num_batched_tokens", lambda c: max(8192, c.max_seq_len)),
                ),
                states=(False,),
                note="without chunked prefill vLLM needs max_num_batched_tokens >= max_model_len, and verl 0.9.1 "
                "sets an unset max_model_len to the model's max_position_embeddings (raising the batch to it): "
                "max_model_len is prompt+response, as the official DAPO NPU scripts set it, and the batch at "
                "least that (never below verl's default 8192, which also covers vLLM's max_num_seqs)",
            ),
        ),
        applies=when(test=_vllm),
        not_applicable=SGLANG_NA,
        verl_default_on=True,
        cannot_turn_off=when(versions={"0.7.0"}),
        cannot_turn_off_why=V070_VLLM_FALSE,
    ),
)

BY_NAME: dict[str, Feature] = {f.name: f for f in FEATURES}
BY_BIT: dict[int, Feature] = {f.bit: f for f in FEATURES if f.bit is not None}
MASK_BITS = 7

#: The OOM ladder: memory features added in this order.
OOM_LADDER: tuple[str, ...] = ("offload", "recompute")
#: Whose device memory each rung frees: both act on the actor / reference (param / optimizer offload,
#: activation recompute), so in a mode with rollout devices of their own neither helps a rollout OOM.
OOM_LADDER_SIDE: dict[str, str] = {"offload": "trainer", "recompute": "trainer"}

CONFLICTS: tuple[Conflict, ...] = (
    Conflict(
        ("swap_optimizer", "offload"),
        "swap_optimizer and offload: optimizer offload is forced off (the swap optimizer moves optimizer "
        "state itself); parameters and gradients are still offloaded",
    ),
    Conflict(
        ("recompute", "gradient_checkpointing"),
        "recompute on FSDP turns gradient checkpointing on",
    ),
)


def canonical_name(name: str) -> str | None:
    key = name.strip().lower().replace("-", "_")
    if key in BY_NAME:
        return key
    for f in FEATURES:
        if key in f.aliases:
            return f.name
    return None


def exclusion_notes(on: Iterable[str]) -> list[str]:
    """What features turned on together exclude or need, without a spec to check them against (``features
    --mask``): each conflict's notice when both are on, each key an on feature turns off (and where), and each
    prerequisite of an on feature."""
    names = set(on)
    notes = [c.notice for c in CONFLICTS if set(c.features) <= names]
    for f in FEATURES:
        if f.name not in names:
            continue
        for e in f.emits:
            offs = [o.key for o in e.overrides if o.value is False] if True in e.states else []
            if offs:
                where = ", ".join([*sorted(e.when.strategies or ()), *sorted(e.when.devices or ()),
                                   *(f"verl {v}" for v in sorted(e.when.versions or ()))])
                notes.append(f"{f.name} turns off {', '.join(offs)}" + (f" ({where})" if where else "")
                             + (f": {e.note}" if e.note else ""))
        notes += [r.message if r.message.startswith(f.name) else f"{f.name}: {r.message}" for r in f.requires]
    return notes


def mask_legend() -> str:
    return " ".join(f"{BY_BIT[i].title.replace(' ', '')}" for i in range(MASK_BITS))


def mask_for(states: dict[str, bool]) -> str:
    return "".join("1" if states.get(BY_BIT[i].name, False) else "0" for i in range(MASK_BITS))
