"""Memory fit: the calibration table (documented working configurations must fit, reported OOMs must not),
the advice, the OOM ladder's use of the estimate, and plan/check output.

Model shapes are the models' Hugging Face ``config.json`` values (huggingface.co/Qwen/<name>/blob/main/
config.json); Qwen2.5-7B and Qwen3-8B are also in verl's own tests (verl-project/verl@7de1304f
tests/utils/test_flops_counter.py). Each is written as a real config.json in a temp model directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from verlctl.checks.findings import Severity
from verlctl.checks.memory import GIB, ModelShape, estimate, layout_for, rung_can_help
from verlctl.monitor.recovery import History, decide
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS, FIXTURES, ROOT, run_cli

QWEN = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "tie_word_embeddings": False}
CONFIGS: dict[str, dict[str, Any]] = {
    # Qwen/Qwen2-7B-Instruct (same shape as Qwen2.5-7B-Instruct in verl's test_flops_counter.py)
    "Qwen2-7B-Instruct": {**QWEN, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                          "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064},
    # Qwen/Qwen2.5-Coder-14B-Instruct
    "Qwen2.5-Coder-14B-Instruct": {**QWEN, "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 48,
                                   "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064},
    # Qwen/Qwen2.5-32B
    "Qwen2.5-32B": {**QWEN, "hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 64,
                    "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064},
    # Qwen/Qwen2-72B-Instruct
    "Qwen2-72B-Instruct": {**QWEN, "hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
                           "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 152064},
    # Qwen/Qwen3-8B (verl's test_flops_counter.py)
    "Qwen3-8B": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "tie_word_embeddings": False,
                 "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "head_dim": 128,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 151936},
    # Qwen/Qwen3-14B
    "Qwen3-14B": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "tie_word_embeddings": False,
                  "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 40, "head_dim": 128,
                  "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 151936},
    # Qwen/Qwen3-4B (tied embeddings)
    "Qwen3-4B": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "tie_word_embeddings": True,
                 "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "head_dim": 128,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 151936},
    # Qwen/Qwen2.5-Math-7B(-Instruct): the Qwen2.5-7B shape
    "Qwen2.5-Math-7B": {**QWEN, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064},
    # Qwen/Qwen3-30B-A3B (verl-project/verl@7de1304f tests/utils/test_flops_counter.py, the Base model's shape)
    "Qwen3-30B-A3B": {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "tie_word_embeddings": False,
                      "hidden_size": 2048, "vocab_size": 151936, "num_hidden_layers": 48, "num_key_value_heads": 4,
                      "num_attention_heads": 32, "head_dim": 128, "moe_intermediate_size": 768,
                      "num_experts_per_tok": 8, "num_experts": 128, "intermediate_size": 6144},
    # meta-llama/Llama-3.1-8B-Instruct
    "Llama-3.1-8B-Instruct": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "tie_word_embeddings": False,
                              "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256},
}
#: nvidia-smi's memory.total: H800/H100 81559 MiB, H20 97871 MiB.
H800_GIB = 81559 / 1024
H20_GIB = 97871 / 1024

_TUNING = "verl-project/verl@2239fd0 examples/tuning/"  # linked from docs/perf/device_tuning.rst (MIN rows)
_FSDP_GRPO = {
    "algorithm": "grpo", "strategy": "fsdp", "device": "gpu", "train.lr": 1e-6,
    "features.enable": ["offload"], "features.disable": ["dynamic_batch"],
}


@dataclass
class Row:
    name: str
    source: str
    model: str
    flags: dict[str, Any]
    fits: bool  # what really happened: it ran (True) or it ran out of memory (False)
    failing: set[str] = field(default_factory=set)  # for rows that must not fit: the phases (or "kv") that fail
    # "rollout": a report about the rollout engine alone (vLLM / vllm-ascend serving): only the rollout phase and
    # its KV cache are compared (the trainer side of the one-step-off layout these rows use is not part of it)
    scope: str = "all"
    fixture: tuple[Path, ...] = ()  # the stored source texts the row's facts are read from
    facts: tuple[str, ...] = ()  # exact strings of those texts: every value the flags take from them
    ratio: float | None = None  # the estimate's peak need / device memory in scope, to 0.01 (the band of docs/memory-fit.md)
    measured_gib: float | None = None  # a peak the source measured (per device), for the band
    url: str = ""  # where the source is published


ROOT_FIXTURES = FIXTURES
MEM = ROOT_FIXTURES / "memory"
ERRORS_FIELD = ROOT_FIXTURES / "errors-field"
OFFICIAL_070 = ROOT_FIXTURES / "official-scripts" / "0.7.0"
#: Atlas 800T A3: 65536 MB of HBM per device (a real npu-smi capture of an A3 node).
A3_NPU_SMI = ROOT_FIXTURES / "npu-smi" / "info-a3-Ascend910-25.2.1-partial-ucm-issue748.txt"
A3_GIB = 65536 / 1024
AR = "actor_rollout_ref"

CALIBRATION: list[Row] = [
    Row("Qwen2-7B GRPO, 2 x H800, FSDP (device_tuning MIN)", _TUNING + "7b/qwen2-7b_grpo_2_h800_fsdp_vllm.sh",
        "Qwen2-7B-Instruct",
        {**_FSDP_GRPO, "cluster.devices": [0, 1], "cluster.device_memory_gib": H800_GIB,
         "train.train_batch_size": 1024, "train.mini_batch_size": 256, "train.micro_batch_size_per_device": 16,
         "train.max_prompt_length": 1024, "train.max_response_length": 1024, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 2, "train.rollout_memory_utilization": 0.6}, True, ratio=0.8),
    Row("Qwen2.5-14B GRPO, 4 x H800, FSDP (device_tuning MIN)", _TUNING + "14b/qwen2_14b_grpo_4_h800_fsdp_vllm.sh",
        "Qwen2.5-Coder-14B-Instruct",
        {**_FSDP_GRPO, "cluster.devices": [0, 1, 2, 3], "cluster.device_memory_gib": H800_GIB,
         "train.train_batch_size": 1024, "train.mini_batch_size": 256, "train.micro_batch_size_per_device": 16,
         "train.max_prompt_length": 1024, "train.max_response_length": 1024, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 4, "train.rollout_memory_utilization": 0.5}, True, ratio=0.91),
    Row("Qwen2.5-32B GRPO, 8 x H20, Megatron TP8 (device_tuning MIN)",
        _TUNING + "32b/qwen2_32B_grpo_8_h20_megatron_vllm.sh", "Qwen2.5-32B",
        {"algorithm": "grpo", "strategy": "megatron", "device": "gpu", "features.enable": ["offload"],
         "features.disable": ["dynamic_batch"], "cluster.devices": list(range(8)),
         "cluster.device_memory_gib": H20_GIB, "train.tensor_parallel": 8, "train.pipeline_parallel": 1,
         "train.train_batch_size": 512, "train.mini_batch_size": 256, "train.micro_batch_size_per_device": 1,
         "train.max_prompt_length": 2048, "train.max_response_length": 6144, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 8, "train.rollout_memory_utilization": 0.6}, True, ratio=0.74),
    Row("Qwen2-72B GRPO, 32 x H20, FSDP (device_tuning MIN)", _TUNING + "70b/qwen2-70b_grpo_32_h20_fsdp_vllm.sh",
        "Qwen2-72B-Instruct",
        {**_FSDP_GRPO, "features.disable": [], "cluster.nodes": ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"],
         "cluster.devices": list(range(8)), "cluster.device_memory_gib": H20_GIB,
         "train.train_batch_size": 1024, "train.mini_batch_size": 256,
         "train.max_prompt_length": 512, "train.max_response_length": 512, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 16, "train.rollout_memory_utilization": 0.6,
         "extra_overrides": ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24000"]}, True, ratio=0.81),
    Row("Qwen3-14B rollout on a 32 GB vNPU at utilization 0.9: 'Available KV cache memory: -0.87 GiB'",
        "vllm-project/vllm-ascend#9372 (weights 27.54 GB, max-model-len 4096, TP 1)", "Qwen3-14B",
        {"algorithm": "dapo", "mode": "one_step_off_policy", "strategy": "fsdp", "device": "npu",
         "cluster.devices": [0, 1], "train.trainer_devices": 1, "train.rollout_devices": 1,
         "cluster.device_memory_gib": 32.0, "train.rollout_tensor_parallel": 1,
         "train.rollout_memory_utilization": 0.9, "train.max_prompt_length": 1024,
         "train.max_response_length": 3072}, False, {"kv"}, scope="rollout",
        url="https://github.com/vllm-project/vllm-ascend/issues/9372",
        fixture=(ERRORS_FIELD / "vllm-ascend-negative-kv-cache-memory-issue9372.txt",),
        facts=("Loading model weights took 27.5376 GB", "Available KV cache memory: -0.87 GiB"), ratio=0.96),
    Row("counterfactual: the 7B MIN row without offload (rollout beside resident fp32 params + Adam state)",
        "verl-project/verl#284: colocated rollout fits only with actor param/optimizer offload at these budgets",
        "Qwen2-7B-Instruct",
        {**_FSDP_GRPO, "features.enable": [], "cluster.devices": [0, 1], "cluster.device_memory_gib": H800_GIB,
         "train.train_batch_size": 1024, "train.mini_batch_size": 256, "train.micro_batch_size_per_device": 16,
         "train.max_prompt_length": 1024, "train.max_response_length": 1024, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 2, "train.rollout_memory_utilization": 0.6}, False, {"rollout"}, ratio=1.24),
    # --- working configurations with their hardware named (added with the "calibrate honestly" item) ---
    # verl's device_tuning MIN row "Qwen2-70B GRPO 32*H800": the 32 x H20 row above on 80 GB GPUs.
    Row("Qwen2-72B GRPO, 32 x H800, FSDP (device_tuning MIN)", _TUNING + "70b/qwen2-70b_grpo_32_h800_fsdp_vllm.sh",
        "Qwen2-72B-Instruct",
        {**_FSDP_GRPO, "features.disable": [], "cluster.nodes": ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"],
         "cluster.devices": list(range(8)), "cluster.device_memory_gib": H800_GIB,
         "train.train_batch_size": 1024, "train.mini_batch_size": 256,
         "train.max_prompt_length": 512, "train.max_response_length": 512, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 16, "train.rollout_memory_utilization": 0.6,
         "extra_overrides": [f"{AR}.actor.ppo_max_token_len_per_gpu=24000"]}, True,
        url="https://github.com/verl-project/verl/blob/2239fd0ff7210c80ad63e20581924d1f66167429/examples/tuning/70b/qwen2-70b_grpo_32_h800_fsdp_vllm.sh",
        fixture=(MEM / "qwen2-70b_grpo_32_h800_fsdp_vllm.sh",),
        facts=("model_path=Qwen/Qwen2-72B-Instruct", "data.train_batch_size=1024", "data.max_prompt_length=512",
               "data.max_response_length=512", "ppo_mini_batch_size=256", "use_dynamic_bsz=True",
               "ppo_max_token_len_per_gpu=24000", "use_kl_loss=True", "enable_gradient_checkpointing=True",
               "fsdp_config.param_offload=True", "fsdp_config.optimizer_offload=True",
               "tensor_model_parallel_size=16", "gpu_memory_utilization=0.6", "rollout.n=5",
               "trainer.n_gpus_per_node=8", "trainer.nnodes=4"), ratio=0.97),
    # verl 0.7.0's one-step-off Qwen3-8B script, "validated on the Ascend Atlas 800T A3" (64 GiB per device):
    # 8 trainer + 8 rollout NPUs, 2k + 32k tokens, Ulysses SP 8, rollout TP 4 at 0.8.
    Row("Qwen3-8B GRPO one-step-off 8+8 x A3 (64 GB), FSDP2, Ulysses 8, 2k+32k",
        "verl 0.7.0 recipe/one_step_off_policy/shell/grpo_qwen3_8b_gsm8k_fsdp2_8_8_npu.sh", "Qwen3-8B",
        {"algorithm": "grpo", "mode": "one_step_off_policy", "strategy": "fsdp", "device": "npu",
         "cluster.devices": list(range(16)), "train.trainer_devices": 8, "train.rollout_devices": 8,
         "cluster.device_memory_gib": A3_GIB, "features.enable": ["offload", "gradient_checkpointing"],
         "train.train_batch_size": 32, "train.mini_batch_size": 32, "train.micro_batch_size_per_device": 1,
         "train.max_prompt_length": 2048, "train.max_response_length": 32768, "train.responses_per_prompt": 8,
         "train.rollout_tensor_parallel": 4, "train.rollout_memory_utilization": 0.8,
         "extra_overrides": [f"{AR}.actor.use_kl_loss=False", f"{AR}.actor.ppo_max_token_len_per_gpu=4352",
                             f"{AR}.actor.ulysses_sequence_parallel_size=8",
                             f"{AR}.rollout.max_num_batched_tokens=34816"]}, True,
        url="https://github.com/volcengine/verl/blob/v0.7.0/recipe/one_step_off_policy/shell/grpo_qwen3_8b_gsm8k_fsdp2_8_8_npu.sh",
        fixture=(OFFICIAL_070 / "recipe/one_step_off_policy/shell/grpo_qwen3_8b_gsm8k_fsdp2_8_8_npu.sh", A3_NPU_SMI),
        facts=("validated on the Ascend Atlas 800T A3", "/ 65536", "NGPUS_PER_NODE=${NGPUS_PER_NODE:-16}",
               "n_gpus_rollout=8", "max_prompt_length=$((1024 * 2))", "max_response_length=$((1024 * 32))",
               "sp_size=8", "actor_ppo_max_token_len=$(((max_prompt_length + max_response_length) / sp_size))",
               "data.train_batch_size=32", "ppo_mini_batch_size=32", "use_kl_loss=False",
               "fsdp_config.param_offload=True", "fsdp_config.optimizer_offload=True",
               "tensor_model_parallel_size=4", "gpu_memory_utilization=0.8",
               "max_num_batched_tokens=$((max_prompt_length + max_response_length))", "rollout.n=8"), ratio=0.83),
    # verl 0.7.0's Qwen3-4B GRPO script for an A3 node (16 NPUs of 64 GiB), rollout utilization 0.9.
    Row("Qwen3-4B GRPO, 16 x A3 (64 GB), FSDP, rollout utilization 0.9",
        "verl 0.7.0 examples/grpo_trainer/run_qwen3_4b_grpo_vllm_1k_npu.sh", "Qwen3-4B",
        {"algorithm": "grpo", "strategy": "fsdp", "device": "npu", "cluster.devices": list(range(16)),
         "cluster.device_memory_gib": A3_GIB, "features.enable": ["offload", "gradient_checkpointing"],
         "train.train_batch_size": 512, "train.mini_batch_size": 256,
         "train.max_prompt_length": 1024, "train.max_response_length": 1024, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 2, "train.rollout_memory_utilization": 0.9,
         "extra_overrides": [f"{AR}.actor.ppo_max_token_len_per_gpu=3000",
                             f"{AR}.rollout.enable_chunked_prefill=False"]}, True,
        url="https://github.com/volcengine/verl/blob/v0.7.0/examples/grpo_trainer/run_qwen3_4b_grpo_vllm_1k_npu.sh",
        fixture=(OFFICIAL_070 / "examples/grpo_trainer/run_qwen3_4b_grpo_vllm_1k_npu.sh", A3_NPU_SMI),
        facts=("# A3 机器单机8卡", "/ 65536", "trainer_n_gpus_per_node=16", "data.train_batch_size=512",
               "data.max_prompt_length=1024", "data.max_response_length=1024", "ppo_mini_batch_size=256",
               "use_kl_loss=True", "ppo_max_token_len_per_gpu=3000", "fsdp_config.param_offload=True",
               "fsdp_config.optimizer_offload=True", "enable_chunked_prefill=False",
               "tensor_model_parallel_size=2", "gpu_memory_utilization=0.9", "rollout.n=5",
               "ref.fsdp_config.param_offload=True"), ratio=0.93),
    # verl's GB200 script ("Tested on GB200 NVL4 (1 node, 4x B200 192GB)"), no offload, SGLang rollout. 192 GB
    # is taken as 10^9 bytes (178.8 GiB), the smaller reading. The script keeps the actor in bf16
    # (fsdp_config.model_dtype=bfloat16); the estimate's fp32 actor overstates its params and grads.
    Row("Qwen3-8B GRPO, 4 x B200 192 GB (GB200 NVL4), FSDP, no offload, SGLang",
        "verl-project/verl@81c5b3ae examples/grpo_trainer/run_qwen3-8b_gb200.sh", "Qwen3-8B",
        {"algorithm": "grpo", "strategy": "fsdp", "device": "gpu", "train.rollout_engine": "sglang",
         "features.enable": ["gradient_checkpointing"], "features.disable": ["dynamic_batch", "offload"],
         "cluster.devices": [0, 1, 2, 3], "cluster.device_memory_gib": 192e9 / GIB,
         "train.train_batch_size": 1024, "train.mini_batch_size": 256, "train.micro_batch_size_per_device": 32,
         "train.max_prompt_length": 512, "train.max_response_length": 1024, "train.responses_per_prompt": 5,
         "train.rollout_tensor_parallel": 4, "train.rollout_memory_utilization": 0.7}, True,
        url="https://github.com/verl-project/verl/blob/81c5b3ae4733f1e798328c7d4327731b6191c5aa/examples/grpo_trainer/run_qwen3-8b_gb200.sh",
        fixture=(MEM / "run_qwen3-8b_gb200.sh",),
        facts=("4x B200 192GB", "NGPUS_PER_NODES=${NGPUS_PER_NODES:-4}", "data.train_batch_size=1024",
               "data.max_prompt_length=512", "data.max_response_length=1024", "model.path=Qwen/Qwen3-8B",
               "ppo_mini_batch_size=256", "ppo_micro_batch_size_per_gpu=32", "use_kl_loss=True",
               "enable_gradient_checkpointing=True", "fsdp_config.param_offload=False",
               "fsdp_config.optimizer_offload=False", "rollout.name=sglang", "gpu_memory_utilization=0.7",
               "rollout.n=5", "ref.fsdp_config.param_offload=True"), ratio=0.86),
    # A verl maintainer's Megatron practice: DAPO Qwen2.5-Math-7B, TP2 on one node of 8 x H100 80 GB, with offload;
    # its result table records the run (389 s per step). It also uses fused kernels (no logits tensor), which the
    # estimate does not model.
    Row("Qwen2.5-Math-7B DAPO, 8 x H100, Megatron TP2, offload, 2k+8k, dynamic 10k",
        "ISEEKYAN/verl_megatron_practice@af44cf8 DAPO_7B/16.mcore_1node_tp2.sh + dapo7b.csv row 16",
        "Qwen2.5-Math-7B",
        {"algorithm": "dapo", "strategy": "megatron", "device": "gpu", "features.enable": ["offload"],
         "cluster.devices": list(range(8)), "cluster.device_memory_gib": H800_GIB,
         "train.tensor_parallel": 2, "train.pipeline_parallel": 1,
         "train.train_batch_size": 512, "train.mini_batch_size": 32, "train.max_prompt_length": 2048,
         "train.max_response_length": 8192, "train.responses_per_prompt": 16,
         "train.rollout_tensor_parallel": 1, "train.rollout_memory_utilization": 0.6,
         "extra_overrides": [f"{AR}.actor.ppo_max_token_len_per_gpu=10240",
                             f"{AR}.rollout.max_num_batched_tokens=10240"]}, True,
        url="https://github.com/ISEEKYAN/verl_megatron_practice/blob/af44cf815ae703dd325c1bccdfdb00924628bb29/DAPO_7B/16.mcore_1node_tp2.sh",
        fixture=(MEM / "iseekyan-dapo7b-mcore-1node-tp2-excerpt.txt",),
        facts=("max_prompt_length=$((1024 * 2))", "max_response_length=$((1024 * 8))", "train_prompt_bsz=512",
               "n_resp_per_prompt=16", "train_prompt_mini_bsz=32", "Qwen2.5-Math-7B", "offload=True",
               "gen_tp=1", "train_tp=2", "train_pp=1", "gpu_memory_utilization=0.6", "trainer.n_gpus_per_node=8",
               "16,megatron+vllm,qwen2.5 7b math,H100,8,tp2,tp1,389"), ratio=0.63),
    # verl's SAPO x Megatron x NPU report: Qwen3-30B-A3B on 16 x 910B3 (60.96 GiB), TP4 EP8 ETP1, param/grad
    # offload with the optimizer in host RAM (HybridDeviceOptimizer), full recompute: ran 100 steps with a constant
    # max_memory_allocated of 29.22 GiB. The estimate models the optimizer as loaded for the step (verl's offload),
    # so it overstates this run's peak.
    Row("Qwen3-30B-A3B SAPO, 16 x 910B3 (60.96 GiB), Megatron TP4 EP8 ETP1, offload, full recompute",
        "verl-project/verl@a60c1ca docs/ascend_tutorial/model_support/examples/sapo_megatron_npu.md (task 716535)",
        "Qwen3-30B-A3B",
        {"algorithm": "grpo", "strategy": "megatron", "device": "npu",
         "features.enable": ["offload", "recompute"], "features.recompute_method": "uniform",
         "cluster.nodes": ["10.0.0.1", "10.0.0.2"], "cluster.devices": list(range(8)),
         "cluster.device_memory_gib": 60.96, "train.tensor_parallel": 4, "train.pipeline_parallel": 1,
         "train.train_batch_size": 96, "train.mini_batch_size": 32, "train.max_prompt_length": 2048,
         "train.max_response_length": 4096, "train.responses_per_prompt": 8,
         "train.rollout_tensor_parallel": 4, "train.rollout_memory_utilization": 0.6,
         "extra_overrides": [f"{AR}.actor.use_kl_loss=False", f"{AR}.actor.ppo_max_token_len_per_gpu=8192",
                             f"{AR}.actor.megatron.expert_model_parallel_size=8",
                             f"{AR}.actor.megatron.expert_tensor_parallel_size=1"]}, True,
        url="https://github.com/verl-project/verl/blob/a60c1cac21e8b084e739fdc21d436f48506eafe2/docs/ascend_tutorial/model_support/examples/sapo_megatron_npu.md",
        fixture=(MEM / "sapo-megatron-npu-doc-excerpt.md",),
        facts=("Qwen3-30B-A3B", "**910B3 × 16**（每节点 8 卡），每卡 HBM **60.96 GiB**", "4 / 1 / 1 / **8 / 1**",
               "| GEN_TP | 4 | 4 |", "| TRAIN_BATCH_SIZE | 96 | 96 |", "| PPO_MINI_BATCH_SIZE | 32 | 32 |",
               "| MAX_PROMPT_LENGTH | 2048 | 2048 |", "| MAX_RESPONSE_LENGTH | 4096 | 4096 |",
               "| PPO_MAX_TOKEN_LEN_PER_GPU | 8192 | 8192 |", "| actor.use_dynamic_bsz | False | **True** |",
               "use_kl_loss / entropy_coeff | False / 0 | False / 0", "optimizer_cpu_offload + fraction | True + 1",
               "param/grad True", "| RECOMPUTE | full | full |", "| 8 / 0.8 | 8 / **0.6** |",
               "`max_memory_allocated_gb` 跨全程恒定 **29.22 GiB**"), ratio=0.77, measured_gib=29.22),
    # vllm-ascend#89: Qwen2.5-Math-7B-Instruct served on one 64 GB NPU (the report's own "0.2 -> 12.8GB" is
    # 0.2 x 64), max_tokens 1K, at utilization 0.9 it ran using 63.3 GB of the device. max_model_len is the
    # model's own 4096 (vLLM's default); vLLM then had no chunked prefill below 32k, so it profiles 4096 tokens.
    Row("Qwen2.5-Math-7B served on one 64 GB NPU at utilization 0.9 (63.3 GB used)",
        "vllm-project/vllm-ascend#89 (table: 0.9 | 14GB | 57.6GB | 63.3GB)", "Qwen2.5-Math-7B",
        {"algorithm": "dapo", "mode": "one_step_off_policy", "strategy": "fsdp", "device": "npu",
         "cluster.devices": [0, 1], "train.trainer_devices": 1, "train.rollout_devices": 1,
         "cluster.device_memory_gib": 64.0, "train.rollout_tensor_parallel": 1,
         "train.rollout_memory_utilization": 0.9, "train.max_prompt_length": 3072, "train.max_response_length": 1024,
         "extra_overrides": [f"{AR}.rollout.enable_chunked_prefill=False"]}, True, scope="rollout",
        url="https://github.com/vllm-project/vllm-ascend/issues/89",
        fixture=(MEM / "vllm-ascend-issue89-utilization-table.txt",),
        facts=("Qwen2.5-Math-7B-Instruct on one card (TP=PP=1)", "| 0.2 | 14GB | 12.8GB | OOM |",
               "| 0.9 | 14GB | 57.6GB | 63.3GB |", "max_tokens = 1K"), ratio=0.93),
    # vllm-project/vllm#10517: Llama-3.1-8B-Instruct on an RTX 3090 (23.58 GiB) at 0.9 with max_model_len 20000 ran
    # (no chunked prefill below 32k in that vLLM: the profile pass takes max_model_len tokens).
    Row("Llama-3.1-8B served on an RTX 3090 at 0.9, max_model_len 20000 (runs)",
        "vllm-project/vllm#10517 ('20k - OK', kv_cache_size=3.81GiB)", "Llama-3.1-8B-Instruct",
        {"algorithm": "dapo", "mode": "one_step_off_policy", "strategy": "fsdp", "device": "gpu",
         "cluster.devices": [0, 1], "train.trainer_devices": 1, "train.rollout_devices": 1,
         "cluster.device_memory_gib": 23.58, "train.rollout_tensor_parallel": 1,
         "train.rollout_memory_utilization": 0.9, "train.max_prompt_length": 1000, "train.max_response_length": 19000,
         "extra_overrides": [f"{AR}.rollout.enable_chunked_prefill=False"]}, True, scope="rollout",
        url="https://github.com/vllm-project/vllm/issues/10517",
        fixture=(MEM / "vllm-issue10517-profiling.txt",),
        facts=("RTX 3090", "meta-llama/Llama-3.1-8B-Instruct", "20k - OK", "total_gpu_memory=23.58GiB",
               "gpu_memory_utilization=0.90"), ratio=0.94),
    # --- reported OOMs ---
    Row("Llama-3.1-8B served on an RTX 3090 at 0.9, max_model_len 29000: KV cache holds 23648 tokens",
        "vllm-project/vllm#10517 ('29k - BAD': max seq len (29000) larger than the KV cache (23648))",
        "Llama-3.1-8B-Instruct",
        {"algorithm": "dapo", "mode": "one_step_off_policy", "strategy": "fsdp", "device": "gpu",
         "cluster.devices": [0, 1], "train.trainer_devices": 1, "train.rollout_devices": 1,
         "cluster.device_memory_gib": 23.58, "train.rollout_tensor_parallel": 1,
         "train.rollout_memory_utilization": 0.9, "train.max_prompt_length": 1000, "train.max_response_length": 28000,
         "extra_overrides": [f"{AR}.rollout.enable_chunked_prefill=False"]}, False, {"kv"}, scope="rollout",
        url="https://github.com/vllm-project/vllm/issues/10517",
        fixture=(MEM / "vllm-issue10517-profiling.txt",),
        facts=("29k - BAD", "The model's max seq len (29000) is larger than the maximum number of tokens that can "
               "be stored in KV cache (23648)", "gpu_memory_utilization=0.90"), ratio=0.94),
    Row("Qwen2.5-Math-7B served on one 64 GB NPU at utilization 0.2: OOM (weights 14 GB > 12.8 GB budget)",
        "vllm-project/vllm-ascend#89 (table: 0.2 | 14GB | 12.8GB | OOM)", "Qwen2.5-Math-7B",
        {"algorithm": "dapo", "mode": "one_step_off_policy", "strategy": "fsdp", "device": "npu",
         "cluster.devices": [0, 1], "train.trainer_devices": 1, "train.rollout_devices": 1,
         "cluster.device_memory_gib": 64.0, "train.rollout_tensor_parallel": 1,
         "train.rollout_memory_utilization": 0.2, "train.max_prompt_length": 3072, "train.max_response_length": 1024,
         "extra_overrides": [f"{AR}.rollout.enable_chunked_prefill=False"]}, False, {"kv"}, scope="rollout",
        url="https://github.com/vllm-project/vllm-ascend/issues/89",
        fixture=(MEM / "vllm-ascend-issue89-utilization-table.txt",),
        facts=("| 0.2 | 14GB | 12.8GB | OOM |",), ratio=0.23),
    Row("Qwen2.5-Math-7B served on one 64 GB NPU at utilization 0.95: OOM",
        "vllm-project/vllm-ascend#89 (table: 0.95 | 14GB | 60.8GB | OOM)", "Qwen2.5-Math-7B",
        {"algorithm": "dapo", "mode": "one_step_off_policy", "strategy": "fsdp", "device": "npu",
         "cluster.devices": [0, 1], "train.trainer_devices": 1, "train.rollout_devices": 1,
         "cluster.device_memory_gib": 64.0, "train.rollout_tensor_parallel": 1,
         "train.rollout_memory_utilization": 0.95, "train.max_prompt_length": 3072, "train.max_response_length": 1024,
         "extra_overrides": [f"{AR}.rollout.enable_chunked_prefill=False"]}, False, {"rollout"}, scope="rollout",
        url="https://github.com/vllm-project/vllm-ascend/issues/89",
        fixture=(MEM / "vllm-ascend-issue89-utilization-table.txt",),
        facts=("| 0.95 | 14GB | 60.8GB | OOM |", "| 0.4 | 14GB | 25.6GB | 36.2GB |"), ratio=0.98),
    # The SAPO report's probe 707032: the same run with all three offloads off (Adam state on the device) ran out of
    # memory in step 1. Its rollout utilization is not stated; at the accepted run's 0.6 (taken here) the colocated
    # rollout already needs 1.35 x HBM, and 682143's 0.8 needs more.
    Row("Qwen3-30B-A3B SAPO, 16 x 910B3, Megatron TP4 EP8 ETP1, all offloads off: step-1 OOM",
        "verl-project/verl@a60c1ca docs/ascend_tutorial/model_support/examples/sapo_megatron_npu.md (probe 707032)",
        "Qwen3-30B-A3B",
        {"algorithm": "grpo", "strategy": "megatron", "device": "npu",
         "features.enable": ["recompute"], "features.disable": ["offload"], "features.recompute_method": "uniform",
         "cluster.nodes": ["10.0.0.1", "10.0.0.2"], "cluster.devices": list(range(8)),
         "cluster.device_memory_gib": 60.96, "train.tensor_parallel": 4, "train.pipeline_parallel": 1,
         "train.train_batch_size": 96, "train.mini_batch_size": 32, "train.max_prompt_length": 2048,
         "train.max_response_length": 4096, "train.responses_per_prompt": 8,
         "train.rollout_tensor_parallel": 4, "train.rollout_memory_utilization": 0.6,
         "extra_overrides": [f"{AR}.actor.use_kl_loss=False", f"{AR}.actor.ppo_max_token_len_per_gpu=8192",
                             f"{AR}.actor.megatron.expert_model_parallel_size=8",
                             f"{AR}.actor.megatron.expert_tensor_parallel_size=1"]}, False, {"rollout"},
        url="https://github.com/verl-project/verl/blob/a60c1cac21e8b084e739fdc21d436f48506eafe2/docs/ascend_tutorial/model_support/examples/sapo_megatron_npu.md",
        fixture=(MEM / "sapo-megatron-npu-doc-excerpt.md",),
        facts=("707032 三个 offload 全关则 OOM", "| 707032 full-offload-off | 三 offload 全关 | step1 OOM（HDO 不可关）|",
               "707032 证实关则 Adam 态上设备 OOM"), ratio=1.35),
    # verl#224: host RAM. "qwen7b on single node with 8*A800 80g and 96g memory" ran out of host memory with 8
    # rollout processes of 11.0-11.2 GB each. Rollout TP and offload are not stated: TP 2 is what that RSS implies
    # (7.1 GiB of bf16 weights per TP-2 shard + 3 GiB per process = 10.1 GiB), no offload is taken.
    Row("Qwen2-7B GRPO, 8 x A800 80 GB, 96 GB host RAM: Ray host OOM (8 rollout processes of ~11 GB)",
        "verl-project/verl#224", "Qwen2-7B-Instruct",
        {"algorithm": "grpo", "strategy": "fsdp", "device": "gpu", "cluster.devices": list(range(8)),
         "cluster.device_memory_gib": 80.0, "cluster.host_memory_gib": 96.0, "train.rollout_tensor_parallel": 2,
         "train.max_prompt_length": 1024, "train.max_response_length": 1024}, False, {"host"},
        url="https://github.com/verl-project/verl/issues/224",
        fixture=(MEM / "verl-issue224-rollout-rss.txt",),
        facts=("qwen7b on single node with 8*A800 80g and 96g memory and got OOM",
               "There were 8 rollout processes and each consumed 11G memory",
               "11.20   ray::WorkerDict.actor_rollout_generate_sequences",
               "11.04   ray::WorkerDict.actor_rollout_generate_sequences"), ratio=0.77),
]

#: Rows where the estimate and the report disagree, with the reason (checked: each listed row still disagrees,
#: and no other row does, so a formula change that fixes or breaks one fails the test until this table and the
#: memory guide (docs/memory-fit.md) say so).
KNOWN_MISSES: dict[str, str] = {
    "Qwen2.5-Math-7B served on one 64 GB NPU at utilization 0.95: OOM": (
        "vllm-ascend 0.7.x (Feb 2025) used 9-10 GB of the device beyond gpu_memory_utilization x HBM (the report's own "
        "table: 36.2 GB used at a 25.6 GB budget, 48.3 at 38.4, 60.5 at 51.2); the estimate counts 2 GiB of NPU "
        "runtime beside the budget, which later vllm-ascend releases need: verl 0.7.0's A3 Qwen3-4B script runs its "
        "rollout at 0.9 of 64 GiB (the row above). Estimate 0.98 of HBM: 'fits'."),
    "Qwen2-7B GRPO, 8 x A800 80 GB, 96 GB host RAM: Ray host OOM (8 rollout processes of ~11 GB)": (
        "host RAM: the estimate needs 84.8 GiB of the 91.2 GiB below Ray's 0.95 threshold; the report's own process "
        "list already sums to 89.4 GB (8 x 11.0-11.2 GB + 0.54 GB driver) before Ray's daemons and the OS, which the "
        "estimate does not count. The report does not state the offload settings: verl's GRPO example of that date "
        "offloaded the reference model (+14 GiB of host RAM), which would make it 'does not fit'."),
}


def row_verdict(est: Any, row: Row) -> tuple[bool, float, set[str]]:
    """(fits, peak need / HBM, what fails) within the row's scope."""
    if row.scope == "rollout":
        ph = est.device["rollout"]
        failing = ({"rollout"} if ph.fits is False else set()) | ({"kv"} if est.kv_short else set())
        return not failing, ph.need / ph.have, failing
    failing = set(est.failing) | ({"kv"} if est.kv_short else set()) | ({"host"} if est.host.fits is False else set())
    worst = max(ph.need / ph.have for ph in est.device.values() if ph.have)
    return not failing, worst, failing


def model_dir(tmp_path: Path, name: str) -> str:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(CONFIGS[name]))
    return str(d)


def plan_for(tmp_path: Path, model: str, flags: dict[str, Any]):
    resolved = load_spec(None, flags={**BASE_PATHS, "paths.model": model_dir(tmp_path, model), **flags}, environ={})
    return make_plan(resolved)


@pytest.mark.parametrize("row", CALIBRATION, ids=[r.name for r in CALIBRATION])
def test_calibration(tmp_path: Path, row: Row) -> None:
    if row.fixture:  # every value the row takes from its source is in the stored text of that source
        assert row.url.startswith("https://github.com/"), row.name
        text = "\n".join(p.read_text(encoding="utf-8") for p in row.fixture)
        missing = [f for f in row.facts if f not in text]
        assert not missing, (row.name, missing)
    p = plan_for(tmp_path, row.model, row.flags)
    est = p.memory
    assert est is not None, row.source
    fits, ratio, failing = row_verdict(est, row)
    if row.name in KNOWN_MISSES:
        assert fits is not row.fits, f"{row.name} is no longer a known miss: update KNOWN_MISSES and docs/memory-fit.md"
    else:
        assert fits is row.fits, (row.source, est.to_json())
    if row.ratio is not None:  # the band of docs/memory-fit.md is computed from these
        assert ratio == pytest.approx(row.ratio, abs=0.006), (row.name, ratio)
    memory_errors = {f.code for f in p.findings if f.code.startswith("memory_") and f.severity is Severity.ERROR}
    if row.scope == "all" and fits:
        assert not memory_errors
    if not fits:
        assert row.failing <= failing, failing
        if row.scope == "all" and failing - {"host"}:
            assert memory_errors
        assert est.advice  # something concrete to do


def test_known_misses_are_exactly_the_rows_that_disagree(tmp_path: Path) -> None:
    disagree = set()
    for row in CALIBRATION:
        est = plan_for(tmp_path, row.model, row.flags).memory
        assert est is not None
        if row_verdict(est, row)[0] is not row.fits:
            disagree.add(row.name)
    assert disagree == set(KNOWN_MISSES), disagree ^ set(KNOWN_MISSES)
    assert all(len(reason) > 80 for reason in KNOWN_MISSES.values())
    # the "does not fit" side: at least 3 real OOM reports beyond vllm-ascend#9372 that the estimate catches
    caught = [r for r in CALIBRATION if not r.fits and r.name not in KNOWN_MISSES
              and not r.name.startswith("counterfactual")]
    assert len(caught) >= 4, [r.name for r in caught]


def test_the_memory_guide_states_the_band_of_the_table() -> None:
    """docs/memory-fit.md's error band is the table's: working rows (not known misses) from their lowest to their highest
    peak need / HBM, and the OOM rows from their lowest up."""
    working = [r.ratio for r in CALIBRATION if r.fits and r.name not in KNOWN_MISSES and r.ratio is not None]
    oom_device = [r.ratio for r in CALIBRATION if not r.fits and r.name not in KNOWN_MISSES
                  and not r.name.startswith("counterfactual")
                  and r.ratio is not None and r.failing & {"rollout", "update", "reference"}]
    readme = (ROOT / "docs" / "memory-fit.md").read_text(encoding="utf-8")
    assert f"{min(working):.2f}–{max(working):.2f}" in readme, (min(working), max(working))
    assert f"{min(oom_device):.2f}" in readme, min(oom_device)
    assert f"{len(CALIBRATION)} rows" in readme
    for row in CALIBRATION:  # each known miss is named in docs/memory-fit.md by its source (e.g. "verl#224")
        if row.name in KNOWN_MISSES:
            assert row.source.split()[0].split("/")[-1] in readme, row.source
    measured = [r for r in CALIBRATION if r.measured_gib]
    assert measured  # the SAPO run's 29.22 GiB peak: the estimate's overstatement is stated in docs/memory-fit.md


def test_shape_from_config_counts_qwen3_8b() -> None:
    s = ModelShape.from_config(CONFIGS["Qwen3-8B"])
    assert s is not None
    assert 8.1e9 < s.params < 8.3e9  # Qwen3-8B: 8.19 B parameters
    assert s.largest_tensor_numel == 151936 * 4096
    assert s.head_dim == 128 and s.kv_heads == 8


def test_memory_features_lower_the_phase_they_target(tmp_path: Path) -> None:
    base = {"algorithm": "dapo", "strategy": "megatron", "device": "npu", "cluster.device_memory_gib": 64.0,
            "train.tensor_parallel": 2, "train.pipeline_parallel": 1}
    plain = plan_for(tmp_path, "Qwen3-8B", base).memory
    offload = plan_for(tmp_path, "Qwen3-8B", {**base, "features.enable": ["offload"]}).memory
    recompute = plan_for(tmp_path, "Qwen3-8B", {**base, "features.enable": ["recompute"]}).memory
    swap = plan_for(tmp_path, "Qwen3-8B", {**base, "features.enable": ["swap_optimizer"]}).memory
    assert plain and offload and recompute and swap
    need = {k: {ph: e.device[ph].need for ph in e.device} for k, e in
            (("plain", plain), ("offload", offload), ("recompute", recompute), ("swap", swap))}
    assert need["offload"]["rollout"] < need["plain"]["rollout"]  # training states leave the device
    assert need["recompute"]["update"] < need["plain"]["update"]  # activations recomputed
    assert need["recompute"]["rollout"] == need["plain"]["rollout"]  # recompute does nothing for the rollout
    assert need["swap"]["update"] < need["plain"]["update"]  # optimizer state on the host
    assert offload.host.need > plain.host.need  # ... which costs host RAM


def test_advice_is_ordered_and_verified(tmp_path: Path) -> None:
    # Qwen3-8B, Megatron TP4 PP1 on 8 x 64 GB NPUs, 32k responses: the update does not fit.
    flags = {"algorithm": "dapo", "strategy": "megatron", "device": "npu", "cluster.device_memory_gib": 64.0,
             "train.tensor_parallel": 4, "train.pipeline_parallel": 1, "train.max_response_length": 32768}
    p = plan_for(tmp_path, "Qwen3-8B", flags)
    assert p.memory is not None and p.memory.fits is False and p.memory.failing == ["update"]
    first = p.memory.advice[0]
    assert first.startswith("enable the `recompute` feature with features.recompute_method=uniform"), first
    # Following the advice makes it fit; recompute of only the first 8 layers (the default) does not.
    fixed = plan_for(tmp_path, "Qwen3-8B", {**flags, "features.enable": ["recompute"],
                                            "features.recompute_method": "uniform"})
    assert fixed.memory is not None and fixed.memory.fits is True, fixed.memory.to_json()
    block = plan_for(tmp_path, "Qwen3-8B", {**flags, "features.enable": ["recompute"]})
    assert block.memory is not None and block.memory.fits is False
    err = next(f for f in p.findings if f.code == "memory_device_fit")
    assert err.severity is Severity.ERROR and err.hint and "recompute" in err.hint
    # Longer still: features alone do not do it, a bigger layout is proposed after them.
    worse = plan_for(tmp_path, "Qwen3-14B", {**flags, "train.tensor_parallel": 2, "train.max_response_length": 16384})
    assert worse.memory is not None and worse.memory.fits is False
    assert any("tensor_parallel" in a or "nodes" in a or "together" in a for a in worse.memory.advice)


def test_host_ram_short_never_advises_offload(tmp_path: Path) -> None:
    flags = {"algorithm": "dapo", "strategy": "megatron", "device": "npu", "cluster.device_memory_gib": 64.0,
             "cluster.host_memory_gib": 64.0, "train.tensor_parallel": 1, "train.pipeline_parallel": 1}
    p = plan_for(tmp_path, "Qwen3-14B", flags)
    est = p.memory
    assert est is not None and est.fits is False
    assert not any("`offload`" in a and a.startswith("enable") for a in est.advice), est.advice


def test_rung_can_help_and_the_ladder_skips_useless_rungs(tmp_path: Path) -> None:
    flags = {"algorithm": "dapo", "strategy": "megatron", "device": "npu", "cluster.device_memory_gib": 64.0,
             "cluster.host_memory_gib": 32.0, "paths.model": model_dir(tmp_path, "Qwen3-14B"),
             "train.tensor_parallel": 2, "train.pipeline_parallel": 1}
    spec = load_spec(None, flags={**BASE_PATHS, **flags}, environ={}).spec
    on = {"remove_padding": True, "dynamic_batch": True}
    assert rung_can_help(spec, on, "offload") is False  # 32 GiB of host RAM cannot take the offloaded states
    assert rung_can_help(spec, on, "recompute") is True
    d = decide("device_oom", spec, on, History())
    assert d.restart and d.add_feature == "recompute"
    assert any("offload" in n and "host RAM" in n for n in d.notices), d.notices
    # FSDP already checkpoints activations (gradient_checkpointing is on by default): recompute cannot help.
    fsdp = load_spec(None, flags={**BASE_PATHS, **flags, "strategy": "fsdp", "cluster.host_memory_gib": 2048.0},
                     environ={}).spec
    fsdp_on = {**on, "gradient_checkpointing": True}
    assert rung_can_help(fsdp, fsdp_on, "recompute") is False
    assert rung_can_help(fsdp, fsdp_on, "offload") is True


def test_ladder_unchanged_without_a_model_config() -> None:
    spec = load_spec(None, flags=dict(BASE_PATHS), environ={}).spec  # /mnt/models/Qwen3-8B does not exist here
    assert rung_can_help(spec, {}, "offload") is True
    assert decide("device_oom", spec, {}, History()).add_feature == "offload"


def test_layout_reads_the_users_extra_overrides(tmp_path: Path) -> None:
    spec = load_spec(None, flags={**BASE_PATHS, "extra_overrides": [
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40000"]}, environ={}).spec
    lay = layout_for(spec, {"dynamic_batch": True})
    assert lay.memory_utilization == 0.3 and lay.tokens_per_micro_batch == 40000


def test_plan_json_carries_the_memory_table(tmp_path: Path) -> None:
    args = ["--set", f"paths.model={model_dir(tmp_path, 'Qwen3-8B')}", "--set", "paths.train_files=/mnt/data/t.parquet",
            "--set", "paths.val_files=/mnt/data/v.parquet", "--set", "cluster.device_memory_gib=64"]
    res = run_cli("plan", "--json", *args)
    assert res.code == 0, res.err
    mem = json.loads(res.out)["memory"]
    assert set(mem) >= {"device", "host", "fits", "advice"}
    assert set(mem["device"]) == {"rollout", "update"}  # DAPO: no reference model
    for phase in mem["device"].values():
        assert phase["have_gib"] == 64.0 and phase["need_gib"] > 0
    assert mem["host"]["need_gib"] > 0 and mem["fits"] is True and mem["advice"] == []
    text = run_cli("plan", *args).out
    assert "memory fit" in text and "update (per device)" in text and "host RAM (per node)" in text
    # Too small a device: plan refuses (exit 2) and says what to change.
    small = run_cli("plan", "--json", *args[:-1], "cluster.device_memory_gib=32")
    assert small.code == 2
    doc = json.loads(small.out)
    assert doc["memory"]["fits"] is False and doc["memory"]["advice"]
    assert any(f["code"] == "memory_device_fit" for f in doc["findings"])


def test_estimate_is_bounded_for_hostile_sizes() -> None:
    s = ModelShape.from_config({**CONFIGS["Qwen3-8B"], "num_hidden_layers": 10**6})
    assert s is not None
    est = estimate(layout_for(load_spec(None, flags=dict(BASE_PATHS), environ={}).spec, {}), s, 64.0, 512.0)
    assert est.fits is False and est.device["update"].need > 1000 * GIB


def test_device_memory_from_real_captures() -> None:
    from verlctl.checks.memory import hbm_from_machine
    from verlctl.detect.gpu import parse_nvidia_smi
    from verlctl.detect.machine import MachineState
    from verlctl.detect.npu import parse_npu_smi_info

    from conftest import FIXTURES, fixture_text

    npu = parse_npu_smi_info(fixture_text(FIXTURES / "npu-smi" / "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt"))
    spec = load_spec(None, flags={**BASE_PATHS, "device": "npu", "cluster.devices": [0, 7]}, environ={}).spec
    assert hbm_from_machine(spec, MachineState(npu=npu)) == 32.0  # 910B4: 32768 MB of HBM
    absent = load_spec(None, flags={**BASE_PATHS, "device": "npu", "cluster.devices": [12]}, environ={}).spec
    assert hbm_from_machine(absent, MachineState(npu=npu)) is None  # only the chosen devices count
    gpu = parse_nvidia_smi(fixture_text(FIXTURES / "nvidia-smi" / "default-580-1gpu-h200-idle-verlctl-device-check.txt"))
    gspec = load_spec(None, flags={**BASE_PATHS, "device": "gpu", "cluster.devices": [0]}, environ={}).spec
    assert hbm_from_machine(gspec, MachineState(gpu=gpu)) == pytest.approx(143771 / 1024)


def test_moe_activations_use_the_routed_width() -> None:
    # Qwen/Qwen3-30B-A3B-Base (verl-project/verl@7de1304f tests/utils/test_flops_counter.py)
    moe = ModelShape.from_config({
        "model_type": "qwen3_moe", "hidden_size": 2048, "vocab_size": 151936, "num_hidden_layers": 48,
        "num_key_value_heads": 4, "num_attention_heads": 32, "head_dim": 128, "moe_intermediate_size": 768,
        "num_experts_per_tok": 8, "num_experts": 128, "intermediate_size": 6144})
    assert moe is not None and moe.intermediate == 8 * 768 and moe.experts == 128
    assert 29e9 < moe.params < 32e9  # 30.5 B total parameters: every expert is stored


def test_vllm_profile_peak_and_kv_tokens_match_vllm_10517(tmp_path: Path) -> None:
    """The rollout's KV budget against vLLM's own profiling numbers (vllm-project/vllm#10517, Llama-3.1-8B on an
    RTX 3090 at 0.9, no chunked prefill): the activation peak of the profiling pass (peak_torch_memory minus the
    weights) and the KV tokens (GPU blocks x 16) within 15 %."""
    import re

    from verlctl.checks.memory import _vllm_profile_peak

    text = (MEM / "vllm-issue10517-profiling.txt").read_text(encoding="utf-8")
    weights = float(re.findall(r"Loading model weights took ([\d.]+) GB", text)[0])  # vLLM's "GB" are GiB
    peaks = [float(x) for x in re.findall(r"peak_torch_memory=([\d.]+)GiB", text)]
    blocks = [int(x) for x in re.findall(r"GPU blocks: (\d+)", text)]
    for seq, peak, nblocks in zip((20000, 29000), peaks, blocks, strict=True):
        row = next(r for r in CALIBRATION if r.model == "Llama-3.1-8B-Instruct"
                   and r.flags["train.max_prompt_length"] + r.flags["train.max_response_length"] == seq)
        est = plan_for(tmp_path, row.model, row.flags).memory
        assert est is not None and est.kv_tokens_fit is not None
        measured_act = (peak - weights) * GIB
        assert _vllm_profile_peak(est.shape, est.layout) == pytest.approx(measured_act, rel=0.15)
        assert est.kv_tokens_fit == pytest.approx(nblocks * 16, rel=0.15)  # vLLM's default block size 16
    assert blocks[1] * 16 == 23648  # the error message's KV capacity


def test_expert_parallel_splits_the_experts_only() -> None:
    """Megatron splits the routed experts over EP x ETP (ETP defaults to TP) and the rest over TP; the experts'
    optimizer shards over the expert data-parallel group (devices / (EP x ETP x PP))."""
    from memory_support import base_layout
    from verlctl.checks.memory import _train_states

    s = ModelShape.from_config(CONFIGS["Qwen3-30B-A3B"])
    assert s is not None
    assert s.expert_params == 128 * 3 * 2048 * 768 * 48  # 28.99 B of the 30.5 B
    base = base_layout(device="npu", strategy="megatron", nodes=2, devices_per_node=8, train_devices_per_node=8, tp=4)
    dense = (s.params - s.expert_params) + 0.0  # untied, PP 1: embedding and head on the one stage
    no_ep = _train_states(s, base)
    assert no_ep["params"] == pytest.approx(2.0 * s.params / 4, rel=1e-6)  # everything over TP, as before
    ep8 = _train_states(s, base_layout(**{**base.__dict__, "ep": 8, "etp": 1}))
    assert ep8["params"] == pytest.approx(2.0 * (dense / 4 + s.expert_params / 8), rel=1e-6)
    assert ep8["optimizer"] == pytest.approx(12.0 * (dense / 4 / 4 + s.expert_params / 8 / 2), rel=1e-6)
    dense_model = ModelShape.from_config(CONFIGS["Qwen3-8B"])
    assert dense_model is not None and dense_model.expert_params == 0


def test_ulysses_sequence_parallel_divides_the_tokens_per_device(tmp_path: Path) -> None:
    """verl packs ppo_max_token_len_per_gpu x sp tokens per micro batch and splits each sequence over the sp ranks
    (dp_actor.py): the one-step-off A3 row holds 4352 tokens per device, not its 34816-token sequence."""
    row = next(r for r in CALIBRATION if "Ulysses 8" in r.name)
    est = plan_for(tmp_path, row.model, row.flags).memory
    assert est is not None
    assert est.layout.ulysses == 8 and est.layout.tokens_per_micro_batch == 34816 // 8
    no_sp = layout_for(load_spec(None, flags={**BASE_PATHS, **row.flags, "extra_overrides": [
        o for o in row.flags["extra_overrides"] if "ulysses" not in o]}, environ={}).spec, {"dynamic_batch": True})
    assert no_sp.tokens_per_micro_batch == 34816  # a sequence never splits without SP
