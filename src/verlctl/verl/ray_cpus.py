"""The logical CPUs that verl's Ray actors ask for, per node: what ``ray start --num-cpus`` must at least give.

Ray schedules by *logical* CPUs: an actor (or placement-group bundle) that asks for more CPUs than the node has
free waits forever, and verl logs nothing (real verl 0.9.1 on a 2-core host, Ray counting 2 CPUs: its
TransferQueue storage actors never scheduled; ``reference/realverl.md`` run r1). Logical CPUs are only
scheduling tokens, so giving Ray more of them than the cores is safe; too few is a silent deadlock.
``start_verl.sh`` raises Ray's count to :func:`cpu_demand`'s numbers where the node has fewer, and the rule
``ray_cpus`` (:mod:`verlctl.checks.rules`) rejects an explicit ``--num-cpus`` below them.

What each actor holds while it runs (Ray's default for an actor without ``num_cpus`` is 1 CPU to be placed and
0 while it runs; one with ``num_cpus=N`` holds N):

* every device's placement-group bundle: ``{"CPU": max_colocate_count, <device>: 1}`` with
  ``max_colocate_count`` 3 (0.9.1 ``single_controller/ray/base.py:146`` and ``:192``; 0.7.0
  ``single_controller/ray/base.py:127``, ``trainer/ppo/ray_trainer.py:93``), on the device's node;
* the task runner: 0.7.0 ``main_ppo`` ``ray.remote(num_cpus=1)(TaskRunner)`` (``trainer/main_ppo.py:80``);
  0.7.0 DAPO ``@ray.remote(num_cpus=1)`` (source checkout ``recipe/dapo/main_dapo.py:71``): 1; 0.9.1
  ``TaskRunnerV1`` is a plain ``@ray.remote`` (``trainer/main_ppo.py:102``): 0; one-step-off
  ``@ray.remote(num_cpus=10, max_concurrency=100)`` (0.9.1 ``experimental/one_step_off_policy/main_ppo.py:33``,
  0.7.0 source checkout ``recipe/one_step_off_policy/main_ppo.py:134``): 10;
* 0.9.1 ``main_ppo`` (V1 trainer, ``trainer.use_v1: true``) starts TransferQueue (``tq.init``,
  ``trainer/main_ppo.py:149``): its controller (TransferQueue ``transfer_queue/controller.py``
  ``@ray.remote(num_cpus=1) class TransferQueueController``) and
  ``transfer_queue.backend.SimpleStorage.num_data_storage_units`` storage units (default 8,
  ``trainer/config/transfer_queue/transfer_queue.yaml:29``; ``transfer_queue/storage/simple_backend.py``
  ``@ray.remote(num_cpus=1) class SimpleStorageUnit``): 1 each;
* the rest (vLLM/SGLang servers, agent-loop and reward-loop workers) have Ray's default: 1 free CPU to be
  placed, 0 after; one CPU of headroom is counted for them.

The actors outside the placement groups may land on any node; they are all counted on the head (where
``start_verl.sh`` starts Ray first and the driver runs), the other nodes need their bundles only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: CPUs of each device's placement-group bundle (ResourcePoolManager's max_colocate_count).
BUNDLE_CPUS = 3
#: The TransferQueue default number of storage units (verl 0.9.1 transfer_queue.yaml).
DEFAULT_STORAGE_UNITS = 8
STORAGE_UNITS_KEY = "transfer_queue.backend.SimpleStorage.num_data_storage_units"


@dataclass
class CpuDemand:
    head: int
    worker: int
    items: list[tuple[str, int]] = field(default_factory=list)  # (what, CPUs) on the head

    def describe(self) -> str:
        return ", ".join(f"{what}: {n}" for what, n in self.items if n)


def _override(overrides: list[str], key: str) -> str | None:
    value = None
    for text in overrides:
        k, sep, v = text.partition("=")
        if sep and k.lstrip("+~") == key:
            value = v.strip().strip("'\"")
    return value


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def cpu_demand(version: str, module: str, overrides: list[str], devices_per_node: int) -> CpuDemand:
    """The CPUs Ray must count on the head and on every other node for this training command."""
    bundles = BUNDLE_CPUS * devices_per_node
    items: list[tuple[str, int]] = [(f"placement-group bundles ({BUNDLE_CPUS} x {devices_per_node} devices)", bundles)]
    if module.endswith("one_step_off_policy.main_ppo"):
        items.append(("one-step-off task runner", 10))
    elif version == "0.9.1" and module == "verl.trainer.main_ppo":
        use_v1 = (_override(overrides, "trainer.use_v1") or "true").lower() != "false"
        if use_v1:
            units = _int(_override(overrides, STORAGE_UNITS_KEY), DEFAULT_STORAGE_UNITS)
            items.append(("TransferQueue controller", 1))
            items.append((f"TransferQueue storage units ({STORAGE_UNITS_KEY})", max(0, units)))
    else:
        items.append(("task runner", 1))
    items.append(("headroom to place the default actors (rollout servers, agent-loop and reward workers)", 1))
    return CpuDemand(head=sum(n for _, n in items), worker=bundles, items=items)
