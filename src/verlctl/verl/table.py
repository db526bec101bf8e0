"""Building blocks of the declarative verl tables: conditions, overrides and the evaluation context."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from verlctl.spec.model import device_family
from verlctl.verl.modes import is_disaggregated

if TYPE_CHECKING:
    from verlctl.spec.model import RunSpec

AR = "actor_rollout_ref"

MEGATRON = frozenset({"megatron"})
FSDP = frozenset({"fsdp", "fsdp2"})
ANY_STRATEGY = MEGATRON | FSDP


class _State:
    """Sentinel: the value is the feature's own on/off state."""

    def __repr__(self) -> str:
        return "STATE"


STATE: Any = _State()


@dataclass(frozen=True)
class Ctx:
    """What a table row may look at: the spec, the concrete verl version, the feature states."""

    spec: RunSpec
    version: str
    features: dict[str, bool] = field(default_factory=dict)

    def on(self, name: str) -> bool:
        return self.features.get(name, False)

    @property
    def megatron(self) -> bool:
        return self.spec.strategy == "megatron"

    @property
    def npu(self) -> bool:
        return self.spec.device == "npu"

    @property
    def nnodes(self) -> int:
        return self.spec.cluster.node_count

    @property
    def rollout_nnodes(self) -> int:
        """Nodes of the rollout: all of them, or ``rollout_nodes`` whole nodes (a disaggregated node split)."""
        rn = self.spec.train.rollout_nodes
        return rn if is_disaggregated(self.spec.mode) and rn else self.nnodes

    @property
    def trainer_nnodes(self) -> int:
        rn = self.spec.train.rollout_nodes
        return max(1, self.nnodes - rn) if is_disaggregated(self.spec.mode) and rn else self.nnodes

    @property
    def devices_per_node(self) -> int:
        return len(self.spec.cluster.devices)

    @property
    def train_devices_per_node(self) -> int:
        """Devices the trainer uses per node (a disaggregated mode splits them with the rollout)."""
        if is_disaggregated(self.spec.mode) and self.spec.train.trainer_devices:
            return self.spec.train.trainer_devices
        return self.devices_per_node

    @property
    def max_seq_len(self) -> int:
        return self.spec.train.max_prompt_length + self.spec.train.max_response_length


Value = Any  # a constant, STATE, or Callable[[Ctx], Any]


@dataclass(frozen=True)
class Ov:
    """One Hydra override: ``<prefix><key>=<value>``. ``value`` may be STATE or a function of Ctx."""

    key: str
    value: Value
    prefix: str = ""

    def resolve(self, ctx: Ctx, state: bool | None = None) -> Any:
        if self.value is STATE:
            return bool(state)
        if callable(self.value):
            return self.value(ctx)
        return self.value


@dataclass(frozen=True)
class When:
    """A condition on the run. ``None`` means any."""

    strategies: frozenset[str] | None = None
    devices: frozenset[str] | None = None
    versions: frozenset[str] | None = None
    algorithms: frozenset[str] | None = None
    modes: frozenset[str] | None = None
    test: Callable[[Ctx], bool] | None = None

    def matches(self, ctx: Ctx) -> bool:
        s = ctx.spec
        return (
            (self.strategies is None or s.strategy in self.strategies)
            and (self.devices is None or device_family(s.device) in self.devices)
            and (self.versions is None or ctx.version in self.versions)
            and (self.algorithms is None or s.algorithm in self.algorithms)
            and (self.modes is None or s.mode in self.modes)
            and (self.test is None or self.test(ctx))
        )


ALWAYS = When()


def when(
    strategies: set[str] | frozenset[str] | None = None,
    devices: set[str] | None = None,
    versions: set[str] | None = None,
    algorithms: set[str] | None = None,
    modes: set[str] | None = None,
    test: Callable[[Ctx], bool] | None = None,
) -> When:
    def fz(x: set[str] | frozenset[str] | None) -> frozenset[str] | None:
        return frozenset(x) if x is not None else None

    return When(fz(strategies), fz(devices), fz(versions), fz(algorithms), fz(modes), test)
