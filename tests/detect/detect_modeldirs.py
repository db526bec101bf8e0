"""Builders for Hugging Face style model directories used by the detect tests.

Safetensors files are written in the format's bytes by hand (u64 little-endian header length, JSON
header with data offsets, then the tensor bytes), so no torch or safetensors package is needed.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4}


def write_safetensors(
    path: Path, tensors: dict[str, tuple[str, list[int]]], sparse_data: bool = False
) -> int:
    """The safetensors format: u64 LE header size, JSON header (offsets into the data), tensor bytes."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        if sparse_data:
            fh.truncate(8 + len(raw) + offset)  # a hole: no data on disk, reading it would still take time
        else:
            fh.write(
                os.urandom(min(offset, 1 << 16)) * (offset // (1 << 16)) + os.urandom(offset % (1 << 16))
            )
    return sum(math.prod(s) for _, s in tensors.values())


def llama_tensors(
    cfg: dict, with_bias: bool = False, qk_norm: bool = False
) -> dict[str, tuple[str, list[int]]]:
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", h // heads)
    t: dict[str, tuple[str, list[int]]] = {"model.embed_tokens.weight": ("BF16", [vocab, h])}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = ("BF16", [heads * hd, h])
        t[p + "self_attn.k_proj.weight"] = ("BF16", [kv * hd, h])
        t[p + "self_attn.v_proj.weight"] = ("BF16", [kv * hd, h])
        t[p + "self_attn.o_proj.weight"] = ("BF16", [h, heads * hd])
        if with_bias:
            t[p + "self_attn.q_proj.bias"] = ("BF16", [heads * hd])
            t[p + "self_attn.k_proj.bias"] = ("BF16", [kv * hd])
            t[p + "self_attn.v_proj.bias"] = ("BF16", [kv * hd])
        if qk_norm:
            t[p + "self_attn.q_norm.weight"] = ("BF16", [hd])
            t[p + "self_attn.k_norm.weight"] = ("BF16", [hd])
        t[p + "mlp.gate_proj.weight"] = ("BF16", [inter, h])
        t[p + "mlp.up_proj.weight"] = ("BF16", [inter, h])
        t[p + "mlp.down_proj.weight"] = ("BF16", [h, inter])
        t[p + "input_layernorm.weight"] = ("BF16", [h])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [h])
    t["model.norm.weight"] = ("BF16", [h])
    if not cfg.get("tie_word_embeddings", False):
        t["lm_head.weight"] = ("BF16", [vocab, h])
    return t


LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 3,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 301,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def make_model(
    d: Path,
    cfg: dict | None = None,
    shards: int = 2,
    tokenizer: bool = True,
    weights: bool = True,
    with_bias: bool = False,
    qk_norm: bool = False,
) -> int:
    cfg = LLAMA if cfg is None else cfg
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "generation_config.json").write_text("{}")
    if tokenizer:
        (d / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE"}}')
        (d / "tokenizer_config.json").write_text('{"model_max_length": 4096}')
    if not weights:
        return 0
    tensors = llama_tensors(cfg, with_bias, qk_norm)
    names = list(tensors)
    per = math.ceil(len(names) / shards)
    weight_map: dict[str, str] = {}
    total = 0
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s * per : (s + 1) * per]}
        total += write_safetensors(d / fname, part)
        weight_map.update({n: fname for n in part})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return total
