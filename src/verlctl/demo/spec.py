"""The run spec ``verlctl demo`` writes next to the user: an ordinary spec, every CPU-only setting commented."""

from __future__ import annotations

import json
import socket
from pathlib import Path

#: The environment variables of the demo device layer (every verl process loads it through verl's plugin hook).
LAYER_ENV = {
    "VERL_USE_EXTERNAL_MODULES": "verlctl_demo_device",
    "VERL_PLATFORM": "cpu",
    "VERL_ENGINE_DEVICE": "cuda",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    # vLLM's CPU sampler and verl's helpers call torch.compile, whose CPU backend builds C++ with g++ and the
    # Python headers; eager mode needs neither (the demo's model is tiny: nothing to gain from compiling)
    "TORCHDYNAMO_DISABLE": "1",
}


def free_port(taken: set[int] | None = None) -> int:
    """A port nothing listens on, not in ``taken`` and not one Ray reserves by default (its worker-port range,
    client server and dashboard agent ports: ``ray start`` refuses a port two components share)."""
    from verlctl.detect.ray_ports import reserved_by_default

    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in (taken or ()) and not reserved_by_default(port):
            return port
    raise OSError("no free port outside Ray's reserved ports")


def q(value: object) -> str:
    """A YAML scalar: JSON's quoting is valid YAML and keeps any path literal."""
    return json.dumps(value)


def demo_spec(folder: Path, python_env: Path, algorithm: str, steps: int) -> str:
    """The text of ``demo/run.yaml`` for a run in ``folder`` (absolute) on the environment ``python_env``."""
    f = folder
    ports: dict[str, int] = {}
    for name in ("ray", "dashboard", "client", "agent", "agent_grpc", "metrics"):
        ports[name] = free_port(set(ports.values()))  # distinct: the kernel may hand out one port twice
    env_lines = "\n".join(f"  {k}: {q(v)}" for k, v in LAYER_ENV.items())
    return f"""\
# verlctl demo: real verl {'0.9.1'} on this machine's CPU, through verlctl's ordinary launch.
# An ordinary run spec: `verlctl launch -c {f / 'run.yaml'} --watch` runs it again (it resumes from the last
# checkpoint; raise train.steps first), `verlctl status`, `logs`, `stop`, `report`, `export-hf` act on its run.
# Lines marked CPU are there because the demo runs on a CPU; on an NPU/GPU host you would drop them.
# What a CPU run cannot show: NPU/CUDA kernels, whether the model fits in HBM, HCCL/NCCL collectives, speed.

verl_version: "0.9.1"     # the demo device layer is written against verl 0.9.1's platform registry
algorithm: {algorithm}           # dapo | grpo
mode: sync
strategy: fsdp2
device: cpu               # CPU: the demo device layer (verl's CUDA path on the CPU, gloo collectives)

cluster:
  devices: [0]            # CPU: one "device", the CPU
  ray_port: {ports['ray']}        # free ports picked by `verlctl demo`, so a Ray already on this host is left alone
  dashboard_port: {ports['dashboard']}
  ray_start_args:
    - --num-cpus=16       # CPU: Ray's logical CPUs for verl's actors (not the machine's cores)
    - --include-dashboard=false   # CPU: saves ~150 MiB; verlctl does not use Ray's dashboard
    - --ray-client-server-port={ports['client']}
    - --dashboard-agent-listen-port={ports['agent']}
    - --dashboard-agent-grpc-port={ports['agent_grpc']}
    - --metrics-export-port={ports['metrics']}

paths:
  model: {q(str(f / 'tiny' / 'model'))}   # a random 2-layer Qwen2 made by `verlctl demo` (nothing from a hub)
  train_files: [{q(str(f / 'tiny' / 'data' / 'train.parquet'))}]
  val_files: [{q(str(f / 'tiny' / 'data' / 'test.parquet'))}]
  checkpoints: {q(str(f / 'checkpoints'))}
  logs: {q(str(f / 'logs'))}

container:
  runtime: host           # CPU: no container; verl runs in the Python environment below
  python_env: {q(str(python_env))}
  workdir: {q(str(f))}

train:
  steps: {steps}
  train_batch_size: 4
  mini_batch_size: 4
  micro_batch_size_per_device: 2
  responses_per_prompt: 2
  max_prompt_length: 128
  max_response_length: 32
  save_freq: 1            # a checkpoint every step: a stopped demo resumes from it
  test_freq: -1
  tensor_parallel: 1
  pipeline_parallel: 1
  rollout_tensor_parallel: 1

features:
  disable: [flash_attn]   # CPU: no flash-attention kernels (attention runs as sdpa)

recovery:
  health:
    ignore: [overlong]    # the random tiny model rarely ends a response: most are cut at 32 tokens, by design

logging:
  project: verlctl-demo
  swanlab:
    enabled: false

env:                      # CPU: the demo device layer, loaded by verl's own plugin hook in every verl process
{env_lines}

extra_overrides:
  # a reward with variance for a random model (verl's gsm8k score is 0 everywhere, so every advantage would be 0)
  - reward.custom_reward_function.path={f / 'reward.py'}
  - reward.custom_reward_function.name=compute_score
  - +actor_rollout_ref.rollout.enable_sleep_mode=False                # CPU: no device memory to release
  - actor_rollout_ref.rollout.enforce_eager=True                     # CPU: no graph compile (minutes on a CPU)
  - actor_rollout_ref.rollout.free_cache_engine=False                 # CPU
  - actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=64   # CPU: small sync buffer
  - +actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=67108864    # CPU: 64 MiB KV cache
  - actor_rollout_ref.rollout.agent.num_workers=1                    # CPU: fewer processes, less memory
  - reward.num_workers=1                                             # CPU
  - transfer_queue.backend.SimpleStorage.num_data_storage_units=1    # CPU
  - data.dataloader_num_workers=1                                    # CPU
"""
