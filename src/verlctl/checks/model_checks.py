"""``paths.model``: a readable Hugging Face model directory, and the model's shape against TP / PP / VPP."""

from __future__ import annotations

from verlctl.checks.findings import Finding, error, warning
from verlctl.checks.units import id_list, total_devices, valid_sizes
from verlctl.detect.common import Unavailable
from verlctl.detect.models import ModelInfo
from verlctl.spec.model import RunSpec

#: Overrides that set an uneven pipeline layout: the even-split rule of layers over PP does not apply.
UNEVEN_PP_KEYS = (
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "pipeline_num_transformer_layers",
)


def check_model_path(spec: RunSpec, model: ModelInfo | Unavailable | None) -> list[Finding]:
    """``paths.model`` is a readable Hugging Face model directory (config.json, weights, tokenizer)."""
    path = spec.paths.model
    if path is None or model is None:
        return []
    field = "paths.model"
    if isinstance(model, Unavailable):
        return [warning("model_unchecked", f"{path} was not checked: {model.reason}", field)]
    missing = model.missing
    if "does not exist" in missing:
        return [
            error(
                "model_missing",
                f"{path} does not exist",
                field,
                "download the model there (e.g. `huggingface-cli download ORG/NAME --local-dir DIR`) or fix "
                "paths.model",
            )
        ]
    if "not a directory" in missing:
        return [error("model_not_dir", f"{path} is not a directory (a Hugging Face model is a directory)", field)]
    listing = [m for m in missing if m.startswith("cannot be listed")]
    if listing:
        return [error("model_unreadable", f"{path} {listing[0]}", field, "fix the directory's permissions")]
    out: list[Finding] = []
    if missing:
        out.append(
            error(
                "model_incomplete",
                f"{path} is not a complete Hugging Face model directory: {'; '.join(missing)}",
                field,
                "a model directory needs config.json, the weights (*.safetensors or pytorch_model*.bin) and the "
                "tokenizer files",
            )
        )
    if model.warnings:
        out.append(warning("model_warnings", f"{path}: {'; '.join(model.warnings)}", field))
    return out


def megatron_tp_ok(heads: int, kv: int, tp: int) -> bool:
    """Megatron: num_attention_heads and num_query_groups are multiples of the TP size."""
    return heads % tp == 0 and kv % tp == 0


def vllm_tp_ok(heads: int, kv: int, tp: int) -> bool:
    """vLLM: heads divisible by TP; KV heads divisible by TP, or (fewer KV heads than TP) replicated evenly."""
    return heads % tp == 0 and (kv % tp == 0 if kv >= tp else tp % kv == 0)


def _train_tp(spec: RunSpec, model: ModelInfo, heads: int, kv: int) -> list[Finding]:
    tp = spec.train.tensor_parallel
    if megatron_tp_ok(heads, kv, tp):
        return []
    which = f"{heads} attention heads" if heads % tp else f"{kv} key/value heads (query groups)"
    choices = valid_sizes(total_devices(spec), lambda t: megatron_tp_ok(heads, kv, t))
    return [
        error(
            "model_tp_heads",
            f"{model.name or model.path} has {which}, not divisible by the training TP {tp} (Megatron requires "
            "num_attention_heads and num_query_groups to be multiples of tensor_model_parallel_size)",
            "train.tensor_parallel",
            f"valid training TP for this model: {id_list(choices)}",
        )
    ]


def _rollout_tp(spec: RunSpec, model: ModelInfo, heads: int, kv: int) -> list[Finding]:
    rtp = spec.train.rollout_tensor_parallel or spec.train.tensor_parallel
    if vllm_tp_ok(heads, kv, rtp):
        return []
    engine = spec.train.rollout_engine
    if heads % rtp:
        why = f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({rtp})"
    else:
        why = f"{kv} key/value heads can be neither split nor replicated evenly over tensor parallel size {rtp}"
    choices = valid_sizes(total_devices(spec), lambda t: vllm_tp_ok(heads, kv, t))
    return [
        error(
            "model_rollout_tp_heads",
            f"{model.name or model.path}: the rollout ({engine}) fails with '{why}'",
            "train.rollout_tensor_parallel",
            f"valid rollout TP for this model: {id_list(choices)}",
        )
    ]


def _layers(spec: RunSpec, model: ModelInfo, layers: int, vpp_on: bool, recompute_on: bool = False) -> list[Finding]:
    pp = spec.train.pipeline_parallel
    name = model.name or model.path
    if layers % pp:
        choices = valid_sizes(min(layers, total_devices(spec)), lambda p: layers % p == 0)
        return [
            error(
                "model_layers_pp",
                f"{name} has {layers} layers, which do not split evenly over PP {pp} pipeline stages",
                "train.pipeline_parallel",
                f"valid PP for this model: {id_list(choices)} (or an uneven layout with "
                "num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage)",
            )
        ]
    vpp = spec.features.vpp_size
    recompute = spec.features.recompute_num_layers
    if recompute_on and spec.features.recompute_method == "uniform" and layers % (pp * (vpp if vpp_on else 1)) == 0:
        # Megatron's uniform recompute splits each pipeline stage's (model chunk's) layers into groups of
        # recompute_num_layers (verl v0.9.0 docs/ascend_tutorial/feature_support/npu_advance_features.md:219).
        chunk = layers // pp // (vpp if vpp_on else 1)
        if chunk % recompute:
            where = f"{chunk} per pipeline stage (PP {pp})" + (f", per virtual stage (vpp {vpp})" if vpp_on else "")
            return [
                error(
                    "model_recompute_layers",
                    f"{name} has {layers} layers, {where}: recompute_method uniform needs recompute_num_layers "
                    f"({recompute}) to divide them",
                    "features.recompute_num_layers",
                    f"valid recompute_num_layers: {id_list([d for d in range(1, chunk + 1) if chunk % d == 0])}, "
                    "or recompute_method block",
                )
            ]
    if vpp_on and layers % (pp * vpp):
        sizes = [v for v in range(2, layers // pp + 1) if (layers // pp) % v == 0]
        pps = valid_sizes(min(layers, total_devices(spec)), lambda p: layers % (p * vpp) == 0)
        return [
            error(
                "model_layers_vpp",
                f"{name} has {layers} layers: {layers // pp} per pipeline stage (PP {pp}) do not split into "
                f"{vpp} virtual stages (layers must be divisible by PP × vpp_size = {pp * vpp})",
                "features.vpp_size",
                f"valid vpp_size with PP {pp}: {id_list(sizes)}; valid PP with vpp_size {vpp}: {id_list(pps)}; or turn vpp off",
            )
        ]
    return []


def check_model_fit(
    spec: RunSpec, model: ModelInfo | Unavailable | None, vpp_on: bool = False, recompute_on: bool = False
) -> list[Finding]:
    """Heads and KV heads divisible by the training TP (Megatron) and the rollout TP (vLLM); layers by PP
    (by PP × vpp_size with the vpp feature on). Nothing when the model's shape is unknown."""
    if not isinstance(model, ModelInfo):
        return []
    out: list[Finding] = []
    heads, kv, layers = model.num_attention_heads, model.num_kv_heads or model.num_attention_heads, model.num_layers
    megatron = spec.strategy == "megatron"
    if heads and kv:
        if megatron:
            out += _train_tp(spec, model, heads, kv)
        out += _rollout_tp(spec, model, heads, kv)
    uneven = any(k in o for o in spec.extra_overrides for k in UNEVEN_PP_KEYS)
    if megatron and layers and not uneven:
        out += _layers(spec, model, layers, vpp_on, recompute_on)
    return out
