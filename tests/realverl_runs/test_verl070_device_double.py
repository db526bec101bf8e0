"""The verl 0.7.0 CPU device double (tests/realverl/verl070_cpu_device_double.py) in the real verl 0.7.0 image
(tests/image/build_realverl070.sh), in seconds and without Ray or a training run: through verl 0.7.0's plugin
hook it makes verl's own process-group string (verl/workers/fsdp_workers.py:157) a gloo group and an FSDP2 step
run on the CPU, with the functions other verl modules imported before the hook ran replaced too; without it,
verl 0.7.0 asks torch for ``cpu:gloo,cpu:nccl`` on a machine without CUDA, which torch refuses.

What this double cannot run: verl 0.7.0's one-step-off recipe (1 trainer + 1 rollout device). It syncs weights
from the trainer to the rollout over a Ray collective group spanning both sides
(recipe/one_step_off_policy/ray_trainer.py:282-288: ``collective.create_collective_group(...,
backend=get_nccl_backend(), group_name="actor_rollout")``; fsdp_workers.py:101: ``collective.broadcast`` per
tensor). Off an NPU that backend is NCCL, which Ray's collective runs with cupy on CUDA only. With the double's
gloo, Ray 2.60's ``TorchGLOOGroup`` (ray/util/collective/collective_group/torch_gloo_collective_group.py:67-113)
skips its rendezvous when the process has a torch default group and builds the 2-rank group with
``dist.new_group(ranks=[0, 1])`` inside it; but each side's verl worker already made its own 1-rank default group
(verl/workers/fsdp_workers.py:156), so the trainer-rollout group cannot form. Running it would take replacing the
recipe's weight-sync transport (as the 0.9.1 demo layer re-registers verl's checkpoint engine on gloo), for which
0.7.0 has no registry: no longer a device-layer double."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.docker]


PROBE = r"""
import os
import verl  # verl/__init__.py runs the plugin hook (VERL_USE_EXTERNAL_MODULES)
import torch, torch.distributed as dist
import verl.protocol
from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device, get_device_id
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29731")
print("protocol sees", verl.protocol.get_torch_device().__name__, flush=True)
backend = f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"  # verl/workers/fsdp_workers.py:157
print("backend", backend, flush=True)
dist.init_process_group(backend=backend, rank=0, world_size=1)
t = torch.ones(3, device=get_device_id())
dist.all_reduce(t)
get_torch_device().empty_cache()
assert get_torch_device().mem_get_info()[1] > 0
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
m = torch.nn.Linear(4, 4)
fully_shard(m, mesh=init_device_mesh(get_device_name(), (1,)))
m(torch.ones(2, 4)).sum().backward()
print("STEP OK", dist.get_backend(), get_device_id(), flush=True)
"""




#: What verl 0.7.0 imports at its first weight update (verl/workers/rollout/vllm_rollout/vllm_rollout.py:255):
#: its vLLM patch module, which imports vLLM's Qwen3-Next model (verl/utils/vllm/patch.py:56).
TRITON_PROBE = r"""
import verl  # the plugin hook
import verl.utils.vllm.patch as patch
print("MOE MODELS", " ".join(c.__name__ for c in patch.SUPPORTED_MOE_MODELS), flush=True)
"""


def probe(client: Any, image: str, modules: str, source: str = PROBE) -> tuple[int, str]:
    c = client.containers.run(image, ["python3", "-c", source], detach=True, network_mode="none",
                              working_dir="/verl", environment={"VERL_USE_EXTERNAL_MODULES": modules},
                              labels={"verlctl-test": "1"})
    try:
        rc = int(c.wait(timeout=600)["StatusCode"])
        return rc, c.logs().decode(errors="replace")
    finally:
        c.remove(force=True)


def test_the_070_double_runs_verls_process_group_and_an_fsdp2_step_on_cpu(
        docker_engine: Any, realverl070_image: str) -> None:
    rc, out = probe(docker_engine, realverl070_image, "verl070_cpu_device_double")
    assert rc == 0, out[-3000:]
    assert "protocol sees verl070_cpu_device_double.device" in out, out[-3000:]
    assert "STEP OK gloo cpu" in out, out[-3000:]


def test_without_the_double_verl_070_cannot_make_its_process_group_on_cpu(
        docker_engine: Any, realverl070_image: str) -> None:
    rc, out = probe(docker_engine, realverl070_image, "")
    assert rc != 0, out[-3000:]
    assert "backend cpu:gloo,cpu:nccl" in out and "cpu:gloo,cpu:nccl" in out.split("backend cpu:gloo,cpu:nccl", 1)[1]


def test_the_070_double_lets_verls_vllm_patch_import_as_on_a_gpu(docker_engine: Any, realverl070_image: str) -> None:
    """On the CPU, vLLM 0.11 binds triton.language to a placeholder without ``exp`` (no active triton driver), and
    vLLM's Qwen3-Next model module reads ``tl.exp`` at import (vllm/model_executor/layers/fla/ops/op.py:26): verl
    0.7.0's patch module then fails with an AttributeError, which its ``except ImportError`` does not catch. The
    double makes vLLM find triton usable, as its GPU driver does on a GPU host."""
    rc, out = probe(docker_engine, realverl070_image, "verl070_cpu_device_double", TRITON_PROBE)
    assert rc == 0, out[-3000:]
    assert "Qwen3NextForCausalLM" in out.split("MOE MODELS", 1)[1], out[-3000:]
    rc, out = probe(docker_engine, realverl070_image, "", TRITON_PROBE)
    assert rc != 0 and "AttributeError: module 'triton.language' has no attribute 'exp'" in out, out[-3000:]


#: verl 0.7.0's FSDP actor unpads each micro-batch with ``use_remove_padding`` (verl/workers/actor/dp_actor.py:31,
#: the unpad_input it imports from verl/utils/attention_utils.py), as in its first compute_log_prob.
UNPAD_PROBE = r"""
import verl  # the plugin hook
import torch
from verl.utils.attention_utils import unpad_input
ids = torch.ones(2, 4, dtype=torch.long).unsqueeze(-1)
mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
print("UNPADDED", tuple(unpad_input(ids, mask)[0].shape), flush=True)
"""


def test_verl_070_unpads_with_flash_attn_off_an_npu_which_verlctl_refuses_without_it(
        docker_engine: Any, realverl070_image: str) -> None:
    """Off an NPU (is_npu_available is False: the double is a CPU, as a GPU would be), verl 0.7.0 unpads with
    flash_attn.bert_padding (verl/utils/attention_utils.py:27-30); the image, like any without flash-attn, fails
    there. verlctl's in-target look-up refuses that plan (remove_padding on, FSDP, verl 0.7.0, not an NPU) before
    launch, and plans that verl runs here (remove_padding off, or Megatron, or an NPU) are not refused."""
    from verlctl.plan import make_plan
    from verlctl.spec.resolve import load_spec
    from verlctl.verl.packages import package_checks

    from conftest import BASE_PATHS

    rc, out = probe(docker_engine, realverl070_image, "verl070_cpu_device_double", UNPAD_PROBE)
    assert rc != 0 and "No module named 'flash_attn'" in out, out[-3000:]

    def needs(**flags: Any) -> list[str]:
        plan = make_plan(load_spec(None, flags={**BASE_PATHS, "verl_version": "0.7.0", "algorithm": "dapo",
                                                "features.disable": ["flash_attn"], **flags}, environ={}))
        return [c.module for c in package_checks(plan.command)]

    assert needs(device="gpu", strategy="fsdp2") == ["flash_attn"]
    assert needs(device="gpu", strategy="fsdp2", **{"features.disable": ["flash_attn", "remove_padding"]}) == []
    assert needs(device="npu", strategy="fsdp2") == [] and needs(device="gpu", strategy="megatron") == []
