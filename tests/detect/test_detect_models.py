"""Model directories built for real in tmp dirs: config.json, tokenizer files and safetensors files
written in the safetensors byte format by hand (8-byte little-endian header length + JSON + data)."""

from __future__ import annotations

import json
import os
import struct
import threading
import time
from pathlib import Path

import pytest

from detect_modeldirs import LLAMA, make_model, write_safetensors
from verlctl.detect.models import (
    SafetensorsError,
    estimate_params_from_config,
    inspect_model,
    looks_like_model_dir,
    read_safetensors_header,
)

# --------------------------------------------------------------------------------------------------


def test_read_safetensors_header(tmp_path: Path) -> None:
    n = write_safetensors(
        tmp_path / "m.safetensors", {"a": ("F32", [3, 4]), "b": ("BF16", [5]), "c": ("F16", [2, 2, 2])}
    )
    h = read_safetensors_header(str(tmp_path / "m.safetensors"))
    assert (h.tensors, h.params, n) == (3, 12 + 5 + 8, 25)
    assert h.dtypes == {"F32": 12, "BF16": 5, "F16": 8}
    assert h.metadata == {"format": "pt"}


def test_header_is_read_without_the_tensor_data(tmp_path: Path) -> None:
    # 24 GiB of declared tensor data in a sparse file: only the header may be read
    p = tmp_path / "big.safetensors"
    n = write_safetensors(p, {"w": ("BF16", [98304, 131072])}, sparse_data=True)
    assert p.stat().st_size > 24 * 2**30
    assert p.stat().st_blocks * 512 < 1 << 20  # nothing allocated on disk
    t = time.perf_counter()
    assert read_safetensors_header(str(p)).params == n == 98304 * 131072
    assert time.perf_counter() - t < 0.5


@pytest.mark.parametrize(
    "payload, fragment",
    [
        (b"", "shorter than 8 bytes"),
        (struct.pack("<Q", 0), "implausible header length"),
        (struct.pack("<Q", 1 << 40), "implausible header length"),
        (struct.pack("<Q", 100) + b"{}", "cut short"),
        (struct.pack("<Q", 4) + b"nope", "not JSON"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
    ],
)
def test_broken_safetensors_headers(tmp_path: Path, payload: bytes, fragment: str) -> None:
    p = tmp_path / "x.safetensors"
    p.write_bytes(payload)
    with pytest.raises(SafetensorsError, match=fragment):
        read_safetensors_header(str(p))


def test_tiny_llama_model(tmp_path: Path) -> None:
    d = tmp_path / "Llama-tiny"
    total = make_model(d)
    info = inspect_model(str(d))
    assert info.is_model and info.missing == [] and info.warnings == []
    assert info.name == "Llama-tiny"
    assert (info.architecture, info.model_type) == ("LlamaForCausalLM", "llama")
    assert (info.num_layers, info.num_attention_heads, info.num_kv_heads, info.hidden_size) == (3, 8, 2, 64)
    assert (info.vocab_size, info.intermediate_size, info.max_position_embeddings) == (301, 160, 4096)
    assert (info.torch_dtype, info.tie_word_embeddings) == ("bfloat16", False)
    assert info.param_count == total and info.param_count_source == "safetensors"
    assert info.weight_format == "safetensors"
    assert info.weight_files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert info.weight_bytes == sum((d / f).stat().st_size for f in info.weight_files)
    assert info.tokenizer_files == ["tokenizer.json", "tokenizer_config.json"]


def test_config_formula_equals_the_safetensors_count(tmp_path: Path) -> None:
    # llama (no bias, untied), qwen2 (q/k/v bias, tied), qwen3 (q/k norms, explicit head_dim)
    cases = [
        (LLAMA, {}),
        ({**LLAMA, "model_type": "qwen2", "tie_word_embeddings": True}, {"with_bias": True}),
        ({**LLAMA, "model_type": "qwen3", "head_dim": 16}, {"qk_norm": True}),
    ]
    for i, (cfg, kw) in enumerate(cases):
        d = tmp_path / f"m{i}"
        total = make_model(d, cfg, **kw)
        assert estimate_params_from_config(cfg) == total, cfg["model_type"]
        assert inspect_model(str(d)).param_count == total


def test_public_configs_give_published_sizes() -> None:
    llama31_8b = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}  # fmt: skip
    qwen25_7b = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                 "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064}  # fmt: skip
    qwen25_05b = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                  "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                  "tie_word_embeddings": True}  # fmt: skip
    assert estimate_params_from_config(llama31_8b) == 8_030_261_248
    assert estimate_params_from_config(qwen25_7b) == 7_615_616_512
    assert estimate_params_from_config(qwen25_05b) == 494_032_768
    qwen3_30b_a3b = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                     "moe_intermediate_size": 768, "num_experts": 128, "num_hidden_layers": 48,
                     "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                     "vocab_size": 151936}  # fmt: skip
    assert abs(estimate_params_from_config(qwen3_30b_a3b) / 30.5e9 - 1) < 0.01  # type: ignore[operator]


def test_multimodal_config_uses_the_text_config(tmp_path: Path) -> None:
    cfg = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
           "text_config": {k: v for k, v in LLAMA.items() if k != "architectures"}}  # fmt: skip
    d = tmp_path / "vl"
    make_model(d, cfg={**LLAMA, **cfg}, weights=False)
    (d / "config.json").write_text(json.dumps(cfg))
    info = inspect_model(str(d))
    assert (info.architecture, info.num_layers, info.hidden_size) == (
        "Qwen2_5_VLForConditionalGeneration",
        3,
        64,
    )
    assert info.param_count_source == "config"


def test_no_weights_uses_the_config_and_says_so(tmp_path: Path) -> None:
    d = tmp_path / "ckpt" / "huggingface"
    make_model(d, weights=False)
    info = inspect_model(str(d))
    assert not info.is_model
    assert info.missing == ["no weights (*.safetensors or pytorch_model*.bin)"]
    assert info.param_count == estimate_params_from_config(LLAMA) and info.param_count_source == "config"


def test_not_a_model_explains_everything_missing(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    info = inspect_model(str(tmp_path / "empty"))
    assert not info.is_model
    assert info.missing == [
        "no config.json",
        "no tokenizer files (tokenizer.json, tokenizer.model, vocab.json, …)",
        "no weights (*.safetensors or pytorch_model*.bin)",
    ]
    assert inspect_model(str(tmp_path / "nope")).missing == ["does not exist"]
    (tmp_path / "file").write_text("x")
    assert inspect_model(str(tmp_path / "file")).missing == ["not a directory"]


def test_missing_tokenizer_only(tmp_path: Path) -> None:
    d = tmp_path / "m"
    make_model(d, tokenizer=False)
    info = inspect_model(str(d))
    assert not info.is_model
    assert info.missing == ["no tokenizer files (tokenizer.json, tokenizer.model, vocab.json, …)"]
    assert info.param_count_source == "safetensors"


def test_pytorch_bin_weights_and_sentencepiece_tokenizer(tmp_path: Path) -> None:
    d = tmp_path / "old"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA))
    (d / "tokenizer.model").write_bytes(b"\x0a\x0b")
    (d / "pytorch_model.bin").write_bytes(b"PK\x03\x04" + b"\0" * 2048)
    (d / "training_args.bin").write_bytes(b"\0" * 16)
    info = inspect_model(str(d))
    assert info.is_model and info.weight_format == "bin"
    assert info.weight_files == ["pytorch_model.bin"]
    assert info.param_count_source == "config"


def test_absent_shards_listed_in_the_index(tmp_path: Path) -> None:
    d = tmp_path / "partial"
    make_model(d, shards=3)
    (d / "model-00002-of-00003.safetensors").unlink()
    info = inspect_model(str(d))
    assert not info.is_model
    assert info.missing == [
        "1 of 3 weight shards listed in model.safetensors.index.json are absent (model-00002-of-00003.safetensors)"
    ]


def test_git_lfs_pointer_files_are_not_weights(tmp_path: Path) -> None:
    d = tmp_path / "cloned"
    make_model(d, shards=1)
    (d / "model-00001-of-00001.safetensors").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 988097824\n"
    )
    info = inspect_model(str(d))
    assert not info.is_model
    assert any("Git LFS pointers" in m for m in info.missing)
    assert info.param_count_source == "config"


def test_broken_config_json(tmp_path: Path) -> None:
    d = tmp_path / "bad"
    make_model(d, shards=1)
    (d / "config.json").write_text("{not json")
    info = inspect_model(str(d))
    assert not info.is_model and info.missing[0].startswith("config.json cannot be read")
    (d / "config.json").write_text("[1, 2]")
    assert inspect_model(str(d)).missing == ["config.json is not a JSON object"]


def test_fifo_config_is_reported_not_opened(tmp_path: Path) -> None:
    # a named pipe would block open() forever; the probe checks the file type first (real FIFO)
    d = tmp_path / "fifo"
    make_model(d, shards=1)
    (d / "config.json").unlink()
    os.mkfifo(d / "config.json")
    os.mkfifo(d / "model-00001-of-00001.safetensors.tmp")
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(inspect_model(str(d))), daemon=True)
    t.start()
    t.join(5)
    assert result, "inspect_model blocked on a FIFO"
    info = result[0]
    assert info.missing == ["config.json is not a regular file"]  # type: ignore[attr-defined]


def test_looks_like_model_dir() -> None:
    assert looks_like_model_dir(["config.json", "model.safetensors"])
    assert looks_like_model_dir(["config.json", "tokenizer.json"])
    assert looks_like_model_dir(["config.json", "pytorch_model.bin.index.json"])
    assert not looks_like_model_dir(["config.json", "README.md"])
    assert not looks_like_model_dir(["model.safetensors", "tokenizer.json"])
    assert not looks_like_model_dir(["config.json", "training_args.bin"])
