"""Build the tiny artefacts of the real-verl test image, with no download (HF_HUB_OFFLINE=1).

    python3 build_tiny.py OUT

writes
  OUT/model/   a random Qwen2 (2 layers, hidden 128, 2 heads of 64, 1 KV head, vocab 512), bf16 safetensors,
               a byte-level BPE tokenizer trained on the prompts below, Qwen's chat template
               (eos ``<|im_end|>``, pad ``<|endoftext|>``), generation_config.json;
  OUT/data/train.parquet (48 rows), OUT/data/test.parquet (16 rows): verl's gsm8k format
               (``data_source: openai/gsm8k``, ``reward_model.ground_truth``), so verl's own
               ``default_compute_score`` scores them.
Everything is seeded: the same inputs give the same files.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2.5's chat template, without the tool-calling branches.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] != 'system' %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def questions(n: int, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(2, 40), rng.randint(2, 40)
        kind = rng.choice(["apples", "books", "coins", "pens"])
        out.append((f"Tom has {a} {kind} and buys {b} more. How many {kind} does he have?", a + b))
    return out


def build_tokenizer(texts: list[str], out: Path):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=474, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"], model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_model(tok, out: Path) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = Qwen2Config(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=64, max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=pad, eos_token_id=eos, pad_token_id=pad, torch_dtype="bfloat16",
    )
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(bos_token_id=pad, eos_token_id=eos, pad_token_id=pad).save_pretrained(out)


def gsm8k_rows(items: list[tuple[str, int]], split: str) -> list[dict]:  # type: ignore[type-arg]
    rows = []
    for i, (q, ans) in enumerate(items):
        rows.append({
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"{q} {INSTRUCTION}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(ans)},
            "extra_info": {"split": split, "index": i, "answer": f"#### {ans}", "question": q},
        })
    return rows


def main(out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    train, test = questions(48, seed=1), questions(16, seed=2)
    (out / "model").mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(parents=True, exist_ok=True)
    texts = [f"{q} {INSTRUCTION} #### {a}" for q, a in train + test] + ["You are a helpful assistant.",
                                                                        "system user assistant 0123456789"]
    tok = build_tokenizer(texts, out / "model")
    build_model(tok, out / "model")
    for name, items, split in (("train", train, "train"), ("test", test, "test")):
        pq.write_table(pa.Table.from_pylist(gsm8k_rows(items, split)), out / "data" / f"{name}.parquet")
    longest = max(len(tok.encode(tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)))
                  for r in gsm8k_rows(train + test, "x"))
    (out / "BUILD.json").write_text(json.dumps({
        "tokenizer_vocab": len(tok), "model_vocab": 512, "train_rows": len(train), "test_rows": len(test),
        "longest_prompt_tokens": longest,
    }, indent=1) + "\n")
    print(f"tiny artefacts in {out}: tokenizer {len(tok)} tokens, longest prompt {longest} tokens")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: build_tiny.py OUT")
    main(Path(sys.argv[1]))
