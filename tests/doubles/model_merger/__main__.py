"""TEST DOUBLE: a stand-in for verl's ``python -m verl.model_merger`` (no torch here to merge real weights).

It parses its arguments with verl's REAL ``parse_args`` (the function's source is read from the installed
verl wheel's ``verl/model_merger/base_model_merger.py`` and run as is), so a flag verl does not know fails
here as it would with verl. Then it does what the real FSDP/Megatron mergers check before they write:
``fsdp_config.json`` with the world size (``FSDPModelMerger._get_world_size``) and every rank's shard, or a
Megatron checkpoint directory; and writes ``config.json`` (from the checkpoint's ``huggingface`` dir) and a
weights file into ``--target_dir``. ``STANDIN_ARGV <json>`` on stdout is the argv it was given.
A file ``STANDIN_SLEEP`` in ``--local_dir`` (its content: seconds) makes it sleep first (timeout tests).
"""

import argparse
import ast
import importlib.metadata
import json
import os
import sys
import time


def real_parse_args():
    path = importlib.metadata.distribution("verl").locate_file("verl/model_merger/base_model_merger.py")
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parse_args")
    scope = {"argparse": argparse}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), scope)
    return scope["parse_args"]()


def main():
    print("STANDIN_ARGV " + json.dumps(sys.argv[1:]), flush=True)
    args = real_parse_args()
    local = args.local_dir
    sleep = os.path.join(local, "STANDIN_SLEEP")
    if os.path.exists(sleep):
        with open(sleep) as fh:
            time.sleep(float(fh.read().strip() or "3600"))
    if args.backend == "fsdp":
        config_path = os.path.join(local, "fsdp_config.json")
        if not os.path.exists(config_path):
            raise FileNotFoundError(f"{config_path} does not exist.")
        with open(config_path) as fh:
            world_size = json.load(fh)["world_size"]
        for rank in range(world_size):
            shard = os.path.join(local, f"model_world_size_{world_size}_rank_{rank}.pt")
            if not os.path.exists(shard):
                raise FileNotFoundError(shard)
            print(f"loading shard {rank + 1}/{world_size}", flush=True)
        hf = os.path.join(local, "huggingface")
    else:
        hf = os.path.join(local, "huggingface")
        if not os.path.isdir(hf):
            hf = os.path.join(local, "model", "huggingface")
        print(f"megatron merge (tie_word_embedding={args.tie_word_embedding})", flush=True)
    os.makedirs(args.target_dir, exist_ok=True)
    with open(os.path.join(hf, "config.json"), encoding="utf-8") as fh:
        config = fh.read()
    with open(os.path.join(args.target_dir, "config.json"), "w", encoding="utf-8") as fh:
        fh.write(config)
    with open(os.path.join(args.target_dir, "model.safetensors"), "wb") as fh:
        fh.write(b"stand-in weights")
    print(f"Saving model to {args.target_dir}", flush=True)


if __name__ == "__main__":
    main()
