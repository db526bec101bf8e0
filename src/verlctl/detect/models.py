"""Hugging Face model directories: recognise them, read their shape, estimate their size.

A model directory holds ``config.json``, tokenizer files and weights (``*.safetensors`` or
``pytorch_model*.bin``, possibly sharded with an index json). The parameter count comes from the
safetensors headers when there are any (only the 8-byte length and the JSON header of each file
are read, never tensor data), else from the config by the usual decoder-only formula.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel

from verlctl.model_config import config_int, text_config

#: Files that make a tokenizer (any one is enough; vocab.json usually comes with merges.txt).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "qwen.tiktoken",
    "tiktoken.model",
    "tokenizer.tiktoken",
)
TOKENIZER_SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json", "merges.txt", "added_tokens.json")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_NOT_WEIGHTS_BIN = ("training_args.bin", "optimizer.bin", "scheduler.bin", "scaler.bin")
_MAX_HEADER_BYTES = 100 * 1024 * 1024
_MAX_CONFIG_BYTES = 16 * 1024 * 1024

_DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8,
    "F32": 4, "I32": 4, "U32": 4,
    "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip


def is_weight_file(name: str) -> bool:
    if name.endswith(".safetensors"):
        return True
    if name.endswith(".bin"):
        return name not in _NOT_WEIGHTS_BIN and not name.startswith(("rng_state", "optimizer", "scheduler"))
    return False


def is_tokenizer_file(name: str) -> bool:
    return name in TOKENIZER_FILES


def looks_like_model_dir(names: Iterable[str]) -> bool:
    """A candidate for :func:`inspect_model`: ``config.json`` plus weights, an index or a tokenizer."""
    has_config = False
    has_other = False
    for name in names:
        if name == "config.json":
            has_config = True
        elif is_weight_file(name) or name in INDEX_FILES or name in TOKENIZER_FILES:
            has_other = True
    return has_config and has_other


class SafetensorsHeader(BaseModel):
    path: str
    header_bytes: int
    tensors: int
    params: int
    dtypes: dict[str, int]  # dtype -> number of parameters
    metadata: dict[str, str] = {}


class SafetensorsError(ValueError):
    pass


def read_safetensors_header(path: str) -> SafetensorsHeader:
    """Read the header of a ``.safetensors`` file (8-byte little-endian length + JSON); no tensor data."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) != 8:
            raise SafetensorsError(f"{path}: shorter than 8 bytes")
        (length,) = struct.unpack("<Q", head)
        if length == 0 or length > _MAX_HEADER_BYTES:
            raise SafetensorsError(f"{path}: implausible header length {length}")
        raw = fh.read(length)
    if len(raw) != length:
        raise SafetensorsError(f"{path}: header cut short ({len(raw)} of {length} bytes)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsError(f"{path}: header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    params = 0
    tensors = 0
    dtypes: dict[str, int] = {}
    metadata: dict[str, str] = {}
    for key, value in header.items():
        if key == "__metadata__":
            if isinstance(value, dict):
                metadata = {str(k): str(v) for k, v in value.items()}
            continue
        if not isinstance(value, dict) or not isinstance(value.get("shape"), list):
            raise SafetensorsError(f"{path}: tensor {key!r} has no shape")
        n = math.prod(int(d) for d in value["shape"])
        params += n
        tensors += 1
        dtype = str(value.get("dtype", "?"))
        dtypes[dtype] = dtypes.get(dtype, 0) + n
    return SafetensorsHeader(
        path=path, header_bytes=length, tensors=tensors, params=params, dtypes=dtypes, metadata=metadata
    )


class ModelInfo(BaseModel):
    """What a directory holds as a Hugging Face model; ``missing`` explains why it is not (complete)."""

    path: str
    is_model: bool = False
    missing: list[str] = []  # human-readable, e.g. "no config.json"
    warnings: list[str] = []
    name: str = ""  # the directory's base name
    model_type: str | None = None
    architecture: str | None = None  # architectures[0]
    num_layers: int | None = None
    num_attention_heads: int | None = None
    num_kv_heads: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    torch_dtype: str | None = None
    tie_word_embeddings: bool | None = None
    num_experts: int | None = None
    param_count: int | None = None
    param_count_source: Literal["safetensors", "config"] | None = None
    weight_format: Literal["safetensors", "bin"] | None = None
    weight_files: list[str] = []
    weight_bytes: int = 0
    tokenizer_files: list[str] = []

    @property
    def params_billions(self) -> float | None:
        return None if self.param_count is None else self.param_count / 1e9


def _regular_file_size(path: str) -> int | None:
    """Size of a regular file; None for anything else (a FIFO must never be opened: it would block)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _is_lfs_pointer(path: str) -> bool:
    """A Git LFS pointer file (a clone without ``git lfs``): ~130 bytes of text instead of weights."""
    size = _regular_file_size(path)
    if size is None or size > 1024:
        return False
    try:
        with open(path, "rb") as fh:
            return fh.read(64).startswith(b"version https://git-lfs")
    except OSError:
        return False


def _read_json(path: str, problems: list[str], label: str) -> Any:
    size = _regular_file_size(path)
    if size is None:
        problems.append(f"{label} is not a regular file")
        return None
    if size > _MAX_CONFIG_BYTES:
        problems.append(f"{label} is too large to be a config ({size} bytes)")
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.append(f"{label} cannot be read: {exc}")
        return None


def moe_layer_count(cfg: dict[str, Any] | Any, layers: int) -> int:
    """How many of ``layers`` decoder layers are sparse (MoE) in a MoE text config: not among the first
    ``first_k_dense_replace`` (DeepSeek), not in ``mlp_only_layers`` and, with ``decoder_sparse_step`` s > 1,
    only layers i with (i + 1) % s == 0 (Qwen2-MoE). Counted, not looped: a config.json is untrusted input."""
    n = max(0, layers)
    first_dense = min(n, max(0, config_int(cfg, "first_k_dense_replace") or 0))
    step = config_int(cfg, "decoder_sparse_step") or 1

    def sparse_by_step(i: int) -> bool:
        return step <= 1 or (i + 1) % step == 0

    # layers first_dense..n-1 whose (i + 1) is a multiple of step: multiples of step in (first_dense, n]
    count = n - first_dense if step <= 1 else n // step - first_dense // step
    raw_only = cfg.get("mlp_only_layers")  # a list of layer indices; anything else is no dense layer
    mlp_only = {i for i in raw_only if isinstance(i, int) and not isinstance(i, bool)} if isinstance(raw_only, list) \
        else set()
    return count - sum(1 for i in mlp_only if first_dense <= i < n and sparse_by_step(i))


def estimate_params_from_config(config: dict[str, Any]) -> int | None:
    """Parameter count of a decoder-only transformer from its config (dense, GQA and simple MoE).

    Exact for Llama/Qwen2-style models without attention bias; biases and norms of other families
    make it an estimate (within a few per cent). Returns None if the config lacks the sizes.
    """
    cfg = text_config(config)
    hidden = config_int(cfg, "hidden_size", "n_embd", "d_model")
    layers = config_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    vocab = config_int(cfg, "vocab_size", "padded_vocab_size")
    heads = config_int(cfg, "num_attention_heads", "n_head")
    if not (hidden and layers and vocab and heads):
        return None
    kv_heads = config_int(cfg, "num_key_value_heads", "multi_query_group_num") or heads
    head_dim = config_int(cfg, "head_dim") or hidden // heads
    inter = config_int(cfg, "intermediate_size", "ffn_hidden_size", "n_inner") or 4 * hidden
    tie = bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))

    attn = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    model_type = str(cfg.get("model_type") or config.get("model_type") or "")
    if cfg.get("attention_bias") or cfg.get("qkv_bias") or model_type in ("qwen2", "qwen2_vl", "qwen2_5_vl"):
        attn += heads * head_dim + 2 * kv_heads * head_dim
    if model_type.startswith("qwen3"):
        attn += 2 * head_dim  # q_norm and k_norm
    dense_mlp = 3 * hidden * inter
    norms = 2 * hidden

    experts = config_int(cfg, "num_experts", "num_local_experts", "n_routed_experts")
    per_layer_dense = attn + dense_mlp + norms
    if experts:
        moe_inter = config_int(cfg, "moe_intermediate_size") or inter
        shared = config_int(cfg, "n_shared_experts", "num_shared_experts") or 0
        shared_inter = config_int(cfg, "shared_expert_intermediate_size")
        moe_mlp = experts * 3 * hidden * moe_inter + hidden * experts  # experts + router
        if shared_inter:
            moe_mlp += 3 * hidden * shared_inter + hidden  # Qwen2-MoE shared expert + its gate
        elif shared:
            moe_mlp += shared * 3 * hidden * moe_inter
        sparse = moe_layer_count(cfg, layers)
        total_layers = (max(0, layers) - sparse) * per_layer_dense + sparse * (attn + moe_mlp + norms)
    else:
        total_layers = layers * per_layer_dense
    embed = vocab * hidden
    head = 0 if tie else vocab * hidden
    return embed + head + total_layers + hidden  # + final norm


def inspect_model(path: str, names: Iterable[str] | None = None) -> ModelInfo:
    """Describe ``path`` as a Hugging Face model dir; explain in ``missing`` what it lacks.

    ``names`` (the directory listing) may be passed by a scanner that already has it.
    """
    path = os.path.abspath(path)
    info = ModelInfo(path=path, name=os.path.basename(path.rstrip(os.sep)))
    if names is None:
        try:
            with os.scandir(path) as it:
                names = [e.name for e in it]
        except NotADirectoryError:
            info.missing.append("not a directory")
            return info
        except FileNotFoundError:
            info.missing.append("does not exist")
            return info
        except OSError as exc:
            info.missing.append(f"cannot be listed: {exc.strerror or exc}")
            return info
    listing = sorted(set(names))
    weights = [n for n in listing if is_weight_file(n)]
    indexes = [n for n in listing if n in INDEX_FILES]
    info.tokenizer_files = [n for n in listing if n in TOKENIZER_FILES or n in TOKENIZER_SIDE_FILES]
    has_tokenizer = any(n in TOKENIZER_FILES for n in listing)

    config: dict[str, Any] | None = None
    if "config.json" not in listing:
        info.missing.append("no config.json")
    else:
        raw = _read_json(os.path.join(path, "config.json"), info.missing, "config.json")
        if raw is not None and not isinstance(raw, dict):
            info.missing.append("config.json is not a JSON object")
        elif raw is not None:
            config = raw
    if not has_tokenizer:
        info.missing.append("no tokenizer files (tokenizer.json, tokenizer.model, vocab.json, …)")

    safetensors = [n for n in weights if n.endswith(".safetensors")]
    info.weight_format = "safetensors" if safetensors else ("bin" if weights else None)
    info.weight_files = weights
    for n in weights:
        size = _regular_file_size(os.path.join(path, n))
        if size is None:
            info.warnings.append(f"{n} is not a regular file")
        else:
            info.weight_bytes += size
    if not weights:
        info.missing.append("no weights (*.safetensors or pytorch_model*.bin)")
    for index_name in indexes:
        _check_index(path, index_name, listing, info)

    if config is not None:
        _fill_from_config(info, config)
    params = 0
    header_errors = 0
    lfs_pointers = [n for n in weights if _is_lfs_pointer(os.path.join(path, n))]
    if lfs_pointers:
        info.missing.append(
            f"{len(lfs_pointers)} weight file(s) are Git LFS pointers, not weights "
            f"(e.g. {lfs_pointers[0]}; run 'git lfs pull')"
        )
    for n in safetensors:
        full = os.path.join(path, n)
        if _regular_file_size(full) is None or n in lfs_pointers:
            header_errors += 1
            continue
        try:
            params += read_safetensors_header(full).params
        except SafetensorsError as exc:
            header_errors += 1
            info.warnings.append(str(exc))
        except OSError as exc:
            header_errors += 1
            info.warnings.append(f"{full}: {exc.strerror or exc}")
    if safetensors and header_errors == 0:
        info.param_count, info.param_count_source = params, "safetensors"
    elif config is not None:
        estimate = estimate_params_from_config(config)
        if estimate is not None:
            info.param_count, info.param_count_source = estimate, "config"
    info.is_model = not info.missing
    return info


def _check_index(path: str, index_name: str, listing: list[str], info: ModelInfo) -> None:
    problems: list[str] = []
    index = _read_json(os.path.join(path, index_name), problems, index_name)
    if problems:
        info.warnings.extend(problems)
        return
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        info.warnings.append(f"{index_name} has no weight_map")
        return
    wanted = sorted({str(v) for v in weight_map.values()})
    present = set(listing)
    absent = [w for w in wanted if w not in present]
    if absent:
        shown = ", ".join(absent[:3]) + (" …" if len(absent) > 3 else "")
        info.missing.append(
            f"{len(absent)} of {len(wanted)} weight shards listed in {index_name} are absent ({shown})"
        )


def _fill_from_config(info: ModelInfo, config: dict[str, Any]) -> None:
    cfg = text_config(config)
    archs = config.get("architectures")
    if isinstance(archs, list) and archs:
        info.architecture = str(archs[0])
    model_type = config.get("model_type") or cfg.get("model_type")
    info.model_type = str(model_type) if model_type else None
    info.num_layers = config_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    info.num_attention_heads = config_int(cfg, "num_attention_heads", "n_head")
    info.num_kv_heads = (
        config_int(cfg, "num_key_value_heads", "multi_query_group_num") or info.num_attention_heads
    )
    info.hidden_size = config_int(cfg, "hidden_size", "n_embd", "d_model")
    info.intermediate_size = config_int(cfg, "intermediate_size", "ffn_hidden_size", "n_inner")
    info.vocab_size = config_int(cfg, "vocab_size", "padded_vocab_size")
    info.max_position_embeddings = config_int(cfg, "max_position_embeddings", "n_positions", "seq_length")
    info.num_experts = config_int(cfg, "num_experts", "num_local_experts", "n_routed_experts")
    dtype = cfg.get("torch_dtype") or config.get("torch_dtype") or cfg.get("dtype")
    info.torch_dtype = str(dtype) if dtype else None
    tie = cfg.get("tie_word_embeddings", config.get("tie_word_embeddings"))
    info.tie_word_embeddings = tie if isinstance(tie, bool) else None
    if info.num_layers is None:
        info.warnings.append("config.json has no layer count (num_hidden_layers)")
