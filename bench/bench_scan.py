#!/usr/bin/env python3
"""Benchmark: verlctl's model/dataset scan vs. the seed's two ``find`` commands, same tree, same run.

The seed's pre-check runs::

    find /mnt/public /mnt2 /mnt/project -maxdepth 4 -type d -name "Qwen*" 2>/dev/null
    find /mnt /mnt2 -name "*.parquet" 2>/dev/null | head -20

(the second has no depth bound). This script builds a synthetic tree shaped like a training
host's ``/mnt`` and ``/mnt2`` (model directories, datasets, a code checkout with ``.git``, a conda
env, ``node_modules``, an image dataset, verl checkpoints, logs) under a scratch directory, runs
both ``find`` commands and ``verlctl.detect.scan`` on it (warm cache, best of N), and prints a
table with the ratio (target: verlctl's full scan <= 0.5 x the two ``find`` commands together).

    python bench/bench_scan.py [--files 200000] [--repeat 5] [--workers N] [--no-worst-case]

``build_tree`` is also used by the test suite (tests/detect/test_detect_scan_big.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL_NAMES = (
    "Qwen2.5-0.5B-Instruct",
    "Qwen2.5-7B-Instruct",
    "Qwen3-8B",
    "Llama-3.1-8B-Instruct",
    "DeepSeek-R1-Distill-Qwen-7B",
)


def _touch_many(directory: str, names: list[str]) -> None:
    os.makedirs(directory, exist_ok=True)
    flags = os.O_CREAT | os.O_WRONLY
    for name in names:
        os.close(os.open(os.path.join(directory, name), flags, 0o644))


def _safetensors_bytes(tensors: dict[str, list[int]]) -> bytes:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors.items():
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + 2 * n]}
        offset += 2 * n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"\0" * offset


def _write_model(directory: str, shards: int = 2) -> None:
    os.makedirs(directory, exist_ok=True)
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "llama",
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 64,
        "torch_dtype": "bfloat16",
    }
    Path(directory, "config.json").write_text(json.dumps(config))
    for name in (
        "generation_config.json",
        "tokenizer_config.json",
        "tokenizer.json",
        "vocab.json",
        "merges.txt",
    ):
        Path(directory, name).write_text("{}")
    for name in ("README.md", "LICENSE", ".gitattributes"):
        Path(directory, name).write_text("x")
    weight_map = {}
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {f"model.layers.{i}.mlp.up_proj.weight": [32, 16]}
        Path(directory, fname).write_bytes(_safetensors_bytes(tensors))
        weight_map.update({k: fname for k in tensors})
    Path(directory, "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _write_parquet(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        Path(path).write_bytes(b"PAR1")
        return
    table = pa.table(
        {
            "data_source": ["openai/gsm8k"],
            "prompt": [[{"role": "user", "content": "1+1?"}]],
            "ability": ["math"],
            "reward_model": [{"style": "rule", "ground_truth": "2"}],
            "extra_info": [{"index": 0}],
        }
    )
    pq.write_table(table, path)


def build_tree(base: str, target_files: int = 200_000) -> dict[str, object]:
    """Create the synthetic host tree under ``base``; returns what a correct scan must find."""
    t0 = time.monotonic()
    mnt, mnt2 = os.path.join(base, "mnt"), os.path.join(base, "mnt2")
    public, project = os.path.join(mnt, "public"), os.path.join(mnt, "project")
    user = os.path.join(project, "h4380")
    expected_models: list[str] = []
    expected_parquet: list[str] = []

    for name in MODEL_NAMES:  # /mnt/public/models/<name>: depth 2 from /mnt/public
        d = os.path.join(public, "models", name)
        _write_model(d)
        expected_models.append(d)
    d = os.path.join(mnt2, "weights", "qwen", "Qwen2.5-3B")  # depth 3 from /mnt2
    _write_model(d)
    expected_models.append(d)
    # a Hugging Face cache: the snapshot dir is at depth 5 from /mnt/public -> beyond max_depth 4
    hf = os.path.join(public, "hf_cache", "hub", "models--Qwen--Qwen2.5-1.5B")
    _write_model(os.path.join(hf, "snapshots", "0123abcd"))
    _touch_many(os.path.join(hf, "blobs"), [f"{i:040x}" for i in range(40)])

    for ds in ("gsm8k", "math", "dapo-math-17k", "aime-2024", "deepscaler"):
        for split in ("train", "test"):
            p = os.path.join(public, "datasets", ds, f"{split}.parquet")
            _write_parquet(p)
            expected_parquet.append(p)
    for i in range(4):
        p = os.path.join(user, "data", "rl", f"shard-{i:03d}.parquet")
        _write_parquet(p)
        expected_parquet.append(p)

    count = 0

    def fill(directory: str, n: int, ext: str) -> None:
        nonlocal count
        _touch_many(directory, [f"f{i:05d}{ext}" for i in range(n)])
        count += n

    # verl checkout with a .git object store (pruned by the scan, walked by find)
    repo = os.path.join(user, "verl")
    for i in range(256):
        fill(os.path.join(repo, ".git", "objects", f"{i:02x}"), 30, "")
    for pkg in ("verl/trainer", "verl/workers", "verl/utils", "examples/grpo", "tests/unit", "docs/source"):
        fill(os.path.join(repo, pkg), 120, ".py")
    # conda env: site-packages is pruned
    sp = os.path.join(user, "envs", "verl", "lib", "python3.11", "site-packages")
    for i in range(400):
        fill(os.path.join(sp, f"pkg{i:03d}", "sub"), 50, ".py")
    fill(os.path.join(user, "envs", "verl", "bin"), 300, "")
    # a web UI's node_modules
    nm = os.path.join(user, "dashboard", "node_modules")
    for i in range(300):
        fill(os.path.join(nm, f"mod{i:03d}", "lib"), 60, ".js")
    # verl checkpoints: actor/huggingface holds config+tokenizer but no weights (an incomplete model)
    for step in (50, 100, 150):
        actor = os.path.join(user, "ckpts", "qwen-grpo", f"global_step_{step}", "actor")
        fill(actor, 8, ".pt")
        hfdir = os.path.join(actor, "huggingface")
        os.makedirs(hfdir, exist_ok=True)
        Path(hfdir, "config.json").write_text('{"num_hidden_layers": 2}')
        Path(hfdir, "tokenizer.json").write_text("{}")
    fill(os.path.join(user, "logs"), 2000, ".log")
    # image datasets: files below depth 5 (not reached with max_depth 4, walked by find)
    per_dir = 500
    images_needed = max(0, target_files - count - 30_000)
    n_dirs = max(1, -(-images_needed // per_dir))
    for i in range(n_dirs):
        fill(
            os.path.join(user, "data", "coco", "train2017", f"{i // 20:03d}", f"{i % 20:02d}"),
            per_dir,
            ".jpg",
        )
    # outputs on /mnt2
    for i in range(60):
        fill(os.path.join(mnt2, "outputs", f"run{i:02d}", "samples"), 500, ".npy")
    total = sum(len(files) for _, _, files in os.walk(base))
    return {
        "base": base,
        "roots": [public, mnt2, project, mnt],
        "find_qwen_roots": [public, mnt2, project],
        "find_parquet_roots": [mnt, mnt2],
        "expected_models": sorted(expected_models),
        "expected_parquet": sorted(expected_parquet),
        "files": total,
        "build_s": time.monotonic() - t0,
    }


def build_flat_tree(base: str, target_files: int = 200_000) -> dict[str, object]:
    """Worst case for the scan: every file within depth 4 and nothing to prune."""
    t0 = time.monotonic()
    mnt, mnt2 = os.path.join(base, "mnt"), os.path.join(base, "mnt2")
    public, project = os.path.join(mnt, "public"), os.path.join(mnt, "project")
    expected_models = [os.path.join(public, "models", "Qwen2.5-7B-Instruct")]
    _write_model(expected_models[0])
    expected_parquet = [os.path.join(project, "data", "gsm8k", "train.parquet")]
    _write_parquet(expected_parquet[0])
    per_dir, made, i = 250, 0, 0
    while made < target_files:
        top = (public, project, mnt2)[i % 3]
        _touch_many(
            os.path.join(top, f"d{i // 60:03d}", f"e{i % 60:02d}"), [f"f{k:04d}.txt" for k in range(per_dir)]
        )
        made += per_dir
        i += 1
    total = sum(len(files) for _, _, files in os.walk(base))
    return {
        "base": base,
        "roots": [public, mnt2, project, mnt],
        "find_qwen_roots": [public, mnt2, project],
        "find_parquet_roots": [mnt, mnt2],
        "expected_models": expected_models,
        "expected_parquet": expected_parquet,
        "files": total,
        "build_s": time.monotonic() - t0,
    }


def _time_shell(cmd: str) -> float:
    t = time.perf_counter()
    subprocess.run(["bash", "-c", cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def run_case(title: str, tree: dict[str, object], repeat: int, workers: int) -> float:
    from verlctl.detect.scan import ScanOptions, scan

    q = " ".join(f'"{r}"' for r in tree["find_qwen_roots"])  # type: ignore[attr-defined]
    p = " ".join(f'"{r}"' for r in tree["find_parquet_roots"])  # type: ignore[attr-defined]
    find1 = f'find {q} -maxdepth 4 -type d -name "Qwen*" 2>/dev/null'
    find2 = f'find {p} -name "*.parquet" 2>/dev/null | head -20'
    opts = ScanOptions(roots=tree["roots"], workers=workers)  # type: ignore[arg-type]

    scan(opts)  # warm the dentry cache for both sides
    _time_shell(find2)
    f1: list[float] = []
    f2: list[float] = []
    sc: list[float] = []
    result = None
    for _ in range(repeat):
        f1.append(_time_shell(find1))
        f2.append(_time_shell(find2))
        t = time.perf_counter()
        result = scan(opts)
        sc.append(time.perf_counter() - t)
    assert result is not None
    found_models = sorted(m.path for m in result.models if m.is_model)
    found_parquet = sorted(f.path for f in result.parquet_files)
    finds = min(f1) + min(f2)
    print(f"## {title}")
    print(
        f"tree: {tree['files']} files (built in {tree['build_s']:.1f} s); scan: {len(found_models)} models, "
        f"{len(found_parquet)} parquet, {result.dirs_listed} dirs listed, {result.entries_seen} entries, "
        f"workers={workers}, timed_out={result.timed_out}"
    )
    print(
        f"found what it should: models={found_models == tree['expected_models']} "
        f"parquet={found_parquet == tree['expected_parquet']}"
    )
    print()
    print(f"| {'what':<52} | {'best s':>7} | {'median s':>8} |")
    print(f"|{'-' * 54}|{'-' * 9}|{'-' * 10}|")
    rows = [
        ('find ROOTS -maxdepth 4 -type d -name "Qwen*"', f1),
        ('find ROOTS -name "*.parquet" | head -20', f2),
        ("verlctl scan (models + parquet + model inspection)", sc),
    ]
    for label, values in rows:
        values = sorted(values)
        print(f"| {label:<52} | {values[0]:>7.3f} | {values[len(values) // 2]:>8.3f} |")
    print(f"| {'both find commands':<52} | {finds:>7.3f} | {'':>8} |")
    ratio = min(sc) / finds
    print()
    print(f"ratio verlctl / (find + find), best of {repeat}: {ratio:.2f}x (target <= 0.50x)")
    print()
    return ratio


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--files", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--no-worst-case", action="store_true", help="skip the flat, nothing-to-prune tree")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from verlctl.detect.scan import DEFAULT_WORKERS

    workers = args.workers or DEFAULT_WORKERS
    cases = [("host-like tree (models, datasets, .git, conda env, node_modules, images)", build_tree)]
    if not args.no_worst_case:
        cases.append(("worst case: all files within depth 4, nothing to prune", build_flat_tree))
    for title, builder in cases:
        base = tempfile.mkdtemp(prefix="verlctl-bench-scan-")
        try:
            run_case(title, builder(base, args.files), args.repeat, workers)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
