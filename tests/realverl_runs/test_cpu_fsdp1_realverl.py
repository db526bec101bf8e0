"""A CPU run is a user's decision (issue 38 item 3): `strategy: fsdp` (FSDP1) with `device: cpu` is refused
before launch (rule ``cpu_fsdp1``, code ``cpu_device_fsdp1``), and its fix, `strategy: fsdp2`, is accepted.

verl decides, both ways: in the real-verl image's torch, the call verl 0.9.1 makes
(``verl/workers/engine/fsdp/transformer_impl.py:444``: ``FSDP(module, device_id=get_device_id(),
sync_module_states=True, ...)``, where the CPU device layer's device id is the CPU) raises the ValueError the
finding quotes, and FSDP2's ``fully_shard`` (the fix) wraps and runs the same module on the CPU. Nothing trains:
one gloo rank, a 4x4 linear layer (~40 s, mostly importing torch).
"""

from __future__ import annotations

from typing import Any

import pytest

from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS

pytestmark = [pytest.mark.docker, pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]

PROBE = r"""
import os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
dist.init_process_group("gloo", rank=0, world_size=1)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
try:
    FSDP(torch.nn.Linear(4, 4), device_id=torch.device("cpu"), sync_module_states=True)
    print("FSDP1 OK")
except ValueError as exc:
    print("FSDP1 ValueError:", exc)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
m = torch.nn.Linear(4, 4)
fully_shard(m, mesh=init_device_mesh("cpu", (1,)))
print("FSDP2 OK", tuple(m(torch.ones(2, 4)).shape))
"""


def _plan(strategy: str) -> Any:
    return make_plan(load_spec(None, flags={**BASE_PATHS, "device": "cpu", "verl_version": "0.9.1",
                                            "strategy": strategy, "container.runtime": "host",
                                            "train.tensor_parallel": 1, "train.pipeline_parallel": 1}, environ={}))


def test_fsdp1_on_cpu_is_refused_before_launch_and_fails_in_torch_as_verl_calls_it(
        docker_engine: Any, realverl_image: str) -> None:
    refused = [f for f in _plan("fsdp").findings if f.code == "cpu_device_fsdp1"]
    assert [f.field for f in refused] == ["strategy"] and "strategy: fsdp2" in (refused[0].hint or "")
    assert not [f for f in _plan("fsdp2").findings if f.code == "cpu_device_fsdp1"]
    out = docker_engine.containers.run(realverl_image, ["python3", "-c", PROBE], remove=True, network_mode="none",
                                       stderr=True).decode(errors="replace")
    quoted = refused[0].message.split('"ValueError: ', 1)[1].split('"', 1)[0]
    assert f"FSDP1 ValueError: {quoted}" in out, out[-2000:]
    assert "FSDP2 OK (2, 4)" in out, out[-2000:]
