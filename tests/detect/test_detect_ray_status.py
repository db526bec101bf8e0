"""`ray status` parser against every real capture in tests/fixtures/ray-status."""

from __future__ import annotations

from detect_helpers import capture, fixture_names
from verlctl.detect.ray_status import parse_amount, parse_ray_status

GiB, TiB, MiB = 2**30, 2**40, 2**20


def test_every_ray_fixture_has_a_test() -> None:
    assert fixture_names("ray-status") == [
        "ray-status-2node-16gpu-verl-docs.txt",
        "ray-status-2node-8gpu-ray2.44.1-with-prompts-vllm-issue15385.txt",
        "ray-status-v-3node-autoscaler-healthy-ray-issue35411.txt",
    ]


def test_verl_docs_two_nodes_sixteen_gpus_indented() -> None:
    s = parse_ray_status(capture("ray-status", "ray-status-2node-16gpu-verl-docs.txt"))
    assert s.timestamp == "2025-04-09 09:25:37.694016"
    assert s.node_count == 2
    assert sorted(s.active) == [
        "node_1eb4d7d07e793114c23a89d1a41f1f76acf6ef5b35af844a4ee8e4ba",
        "node_ef382ffd687d8f6b060c1b68e63ada7341b936fe5b1901dd04de1027",
    ]
    assert (s.used("CPU"), s.total("CPU")) == (0.0, 360.0)
    assert (s.used("GPU"), s.total("GPU")) == (0.0, 16.0)
    assert s.total("NPU") is None
    assert s.usage["memory"].unit == "bytes" and s.total("memory") == 3.39 * TiB
    assert s.total("object_store_memory") == 372.53 * GiB
    assert s.pending == [] and s.failures == [] and s.demands == [] and s.nodes == []
    assert s.warnings == []


def test_ray_2_44_paste_with_prompts() -> None:
    s = parse_ray_status(
        capture("ray-status", "ray-status-2node-8gpu-ray2.44.1-with-prompts-vllm-issue15385.txt")
    )
    assert s.ray_version == "2.44.1"
    assert s.node_count == 2
    assert (s.total("CPU"), s.total("GPU")) == (96.0, 8.0)
    assert s.total("memory") == 1.04 * TiB
    assert s.demands == []  # '(no resource demands)'; the following prompt/ps lines are not demands
    assert s.warnings == []


def test_verbose_three_nodes_with_cut_last_block() -> None:
    s = parse_ray_status(capture("ray-status", "ray-status-v-3node-autoscaler-healthy-ray-issue35411.txt"))
    assert s.active == {"ray.head.default": 1, "ray.worker.default": 2}
    assert s.node_count == 3
    assert (s.used("CPU"), s.total("CPU"), s.total("GPU")) == (0.0, 6.0, None)
    assert s.used("object_store_memory") == 1.87 * GiB
    assert [(n.address, n.node_type, n.is_idle) for n in s.nodes] == [
        ("10.0.3.87", "ray.head.default", False),
        ("10.0.2.228", "ray.worker.default", False),
        ("10.0.2.207", "ray.worker.default", None),  # cut before 'Is Idle:'
    ]
    assert [n.usage["CPU"].total for n in s.nodes] == [2.0, 2.0, 2.0]
    assert s.nodes[1].usage["object_store_memory"].used == 319.87 * MiB
    assert "object_store_memory" not in s.nodes[2].usage and "obj" not in s.nodes[2].usage
    assert any("'obj…'" in w for w in s.warnings)


def test_npus_reported_by_a_newer_ray() -> None:
    # derived from the docs capture: an Ascend cluster shows NPU lines and placement-group notes
    text = capture("ray-status", "ray-status-2node-16gpu-verl-docs.txt").replace(
        "     0.0/16.0 GPU\n",
        "     8.0/16.0 NPU (8.0 used of 16.0 reserved in placement groups)\n",
    )
    s = parse_ray_status(text)
    assert (s.used("NPU"), s.total("NPU"), s.usage["NPU"].available) == (8.0, 16.0, 8.0)
    assert s.usage["NPU"].note == "8.0 used of 16.0 reserved in placement groups"


def test_parse_amount() -> None:
    assert parse_amount("0B") == (0.0, "bytes")
    assert parse_amount("16.0") == (16.0, None)
    assert parse_amount("1.5GiB") == (1.5 * GiB, "bytes")
    assert parse_amount("abc") is None
