"""Benchmark: `verlctl check` on a full spec vs a bare Hydra compose of the same overrides.

A benchmark, not a test. Both run as fresh processes (what a user waits for), interleaved so that machine
noise hits both alike, and the ratio is taken against the baseline measured in the same run:

* baseline: ``python -c`` that composes the verl config of the spec's entry point with exactly the overrides
  ``verlctl`` generates (Hydra's compose API on the real verl config tree under ``.cache/verl/<version>``, as
  ``scripts/print_cfg.py`` would) and resolves it; the least a user runs to validate a command line.
* ``verlctl check -c spec.yaml``: the spec checks, the composed command, every machine probe (accelerator
  tool, network, system, Docker engine, model directory, parquet schemas, checkpoint directory), the memory
  fit and the field checks (weight bucket, /dev/shm, dataset rows, HCCL ports, prompt lengths with the
  model's tokenizer when ``tokenizers`` is installed).

* ``verlctl plan -c spec.yaml``: the one verdict on what plan collects (the spec and the model's
  config.json: the model-shape, max_model_len and memory rules), the composed command (issue 21).
* ``verlctl check -c examples/run.yaml``: the example spec (its paths are absent here), absolute time.

Target: <= 2x the baseline (median), for plan and check; examples/run.yaml's check <= 3 s on a quiet machine.

    .venv/bin/python bench/bench_check.py [--runs 7] [--version 0.9.1]   # VERLCTL_VERL_CACHE=<dir> as for the tests
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("VERLCTL_VERL_CACHE", ROOT / ".cache" / "verl"))  # as tests/verlcompose.py
sys.path.insert(0, str(ROOT / "tests"))

# Qwen/Qwen3-8B's config.json sizes (verl-project/verl tests/utils/test_flops_counter.py).
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
            "intermediate_size": 12288, "num_hidden_layers": 36, "head_dim": 128, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 151936, "tie_word_embeddings": False}

COMPOSE = r"""
import json, sys
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
cfg_dir, name, search, overrides = json.loads(sys.argv[1])
with initialize_config_dir(config_dir=cfg_dir, version_base=None):
    cfg = compose(config_name=name, overrides=[*overrides, search])
OmegaConf.to_container(cfg, resolve=True)
"""


def make_files(tmp: Path, version: str) -> Path:
    from launch_support import write_parquet

    model = tmp / "models" / "Qwen3-8B"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(QWEN3_8B))
    try:  # a real tokenizer, so that the prompt-length check runs
        from tokenizers import Tokenizer, models, pre_tokenizers

        tok = Tokenizer(models.WordLevel({"[UNK]": 0, "what": 1, "is": 2}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.save(str(model / "tokenizer.json"))
    except ImportError:
        (model / "tokenizer.json").write_text("{}")
    (model / "tokenizer_config.json").write_text("{}")
    header = b'{"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}'
    (model / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    (tmp / "data").mkdir()
    write_parquet(tmp / "data" / "train.parquet", rows=512)
    write_parquet(tmp / "data" / "val.parquet", rows=64)
    spec = tmp / "run.yaml"
    spec.write_text(json.dumps({
        "verl_version": version, "algorithm": "grpo", "strategy": "fsdp", "device": "npu",
        "paths": {"model": str(model), "train_files": str(tmp / "data" / "train.parquet"),
                  "val_files": str(tmp / "data" / "val.parquet"), "checkpoints": str(tmp / "ckpt")},
        "container": {"name": "verlctl-bench-check-absent"},
        "cluster": {"device_memory_gib": 64},
        "train": {"train_batch_size": 32, "rollout_tensor_parallel": 2},
    }))
    return spec


def compose_args(spec: Path, version: str) -> str:
    from verlctl.plan import make_plan
    from verlctl.spec.resolve import load_spec

    plan = make_plan(load_spec(spec, environ={}))
    entry = plan.command.entry
    cfg_dir = CACHE / version / entry.config_dir
    search = f"hydra.searchpath=[file://{CACHE / version / 'verl' / 'trainer' / 'config'}]"
    return json.dumps([str(cfg_dir), entry.config_name, search, plan.command.override_texts()])


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if proc.returncode not in (0, 2):  # check exits 2 when it finds errors (no NPU here): still a full run
        raise SystemExit(f"{cmd[:4]} failed ({proc.returncode}): {proc.stderr.decode()[-800:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--version", default="0.9.1", choices=["0.7.0", "0.9.1"])
    args = ap.parse_args()
    py = sys.executable
    if not (CACHE / args.version / "verl" / "trainer" / "config").is_dir():
        raise SystemExit(f"verl {args.version} config tree missing under {CACHE} (.ci/run installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        spec = make_files(Path(tmp), args.version)
        cmds = {
            "hydra compose of the same overrides (baseline)": [py, "-c", COMPOSE, compose_args(spec, args.version)],
            "verlctl check (full spec)": [py, "-m", "verlctl", "check", "-c", str(spec)],
            "verlctl check --json": [py, "-m", "verlctl", "check", "-c", str(spec), "--json"],
            "verlctl plan (full spec)": [py, "-m", "verlctl", "plan", "-c", str(spec)],
            "verlctl plan --json": [py, "-m", "verlctl", "plan", "-c", str(spec), "--json"],
            "verlctl check examples/run.yaml": [py, "-m", "verlctl", "check", "-c", str(ROOT / "examples" / "run.yaml")],
        }
        for cmd in cmds.values():  # warm the page cache and .pyc files
            timed(cmd)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.runs):
            for name, cmd in cmds.items():
                times[name].append(timed(cmd))
    base = "hydra compose of the same overrides (baseline)"
    base_med, base_min = statistics.median(times[base]), min(times[base])
    print(f"{'command':48} {'median ms':>10} {'best ms':>9} {'x baseline (median)':>20} {'x baseline (best)':>18}")
    for name, ts in times.items():
        med, best = statistics.median(ts), min(ts)
        print(f"{name:48} {med * 1000:10.1f} {best * 1000:9.1f} {med / base_med:20.2f} {best / base_min:18.2f}")


if __name__ == "__main__":
    main()
