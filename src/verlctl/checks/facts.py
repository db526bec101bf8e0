"""Everything ``verlctl check`` learned about this machine for one spec: what the machine checks read.

Collected by ``orchestrator.machine_facts.collect_facts`` (or built by hand in tests from parsed captures)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from verlctl.checks.storage import StorageFacts
from verlctl.detect.check_probes import (
    CheckpointProbe,
    DatasetCheck,
    DockerFacts,
    ImageVersions,
    TargetLookup,
)
from verlctl.detect.common import Unavailable
from verlctl.detect.machine import MachineState
from verlctl.detect.models import ModelInfo
from verlctl.detect.node_probe import NodeFacts
from verlctl.detect.reach import ReachResult
from verlctl.detect.system import DiskSpace


class LiveRun(BaseModel):
    """One of this user's recorded verlctl runs that shares devices with the spec being checked."""

    run_id: str
    devices: list[int]  # the devices of the checked spec's cluster.devices that this run's spec uses
    state: str  # "running", or "unknown" (its processes could not be checked)
    why: str = ""  # the run state's reason (for "unknown": why it could not be decided)


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
    # this user's verlctl runs (gated records) whose spec uses devices of this spec on its nodes, with their state
    # ("running", or "unknown": not decided); None: not collected (O5)
    live_runs: list[LiveRun] | None = None
    log_disk: DiskSpace | Unavailable | None = None  # free space where paths.logs is (None: unset or in a container)
    log_shares_checkpoint_fs: bool | None = None  # paths.logs and paths.checkpoints are on one file system
    # --- added for the one verdict (checks/verdict.py); None: not collected
    not_collected: dict[str, str] = {}  # Need value -> why those facts are not here ("no Docker engine")
    device_nodes_missing: list[str] | None = None  # /dev/davinciN of cluster.devices absent on this host
    ray_ports_busy: list[int] | None = None  # cluster.ray_port / dashboard_port already bound on this host
    hccl_ports_busy: dict[str, list[int]] | None = None  # HCCL range name -> its ports already bound here
    resume_step: int | None = None  # the global_step_N trainer.resume_mode=auto would resume from
    checkpoint_users: list[str] | None = None  # runs recorded here (not stopped) on paths.checkpoints (A5)
    nodes: list[NodeFacts] | None = None  # multi-node: every node's facts (launch's pre-flight)
    node_marker: str | None = None  # the checkpoint marker the head wrote (read back on every node)
    prompt_lengths: Any = None  # checks.field_checks.PromptLengths, or why they were not counted (str)
    swanlab_reach: ReachResult | None = None  # the SwanLab host tried from this host (None: not tried)
    target_lookup: TargetLookup | None = None  # the in-target look-up (orchestrator/preflight.py; None: not looked)
