"""The fixed vocabulary of failure categories (extend it only by adding names)."""

from __future__ import annotations

CATEGORIES: tuple[str, ...] = (
    "device_oom",
    "hccl_timeout",
    "collective_timeout",
    "port_in_use",
    "device_error",
    "npu_unavailable",
    "ray_actor_died",
    "ray_gcs_unreachable",
    "raylet_died",
    "config_key_error",
    "config_value_error",
    "missing_module",
    "disk_full",
    "checkpoint_save_failed",
    "segfault",
    "host_oom",
    "gpu_unavailable",
    "resource_limit",
    "hccl_error",
    "ray_task_failed",
    "python_exception",
    "stalled",
)
