"""Everything ``verlctl check`` learned about this machine for one spec: what the machine checks read.

Collected by ``ops.machine_facts.collect_facts`` (or built by hand in tests from parsed captures)."""

from __future__ import annotations

from pydantic import BaseModel

from verlctl.checks.storage import StorageFacts
from verlctl.detect.check_probes import CheckpointProbe, DatasetCheck, DockerFacts, ImageVersions
from verlctl.detect.common import Unavailable
from verlctl.detect.machine import MachineState
from verlctl.detect.models import ModelInfo


class CheckFacts(BaseModel):
    """Everything ``verlctl check`` learned about this machine for one spec."""

    machine: MachineState
    model: ModelInfo | Unavailable | None = None
    datasets: list[DatasetCheck] = []
    checkpoint: CheckpointProbe | Unavailable | None = None
    docker: DockerFacts | None = None  # None with container.runtime: host
    master_ips: list[str] = []  # cluster.master_addr resolved to IPv4 addresses
    storage: StorageFacts | None = None  # multi-node: where the checkpoint directory lives
    recipe_missing: str | None = None  # the recipe entry file the work dir lacks (0.7.0 DAPO / one-step-off)
    image_versions: ImageVersions | None = None  # Python and Ray where training runs (None: not asked)
    holders: dict[int, str] = {}  # pid on a device -> who holds it (runtime.holders), for device_busy
