"""The error catalogue's data: failure signatures of verl runs, root causes first.

Each :class:`Category` has regex :class:`Signature` s (each with the literal ``anchors`` one of which every
matching line contains, and real ``examples``), a message and a concrete hint naming the verlctl spec key or
feature to change. The order of :data:`CATALOGUE` is the root-cause order: a category earlier in the list is a
possible cause of the later ones, never a consequence of them, e.g.

* ``disk_full`` causes ``checkpoint_save_failed``;
* ``device_oom`` / ``host_oom`` / ``segfault`` / ``resource_limit`` on one rank make the other ranks time out
  (``hccl_timeout``, ``collective_timeout``, ``device_error`` stream-sync timeouts);
* any death of a worker shows up on the driver as ``ray_actor_died`` and ``ray_task_failed`` (wrappers);
* ``ray_gcs_unreachable`` makes the raylet exit (``raylet_died``).
* ``ray_start_timeout`` (a node's Ray that never came up) leaves the GCS unreachable and devices missing
  (``ray_devices_missing``, start_verl.sh's own "only N of M devices joined Ray").

``python_exception`` is a fallback: it is reported only when nothing more specific was found.

This module is data and imports nothing of verlctl; :mod:`verlctl.monitor.catalogue` (the matcher and the
line classifier) applies it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

#: What the head's ``ray start --block`` prints when one of the Ray daemons it launched (gcs_server, raylet, ...)
#: has exited; it then kills the rest and exits (ray/scripts/scripts.py, ``start``: the ``if block:`` loop over
#: ``node.dead_processes()``; Ray 2.x). The GCS is gone from that line on.
RAY_DAEMONS_EXITED = "Some Ray subprocesses exited unexpectedly"

# Patterns that need a line start accept a Ray prefix ``(X pid=N) ``, torch's ``[rankN]: `` or a tqdm ``\r``.
_BOL = r"(?:^|\r|\) |\]: ?)[ \t]*"
#: The process a line comes from: Ray's ``(Name pid=N, ip=A)`` or torch's ``[rankN]:`` prefix, then one space.


@dataclass(frozen=True)
class Signature:
    """One way a failure shows up in a log line."""

    pattern: str  # Python regex, searched in the line (ANSI codes removed)
    anchors: tuple[str, ...]  # literals: a line the pattern matches contains at least one of them
    examples: tuple[str, ...] = ()  # real lines (fixtures, issues, upstream sources) the pattern must match
    message: str | None = None  # str.format template over the named groups; default: the category's
    hint: str | None = None  # same, for the hint
    ere: str | None = None  # grep -E form, when the pattern is not expressible in POSIX ERE
    #: a detail of the incident it joins (Ray's ``class_name:`` of a died actor): its message replaces the
    #: incident's (and that of every earlier finding of the category that names no such detail yet)
    detail: bool = False

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern)


@dataclass(frozen=True)
class Silence:
    """What a known-harmless message hides: these categories, on the next ``lines`` lines (its traceback)."""

    categories: tuple[str, ...]
    lines: int


@dataclass(frozen=True)
class Category:
    name: str
    message: str
    hint: str
    signatures: tuple[Signature, ...]
    fallback: bool = False  # reported only when no other category was found
    #: a known-harmless message: never a finding; it silences categories for the next lines
    silence: Silence | None = None
    #: a line saying the last step ran: never a finding; what follows it is the run's teardown
    marks_finished: bool = False
    #: after such a line, a known teardown message: no finding, and it takes back the fallback traceback
    #: (``python_exception``) it ends, when that started after the mark within the fold window
    teardown_after_finish: bool = False
    #: a wrapper (Ray's ``RayTaskError`` / ``ActorDiedError``, a driver's re-raise): the exception it carries,
    #: the next exception line of the same process (or one of the type it names), is the root cause
    wrapper: bool = False


def _sig(pattern: str, *anchors: str, examples: Iterable[str] = (), **kw: Any) -> Signature:
    return Signature(pattern, tuple(anchors), tuple(examples), **kw)


#: The OOM ladder's rungs in the device OOM hint, in order (verlctl.verl.features.OOM_LADDER).
_OOM_RUNGS = ("offload", "recompute")
_OOM_LADDER_WORDS = "(the watcher's OOM ladder does this: `verlctl launch --watch`, `verlctl watch`)"
_OOM_MANUAL_HINT = (
    "lower `train.micro_batch_size_per_device`, `train.max_response_length` or the rollout `gpu_memory_utilization` "
    "(`train.rollout_memory_utilization`), or raise TP (`train.tensor_parallel` / `train.rollout_tensor_parallel`)"
)
_OOM_HINT = (
    "enable the `offload` feature, then `recompute` " + _OOM_LADDER_WORDS + "; or " + _OOM_MANUAL_HINT
)


def oom_hint(tried: Iterable[str] = (), watching: bool = False, advice: Iterable[str] = ()) -> str:
    """The device OOM hint as it stands after what recovery did: ``tried`` the ladder's features already on
    (added by it, or the user's), ``watching`` a watcher is climbing the ladder now, ``advice`` the watcher's
    advice when it gave up (then that leads, and no rung already tried is advised again)."""
    tried = [f for f in tried if f in _OOM_RUNGS]
    done = f" (the OOM ladder already tried {', '.join(tried)})" if tried else ""
    advice = list(advice)
    if advice:
        return "; ".join(advice) + done
    left = [f for f in _OOM_RUNGS if f not in tried]
    if not left:
        return _OOM_MANUAL_HINT + done
    rungs = "`" + "`, then `".join(left) + "`"
    if watching:
        return (f"nothing to do yet: the watcher's OOM ladder restarts the run with {rungs}{done}; if it gives up: "
                + _OOM_MANUAL_HINT)
    if not tried:
        return _OOM_HINT
    return f"enable {rungs} {_OOM_LADDER_WORDS}{done}; or {_OOM_MANUAL_HINT}"

#: The catalogue, root causes first (see the module docstring).
CATALOGUE: tuple[Category, ...] = (
    Category(
        "ray_npu_probe_noise",
        "Ray could not identify the NPU model (harmless)",
        "nothing to do: Ray's NPU accelerator probe needs pyACL only to name the chip type",
        (
            _sig(
                r"Failed to detect NPU type",
                "Failed to detect NPU type",
                examples=("2026-11-30 01:29:32,505\tERROR npu.py:82 -- Failed to detect NPU type.",),
            ),
        ),
        silence=Silence(("python_exception", "missing_module"), lines=6),
    ),
    Category(
        "run_finished",
        "the last training step ran (verl's final validation line)",
        "nothing to do: what follows is the run's teardown",
        (
            _sig(
                r"Final validation metrics",
                "Final validation metrics",
                examples=(
                    "(TaskRunnerV1) 'Final validation metrics: None'",
                ),
            ),
        ),
        marks_finished=True,
    ),
    Category(
        "verl_optional_engine_noise",
        "verl could not load an optional training engine it does not use (harmless)",
        "nothing to do: verl 0.9.1 tries every engine package at import (torchtitan, veomni, nemo_automodel, "
        "megatron) and warns for each one that is absent; only the engine of `strategy` has to be installed",
        (
            _sig(
                r"UserWarning: \w+ engine is not available: \w*(?:Error|Exception)\(",
                "engine is not available:",
                examples=(
                    "(TaskRunnerV1 pid=878) /opt/verl-venv/lib/python3.11/site-packages/verl/workers/engine/"
                    "__init__.py:32: UserWarning: torchtitan engine is not available: "
                    "ModuleNotFoundError(\"No module named 'torchtitan'\")",
                ),
            ),
        ),
        silence=Silence(("python_exception", "missing_module"), lines=1),
    ),
    Category(
        "disk_full",
        "the disk is full (or a disk quota is exhausted)",
        "free space where the job writes: delete old `global_step_*` directories under `paths.checkpoints` or keep "
        "fewer (`trainer.max_actor_ckpt_to_keep` in `extra_overrides`), move Ray's temp dir off a small `/tmp` "
        "(`ray start --temp-dir`), and check `df -h` inside the container",
        (
            _sig(
                r"No space left on device",
                "No space left on device",
                examples=("OSError: [Errno 28] No space left on device",),
            ),
            _sig(
                r"Disk quota exceeded",
                "Disk quota exceeded",
                examples=("OSError: [Errno 122] Disk quota exceeded: '/mnt/ckpt/global_step_20/actor'",),
            ),
        ),
    ),
    Category(
        "ray_version_mismatch",
        "a node runs another Ray or Python version than the Ray head (it cannot join the cluster)",
        "run the same image on every node: Ray refuses even a Python patch-level difference and "
        "`RAY_IGNORE_VERSION_MISMATCH` does not apply to `ray start`; compare `python -V` and `ray --version` in "
        "each node's container (`container.image`)",
        (
            _sig(
                r"Version mismatch: The cluster was started with",
                "Version mismatch: The cluster was started with",
                examples=("RuntimeError: Version mismatch: The cluster was started with:",),
            ),
        ),
    ),
    Category(
        "ray_resources_unavailable",
        "Ray has fewer accelerators (or CPUs) than the run asks for",
        "wait until every node has joined (`ray status` shows nnodes x devices), and make the run's counts match "
        "the cluster: `cluster.nodes`, `cluster.devices` (trainer.nnodes x n_gpus_per_node); on Ascend every node "
        "needs `ray start --resources='{\"NPU\": N}'` (verlctl's start script does this)",
        (
            _sig(
                r"Total available (?P<kind>GPUs|NPUs) (?P<have>[\d.]+) is less than total desired (?:GPUs|NPUs) "
                r"(?P<want>\d+)",
                "Total available",
                examples=("ValueError: Total available GPUs 8.0 is less than total desired GPUs 16",),
                message="Ray sees {have} {kind}, the run wants {want}",
            ),
            _sig(
                r"No available node types can fulfill resource request",
                "No available node types can fulfill",
                examples=(
                    "(autoscaler +8m46s) Error: No available node types can fulfill resource request "
                    "defaultdict(<class 'float'>, {'CPU': 2.0, 'GPU': 2.0}). Add suitable node types to this "
                    "cluster to resolve this issue.",
                ),
            ),
        ),
    ),
    Category(
        "device_held",
        "the NPUs are still held by a previous training process (HCCP could not start: EJ0001)",
        "stop the previous run (`verlctl stop`, or the process that `npu-smi info` lists on these NPUs), wait at "
        "least 10 s after it exits, then start again; verlctl's recovery waits for the devices to be released "
        "(`recovery.memory_release_timeout_s`) before a restart",
        (
            _sig(
                r"EJ0001|Failed to initialize the HCCP process",
                "EJ0001",
                "Failed to initialize the HCCP process",
                examples=(
                    "(TaskRunner pid=467613) EJ0001: [PID: 468348] 2025-04-24-16:14:56.975.866 Failed to "
                    "initialize the HCCP process. Reason: Maybe the last training process is running.",
                ),
            ),
        ),
    ),
    Category(
        "device_oom",
        "the NPU/GPU ran out of device memory",
        _OOM_HINT,
        (
            _sig(
                r"Free memory on device (?P<dev>\S*) ?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less "
                r"than desired GPU memory utilization \((?P<util>[\d.]+), (?P<want>[\d.]+) GiB\)",
                "less than desired GPU memory utilization",
                examples=(
                    "ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on startup is less than desired "
                    "GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU "
                    "memory used by other processes.",
                    "ValueError: Free memory on device (31.44/47.38 GiB) on startup is less than desired GPU "
                    "memory utilization (0.95, 45.01 GiB).",
                ),
                message="the rollout engine wants {want} GiB (utilization {util}) but only {free} GiB are free",
                hint="what the training side keeps on the device during the rollout leaves too little: enable the "
                "`offload` feature (the OOM ladder does), or lower `train.rollout_memory_utilization` below {util} "
                "(`verlctl check` estimates the fit), and make sure no stale process holds the device",
            ),
            _sig(
                r"Available KV cache memory: -(?P<gib>[\d.]+) GiB",
                "Available KV cache memory: -",
                examples=("Available KV cache memory: -0.87 GiB",),
                message="the rollout weights exceed the rollout memory budget by {gib} GiB (no room for a KV cache)",
                hint="raise `train.rollout_tensor_parallel` (weights split over more devices) or "
                "`train.rollout_memory_utilization`, or use larger devices; `verlctl check` shows the rollout budget",
            ),
            _sig(
                r"(?i:CUDA Error: out of memory at \S*cumem_allocator)",
                "cumem_allocator",
                examples=(
                    "cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
                    "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
                ),
                message="vLLM ran out of device memory while waking up (cumem allocator)",
                hint="the actor's states and vLLM do not fit together: enable the `offload` feature (the OOM ladder "
                "does), or lower `train.rollout_memory_utilization` (verl#302 needed 0.45)",
                ere=r"[Cc][Uu][Dd][Aa] [Ee][Rr][Rr][Oo][Rr]: out of memory at [^[:space:]]*cumem_allocator",
            ),
            _sig(
                r"(?P<device>CUDA|NPU|HIP|XPU|GPU) out of memory",
                "CUDA out of memory",
                "NPU out of memory",
                "HIP out of memory",
                "XPU out of memory",
                "GPU out of memory",
                examples=(
                    "RuntimeError: NPU out of memory. Tried to allocate 3.47 GiB (NPU 0; 60.97 GiB total capacity; "
                    "58.92 GiB already allocated; 58.92 GiB current active; 1.66 GiB free; 58.95 GiB reserved in "
                    "total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to "
                    "avoid fragmentation.",
                    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total "
                    "capacty of 4.00 GiB of which 41.56 MiB is free.",
                    "NPU out of memory. NPUWorkspaceAllocator tried to allocate 180.00 MiB(NPU 1; 60.96 GiB total "
                    "capacity; 86.81 MiB free). If you want to reduce memory usage, take a try to set the "
                    "environment variable TASK_QUEUE_ENABLE=1.",
                ),
                message="{device} out of memory",
            ),
            _sig(
                r"CUDA error: out of memory",
                "CUDA error: out of memory",
                examples=("RuntimeError: CUDA error: out of memory",),
            ),
            _sig(
                r"torch\.(?:cuda\.|npu\.)?OutOfMemoryError",
                "OutOfMemoryError",
                examples=("torch.OutOfMemoryError: The Inner error is reported as above.",),
            ),
            _sig(
                r"Memory_Allocation_Failure\(EL0004\)|EL0004: ",
                "EL0004",
                examples=(
                    "[PID: 10652] 2025-12-03-12:16:41.842.173 Memory_Allocation_Failure(EL0004): Failed to "
                    "allocate memory.",
                ),
                message="CANN could not allocate device memory (EL0004)",
            ),
            _sig(r"PTA memory error", "PTA memory error", examples=("ERR00006 PTA memory error",)),
            _sig(
                r"No available memory for the cache blocks"
                r"|larger than the maximum number of tokens that can be stored in KV cache"
                r"|larger than the available KV cache memory"
                r"|Not enough memory\. Please try to increase --mem-fraction-static",
                "No available memory for the cache blocks",
                "KV cache",
                "Not enough memory. Please try",
                examples=(
                    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                    "when initializing the engine.",
                    "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that "
                    "can be stored in KV cache (21824). Try increasing `gpu_memory_utilization` or decreasing "
                    "`max_model_len` when initializing the engine.",
                ),
                message="the rollout engine has no device memory left for its KV cache",
                hint="raise the rollout `gpu_memory_utilization` (`train.rollout_memory_utilization`), or lower "
                "`train.max_response_length` (the rollout's max model length), or raise "
                "`train.rollout_tensor_parallel`; the `offload` feature frees the training weights during "
                "rollout",
            ),
        ),
    ),
    Category(
        "host_oom",
        "the host ran out of RAM (a process was killed for memory, not a device OOM)",
        "lower host-memory use: fewer/lighter dataloader and reward workers, smaller `train.train_batch_size`, "
        "or turn the CPU `offload` feature off if it is on; give the container more RAM; Ray kills workers above "
        "`RAY_memory_usage_threshold` (default 0.95) of the node's memory",
        (
            _sig(
                r"ray\.exceptions\.OutOfMemoryError|Task was killed due to the node running low on memory",
                "OutOfMemoryError",
                "Task was killed due to the node running low on memory",
                examples=(
                    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
                ),
            ),
            _sig(
                r"Workers \(tasks / actors\) killed due to memory pressure \(OOM\)",
                "Workers (tasks / actors) killed due to memory pressure",
                examples=(
                    "(raylet) [2025-01-01 10:00:00,000 E 123 123] (raylet) node_manager.cc:3069: 1 Workers "
                    "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other "
                    "reasons at node (ID: 5e2f, IP: 10.0.0.1) over the last time period.",
                ),
            ),
            _sig(
                r"Worker exit type: NODE_OUT_OF_MEMORY",
                "NODE_OUT_OF_MEMORY",
                examples=(
                    "The actor is dead because its worker process has died. Worker exit type: "
                    "NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on "
                    "memory.",
                ),
            ),
            _sig(
                r"Out of memory: Killed process \d+",
                "Out of memory: Killed process",
                examples=("[12345.678901] Out of memory: Killed process 4242 (python3) total-vm:1234kB",),
            ),
            _sig(
                _BOL + r"MemoryError\b",
                "MemoryError",
                examples=("MemoryError",),
                ere=r"(^|\) |\]: ?)[[:space:]]*MemoryError",
            ),
        ),
    ),
    Category(
        "dataloader_worker_killed",
        "a DataLoader worker process was killed (mid-run, usually the host's OOM killer)",
        "check the host's memory (`dmesg`, the container's memory limit): lower "
        "`data.dataloader_num_workers` (extra_overrides; verl's default 8) or `train.train_batch_size`, or give the "
        "container more RAM. After the last step (verl's 'Final validation metrics') this is the normal teardown "
        "of a finished run and is not reported",
        (
            _sig(
                r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: (?P<signal>\w[\w ]*)",
                "DataLoader worker (pid",
                examples=(
                    "(TaskRunnerV1) RuntimeError: DataLoader worker (pid 13197) is killed by signal: Killed.",
                ),
                message="a DataLoader worker (pid {pid}) was killed by signal: {signal}",
            ),
        ),
        teardown_after_finish=True,
    ),
    Category(
        "missing_module",
        "a Python module or shared library is missing",
        "install the missing package in the image that runs the job (Ray workers use the driver's environment), "
        "or pick an image that has it",
        (
            _sig(
                # Not 'acl': Ray's NPU accelerator probe logs "Failed to detect NPU type" with
                # "No module named 'acl'" whenever pyACL is absent, and the job runs on regardless.
                r"No module named '?(?!acl'?(?:$|\s))(?P<module>[\w.]+)'?",
                "No module named",
                ere=r"No module named '?[[:alnum:]_.]+'?",
                examples=(
                    "ModuleNotFoundError: No module named 'torch_npu._C'",
                    "ModuleNotFoundError: No module named 'vllm_ascend.distributed'",
                ),
                message="Python module '{module}' is not importable",
                hint="install `{module}` in the job's image/venv (the Ray workers use the same environment); "
                "`torch_npu._C` missing means Python imported a torch_npu source tree instead of the "
                "installed package: start the job from another directory",
            ),
            _sig(
                r"Error: cannot import name '(?P<name>[^']+)' from '(?P<module>[^']+)'",
                "Error: cannot import name",
                examples=(
                    "ImportError: cannot import name 'ProcessorMixin' from 'transformers' "
                    "(/usr/local/lib/python3.10/dist-packages/transformers/__init__.py)",
                ),
                message="cannot import '{name}' from '{module}': the installed version does not match",
                hint="align the version of `{module}` with the one the verl release expects (see its "
                "requirements / the image's tested stack)",
            ),
            _sig(
                r"Error: (?P<lib>lib[\w.+-]*\.so[\w.]*): cannot open shared object file",
                "Error: lib",
                examples=(
                    "ImportError: libhccl.so: cannot open shared object file: No such file or directory",
                ),
                message="shared library {lib} cannot be loaded",
                hint="source the CANN environment before starting Ray and the job "
                "(`source /usr/local/Ascend/ascend-toolkit/set_env.sh` and "
                "`source /usr/local/Ascend/nnal/atb/set_env.sh`), or fix `LD_LIBRARY_PATH` in the image",
            ),
        ),
    ),
    Category(
        "config_key_error",
        "a Hydra override names a key that the config does not have",
        "check the spelling of the key and the verl version (keys differ between releases); use `+key=value` "
        "to add a key that does not exist yet",
        (
            _sig(
                r"Could not override '(?P<key>[^']+)'",
                "Could not override",
                examples=("Could not override 'actor_rollout_ref.rollout.n'.",),
                message="Hydra could not override '{key}': no such key in this verl version's config",
                hint="check the spelling of `{key}` and the verl version (`verl_version` in the spec); if the "
                "key is new, add it with a `+` prefix: `+{key}=...`",
            ),
            _sig(
                r"Could not append to config\. An item is already at '(?P<key>[^']+)'",
                "Could not append to config",
                examples=(
                    "Could not append to config. An item is already at "
                    "'actor_rollout_ref.rollout.enable_prefix_caching'.",
                ),
                message="Hydra could not append '{key}': the key already exists",
                hint="drop the `+` prefix from `{key}` (or use `++{key}=...` to force the value)",
            ),
            _sig(
                r"Key '(?P<key>[^']+)' is not in struct",
                "Key '",
                examples=("Key 'n' is not in struct",),
                message="the config has no key '{key}'",
                hint="check the spelling of `{key}` and its parent path (`full_key:` on the next lines); add new "
                "keys with a `+` prefix",
            ),
            _sig(
                r"Error parsing override '(?P<key>[^']*)'",
                "Error parsing override",
                examples=(
                    "OverrideParseException: Error parsing override "
                    "'trainer.experiment_name=qwen3_4b_grpo_8npu}'",
                ),
                message="Hydra cannot parse the override '{key}'",
                hint="fix the quoting/brackets of `{key}` (quote values with `[`, `{`, `,` or `=`)",
            ),
            _sig(
                r"ConfigAttributeError: Missing key (?P<key>\S+)",
                "Missing key",
                examples=("omegaconf.errors.ConfigAttributeError: Missing key ppo_micro_batch_size_per_gpu",),
                message="the config has no key '{key}'",
                hint="`{key}` is read by the code but missing from the config: the config and the verl code are "
                "from different versions, or the key needs a `+` override",
            ),
        ),
    ),
    Category(
        "config_value_error",
        "a configuration value failed validation (divisibility, batch sizes, ranges)",
        "fix the value named in the message: batch sizes must divide evenly (`train.train_batch_size` x "
        "`train.responses_per_prompt` by the data-parallel size, `train.mini_batch_size` by "
        "`train.micro_batch_size_per_device` x devices), attention heads by the TP (`train.tensor_parallel`, "
        "`train.rollout_tensor_parallel`); `verlctl plan` checks these rules before a launch",
        (
            _sig(
                r"Error: .*(?:(?:must|should) be|is not) (?:evenly )?divisible by",
                "Error: ",
                examples=(
                    "ValueError: Total number of attention heads (12) must be divisible by tensor parallel "
                    "size (8).",
                    "AssertionError: real_train_batch_size (96) must be divisible by minimal possible batch "
                    "size (64)",
                ),
            ),
            _sig(
                r"Error: only support equal chunk",
                "Error: only support equal chunk",
                examples=(
                    "AssertionError: only support equal chunk. Got size of DataProto 512 and chunk 6.",
                ),
                message="the batch does not split evenly across the workers",
                hint="make `train.train_batch_size` x `train.responses_per_prompt` a multiple of the number of "
                "training devices (and of the rollout data-parallel size)",
            ),
            _sig(
                r"Error: (?P<key>\w+) -?\d+ should be larger than 0",
                "Error: ",
                examples=(
                    "AssertionError: ppo_mini_batch_size 0 should be larger than 0 after normalization",
                ),
                message="'{key}' became 0 after dividing by the number of devices",
                hint="`{key}` is divided by the data-parallel size (and multiplied by "
                "`train.responses_per_prompt`): raise `train.mini_batch_size` / `train.train_batch_size` to "
                "at least the data-parallel size",
            ),
            _sig(
                r"Error: .*must be (?:greater|larger) than",
                "Error: ",
                examples=(
                    "AssertionError: max_token_len must be greater than the sequence length. Got "
                    "max_token_len=8192 and max_seq_len=10240",
                ),
            ),
            _sig(
                r"You have set both '(?P<key>[^']+)' AND '(?P<other>[^']+)'|Please set at least one of '(?P<one>[^']+)'",
                "You have set both",
                "Please set at least one of",
                examples=(
                    "ValueError: [actor] You have set both 'actor.ppo_micro_batch_size' AND "
                    "'actor.ppo_micro_batch_size_per_gpu'. Please remove 'actor.ppo_micro_batch_size' "
                    "because only '*_ppo_micro_batch_size_per_gpu' is supported (the former is deprecated).",
                ),
            ),
            _sig(
                r"Value error, |ValidationError: \d+ validation errors? for \w+"
                r"|Value '[^']*' (?:of type '\w+' )?could not be converted to (?:Integer|Float|Boolean)",
                "Value error, ",
                "ValidationError: ",
                "Value '",
                examples=(
                    "pydantic_core._pydantic_core.ValidationError: 1 validation error for RolloutConfig",
                    "omegaconf.errors.ValidationError: Value 'abc' could not be converted to Integer",
                ),
            ),
        ),
    ),
    Category(
        "hccl_port_bind",
        "HCCL could not bind its host port: another job on this host uses the same HCCL port range (EJ0003)",
        "give each job its own HCCL ports: set `env.HCCL_HOST_SOCKET_PORT_RANGE` and "
        "`env.HCCL_NPU_SOCKET_PORT_RANGE` to ranges no other job uses (or `auto`), or `env.HCCL_IF_BASE_PORT`; "
        "`verlctl check` tests whether the run's ranges are free",
        (
            _sig(
                r"EJ0003|Failed to bind the IP port|Communication_Error_Bind_IP_Port",
                "EJ0003",
                "Failed to bind the IP port",
                "Communication_Error_Bind_IP_Port",
                examples=(
                    "[rank0]: EJ0003: [PID: 159] 2025-03-26-17:01:02.816.428 Failed to bind the IP port. Reason: "
                    "The IP address and port have been bound already.",
                ),
            ),
            _sig(
                r"host nic listen start failed, port\[(?P<port>\d+)\]",
                "host nic listen start failed",
                examples=(
                    "[rank0]:         host nic listen start failed, port[60000], return[11][FUNC:StartListenSocket]"
                    "[FILE:network_manager.cc][LINE:1163]",
                ),
                message="HCCL could not listen on host port {port} (already bound)",
            ),
        ),
    ),
    Category(
        "port_in_use",
        "a network port is already in use on this host",
        "find the process holding the port (`ss -ltnp`) and stop it, or move the job to a free port: "
        "`MASTER_PORT` for torch c10d (default 29500), `cluster.ray_port` / `cluster.dashboard_port` for Ray, "
        "`HCCL_IF_BASE_PORT` / `HCCL_HOST_SOCKET_PORT_RANGE` for HCCL",
        (
            _sig(
                r"port: (?P<port>\d+), useIpv6: \w+, code: -98, name: EADDRINUSE",
                "EADDRINUSE",
                examples=(
                    "RuntimeError: The server socket has failed to listen on any local network address. "
                    "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use.",
                ),
                message="port {port} is already in use",
                hint="port {port} is taken: stop its owner (`ss -ltnp | grep :{port}`) or choose another port: "
                "`MASTER_PORT=<free port>` for torch c10d (29500 is the default), `cluster.ray_port` / "
                "`cluster.dashboard_port` for Ray",
            ),
            _sig(
                r"EADDRINUSE",
                "EADDRINUSE",
                examples=(
                    "RuntimeError: The server socket has failed to listen on any local network address. "
                    "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
                ),
            ),
            _sig(
                r"\[Errno 98\] (?:error while attempting to bind on address \([^()]*, (?P<port>\d+)\): )?"
                r"[Aa]ddress already in use|Address already in use",
                "Errno 98",
                "Address already in use",
                examples=(
                    "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8265): "
                    "address already in use",
                    "OSError: [Errno 98] Address already in use",
                ),
                message="port {port} is already in use",
                hint="port {port} is taken: stop its owner (`ss -ltnp | grep :{port}`) or choose another port "
                "(`cluster.ray_port`, `cluster.dashboard_port`, `MASTER_PORT`)",
            ),
            _sig(
                r"listen on ip\[[^]]*\] and specific port\[(?P<port>\d+)\] fail",
                "] and specific port[",
                examples=(
                    "[ERROR] HCCL(3626636,all_reduce_test):2025-11-21-13:18:47.639.860 [hccl_socket.cc:110] "
                    "[3626636][InitChannelStage][RanktableDetect] socket type[2], listen on "
                    "ip[192.168.1.100%enp53s0f2] and specific port[60000] fail. Please check the port status "
                    "and whether the port is being used by other process.",
                ),
                message="HCCL could not listen on port {port} (already in use)",
                hint="another process (often a previous job still holding the NPUs) uses HCCL port {port}: stop "
                "it, or give each job its own range with `HCCL_HOST_SOCKET_PORT_RANGE` / "
                "`HCCL_NPU_SOCKET_PORT_RANGE` or `HCCL_IF_BASE_PORT` in `env`",
            ),
        ),
    ),
    Category(
        "npu_unavailable",
        "a worker runs without an NPU (the NPU platform is registered but not available to it)",
        "Ray scheduled the worker without NPU resources: start Ray with `--resources='{\"NPU\": N}'` on every "
        "node (verl requests the custom resource `NPU`; `--num-gpus` does not count), check "
        "`ASCEND_RT_VISIBLE_DEVICES` and that `device: npu` is set, and that torch_npu imports in the container",
        (
            _sig(
                r"Platform '[^']*' \(PlatformNPU\) is registered but not available",
                "PlatformNPU",
                examples=("Platform 'huawei' (PlatformNPU) is registered but not available.",),
            ),
            _sig(
                r"This may be due to this ray actor being a CPU-only actor",
                "CPU-only actor",
                examples=("This may be due to this ray actor being a CPU-only actor.",),
            ),
        ),
    ),
    Category(
        "gpu_unavailable",
        "a worker sees no GPU",
        "make sure Ray was started with the GPUs (`ray start --num-gpus N`), that `CUDA_VISIBLE_DEVICES` is not "
        "empty in the container (`docker run --gpus all`) and that `device: gpu` matches the machine",
        (
            _sig(
                r"No CUDA GPUs are available|Found no NVIDIA driver on your system",
                "No CUDA GPUs are available",
                "Found no NVIDIA driver",
                examples=(
                    "RuntimeError: No CUDA GPUs are available",
                    "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
                    "NVIDIA GPU and installed a driver",
                ),
            ),
        ),
    ),
    Category(
        "resource_limit",
        "the OS refused a thread, process or file descriptor (a ulimit or pids limit was hit)",
        "raise the limits of the container / user (`ulimit -u` and `ulimit -n`, docker `--pids-limit -1 "
        "--ulimit nofile=1048576:1048576`), or start fewer threads (`OMP_NUM_THREADS`, fewer Ray CPUs per node)",
        (
            _sig(
                r"thread.*Resource temporarily unavailable",
                "Resource temporarily unavailable",
                examples=(
                    "(WorkerDict pid=27497) [2025-03-04 19:28:30,014 E 27497 27497] logging.cc:113: "
                    "Unhandled exception: N5boost10wrapexceptINS_6system12system_errorEEE. what(): thread: "
                    "Resource temporarily unavailable [system:11]",
                    "OpenBLAS blas_thread_init: pthread_create failed for thread 13 of 64: Resource "
                    "temporarily unavailable",
                ),
            ),
            _sig(
                r"Error: can't start new thread",
                "Error: can't start new thread",
                examples=("RuntimeError: can't start new thread",),
            ),
            _sig(
                r"Too many open files",
                "Too many open files",
                examples=("OSError: [Errno 24] Too many open files: '/tmp/ray/session_latest'",),
            ),
        ),
    ),
    Category(
        "segfault",
        "a process crashed with a fatal signal (segmentation fault / bus error)",
        "a native crash: check that torch, torch_npu / CUDA, CANN and vLLM(-ascend) versions match the image's "
        "tested set; a bus error usually means /dev/shm is too small (raise `container.shm_size`); read the "
        "stack printed above this line",
        (
            _sig(
                r"\*\*\* (?P<signal>SIGSEGV|SIGBUS|SIGILL|SIGFPE) received at time=\d+",
                "*** SIG",
                examples=("(SignalActor pid=68921) *** SIGSEGV received at time=1711519153 ***",),
                message="a process received {signal}",
            ),
            _sig(
                r"Fatal Python error: (?P<what>Segmentation fault|Bus error|Illegal instruction)",
                "Fatal Python error",
                examples=("(SignalActor pid=68921) Fatal Python error: Segmentation fault",),
                message="fatal Python error: {what}",
            ),
            _sig(
                r"Segmentation fault \(core dumped\)|Bus error \(core dumped\)|Signal 11 \(SIGSEGV\) received",
                "Segmentation fault",
                "Bus error",
                "Signal 11 (SIGSEGV)",
                examples=(
                    "run_dapo.sh: line 42: 12345 Segmentation fault (core dumped) python3 -m verl.trainer",
                ),
            ),
        ),
    ),
    Category(
        "hccl_timeout",
        "an HCCL collective timed out waiting for another rank",
        "a peer rank stopped: find the first error on the other ranks/nodes (often an OOM or a crash); if every "
        "rank is healthy, check the network (`HCCL_SOCKET_IFNAME`, `HCCL_IF_IP`, `cluster.socket_ifname`) and "
        "raise `HCCL_CONNECT_TIMEOUT` / `HCCL_EXEC_TIMEOUT` in `env` for slow steps",
        (
            _sig(
                r"EI0006|Getting socket times out|Get_Socket_Timeout",
                "EI0006",
                "Getting socket times out",
                "Get_Socket_Timeout",
                examples=(
                    "EI0006: 2024-08-05-18:15:21.270.506 Getting socket times out. Reason: Remote Rank did "
                    "not send the data in time. Please check the reason for the rank being stuck",
                    "[rank1]: EI0006: [PID: 1292363] 2025-04-08-18:07:20.444.436 Getting socket times out. "
                    "Reason: Remote Rank did not send the data in time.",
                ),
            ),
            _sig(
                r"EI0002|The wait execution of the Notify register times out",
                "EI0002",
                "Notify register times out",
                examples=(
                    "EI0002: The wait execution of the Notify register times out. Reason: The Notify "
                    "register has not received the Notify record from remote rank [0].",
                ),
            ),
            _sig(
                r"HCCL.*wait socket establish timeout",
                "HCCL",
                examples=(
                    "[ERROR] HCCL(1234,python3):2025-01-01-00:00:00.000.000 [hccl_socket_manager.cc:100] "
                    "wait socket establish timeout, role[0] rank[3] timeout[120]",
                ),
            ),
        ),
    ),
    Category(
        "npu_task_timeout",
        "an NPU task or stream wait timed out (HCCL_EXEC_TIMEOUT): a peer rank stalled or died",
        "find the rank whose error is earliest (an OOM or crash there is the cause); for long generations raise "
        "`env.HCCL_EXEC_TIMEOUT` (verl's docs use 3600; the default is 1800 s) and collect the plog "
        "(`ASCEND_GLOBAL_LOG_LEVEL=1`, `ASCEND_GLOBAL_EVENT_ENABLE=1`)",
        (
            _sig(
                r"error code is (?P<code>507048|107020)|runtime result = (?P<result>107020|507048)",
                "error code is 507048",
                "error code is 107020",
                "runtime result = 107020",
                "runtime result = 507048",
                examples=(
                    "(train pid=8464) RuntimeError: npuSynchronizeDevice:build/CMakeFiles/torch_npu.dir/"
                    "compiler_depend.ts:479 NPU function error: AclrtSynchronizeDeviceWithTimeout, error code is "
                    "507048",
                    "worker-1: [W NPUStream.cpp:365] Warning: NPU warning, error code is 107020[Error]: .",
                    "worker-1: EH9999: 2024-07-03-11:28:40.450.757  wait for compute device to finish failed, "
                    "runtime result = 107020.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]",
                ),
            ),
        ),
    ),
    Category(
        "collective_timeout",
        "a torch.distributed (c10d / NCCL / gloo) operation timed out",
        "a rank did not join or answer: check that every node reaches `MASTER_ADDR:MASTER_PORT` (firewall, "
        "`GLOO_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME` = `cluster.socket_ifname`), that all ranks started, and "
        "look for an earlier crash on another rank",
        (
            _sig(
                r"\[c10d\] The client socket has timed out after (?P<ms>\d+)ms",
                "The client socket has timed out",
                examples=(
                    "(WorkerDict pid=904548) [E331 20:50:12.688969421 socket.cpp:1011] [c10d] The client "
                    "socket has timed out after 1800000ms while trying to connect to (10.123.132.218, "
                    "38321).",
                ),
                message="c10d: the client socket timed out after {ms} ms",
            ),
            _sig(
                r"Watchdog caught collective operation timeout",
                "Watchdog caught",
                examples=(
                    "[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation "
                    "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                    "ran for 600085 milliseconds before timing out.",
                ),
            ),
            _sig(
                r"DistStoreError: .*[Tt]imed out|Timed out after \d+ seconds waiting for clients"
                r"|Timed out initializing process group|Timed out waiting \d+ms for (?:send|recv) operation",
                "DistStoreError",
                "Timed out after",
                "Timed out initializing",
                "Timed out waiting",
                examples=(
                    "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/2 "
                    "clients joined.",
                    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
                    "waiting 1800000ms for recv operation to complete",
                ),
            ),
        ),
    ),
    Category(
        "device_error",
        "the NPU/GPU runtime reported an error (device fault or stream-synchronize timeout)",
        "check the device (`npu-smi info` Health / `nvidia-smi`) and its plog/dmesg; a stream-synchronize "
        "timeout usually follows a hang on another rank, so look for that rank's first error; make sure no "
        "other process uses the same devices",
        (
            _sig(
                r"EE1002|Stream synchronize timeout",
                "EE1002",
                "Stream synchronize timeout",
                examples=(
                    "EE1002: 2024-09-03-16:50:00.041.231 Stream synchronize timeout. rtDeviceSynchronize "
                    "execute failed, reason=[stream sync timeout]",
                ),
                message="NPU stream synchronize timeout (EE1002)",
            ),
            _sig(
                r"NPU (?:warning|error|function error)[,:] .*error code is (?P<code>507\d{3})",
                "NPU warning",
                "NPU error",
                "NPU function error",
                examples=("W NPUStream.cpp:409] Warning: NPU warning, error code is 507046[Error]: ",),
                message="NPU runtime error {code}",
            ),
            _sig(
                r"\bE[EZ]9999\b",
                "EZ9999",
                "EE9999",
                examples=(
                    "EZ9999: Inner Error! The error from device(chipId:0, dieId:0), serial number is 1, "
                    "there is an aivec error exception, core id is 16.",
                ),
                ere=r"E[EZ]9999",
            ),
            _sig(
                r"CUDA error: (?P<what>[^.]*)",
                "CUDA error",
                examples=("RuntimeError: CUDA error: an illegal memory access was encountered",),
                message="CUDA error: {what}",
            ),
        ),
    ),
    Category(
        "hccl_error",
        "an HCCL collective call failed",
        "read the HCCL error in the device plog (`~/ascend/log/debug/plog`); check `HCCL_SOCKET_IFNAME` / "
        "`HCCL_IF_IP`, that all nodes run the same CANN version, and that no other job uses the NPUs",
        (
            _sig(
                r"OPS function error: (?P<op>Hccl\w+), error code is (?P<code>\d+)",
                "OPS function error: Hccl",
                examples=(
                    "[rank1]: RuntimeError: InnerRunOpApi:torch_npu/csrc/framework/OpParamMaker.cpp:281 OPS "
                    "function error: HcclAllreduce, error code is 6",
                ),
                message="{op} failed with HCCL error code {code}",
            ),
            _sig(
                r"hcclCommInitRootInfo(?:Config)?\(.*error code is (?P<code>\d+)",
                "hcclCommInitRootInfo",
                examples=(
                    "RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:148 HCCL function "
                    "error: hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), "
                    "error code is 5",
                ),
                message="HCCL could not create its communicator (HcclResult error code {code})",
                hint="the HcclResult code says why (CANN's hccl_types.h): 4 internal and 5 not supported are most "
                "often a rank that cannot reach another (the device network: `hccn_tool -i N -ip -g` and "
                "`-net_health -g` on every node; `HCCL_SOCKET_IFNAME` / `cluster.socket_ifname`; a firewall on the "
                "HCCL ports), 7 unavailable (another process still holds the device), 9 a time-out (raise "
                "`HCCL_CONNECT_TIMEOUT` in `env`), 11 to 14 TCP/RoCE connect or transfer, 15 the runtime (device "
                "ids the container does not see, or a CANN too old for the image); `verlctl check --fabric` tests "
                "every link before training",
            ),
            _sig(
                r"HCCL function error: (?P<op>\w+)",
                "HCCL function error",
                examples=(
                    "RuntimeError: HCCL function error: HcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, "
                    "config, &(comm->hcclComm_)), error code is 7",
                ),
                message="HCCL call {op} failed",
            ),
            _sig(
                r"EI0009.*Transport init error(?:.*dst_rank\[(?P<dst>\d+)\])?",
                "EI0009",
                examples=(
                    "[rank1]: EI0009: [PID: 2225827] 2025-09-24-20:59:48.119.066 Transport init error. Reason: "
                    "[Create][DestLink]Create Dest error! createLink para:rank[1]-localUserrank[1]-localIpAddr"
                    "[172.16.0.114], dst_rank[0]-remoteUserrank[0]-remote_ip_addr[172.16.0.114]",
                ),
                message="HCCL could not create the transport link to rank {dst} (EI0009): look for the first error "
                "on that rank's side",
            ),
            _sig(
                r"DIST call hccl api failed",
                "DIST call hccl api failed",
                examples=(
                    "[ERROR] 2025-04-08-18:07:20 (PID:1292363, Device:1, RankID:1) ERR02200 DIST call hccl "
                    "api failed.",
                ),
            ),
        ),
    ),
    Category(
        "checkpoint_save_failed",
        "writing a checkpoint failed",
        "the checkpoint write broke (typically the disk or quota filled up mid-write): check `df -h` for "
        "`paths.checkpoints`, keep fewer checkpoints, or save less often (`train.save_freq`)",
        (
            _sig(
                r"PytorchStreamWriter failed writing file (?P<file>\S+)",
                "PytorchStreamWriter",
                examples=(
                    "RuntimeError: [enforce fail at inline_container.cc:857] . PytorchStreamWriter failed "
                    "writing file data/37: file write failed",
                ),
                message="torch.save failed writing {file}",
            ),
            _sig(
                r"\[enforce fail at inline_container\.cc:\d+\] \. ?unexpected pos",
                "[enforce fail at inline_container",
                examples=(
                    "RuntimeError: [enforce fail at inline_container.cc:659] . unexpected pos 2387758464 vs "
                    "2387758376",
                ),
            ),
        ),
    ),
    Category(
        "ray_start_timeout",
        "Ray did not come up: its daemons (GCS, raylet) did not register in time",
        "usually a loaded host (load average, other jobs, a slow /tmp): `verlctl launch` retries a head start "
        "that fails so once; if it keeps failing, wait for the load to drop, or give Ray longer with "
        "`env: {RAY_raylet_start_wait_time_s: \"120\"}` and more time to join with `cluster.join_timeout_s`",
        (
            _sig(
                r"The current node timed out during startup",
                "The current node timed out during startup",
                examples=(
                    "Exception: The current node timed out during startup. This could happen because some of the "
                    "raylet failed to startup or the GCS has become overloaded.",
                ),
                message="Ray's node timed out during start-up (a raylet did not start, or the GCS was overloaded)",
            ),
            _sig(
                r"ERROR: the Ray head did not listen on (?P<address>\S+) within (?P<seconds>\d+)s",
                "the Ray head did not listen on",
                examples=("[verlctl 08:41:21] ERROR: the Ray head did not listen on 192.0.2.2:6766 within 600s",),
                message="the Ray head did not listen on {address} within {seconds}s",
            ),
        ),
    ),
    Category(
        "ray_gcs_unreachable",
        "a Ray process cannot reach the GCS (the Ray head)",
        "check that the Ray head is up (`ray status`), that every node reaches `<head>:cluster.ray_port` "
        "(firewall, the right NIC in `cluster.socket_ifname`), and that all nodes run the same Ray version",
        (
            _sig(
                r"Failed to connect to GCS(?: at address (?P<address>\S+))?(?: within (?P<seconds>\d+) seconds|\. Please)",
                "Failed to connect to GCS",
                examples=(
                    "(raylet, ip=10.0.0.128) [2022-07-25 08:35:14,805 C 157 212] (raylet) "
                    "gcs_rpc_client.h:537:  Check failed: absl::ToInt64Seconds(absl::Now() - "
                    "gcs_last_alive_time_) < ::RayConfig::instance().gcs_rpc_server_reconnect_timeout_s() "
                    "Failed to connect to GCS within 60 seconds",
                    "[2025-03-24 12:00:00,000 E 1234 1234] gcs_rpc_client.h:151: Failed to connect to GCS at "
                    "address 192.168.2.40:6379 within 5 seconds.",
                    "(raylet) Failed to connect to GCS. Please check `gcs_server.out` for more details.",
                ),
                message="cannot reach the Ray GCS ({address})",
            ),
            _sig(
                re.escape(RAY_DAEMONS_EXITED),
                RAY_DAEMONS_EXITED,
                examples=(
                    "2026-12-01 04:05:12,066\tERR scripts.py:1307 -- Some Ray subprocesses exited unexpectedly:",
                ),
                message="the Ray head's daemons exited (its `ray start --block` stops the rest): the GCS is gone",
            ),
        ),
    ),
    Category(
        "raylet_died",
        "a raylet (a node's Ray daemon) died",
        "a node left the cluster: look at that node's `raylet.out` / `dmesg` (host OOM, disk full under "
        "/tmp/ray, a killed container), and at the GCS connection (`ray_gcs_unreachable`)",
        (
            _sig(
                r"\(raylet(?:, ip=[^)]*)?\) .*(?:Check failed|\*\*\* StackTrace Information|\*\*\* SIG\w+ received)",
                "Check failed",
                "*** StackTrace Information",
                "*** SIG",
                examples=("(raylet, ip=10.0.0.128) *** StackTrace Information ***",),
            ),
            _sig(
                r"Raylet is terminated|LocalRayletDiedError",
                "Raylet is terminated",
                "LocalRayletDiedError",
                examples=(
                    "(raylet) Raylet is terminated. Termination is unexpected. Possible reasons include: (1) "
                    "SIGKILL by the user or system OOM killer, (2) Invalid memory access from Raylet causing "
                    "SIGSEGV or SIGBUS, (3) Other termination signals.",
                ),
            ),
            _sig(
                r"The node with node id:? \S+.* has been marked dead because the detector has missed too many "
                r"heartbeats",
                "The node with node id",
                examples=(
                    "2022-09-02 12:53:00,741 WARNING worker.py:1829 -- The node with node id: "
                    "5ad7fa5dd64fc1fec7a82cceecabed8e5eb247ec97064bb50a1c2a11 and address: 137.78.248.21 and "
                    "node name: 137.78.248.21 has been marked dead because the detector has missed too many "
                    "heartbeats from it. This can happen when a    (1) raylet crashes unexpectedly (OOM, "
                    "preempted node, etc.)",
                ),
                message="a Ray node was marked dead (missed heartbeats)",
            ),
        ),
    ),
    Category(
        "ray_devices_missing",
        "not every device joined Ray before the join timeout",
        "a node's Ray did not start or cannot reach the head: on a loaded host Ray's start-up times out (see "
        "`ray_start_timeout` in that node's log; raise `RAY_raylet_start_wait_time_s` in `env`); check that "
        "start_verl.sh runs on every node, that they reach the head's `cluster.ray_port`, and give them more "
        "time with `cluster.join_timeout_s`; `verlctl launch` retries a single-node start that fails so once",
        (
            _sig(
                r"ERROR: only (?P<have>\d+) of (?P<want>\d+) (?P<resource>\S+) devices joined Ray within (?P<seconds>\d+)s",
                "devices joined Ray within",
                examples=(
                    "[verlctl 09:09:10] ERROR: only 4 of 8 NPU devices joined Ray within 120s: check that "
                    "start_verl.sh runs on every node and that they reach 192.0.2.2:34353",
                ),
                message="only {have} of {want} {resource} devices joined Ray within {seconds}s",
            ),
        ),
    ),
    Category(
        "ray_actor_died",
        "a Ray actor (a verl worker) died",
        "this is a consequence: look above for the worker's own error (OOM, segfault, NPU error); if there is "
        "none, the process was killed from outside: check `dmesg` for the kernel OOM killer and the host's RAM",
        (
            _sig(
                r"\b(?P<exc>ActorDiedError|RayActorError|WorkerCrashedError|ActorUnavailableError)\b",
                "ActorDiedError",
                "RayActorError",
                "WorkerCrashedError",
                "ActorUnavailableError",
                examples=(
                    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
                    "ray.exceptions.RayTaskError(ActorDiedError): ray::TaskRunner.run() (pid=106666, "
                    "ip=144.214.210.20, actor_id=dbc11a20aca6cccf44a05b0301000000, repr=<main_ppo.TaskRunner "
                    "object at 0x7ecd4488b6d0>)",
                ),
                message="a Ray actor died ({exc})",
                ere=r"(ActorDiedError|RayActorError|WorkerCrashedError|ActorUnavailableError)",
            ),
            _sig(
                r"The actor died unexpectedly before finishing this task|The actor is dead because"
                r"|A worker died or was killed while executing a task",
                "The actor died",
                "The actor is dead",
                "A worker died or was killed",
                examples=(
                    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
                    "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of "
                    "file.",
                    "(raylet) A worker died or was killed while executing a task by an unexpected system "
                    "error.",
                ),
            ),
            _sig(
                # the class of the actor that died, in Ray's ActorDiedError details (a tab-indented field)
                r"^\s*class_name: (?:[\w<>]+\.)*(?P<actor>\w+)\s*$",
                "class_name: ",
                examples=(
                    "\tclass_name: SignalActor",
                    "        class_name: create_colocated_worker_cls.<locals>.WorkerDict",
                ),
                message="the Ray actor {actor} died",
                ere=r"^[[:space:]]*class_name: ([[:alnum:]_<>]+\.)*[[:alnum:]_]+[[:space:]]*$",
                detail=True,
            ),
        ),
        wrapper=True,
    ),
    Category(
        "ray_task_failed",
        "a Ray task / the training driver failed (a wrapper around the error of a worker)",
        "the cause is in the worker's traceback: look for the inner exception (`RayTaskError(<Exc>)`) and the "
        "lines above it",
        (
            _sig(
                r"ray\.exceptions\.RayTaskError(?:\((?P<inner>\w+)\))?",
                "RayTaskError",
                examples=(
                    "ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.actor_rollout_save_checkpoint() "
                    "(pid=21050, ip=[2605:340:cd51:4b00:25cb:e433:652c:3043])",
                ),
            ),
            _sig(
                r"TrainingFailedError|Unhandled error \(suppress with",
                "TrainingFailedError",
                "Unhandled error",
                examples=(
                    "ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect "
                    "the previous error messages for a cause.",
                ),
            ),
        ),
        wrapper=True,
    ),
    Category(
        "weight_bucket_too_small",
        "a weight tensor is larger than verl's weight-sync bucket",
        "raise the bucket to >= 1.25 x the largest tensor (vocab x hidden x 4 bytes), a power of two: "
        "`extra_overrides: [actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=4096]` "
        "(verl 0.9.1; 8192 for 72B); `verlctl check` computes it from the model's config.json",
        (
            _sig(
                r"Weight (?P<name>\S+)\(torch\.Size\((?P<shape>\[[\d, ]+\])\), (?P<dtype>torch\.\w+)\) is too large "
                r"to fit in the bucket|is too large to fit in the bucket",
                "too large to fit in the bucket",
                examples=(
                    "AssertionError: Weight model.embed_tokens.weight(torch.Size([151936, 4096]), torch.float32) "
                    "is too large to fit in the bucket.",
                ),
            ),
        ),
    ),
    Category(
        "sleep_mode_unavailable",
        "vllm-ascend's sleep mode is unavailable (camem allocator missing: vllm_ascend_C not built)",
        "use an image whose vllm-ascend was built with its custom kernels (`COMPILE_CUSTOM_KERNELS=1`, e.g. the "
        "quay.io/ascend/verl release images): verl's colocated rollout needs sleep mode",
        (
            _sig(
                r"camem allocator is not available",
                "camem allocator is not available",
                examples=('[rank12]:     assert camem_available, "camem allocator is not available"',),
            ),
        ),
    ),
    Category(
        "nccl_network",
        "NCCL could not connect to a peer (wrong network interface or a blocked port)",
        "pin the interface that reaches the other nodes: `cluster.socket_ifname` (NCCL_SOCKET_IFNAME / "
        "GLOO_SOCKET_IFNAME; pick it with `ip route get <master_addr>`), and open the ports between nodes",
        (
            _sig(
                r"socketStartConnect: Connect to (?P<peer>\S+) failed",
                "socketStartConnect",
                examples=(
                    "ubuntu:39964:40075 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to "
                    "10.0.0.2<45763> failed : Software caused connection abort",
                ),
                message="NCCL could not connect to {peer}",
            ),
        ),
    ),
    Category(
        "python_exception",
        "an unclassified Python exception",
        "read the traceback that ends here; rerun with `HYDRA_FULL_ERROR=1` and `RAY_DEDUP_LOGS=0` (in `env`) "
        "for the full stacks, then search the message in the verl issue tracker",
        (
            _sig(
                _BOL + r"Traceback \(most recent call last\):",
                "Traceback (most recent call last)",
                examples=(
                    "[rank0]: Traceback (most recent call last):",
                    "Traceback (most recent call last):",
                ),
                message="a Python traceback whose exception line is not in the log (it may be cut off)",
                ere=r"(^|\) |\]: ?)[[:space:]]*Traceback \(most recent call last\):",
            ),
            _sig(
                _BOL + r"(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))(?:\([\w.]*\))?: "
                r"(?P<text>\S.{0,159})",
                "Error",
                "Exception",
                examples=("AssertionError: ppo_mini_batch_size must be set", "KeyError: 'prompt'"),
                message="{exc}: {text} (an exception that is not in the catalogue)",
                ere=r"(^|\) |\]: ?)[[:space:]]*([A-Za-z_][[:alnum:]_]*\.)*[A-Z][[:alnum:]_]*(Error|Exception)"
                r"(\([[:alnum:]_.]*\))?: [^[:space:]]",
            ),
        ),
        fallback=True,
    ),
)

CATEGORY_NAMES: tuple[str, ...] = tuple(c.name for c in CATALOGUE)
RANK: dict[str, int] = {c.name: i for i, c in enumerate(CATALOGUE)}


def all_anchors(catalogue: Iterable[Category] = CATALOGUE) -> tuple[str, ...]:
    return tuple(sorted({a for c in catalogue for s in c.signatures for a in s.anchors}))


#: What the watcher's recovery may do for a category: ``ladder`` (the OOM ladder adds a memory feature and
#: resumes), ``restart`` (a plain restart from the last checkpoint can succeed; only within
#: ``recovery.restart_on`` / ``max_restarts``), ``never`` (the same run fails again: the spec, the image or
#: the cluster must change first). Categories not listed: ``never``.
RECOVERY: dict[str, str] = {
    "device_oom": "ladder",
    "device_held": "restart",  # once the previous process has released the devices (EJ0001: wait >= 10 s)
    "npu_task_timeout": "restart",  # a straggler or a dead peer: resume from the checkpoint
    "hccl_timeout": "restart",
    "collective_timeout": "restart",
    "ray_version_mismatch": "never",
    "ray_resources_unavailable": "never",
    "hccl_port_bind": "never",  # the other job still holds the ports: change the range
    "weight_bucket_too_small": "never",  # needs a larger bucket (extra_overrides)
    "sleep_mode_unavailable": "never",
    "nccl_network": "never",
}


def recovery_for(category: str) -> str:
    return RECOVERY.get(category, "never")
