"""The fabric gate's verdict on measurements (checks/fabric.py): the floors by device, the slowest link named by
its nodes, an HCCL init failure shown with its error code and the failure catalogue's fix. The measurements
themselves are taken over real links in tests/orchestrator/test_fabric_gate.py."""

from __future__ import annotations

from typing import Any

from verlctl.checks.fabric import fabric_findings, floors, init_failures
from verlctl.detect.fabric_probe import FabricRun, parse_output
from verlctl.orchestrator.fabric import backend_of, diagnose, wanted
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS

NODES = ["10.0.0.1", "10.0.0.2"]


def spec(**flags: Any) -> Any:
    return load_spec(None, flags={**BASE_PATHS, "cluster.nodes": NODES, **flags}, environ={}).spec


def measured(**run: Any) -> FabricRun:
    base = FabricRun(world=4, backend="hccl", allreduce=[{"bytes": 64 << 20, "busbw_gbps": 20.0}],
                     links=[{"src": r, "dst": (r + 1) % 4, "gbps": 20.0} for r in range(4)],
                     ranks=[{"rank": r, "node": r // 2} for r in range(4)])
    return base.model_copy(update=run)


def test_the_floors_are_half_the_line_rate_by_device_and_none_on_gloo() -> None:
    assert floors(spec(device="npu")) == (12.5, 12.5)
    assert floors(spec(device="gpu", strategy="fsdp")) == (25.0, 25.0)
    assert floors(spec(**{"cluster.fabric.backend": "gloo"})) == (None, None)
    assert floors(spec(**{"cluster.fabric.min_link_gbps": 3, "cluster.fabric.min_busbw_gbps": 7})) == (3, 7)
    assert floors(spec(**{"cluster.fabric.min_link_gbps": 3})) == (3, 3)
    assert backend_of(spec(device="npu")) == "hccl" and backend_of(spec(device="gpu", strategy="fsdp")) == "nccl"


def test_the_gate_runs_only_with_more_than_one_device() -> None:
    assert wanted(spec(**{"cluster.devices": "0"}))  # two nodes x one device
    assert not wanted(load_spec(None, flags={**BASE_PATHS, "cluster.devices": "0"}, environ={}).spec)
    assert not wanted(spec(**{"cluster.fabric.enabled": False}))


def test_the_slowest_link_is_named_by_its_nodes_and_ranks() -> None:
    links = [{"src": r, "dst": (r + 1) % 4, "gbps": g} for r, g in enumerate([20.0, 9.0, 20.0, 11.0])]
    findings = fabric_findings(spec(device="npu"), measured(links=links), NODES)
    codes = [f.code for f in findings]
    assert codes == ["fabric_measured", "fabric_link_slow"]
    assert ("the link node 10.0.0.1 (rank 1) -> node 10.0.0.2 (rank 2) moves 9.00 GB/s, below the floor of "
            "12.5 GB/s") in findings[1].message
    assert "slowest link node 10.0.0.1 (rank 1) -> node 10.0.0.2 (rank 2) at 9.00 GB/s" in findings[0].message


def test_an_hccl_init_failure_is_shown_with_its_code_and_the_catalogues_fix() -> None:
    line = ("RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:148 HCCL function error: "
            "hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 4")
    run = measured(errors=[{"rank": 2, "node": 1, "type": "RuntimeError", "message": line},
                           {"rank": 3, "node": 1, "type": "RuntimeError", "message": line}])
    (finding,) = init_failures(run, NODES, diagnose)  # one per node
    assert finding.message.startswith("the collective test failed on node 10.0.0.2 (rank 2): HCCL could not create "
                                      "its communicator (HcclResult error code 4): RuntimeError")
    assert "hccn_tool" in (finding.hint or "") and "verlctl check --fabric" in (finding.hint or "")
    (unknown,) = init_failures(measured(errors=[{"rank": 0, "node": 0, "message": "boom"}]), NODES, diagnose)
    assert unknown.message == "the collective test failed on node 10.0.0.1 (rank 0): boom"


def test_a_silent_node_and_an_image_without_torch_are_said() -> None:
    (timeout,) = fabric_findings(spec(), measured(timed_out=[1]), NODES)
    assert timeout.code == "fabric_timeout" and "within 120s on 10.0.0.2" in timeout.message
    assert "10.0.0.1:29555" in (timeout.hint or "")
    (no_torch,) = fabric_findings(spec(), measured(no_torch=[0, 1]), NODES)
    assert no_torch.code == "fabric_not_checked" and "on 10.0.0.1, 10.0.0.2" in no_torch.message


def test_the_probe_output_is_read_line_by_line_and_garbage_is_ignored() -> None:
    text = ('noise\nFABRIC {"world": 2}\nFABRIC_ERROR {"rank": 1}\nFABRIC_ERROR not json\nFABRIC [1]\n')
    assert parse_output(text) == ({"world": 2}, [{"rank": 1}])
    assert parse_output("") == (None, [])


def test_the_summary_and_the_floor_use_the_largest_size_of_the_sweep() -> None:
    sweep = [{"bytes": 1 << 20, "busbw_gbps": 3.0}, {"bytes": 64 << 20, "busbw_gbps": 20.0}]
    (measured_,) = fabric_findings(spec(device="npu"), measured(allreduce=sweep), NODES)
    assert measured_.message.startswith("all-reduce bus bandwidth 20.00 GB/s at 64 MiB over 4 ranks (hccl)")
    low = [{"bytes": 1 << 20, "busbw_gbps": 30.0}, {"bytes": 16 << 20, "busbw_gbps": 10.0}]
    codes = [f.code for f in fabric_findings(spec(device="npu"), measured(allreduce=low), NODES)]
    assert codes == ["fabric_measured", "fabric_busbw_low"]
