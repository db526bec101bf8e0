"""Memory fit: per device and per phase (rollout, update, reference), and host RAM per node.

Pure functions over the resolved run spec, the feature states the verl tables chose, and the model's
``config.json``; nothing heavy is imported. The estimate is a worst case: every sequence is assumed to reach
``max_prompt_length + max_response_length`` (the dynamic-batch token cap makes that the most one micro batch
can hold). Formulas and their sources (``reference/field-failures-and-scale-out.md`` §4 and verl's code):

* **training states** per device. Megatron: bf16 params 2 B, fp32 main-grad buffer 4 B, and with verl's
  default ``use_distributed_optimizer: True`` (``engine/megatron.yaml``) fp32 master + Adam m, v = 12 B
  divided by DP x CP, all over TP x PP for the most-loaded stage (Megatron-LM ``theoretical_memory_usage``).
  A MoE's routed experts are split over EP x ETP instead of TP (``actor.megatron.expert_model_parallel_size`` /
  ``expert_tensor_parallel_size``, verl ``engine/megatron.yaml``; an unset ETP is TP in Megatron-core) and their
  optimizer state over the expert data-parallel group, devices / (EP x ETP x PP).
  FSDP / FSDP2: verl keeps the actor's sharded params in fp32 (``fsdp_workers.py``: ``torch_dtype = float32``
  for the actor) = 4 B, fp32 grads 4 B, Adam m, v 8 B, all over the FSDP world size; the gathered bf16 root unit
  (embedding + head) and two decoder layers (prefetch) on top.
* **offload** (verl's manual offload): params (and Megatron grads) leave the device outside the update; the
  optimizer state is loaded only for ``optimizer.step()``, when the activations are already freed. So offload
  frees the rollout phase, and during the update the optimizer no longer coexists with the activations.
* **swap optimizer** (MindSpeed): the optimizer state lives on the host and is swapped in 1/16 chunks.
* **activations** per layer and token: ``18 h + 6 ffn`` bytes (Korthikanti et al. with a SwiGLU MLP), over TP
  with sequence parallel; with recompute / gradient checkpointing only the layer input ``2 h`` is kept, plus one
  layer's full activations during its recompute. Megatron's first pipeline stage holds PP micro batches in
  flight (x (1 + (PP - 1) / (PP x VPP)) with VPP). FSDP with Ulysses sequence parallelism holds a micro batch's
  tokens / SP per device (``actor.ulysses_sequence_parallel_size``; verl ``dp_actor.py``).
* **logits**: bf16 logits and their gradient, ``tokens x vocab x 4`` bytes over TP (verl sets
  ``entropy_coeff=0``, so no entropy tensor).
* **rollout**: vLLM / vllm-ascend reserve ``gpu_memory_utilization x HBM``; weights are split over the rollout
  TP; KV bytes per token = ``2 x layers x kv_heads x head_dim x 2 / TP``. Before the KV cache vLLM takes out its
  non-torch memory and the activation peak of its profiling pass over ``max_num_batched_tokens`` tokens (at least
  ``max_model_len`` without chunked prefill): ``2 x (3 x ffn / TP + 4 x h)`` bytes per token, checked against
  vllm-project/vllm#10517. In the colocated (hybrid) mode what training leaves resident (states not offloaded,
  the reference model) comes on top.
* **host RAM** per node: offloaded states, vLLM's sleep-mode weight backup (level 1 keeps a host copy of the
  rollout weights; verl forces level 1 on NPU), one runtime per device process, and the batch in Ray's object
  store. Ray's memory monitor kills workers above 0.95 of the node's RAM, so that is what is available.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from verlctl.checks.findings import Finding, error, info, warning
from verlctl.model_config import config_int, text_config
from verlctl.verl.modes import is_disaggregated

GIB = float(1 << 30)
#: Ray's memory monitor threshold (RAY_memory_usage_threshold default): workers are killed above it.
RAY_MEMORY_THRESHOLD = 0.95
#: Per-device runtime the framework needs besides tensors: CUDA/CANN context, communicator buffers, workspace.
RUNTIME_GIB = {"gpu": 1.0, "npu": 2.0}
#: What vLLM keeps after it goes to sleep between rollouts (graphs, its own context).
VLLM_RESIDUAL_GIB = 1.0
#: Memory vLLM counts inside its budget besides weights, KV cache and the profiling activation peak
#: (``_vllm_profile_peak``): its non-torch memory (vllm-project/vllm#10517 reports non_torch_memory=0.35GiB).
VLLM_WORKSPACE_GIB = 0.5
#: Host RAM of one device process (torch, the accelerator runtime, Ray worker) and of the driver.
HOST_PER_PROCESS_GIB = 3.0
HOST_DRIVER_GIB = 4.0
#: verl's rollout.max_num_seqs default per version (rollout/rollout.yaml: 0.7.0 line 68, 0.9.1 line 84).
MAX_NUM_SEQS = {"0.7.0": 1024, "0.9.1": 256}
#: The weight-sync bucket (MB) per version; 0.9.1: rollout.checkpoint_engine.update_weights_bucket_megabytes
#: (rollout/rollout.yaml line 296, default 2048), 0.7.0: rollout.update_weights_bucket_megabytes (line 250, 512).
BUCKET_KEY = {
    "0.7.0": "actor_rollout_ref.rollout.update_weights_bucket_megabytes",
    "0.9.1": "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes",
}
BUCKET_DEFAULT_MB = {"0.7.0": 512, "0.9.1": 2048}
_MAX_CONFIG_BYTES = 4 << 20


# --------------------------------------------------------------------------------------------------
# The model


def _active_ffn(cfg: Mapping[str, Any], hidden: int) -> int:
    """The MLP width one token passes through: a dense model's intermediate size, or a MoE's routed experts
    per token (plus its shared experts) times the expert width: what the activations scale with. A MoE config
    without ``moe_intermediate_size`` (Mixtral) gives the expert width as ``intermediate_size``, as
    ``detect.models.estimate_params_from_config`` and ``_expert_params`` read it."""
    dense = config_int(cfg, "intermediate_size", "ffn_hidden_size") or 4 * hidden
    if not config_int(cfg, "num_experts", "num_local_experts", "n_routed_experts"):
        return dense
    moe = config_int(cfg, "moe_intermediate_size") or dense
    per_token = config_int(cfg, "num_experts_per_tok", "moe_topk") or 1
    # the shared experts as the parameter count reads them: Qwen2-MoE's one shared expert of its own width, else
    # DeepSeek's n_shared_experts (Ling / BailingMoE: num_shared_experts) of the routed experts' width
    shared = (config_int(cfg, "shared_expert_intermediate_size")
              or (config_int(cfg, "n_shared_experts", "num_shared_experts") or 0) * moe)
    return per_token * moe + shared


def _expert_params(cfg: Mapping[str, Any], layers: int, hidden: int) -> int:
    """Parameters of the routed experts over all MoE layers (what Megatron splits over expert parallelism);
    the layer pattern as ``detect.models.estimate_params_from_config`` counts it (first_k_dense_replace,
    mlp_only_layers, decoder_sparse_step). 0 for a dense model."""
    experts = config_int(cfg, "num_experts", "num_local_experts", "n_routed_experts")
    if not experts:
        return 0
    from verlctl.detect.models import moe_layer_count

    moe = config_int(cfg, "moe_intermediate_size") or config_int(cfg, "intermediate_size", "ffn_hidden_size") or 4 * hidden
    return experts * 3 * hidden * moe * moe_layer_count(cfg, layers)


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only model that the estimate needs (from its config.json)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    params: int
    experts: int = 0
    name: str = ""
    expert_params: int = 0  # routed experts of all MoE layers (split over expert parallelism by Megatron)

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def layer_params(self) -> int:
        """Parameters of the decoder layers (everything but embedding, head and final norm): what
        ``estimate_params_from_config`` counted for them, the same tie flag read the same way."""
        return self.params - self.embed_params * (1 if self.tied else 2) - self.hidden

    @property
    def largest_tensor_numel(self) -> int:
        """The embedding (vocab x hidden) is the largest tensor of every model verl trains."""
        return self.embed_params

    @classmethod
    def from_config(cls, config: Mapping[str, Any], name: str = "") -> ModelShape | None:
        from verlctl.detect.models import estimate_params_from_config

        cfg = text_config(config)
        layers = config_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
        hidden = config_int(cfg, "hidden_size", "n_embd", "d_model")
        heads = config_int(cfg, "num_attention_heads", "n_head")
        vocab = config_int(cfg, "vocab_size", "padded_vocab_size")
        if not (layers and hidden and heads and vocab):
            return None
        kv_heads = config_int(cfg, "num_key_value_heads", "multi_query_group_num") or heads
        head_dim = config_int(cfg, "head_dim") or hidden // heads
        if min(layers, hidden, heads, vocab, kv_heads, head_dim) <= 0:
            return None  # not a model's sizes (a malformed config.json): no estimate, rather than one from nonsense
        params = estimate_params_from_config(dict(config))
        if params is None:
            return None
        tie = cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
        return cls(
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate=_active_ffn(cfg, hidden),
            vocab=vocab,
            tied=bool(tie),
            params=params,
            experts=config_int(cfg, "num_experts", "num_local_experts", "n_routed_experts") or 0,
            name=name,
            expert_params=min(params, _expert_params(cfg, layers, hidden)),
        )

    @classmethod
    def from_model_dir(cls, path: str) -> ModelShape | None:
        """Read ``<path>/config.json`` (a regular file of at most 4 MiB); None when it cannot be used."""
        cfg_path = os.path.join(path, "config.json")
        try:
            st = os.stat(cfg_path)
        except OSError:
            return None
        import stat

        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_CONFIG_BYTES:
            return None
        try:
            with open(cfg_path, encoding="utf-8") as fh:
                raw = json.load(fh)
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        if not isinstance(raw, dict):
            return None
        return cls.from_config(raw, os.path.basename(path.rstrip("/")))


# --------------------------------------------------------------------------------------------------
# What the run asks for (from the spec, the feature states and the raw extra overrides)


@dataclass(frozen=True)
class Layout:
    """The memory-relevant choices of one run, as verl will see them. :func:`layout_for` sets every field, so
    none has a default (a default no caller reads could only drift from what verl does)."""

    device: str
    strategy: str
    version: str
    colocated: bool
    nodes: int
    devices_per_node: int
    train_devices_per_node: int
    rollout_devices_per_node: int
    tp: int
    pp: int
    cp: int
    vpp: int
    rollout_tp: int
    batch: int
    n: int
    prompt: int
    response: int
    micro_batch: int
    memory_utilization: float
    dynamic_batch: bool
    max_token_len: int | None  # ppo_max_token_len_per_gpu; None: prompt + response
    offload: bool
    optimizer_offload: bool
    recompute: bool  # Megatron recompute (full) / FSDP gradient checkpointing
    recompute_uniform: bool
    recompute_layers: int
    swap_optimizer: bool
    has_ref: bool
    ref_offload: bool
    max_num_seqs: int
    rollout_engine: str
    ep: int  # Megatron expert_model_parallel_size
    etp: int | None  # Megatron expert_tensor_parallel_size; None: Megatron-core uses the TP size
    ulysses: int  # FSDP actor.ulysses_sequence_parallel_size
    max_batched_tokens: int  # rollout.max_num_batched_tokens (rollout/rollout.yaml, both versions)
    chunked_prefill: bool  # rollout.enable_chunked_prefill (verl's default True)

    @property
    def train_devices(self) -> int:
        return self.nodes * self.train_devices_per_node

    @property
    def rollout_devices(self) -> int:
        return self.nodes * (self.devices_per_node if self.colocated else self.rollout_devices_per_node)

    @property
    def seq(self) -> int:
        return self.prompt + self.response

    def layers_per_stage(self, shape: ModelShape) -> float:
        return shape.layers / self.pp

    @property
    def tokens_per_micro_batch(self) -> int:
        """Tokens one device holds in a micro batch. With Ulysses sequence parallelism verl packs
        ``ppo_max_token_len_per_gpu x sp`` tokens per micro batch and splits every sequence over the sp ranks
        (verl 0.7.0 workers/actor/dp_actor.py lines 367 and 441)."""
        sp = max(1, self.ulysses)
        if self.dynamic_batch:
            return math.ceil(max((self.max_token_len or self.seq) * sp, self.seq) / sp)
        return math.ceil(self.micro_batch * self.seq / sp)

    @property
    def profile_tokens(self) -> int:
        """Tokens of vLLM's profiling forward pass (its activation peak is taken out of the budget before the
        KV cache): ``max_num_batched_tokens``; without chunked prefill at least ``max_model_len`` (vLLM refuses
        less; verl 0.9.1 vllm_async_server.py line 1113 raises it)."""
        return self.max_batched_tokens if self.chunked_prefill else max(self.max_batched_tokens, self.seq)


def _raw_overrides(extra: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for o in extra:
        key, _, value = o.partition("=")
        out[key.lstrip("+~").strip()] = value.strip().strip("'\"")
    return out


def _as_int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _as_bool(value: str | None) -> bool | None:
    if value is None:
        return None
    low = value.lower()
    return True if low == "true" else False if low == "false" else None


def layout_for(spec: Any, features: Mapping[str, bool], version: str | None = None) -> Layout:
    """The layout of a RunSpec with the given feature states (name -> on and applicable)."""
    t = spec.train
    v = version or (spec.verl_version if spec.verl_version != "auto" else "0.7.0")
    extra = _raw_overrides(list(spec.extra_overrides))
    ar = "actor_rollout_ref"
    dpn = len(spec.cluster.devices)
    colocated = not is_disaggregated(spec.mode)
    train_dpn = dpn if colocated else (t.trainer_devices or max(1, dpn // 2))
    rollout_dpn = dpn if colocated else (t.rollout_devices or max(1, dpn - dpn // 2))
    offload = bool(features.get("offload"))
    swap = bool(features.get("swap_optimizer"))
    megatron = spec.strategy == "megatron"
    recompute = bool(features.get("recompute")) or (not megatron and bool(features.get("gradient_checkpointing")))
    # verl builds the reference policy for a KL loss or a KL penalty in the reward (0.9.1 trainer/ppo/utils.py
    # need_reference_policy, 0.7.0 main_ppo.py line 252): verlctl writes use_kl_loss=True for GRPO, False for
    # DAPO, and use_kl_in_reward=False; an extra override of either wins.
    kl = _as_bool(extra.get(f"{ar}.actor.use_kl_loss"))
    has_ref = (spec.algorithm == "grpo" if kl is None else kl) or bool(_as_bool(extra.get("algorithm.use_kl_in_reward")))
    chunked = not (bool(features.get("chunked_prefill_off"))
                   or _as_bool(extra.get(f"{ar}.rollout.enable_chunked_prefill")) is False)
    seq = t.max_prompt_length + t.max_response_length
    # verlctl's chunked_prefill=off writes max_num_batched_tokens=max(8192, prompt+response) for 0.9.1
    # (verl/features.py); an explicit override wins.
    batched = _as_int(extra.get(f"{ar}.rollout.max_num_batched_tokens")) or 0
    if batched <= 0:
        batched = max(8192, seq) if (not chunked and v == "0.9.1") else 8192
    u = extra.get(f"{ar}.rollout.gpu_memory_utilization")
    try:
        util = float(u) if u is not None else t.rollout_memory_utilization
    except ValueError:
        util = t.rollout_memory_utilization
    return Layout(
        device=spec.device,
        strategy=spec.strategy,
        version=v,
        colocated=colocated,
        nodes=spec.cluster.node_count,
        devices_per_node=dpn,
        train_devices_per_node=train_dpn,
        rollout_devices_per_node=rollout_dpn,
        tp=t.tensor_parallel if megatron else 1,
        pp=t.pipeline_parallel if megatron else 1,
        cp=t.context_parallel if megatron else 1,
        vpp=spec.features.vpp_size if (megatron and features.get("vpp") and t.pipeline_parallel > 1) else 1,
        rollout_tp=t.rollout_tensor_parallel or t.tensor_parallel,
        batch=t.gen_batch_size or t.train_batch_size,
        n=t.responses_per_prompt,
        prompt=t.max_prompt_length,
        response=t.max_response_length,
        micro_batch=t.micro_batch_size_per_device,
        memory_utilization=util,
        dynamic_batch=bool(features.get("dynamic_batch")),
        max_token_len=_as_int(extra.get(f"{ar}.actor.ppo_max_token_len_per_gpu")),
        offload=offload,
        optimizer_offload=offload and not swap,
        recompute=recompute,
        recompute_uniform=spec.features.recompute_method == "uniform",
        recompute_layers=spec.features.recompute_num_layers,
        swap_optimizer=swap and megatron and spec.device == "npu",
        has_ref=has_ref,
        ref_offload=offload,
        max_num_seqs=_as_int(extra.get(f"{ar}.rollout.max_num_seqs")) or MAX_NUM_SEQS.get(v, 1024),
        rollout_engine=t.rollout_engine,
        # actor.megatron.*: only the Megatron estimate reads them (_expert_split)
        ep=_as_int(extra.get(f"{ar}.actor.megatron.expert_model_parallel_size")) or 1,
        etp=_as_int(extra.get(f"{ar}.actor.megatron.expert_tensor_parallel_size")),
        ulysses=1 if megatron else (_as_int(extra.get(f"{ar}.actor.ulysses_sequence_parallel_size")) or 1),
        max_batched_tokens=batched,
        chunked_prefill=chunked,
    )


# --------------------------------------------------------------------------------------------------
# The estimate


@dataclass
class Phase:
    name: str
    parts: dict[str, float]  # bytes
    have: float | None  # bytes; None when the device/host memory is unknown

    @property
    def need(self) -> float:
        return sum(self.parts.values())

    @property
    def fits(self) -> bool | None:
        return None if self.have is None else self.need <= self.have


@dataclass
class Estimate:
    layout: Layout
    shape: ModelShape
    device: dict[str, Phase]
    host: Phase
    kv_tokens_fit: float | None
    kv_tokens_wanted: int
    advice: list[str] = field(default_factory=list)
    device_note: str | None = None  # where the device memory ("have") comes from, when it is not the total

    @property
    def failing(self) -> list[str]:
        return [name for name, p in self.device.items() if p.fits is False]

    @property
    def kv_short(self) -> bool:
        """vLLM cannot hold even one sequence of max_model_len tokens (it refuses to start)."""
        return self.kv_tokens_fit is not None and self.kv_tokens_fit < self.layout.seq

    @property
    def fits(self) -> bool | None:
        if self.failing or self.kv_short or self.host.fits is False:
            return False
        if any(p.fits is None for p in self.device.values()):
            return None
        return True

    def to_json(self) -> dict[str, Any]:
        def gib(x: float | None) -> float | None:
            return None if x is None else round(x / GIB, 1)

        return {
            "device": {
                name: {"need_gib": gib(p.need), "have_gib": gib(p.have),
                       "parts_gib": {k: gib(v) for k, v in p.parts.items() if v}}
                for name, p in self.device.items()
            },
            "host": {"need_gib": gib(self.host.need), "have_gib": gib(self.host.have),
                     "parts_gib": {k: gib(v) for k, v in self.host.parts.items() if v}},
            "kv_cache": {
                "tokens_fit": None if self.kv_tokens_fit is None else max(0, int(self.kv_tokens_fit)),
                "tokens_wanted": self.kv_tokens_wanted,
            },
            "fits": self.fits,
            "advice": list(self.advice),
            "device_note": self.device_note,
        }


def _act_per_token_layer(s: ModelShape) -> float:
    return 18.0 * s.hidden + 6.0 * s.intermediate


def _expert_split(lay: Layout) -> int:
    """Devices one expert's weights are split over: expert parallel x expert tensor parallel (Megatron-core
    uses the TP size when expert_tensor_parallel_size is unset, verl's default: engine/megatron.yaml)."""
    etp = lay.etp if lay.etp and lay.etp > 0 else lay.tp  # the spec's TP is at least 1
    return max(1, lay.ep) * etp


def _megatron_shard(s: ModelShape, lay: Layout) -> tuple[float, float]:
    """(dense, expert) parameters on the most-loaded device (first/last pipeline stage): the dense part over
    TP, the routed experts over EP x ETP (Megatron-LM ``theoretical_memory_usage``: expert layers / EP)."""
    stage = (s.layer_params - s.expert_params) / lay.pp + s.embed_params
    if lay.pp == 1 and not s.tied:
        stage += s.embed_params
    return stage / lay.tp, s.expert_params / lay.pp / _expert_split(lay)


def _train_states(s: ModelShape, lay: Layout) -> dict[str, float]:
    """Bytes per device of the actor's params, grads, optimizer state and the reference's params."""
    if lay.strategy == "megatron":
        dense, expert = _megatron_shard(s, lay)
        shard = dense + expert
        dp = max(1, lay.train_devices // (lay.tp * lay.pp * lay.cp))
        # The distributed optimizer shards over the data-parallel group of each part: the experts' group is
        # the devices left over by EP x ETP x PP (Megatron-core's expert data parallel group).
        edp = max(1, lay.train_devices // (_expert_split(lay) * lay.pp))
        opt = 12.0 * dense / (dp * lay.cp) + 12.0 * expert / edp
        return {"params": 2.0 * shard, "grads": 4.0 * shard, "optimizer": opt,
                "ref": 2.0 * shard if lay.has_ref else 0.0}
    n = lay.train_devices  # at least one: the spec refuses an empty cluster.devices
    return {"params": 4.0 * s.params / n, "grads": 4.0 * s.params / n, "optimizer": 8.0 * s.params / n,
            "ref": 2.0 * s.params / n if lay.has_ref else 0.0}


def _activations(s: ModelShape, lay: Layout) -> tuple[float, float]:
    """(activations kept for the backward pass, logits) in bytes on the most-loaded device."""
    tokens = lay.tokens_per_micro_batch / lay.cp
    full = tokens * _act_per_token_layer(s) / lay.tp
    kept_in = 2.0 * tokens * s.hidden / lay.tp
    logits = tokens * s.vocab * 4.0 / lay.tp
    if lay.strategy == "megatron":
        per_stage = s.layers / lay.pp
        rec = (per_stage if lay.recompute_uniform else min(lay.recompute_layers, per_stage)) if lay.recompute else 0
        one_mb = rec * kept_in + (per_stage - rec) * full
        inflight = lay.pp * (1 + (lay.pp - 1) / (lay.pp * lay.vpp))  # 1 for one stage
        first = inflight * one_mb + (full if rec else 0.0)
        last = one_mb + (full if rec else 0.0) + logits
        if lay.pp == 1:
            return first, logits
        return max(first, last), 0.0
    acts = s.layers * kept_in + full if lay.recompute else s.layers * full
    return acts, logits


def _vllm_profile_peak(s: ModelShape, lay: Layout) -> float:
    """vLLM's activation peak in its profiling run, which it subtracts from the budget before sizing the KV
    cache: per token the MLP's gate/up and activated outputs (3 x ffn / TP) and a few hidden-size tensors
    (4 x h), bf16. Checked against vllm-project/vllm#10517 (Llama-3.1-8B: 2.07 GiB at 20000 tokens, 2.99 GiB
    at 29000, i.e. 110 KB per token; this gives 119 KB)."""
    per_token = 2.0 * (3.0 * s.intermediate / lay.rollout_tp + 4.0 * s.hidden)
    return per_token * lay.profile_tokens


def _fsdp_gathered(s: ModelShape, lay: Layout) -> float:
    if lay.strategy == "megatron":
        return 0.0
    root = 2.0 * s.embed_params * (1 if s.tied else 2)
    layer = 2.0 * s.layer_params / s.layers  # from_config refuses a config without layers
    return root + 2 * layer


def estimate(
    layout: Layout, shape: ModelShape, hbm_gib: float | None = None, host_gib: float | None = None
) -> Estimate:
    s, lay = shape, layout
    hbm = hbm_gib * GIB if hbm_gib else None
    runtime = RUNTIME_GIB.get(lay.device, 1.0) * GIB
    st = _train_states(s, lay)
    acts, logits = _activations(s, lay)

    # Update (actor forward/backward, then optimizer.step()).
    opt_dev = st["optimizer"] / 16.0 if lay.swap_optimizer else st["optimizer"]
    ref_resident = st["ref"] if not lay.ref_offload else 0.0
    if lay.optimizer_offload or lay.swap_optimizer:
        work = max(acts + logits, opt_dev)
        update_parts = {"params": st["params"], "grads": st["grads"], "activations+logits|optimizer step": work}
    else:
        update_parts = {"params": st["params"], "grads": st["grads"], "optimizer": opt_dev,
                        "activations": acts, "logits": logits}
    update_parts["gathered (FSDP)"] = _fsdp_gathered(s, lay)
    update_parts["reference"] = ref_resident
    update_parts["rollout residual"] = VLLM_RESIDUAL_GIB * GIB if lay.colocated else 0.0
    update_parts["runtime"] = runtime
    device: dict[str, Phase] = {}

    # Rollout.
    rollout_weights = 2.0 * s.params / lay.rollout_tp
    budget = lay.memory_utilization * hbm if hbm else None
    kv_per_token = 2.0 * s.layers * max(1, s.kv_heads // lay.rollout_tp) * s.head_dim * 2.0
    replicas = max(1, lay.rollout_devices // lay.rollout_tp)
    concurrent = min(lay.max_num_seqs, math.ceil(lay.n * lay.batch / replicas))
    kv_wanted = concurrent * lay.seq
    kv_fit = None
    profile = _vllm_profile_peak(s, lay)
    if budget is not None:
        kv_fit = (budget - rollout_weights - VLLM_WORKSPACE_GIB * GIB - profile) / kv_per_token
        vllm = budget
    else:
        vllm = rollout_weights + VLLM_WORKSPACE_GIB * GIB + profile + kv_per_token * lay.seq
    rollout_parts = {"vLLM budget (utilization x HBM)" if budget else "vLLM minimum": vllm}
    if lay.colocated:
        if lay.strategy == "megatron":
            resident_pg = 0.0 if lay.offload else st["params"] + st["grads"]
        else:
            resident_pg = 0.0 if lay.offload else st["params"]  # FSDP frees grads after the step
        rollout_parts["training params/grads"] = resident_pg
        rollout_parts["training optimizer"] = 0.0 if (lay.optimizer_offload or lay.swap_optimizer) else opt_dev
        rollout_parts["reference"] = ref_resident
    rollout_parts["runtime"] = runtime
    device["rollout"] = Phase("rollout", rollout_parts, hbm)

    device["update"] = Phase("update", update_parts, hbm)
    if lay.has_ref:
        fwd = _act_per_token_layer(s) * lay.tokens_per_micro_batch / lay.cp / lay.tp  # one layer, no grad
        ref_parts = {
            "reference params": st["ref"],
            "actor params": 0.0 if lay.offload else st["params"],
            "actor grads/optimizer": 0.0 if lay.offload else (
                (st["grads"] if lay.strategy == "megatron" else 0.0)
                + (0.0 if (lay.optimizer_offload or lay.swap_optimizer) else opt_dev)),
            "forward activations+logits": fwd + logits,
            "rollout residual": VLLM_RESIDUAL_GIB * GIB if lay.colocated else 0.0,
            "runtime": runtime,
        }
        device["reference"] = Phase("reference", ref_parts, hbm)

    # Host RAM per node.
    procs = lay.devices_per_node
    per_dev_off = 0.0
    if lay.offload:
        per_dev_off += st["params"] + st["ref"]
        if lay.strategy == "megatron" and lay.version == "0.7.0":
            per_dev_off += st["grads"]  # 0.7.0's Megatron worker offloads the grads too
    if lay.optimizer_offload or lay.swap_optimizer:
        per_dev_off += st["optimizer"]
    sleep_copy = rollout_weights if lay.colocated else 0.0
    rollout_dpn = lay.devices_per_node if lay.colocated else lay.rollout_devices_per_node
    batch_tokens = lay.n * lay.batch * lay.seq
    host_parts = {
        "offloaded states": per_dev_off * lay.train_devices_per_node,
        "vLLM sleep weight copies": sleep_copy * rollout_dpn,
        "device processes": HOST_PER_PROCESS_GIB * GIB * procs,
        "driver": HOST_DRIVER_GIB * GIB,
        "batch in Ray's object store": batch_tokens * 64.0,
    }
    host = Phase("host", host_parts, host_gib * GIB * RAY_MEMORY_THRESHOLD if host_gib else None)
    return Estimate(lay, s, device, host, kv_fit, kv_wanted)


# --------------------------------------------------------------------------------------------------
# Advice: what-if searches over the knobs, in the order a user should try them


def _fixes_phase(est: Estimate, phase: str) -> bool:
    if phase == "kv":
        return not est.kv_short and est.host.fits is not False
    p = est.device.get(phase)
    return (p is None or p.fits is not False) and est.host.fits is not False


def _try(lay: Layout, shape: ModelShape, hbm: float | None, host: float | None, **changes: Any) -> Estimate:
    return estimate(replace(lay, **changes), shape, hbm, host)


def advise(est: Estimate, hbm_gib: float | None, host_gib: float | None) -> list[str]:
    """Concrete, ordered steps that make every failing phase fit (each verified by re-estimating)."""
    lay, s = est.layout, est.shape
    out: list[str] = []
    if est.fits is not False:
        return out
    failing = est.failing + (["kv"] if est.kv_short else [])
    host_short = est.host.fits is False
    if host_short:
        assert est.host.have is not None  # a phase with unknown memory never fails
        if lay.offload:
            trial = _try(lay, s, hbm_gib, host_gib, offload=False, optimizer_offload=False, ref_offload=False)
            if trial.host.fits:
                out.append("host RAM is short: turn the `offload` feature off (it moves training states to host RAM)"
                           + ("" if trial.fits else "; the device then needs the other steps below"))
        out.append(f"host RAM is short ({est.host.need / GIB:.0f} GiB needed per node, "
                   f"{est.host.have / GIB:.0f} GiB usable): add RAM or nodes; never add offload here")

    if not failing:
        return out

    def worked(trial: Estimate) -> bool:
        return all(_fixes_phase(trial, ph) for ph in failing)

    steps: list[tuple[str, dict[str, Any]]] = []
    if not lay.recompute:
        steps.append(("enable the `recompute` feature (activation recomputation)", {"recompute": True}))
    if lay.strategy == "megatron" and not lay.recompute_uniform and lay.recompute_layers < lay.layers_per_stage(s):
        steps.append(("enable the `recompute` feature with features.recompute_method=uniform (every layer, not only "
                      f"the first {lay.recompute_layers} of each stage)", {"recompute": True, "recompute_uniform": True}))
    if not lay.offload and not host_short:
        steps.append(("enable the `offload` feature (params/grads/optimizer to host RAM between phases)",
                      {"offload": True, "optimizer_offload": not lay.swap_optimizer, "ref_offload": True}))
    if lay.strategy == "megatron" and lay.device == "npu" and not lay.swap_optimizer and not host_short:
        steps.append(("enable the `swap_optimizer` feature (MindSpeed keeps the optimizer state on the host)",
                      {"swap_optimizer": True, "optimizer_offload": False}))
    for label, changes in steps:
        if worked(_try(lay, s, hbm_gib, host_gib, **changes)):
            out.append(label)
            return out
    # Combined memory features, then the rollout budget, then layout (without the features first).
    combo: dict[str, Any] = {}
    for _, ch in steps:
        combo.update(ch)
    names = list(dict.fromkeys(lbl.split("`")[1] for lbl, _ in steps))
    # one feature (a single step, or recompute and its uniform form): that step's own words, not "X together"
    # (no steps: no combo, and the label is never used)
    combo_label = steps[-1][0] if len(names) == 1 else (
        "enable " + " + ".join(names) + " together"
        + (" (recompute_method=uniform)" if combo.get("recompute_uniform") else ""))
    if combo and worked(_try(lay, s, hbm_gib, host_gib, **combo)):
        out.append(combo_label)
        return out
    bases: list[tuple[str, dict[str, Any]]] = [("", {})] + ([(combo_label, combo)] if combo else [])

    def found(label: str, base_label: str) -> list[str]:
        return ([base_label, "then " + label] if base_label else [label])

    if "rollout" in failing or "kv" in failing:
        for base_label, base in bases:
            for u in (0.5, 0.45, 0.4, 0.35, 0.3):
                if u < lay.memory_utilization and worked(
                        _try(lay, s, hbm_gib, host_gib, **{**base, "memory_utilization": u})):
                    return out + found(
                        f"lower train.rollout_memory_utilization from {lay.memory_utilization} to {u}", base_label)
            for rtp in (2, 4, 8, 16):
                ok = rtp > lay.rollout_tp and lay.rollout_devices % rtp == 0 and (
                    s.kv_heads % rtp == 0 or rtp % s.kv_heads == 0)
                if ok and worked(_try(lay, s, hbm_gib, host_gib, **{**base, "rollout_tp": rtp})):
                    return out + found(f"raise train.rollout_tensor_parallel from {lay.rollout_tp} to {rtp}",
                                       base_label)
    if lay.strategy == "megatron":
        layouts = sorted({(tp, pp) for tp in (1, 2, 4, 8, 16) for pp in (1, 2, 4, 8)}, key=lambda x: (x[0] * x[1], x))
        for base_label, base in bases:
            for tp, pp in layouts:
                if tp * pp <= lay.tp * lay.pp or lay.train_devices % (tp * pp * lay.cp):
                    continue
                if s.heads % tp or (s.kv_heads % tp and tp % s.kv_heads) or s.layers % pp:
                    continue
                if worked(_try(lay, s, hbm_gib, host_gib, **{**base, "tp": tp, "pp": pp})):
                    return out + found(f"use train.tensor_parallel={tp}, train.pipeline_parallel={pp}", base_label)
    for base_label, base in bases:
        for resp in (lay.response // 2, lay.response // 4):
            if resp >= 256 and worked(_try(lay, s, hbm_gib, host_gib, **{**base, "response": resp})):
                return out + found(f"shorten train.max_response_length from {lay.response} to {resp}", base_label)
    for base_label, base in bases:
        for nodes in range(lay.nodes + 1, lay.nodes + 64):
            if worked(_try(lay, s, hbm_gib, host_gib, **{**base, "nodes": nodes})):
                return out + found(f"use {nodes} nodes ({nodes * lay.devices_per_node} devices) instead of "
                                   f"{lay.nodes}", base_label)
    if not out:
        out.append("no single change found that fits: a larger device, a smaller model or shorter sequences")
    return out


# --------------------------------------------------------------------------------------------------
# Entry points for plan / check / recovery


def hbm_from_machine(spec: Any, machine: Any) -> float | None:
    """The smallest device memory (GiB) among the spec's devices (``cluster.devices``, the ids
    ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES use), from npu-smi / nvidia-smi results."""
    from verlctl.checks.devices import npu_logical_id
    from verlctl.detect.gpu import GpuInfo
    from verlctl.detect.npu import NpuInfo

    chosen = set(spec.cluster.devices)
    sizes: list[int] = []
    if spec.device == "npu" and isinstance(machine.npu, NpuInfo):
        sizes = [d.hbm_total_mb for d in machine.npu.devices if d.hbm_total_mb and npu_logical_id(d) in chosen]
    elif spec.device == "gpu" and isinstance(machine.gpu, GpuInfo):
        sizes = [d.memory_total_mb for d in machine.gpu.devices if d.memory_total_mb and d.id in chosen]
    return min(sizes) / 1024.0 if sizes else None


def hbm_free_from_machine(spec: Any, machine: Any) -> tuple[float | None, str | None]:
    """The smallest FREE device memory (GiB) among the chosen devices that another process holds (the device
    check's notion of busy, ``checks.devices.busy_devices``), and a note saying so; (None, None) when none of
    them is busy or their memory use is not shown. vLLM and the trainer get only what is free on a busy device."""
    from verlctl.checks.devices import busy_devices, npu_logical_id
    from verlctl.detect.gpu import GpuInfo
    from verlctl.detect.npu import NpuInfo

    busy = busy_devices(spec, machine)
    if not busy:
        return None, None
    free: dict[int, tuple[int, int]] = {}  # device -> (free MB, total MB)
    if spec.device == "npu" and isinstance(machine.npu, NpuInfo):
        for d in machine.npu.devices:
            dev = npu_logical_id(d)
            if dev in busy and d.hbm_total_mb and d.hbm_used_mb is not None:
                left = max(0, d.hbm_total_mb - d.hbm_used_mb)
                free[dev] = min(free.get(dev, (left, d.hbm_total_mb)), (left, d.hbm_total_mb))
    elif spec.device == "gpu" and isinstance(machine.gpu, GpuInfo):
        for g in machine.gpu.devices:
            if g.id in busy and g.memory_total_mb and g.memory_used_mb is not None:
                free[g.id] = (max(0, g.memory_total_mb - g.memory_used_mb), g.memory_total_mb)
    if not free:
        return None, None
    worst = min(free, key=lambda k: free[k][0])
    kind = "NPU" if spec.device == "npu" else "GPU"
    ids = ", ".join(str(d) for d in sorted(free))
    note = (f"free memory of the busy {kind} {ids}: {kind} {worst} has {free[worst][0] / 1024:.1f} of "
            f"{free[worst][1] / 1024:.1f} GiB free (another process holds the rest)")
    return free[worst][0] / 1024.0, note


def host_from_machine(machine: Any) -> float | None:
    from verlctl.detect.machine import SystemInfo

    sysinfo = machine.system
    if isinstance(sysinfo, SystemInfo) and sysinfo.memory_total_bytes:
        return sysinfo.memory_total_bytes / GIB
    return None


def estimate_run(
    spec: Any,
    features: Mapping[str, bool],
    shape: ModelShape,
    version: str | None = None,
    hbm_gib: float | None = None,
    host_gib: float | None = None,
    free_gib: float | None = None,
    free_note: str | None = None,
) -> Estimate:
    """The estimate with its advice; the spec's ``cluster.*_memory_gib`` win over detected values, and the free
    memory of a busy device (``free_gib``, :func:`hbm_free_from_machine`) caps both."""
    hbm = spec.cluster.device_memory_gib or hbm_gib
    note = None
    if free_gib is not None and (hbm is None or free_gib < hbm):
        hbm, note = free_gib, free_note
    host = spec.cluster.host_memory_gib or host_gib
    est = estimate(layout_for(spec, features, version), shape, hbm, host)
    est.advice = advise(est, hbm, host)
    est.device_note = note
    return est


def memory_findings(est: Estimate | None, reason: str | None = None) -> list[Finding]:
    """Blocking when a phase cannot fit: the run would die on its first step (or vLLM refuses to start)
    after minutes of model loading, and the recovery ladder would spend restarts on it. Host RAM short is a
    warning only: Ray's memory monitor threshold and swap make the host limit softer than HBM."""
    if est is None:
        return [info("memory_estimate_skipped", f"memory fit not estimated: {reason}", "paths.model",
                     "set paths.model to a directory with config.json")]
    out: list[Finding] = []
    hint = "; ".join(est.advice) if est.advice else None
    for name in est.failing:
        p = est.device[name]
        assert p.have is not None
        out.append(error(
            "memory_device_fit",
            f"{name} phase needs about {p.need / GIB:.1f} GiB per device, {p.have / GIB:.1f} GiB available"
            + (f" ({est.device_note})" if est.device_note else ""),
            "features" if name != "rollout" else "train.rollout_memory_utilization",
            hint,
        ))
    if est.kv_short:
        assert est.kv_tokens_fit is not None  # kv_short needs a known KV budget
        out.append(error(
            "memory_kv_cache",
            f"the rollout KV cache holds about {max(0, int(est.kv_tokens_fit))} tokens, less than one sequence "
            f"of {est.layout.seq} (prompt + response): vLLM refuses to start",
            "train.rollout_memory_utilization",
            hint,
        ))
    elif est.kv_tokens_fit is not None and est.kv_tokens_fit < est.kv_tokens_wanted:
        out.append(info(
            "memory_kv_cache_queue",
            f"the rollout KV cache holds about {int(est.kv_tokens_fit)} tokens of the {est.kv_tokens_wanted} a full "
            "batch would use at once: vLLM will queue requests (a slower rollout; it still runs)",
            "train.rollout_memory_utilization",
        ))
    if est.host.fits is False:
        assert est.host.have is not None
        out.append(warning(
            "memory_host_fit",
            f"host RAM: about {est.host.need / GIB:.0f} GiB needed per node, "
            f"{est.host.have / GIB:.0f} GiB below Ray's memory-monitor threshold",
            "cluster.host_memory_gib",
            hint,
        ))
    if est.fits is None:
        out.append(info("memory_estimate_partial",
                        "device memory unknown: pass cluster.device_memory_gib (e.g. 64 for Ascend 910B) to "
                        "check the fit away from the machine", "cluster.device_memory_gib"))
    return out


def rung_can_help(spec: Any, features_on: Mapping[str, bool], rung: str, shape: ModelShape | None = None,
                  host_gib: float | None = None) -> bool:
    """Whether adding the OOM-ladder feature ``rung`` can help, by the estimate.

    False when it would not lower any phase's need (e.g. recompute when activations are already recomputed)
    or, for offload, when host RAM (``cluster.host_memory_gib``, else ``host_gib``, else this node's) would then
    be short. True whenever the estimate cannot tell (no model config): the ladder then behaves as before. The
    watcher's OOM ladder and the wizard's memory fix ask it the same way.
    """
    if shape is None and spec.paths.model:
        shape = ModelShape.from_model_dir(spec.paths.model)
    if shape is None:
        return True
    now = {k: bool(v) for k, v in features_on.items()}
    after = dict(now, **{rung: True})
    hbm, host = spec.cluster.device_memory_gib, spec.cluster.host_memory_gib or host_gib
    if host is None:  # the watcher runs on the head node: its RAM
        import psutil

        host = psutil.virtual_memory().total / GIB
    before_est = estimate(layout_for(spec, now), shape, hbm, host)
    after_est = estimate(layout_for(spec, after), shape, hbm, host)
    added = after_est.host.need - before_est.host.need
    if rung == "offload" and after_est.host.fits is False and added > GIB:
        return False  # offload would move GiBs of states into RAM that is already too small
    return any(after_est.device[n].need < p.need - 1.0 for n, p in before_est.device.items() if n in after_est.device)


def table_lines(est: Estimate) -> list[str]:
    """The small per-phase table of plan / check (plain text; the caller styles it)."""
    def gib(x: float | None) -> str:
        return "?" if x is None else f"{x / GIB:.1f}"

    rows = [("phase", "need GiB", "have GiB", "fits")]
    for name, p in est.device.items():
        rows.append((f"{name} (per device)", gib(p.need), gib(p.have),
                     "?" if p.fits is None else ("yes" if p.fits else "NO")))
    h = est.host
    rows.append(("host RAM (per node)", gib(h.need), gib(h.have), "?" if h.fits is None else ("yes" if h.fits else "NO")))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)) for r in rows]
    if est.device_note:
        lines.append(f"device memory: {est.device_note}")
    if est.kv_tokens_fit is not None:
        lines.append(f"KV cache: ~{max(0, int(est.kv_tokens_fit))} tokens per rollout replica, "
                     f"{est.kv_tokens_wanted} wanted at once")
    return lines


def estimate_for_command(
    resolved: Any, command: Any, hbm_gib: float | None = None, host_gib: float | None = None,
    free_gib: float | None = None, free_note: str | None = None,
) -> tuple[Estimate | None, str | None]:
    """The estimate for a composed TrainingCommand (its feature states and verl version), or why not."""
    spec = resolved.spec
    if not spec.paths.model:
        return None, "paths.model is not set"
    shape = ModelShape.from_model_dir(spec.paths.model)
    if shape is None:
        return None, f"no usable config.json under {spec.paths.model} on this machine"
    features = {n: bool(s.on and s.applicable) for n, s in command.features.items()}
    chunked = command.features.get("chunked_prefill")
    # chunked prefill is verl's default: only an explicit "off" that is written (emits_off) turns it off
    features["chunked_prefill_off"] = bool(chunked is not None and chunked.applicable and chunked.emits_off)
    return estimate_run(spec, features, shape, command.version, hbm_gib, host_gib, free_gib, free_note), None
