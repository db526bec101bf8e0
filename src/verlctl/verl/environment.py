"""Environment variables the launch scripts export, per device (``reference/verl.md`` §5.2, §6).

NPU rows follow verl's multi-node Ascend guide, v0.9.0
``docs/ascend_tutorial/model_support/examples/multi-machine_task_startup_practice.rst`` ("the doc" below:
its env block exports RAY_DEDUP_LOGS=0, HYDRA_FULL_ERROR=1, TASK_QUEUE_ENABLE=1,
HCCL_ASYNC_ERROR_HANDLING=0, HCCL_EXEC_TIMEOUT=3600, HCCL_CONNECT_TIMEOUT=3600, the two HCCL port ranges,
NOSET + ASCEND_RT_VISIBLE_DEVICES=0,...,7, the socket interfaces and ``ulimit -n 32768``), and the
one-step-off NPU script (v0.7.0 and v0.9.0
``recipe/one_step_off_policy/shell/grpo_qwen3_8b_gsm8k_fsdp2_8_8_npu.sh:4-6``: HCCL_EXEC_TIMEOUT=60000,
HCCL_CONNECT_TIMEOUT=7200).
"""

from __future__ import annotations

from dataclasses import dataclass

from verlctl.verl.modes import is_disaggregated
from verlctl.verl.table import Ctx, When, when


@dataclass(frozen=True)
class EnvRow:
    name: str
    value: object  # constant or Callable[[Ctx], str | None]; None = not exported
    when: When
    note: str = ""

    def resolve(self, ctx: Ctx) -> str | None:
        v = self.value(ctx) if callable(self.value) else self.value
        return None if v is None else str(v)


def _devices(c: Ctx) -> str:
    return ",".join(str(d) for d in c.spec.cluster.devices)


def _ifname(c: Ctx) -> str | None:
    return c.spec.cluster.socket_ifname


def _all_devices(c: Ctx) -> bool:
    """cluster.devices is 0..n-1: Ray's accelerator ids are then also the ordinals each worker sees."""
    return list(c.spec.cluster.devices) == list(range(len(c.spec.cluster.devices)))


def _oso(c: Ctx) -> bool:
    """A disaggregated mode (one-step-off and its successors separate_async / fully_async)."""
    return is_disaggregated(c.spec.mode)


NPU = {"npu"}
GPU = {"gpu"}

ENV_ROWS: tuple[EnvRow, ...] = (
    EnvRow("ASCEND_RT_VISIBLE_DEVICES", _devices, when(devices=NPU), "devices verl may use on each node"),
    EnvRow(
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
        "1",
        when(devices=NPU, test=lambda c: _all_devices(c) and not _oso(c)),
        "verl sets each worker's device itself (single_controller/base/worker.py: set_device(ray accelerator id)); "
        "only with devices 0..n-1, where that id is also the visible ordinal (a subset lets Ray set visibility); "
        "never in one-step-off mode: its official NPU script (recipe/one_step_off_policy/shell/"
        "grpo_qwen3_8b_gsm8k_fsdp2_8_8_npu.sh, 8 rollout + 8 training NPUs on one A3 node) leaves it unset, and with "
        "it a disaggregated placement puts tensors on the wrong device (verl#2971, verl-omni PR#227)",
    ),
    EnvRow("CUDA_VISIBLE_DEVICES", _devices, when(devices=GPU), "devices verl may use on each node"),
    EnvRow("HCCL_SOCKET_IFNAME", _ifname, when(devices=NPU)),
    EnvRow("GLOO_SOCKET_IFNAME", _ifname, when()),
    EnvRow("TP_SOCKET_IFNAME", _ifname, when(devices=NPU)),
    EnvRow("NCCL_SOCKET_IFNAME", _ifname, when(devices=GPU)),
    EnvRow(
        "HCCL_CONNECT_TIMEOUT",
        lambda c: "7200" if _oso(c) else "3600",
        when(devices=NPU),
        "seconds: 3600 (the doc), 7200 for one-step-off (its official NPU script)",
    ),
    EnvRow(
        "HCCL_EXEC_TIMEOUT",
        lambda c: "60000" if _oso(c) else "3600",
        when(devices=NPU),
        "seconds: 3600 (the doc), 60000 for one-step-off (its official NPU script)",
    ),
    EnvRow("HCCL_ASYNC_ERROR_HANDLING", "0", when(devices=NPU), "the doc's HCCL block"),
    EnvRow("TASK_QUEUE_ENABLE", "1", when(devices=NPU), "Ascend task dispatch: 1 in graph mode, 2 in eager (the doc)"),
    EnvRow("HCCL_HOST_SOCKET_PORT_RANGE", "60000-60050", when(devices=NPU), "avoids port clashes between jobs"),
    EnvRow("HCCL_NPU_SOCKET_PORT_RANGE", "61000-61050", when(devices=NPU)),
    EnvRow("RAY_DEDUP_LOGS", "0", when(), "every worker's log lines reach the training log (the doc)"),
    EnvRow(
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S",
        "0",
        when(),
        "Ray 2.60's `ray start --block` drains its node on SIGTERM for up to 30 s (ray/_private/node.py, for Ray "
        "Serve); verl serves nothing, and a worker node whose head has gone waits all of it: the stop of a "
        "multi-node run, and each Slurm relaunch, took 30 s longer (older Rays ignore it)",
    ),
    EnvRow("HYDRA_FULL_ERROR", "1", when(), "full Hydra errors, for diagnosis (the doc)"),
    # as verl's 0.7.0 scripts; vLLM 0.24 (the 0.9.1 stack) has no such variable and logs "Unknown vLLM environment
    # variable detected: VLLM_USE_V1" (vllm/envs.py validate_environ; an error with fail_on_environ_validation)
    EnvRow("VLLM_USE_V1", "1", when(versions={"0.7.0"})),
    EnvRow("VLLM_ASCEND_ENABLE_NZ", "0", when(devices=NPU, versions={"0.7.0"}), "as the 0.7.0 NPU scripts"),
)

#: ``ulimit -n`` the start script raises the open-file limit to (the doc).
NOFILE_LIMIT = 32768

#: CANN environment scripts sourced (when present) before anything else on NPU.
CANN_ENV_SCRIPTS: tuple[str, ...] = (
    "/usr/local/Ascend/ascend-toolkit/set_env.sh",
    "/usr/local/Ascend/nnal/atb/set_env.sh",
    "/usr/local/Ascend/cann/ascend-toolkit/set_env.sh",
    "/usr/local/Ascend/cann/nnal/atb/set_env.sh",
)


def device_env(ctx: Ctx) -> dict[str, str]:
    out: dict[str, str] = {}
    for row in ENV_ROWS:
        if row.when.matches(ctx):
            v = row.resolve(ctx)
            if v is not None:
                out[row.name] = v
    return out


def proxy_env(ctx: Ctx) -> dict[str, str]:
    p = ctx.spec.container.proxy
    out: dict[str, str] = {}
    for value, names in ((p.http, ("http_proxy", "HTTP_PROXY")), (p.https, ("https_proxy", "HTTPS_PROXY"))):
        if value:
            for n in names:
                out[n] = value
    if p.no_proxy:
        out["no_proxy"] = out["NO_PROXY"] = p.no_proxy
    return out


SECRET_ENV = frozenset({"SWANLAB_API_KEY"})


def swanlab_env(ctx: Ctx) -> dict[str, str]:
    """SwanLab settings; they go to the 0600 env file beside the scripts, never into a script.

    verl reads SWANLAB_API_KEY / SWANLAB_LOG_DIR / SWANLAB_MODE; the SwanLab SDK reads the host variables.
    The key is exported only in cloud mode: verl logs in whenever SWANLAB_API_KEY is set, which an
    offline or local run must not do.
    """
    sw = ctx.spec.logging.swanlab
    if not sw.enabled:
        return {}
    # Not SWANLAB_PROJECT: SwanLab >= 0.8 reads SWANLAB_<field>_<sub> as nested settings and fails on a
    # plain SWANLAB_PROJECT ("error parsing value for field project"); verl passes the project itself.
    out: dict[str, str] = {"SWANLAB_MODE": sw.mode}
    if sw.log_dir:
        out["SWANLAB_LOG_DIR"] = sw.log_dir
    if sw.workspace:  # unset: SwanLab uses the user's own workspace
        out["SWANLAB_WORKSPACE"] = sw.workspace
    if sw.host:
        out["SWANLAB_HOST"] = sw.host
        out["SWANLAB_WEB_HOST"] = sw.host
        out["SWANLAB_API_HOST"] = sw.host + "/api"
    if sw.mode == "cloud" and sw.api_key is not None and sw.api_key.get_secret_value():
        out["SWANLAB_API_KEY"] = sw.api_key.get_secret_value()
    return out
