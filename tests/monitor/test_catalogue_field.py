"""The catalogue's signatures from the field reference (reference/field-failures-and-scale-out.md §1 and its
regex list) on real error text (tests/fixtures/errors-field, each with its source), root cause first, and
whether recovery may act on each."""

from __future__ import annotations

import pytest

from monitor_helpers import capture, fixture_names
from verlctl.failures import CATEGORIES
from verlctl.monitor.catalogue import CATEGORY_NAMES, classify_lines, recovery_for
from verlctl.monitor.recovery import History, decide
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS

# file -> the categories found, root cause first (decided by reading each file).
EXPECTED = {
    # a previous run still held the NPUs; the HCCL init failure ('error code is 7', ERR02200) is the consequence
    "hccp-EJ0001-last-training-process-running-verl-pr332.txt": ["device_held", "hccl_error"],
    # two jobs on HCCL's default port 60000: EJ0003 is the cause of HcclGetRootInfo's error code 11
    "hccl-EJ0003-bind-ip-port-60000-vllm-ascend-issue405.txt": ["hccl_port_bind", "hccl_error"],
    # EI0002: the remote rank never sent its notify; 507048 is the synchronize that surfaced it
    "npu-507048-EI0002-notify-wait-timeout-vllm-ascend-issue1443.txt": ["hccl_timeout", "npu_task_timeout"],
    "npu-107020-task-timeout-ascend-pytorch-issue43.txt": ["npu_task_timeout"],
    "vllm-free-memory-less-than-desired-utilization-pytorch-issue175666.txt": ["device_oom"],
    "vllm-ascend-negative-kv-cache-memory-issue9372.txt": ["device_oom"],
    "vllm-cumem-allocator-oom-on-wake-up-verl-issue302.txt": ["device_oom"],
    "weight-bucket-too-small-verl-ascend-faq.txt": ["weight_bucket_too_small"],
    "ray-version-mismatch-python-patch-ray-issue50511.txt": ["ray_version_mismatch"],
    "ray-no-node-types-can-fulfill-tinyzero-issue94.txt": ["ray_resources_unavailable"],
    "ray-total-available-gpus-less-than-desired-verl-issue2515.txt": ["ray_resources_unavailable"],
    "vllm-ascend-camem-allocator-not-available-issue556.txt": ["sleep_mode_unavailable"],
    "nccl-socketStartConnect-connection-abort-nccl-tests-issue166.txt": ["nccl_network"],
    # EI0009: rank 1 could not create its link to rank 0; the rollout's collective_rpc failure is the consequence
    "hccl-EI0009-transport-init-create-dest-link-vllm-ascend-issue3162.txt": ["hccl_error"],
}


def test_every_field_fixture_is_listed() -> None:
    assert sorted(EXPECTED) == fixture_names("errors-field")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_field_fixture_categories_root_cause_first(name: str) -> None:
    found = classify_lines(capture("errors-field", name).splitlines())
    assert [f.category for f in found] == EXPECTED[name]


def test_messages_carry_the_numbers() -> None:
    [oom] = classify_lines(capture("errors-field",
                                   "vllm-free-memory-less-than-desired-utilization-pytorch-issue175666.txt").splitlines())
    assert oom.message == "the rollout engine wants 19.84 GiB (utilization 0.9) but only 19.77 GiB are free"
    assert "train.rollout_memory_utilization" in oom.hint and "below 0.9" in oom.hint
    [kv] = classify_lines(capture("errors-field", "vllm-ascend-negative-kv-cache-memory-issue9372.txt").splitlines())
    assert "by 0.87 GiB" in kv.message and "train.rollout_tensor_parallel" in kv.hint
    [gpus] = classify_lines(capture("errors-field",
                                    "ray-total-available-gpus-less-than-desired-verl-issue2515.txt").splitlines())
    assert gpus.message == "Ray sees 8.0 GPUs, the run wants 16"
    [link] = classify_lines(capture("errors-field",
                                    "hccl-EI0009-transport-init-create-dest-link-vllm-ascend-issue3162.txt").splitlines())
    assert link.message.startswith("HCCL could not create the transport link to rank 0 (EI0009)")
    port = classify_lines(capture("errors-field", "hccl-EJ0003-bind-ip-port-60000-vllm-ascend-issue405.txt").splitlines())
    assert "HCCL_HOST_SOCKET_PORT_RANGE" in port[0].hint


def test_recovery_may_act_only_where_a_restart_can_succeed() -> None:
    assert recovery_for("device_oom") == "ladder"
    assert {recovery_for(c) for c in ("device_held", "npu_task_timeout")} == {"restart"}
    for never in ("hccl_port_bind", "weight_bucket_too_small", "ray_version_mismatch", "ray_resources_unavailable",
                  "sleep_mode_unavailable", "nccl_network", "config_key_error"):
        assert recovery_for(never) == "never", never
    # The rollout-budget errors are device_oom signatures, so the watcher's OOM ladder acts on them.
    spec = load_spec(None, flags=dict(BASE_PATHS), environ={}).spec
    assert decide("device_oom", spec, {}, History()).add_feature == "offload"
    # The restartable ones are valid recovery.restart_on names; all new names are in the vocabulary.
    new = ["device_held", "npu_task_timeout", "hccl_port_bind", "ray_version_mismatch", "ray_resources_unavailable",
           "weight_bucket_too_small", "sleep_mode_unavailable", "nccl_network"]
    assert set(new) <= set(CATEGORIES) and set(new) <= set(CATEGORY_NAMES)
