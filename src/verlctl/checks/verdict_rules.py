"""The fact rules of the one verdict (:mod:`verlctl.checks.verdict`), each with the facts it needs.

Most wrap the machine checks by concern (model_checks, dataset_checks, devices, network, container, storage,
field_checks, memory); the rest are the rules issue 21 added (G4 G8 U1 U2 U4 U19 U20 N1 N10). Order is the
report order within a severity.
"""

from __future__ import annotations

from collections.abc import Iterable

from verlctl.checks.checkpoints import CHECKPOINT_CITES
from verlctl.checks.findings import Finding, error, warning
from verlctl.checks.rules import V070, V091, Cite
from verlctl.checks.verdict import Need, VerdictCtx, fact_rule
from verlctl.detect.models import ModelInfo

MODEL, DATASETS, HOST, DOCKER, IMAGE, TARGET, LIVE, NODES = (
    Need.MODEL, Need.DATASETS, Need.HOST, Need.DOCKER, Need.IMAGE, Need.TARGET, Need.LIVE, Need.NODES)


def _model(ctx: VerdictCtx) -> ModelInfo | None:

    return ctx.facts.model if isinstance(ctx.facts.model, ModelInfo) else None


# ------------------------------------------------------------------------------------------------ the model


@fact_rule(
    "model_fit",
    ("model_tp_heads", "model_rollout_tp_heads", "model_layers_pp", "model_layers_vpp", "model_recompute_layers"),
    needs=(MODEL,),
    cites=(
        "megatron-core megatron/core/transformer/transformer_block.py get_num_layers_to_build: "
        "assert num_layers % config.pipeline_model_parallel_size == 0 ('num_layers should be divisible by "
        "pipeline_model_parallel_size'), which verl mirrors:",
        Cite(V070, "verl/utils/megatron/router_replay_utils.py", 122,
             "assert num_layers % config.pipeline_model_parallel_size == 0"),
        Cite(V091, "verl/utils/megatron/router_replay_utils.py", 132,
             "assert num_layers % config.pipeline_model_parallel_size == 0"),
        "uniform recompute: verl v0.9.0 docs/ascend_tutorial/feature_support/npu_advance_features.md:219 "
        "(recompute_num_layers divides the layers of each pipeline stage)",
        "heads: megatron-core 'num_attention_heads must be a multiple of tensor_model_parallel_size'; vLLM "
        "'Total number of attention heads ... must be divisible by tensor parallel size'",
    ),
)
def _model_fit(ctx: VerdictCtx) -> Iterable[Finding]:
    """The model's heads by the training and rollout TP, its layers by PP (x vpp), uniform recompute (G4)."""
    from verlctl.checks.model_checks import check_model_fit

    return check_model_fit(ctx.spec, ctx.facts.model, ctx.on("vpp"), ctx.on("recompute"))


@fact_rule(
    "max_model_len",
    ("max_model_len_over_context", "generation_capped"),
    needs=(MODEL,),
    cites=(
        Cite(V091, "verl/workers/rollout/vllm_rollout/vllm_async_server.py", 1107,
             "if self.config.max_model_len > max_position_embeddings:"),
        Cite(V091, "verl/workers/rollout/vllm_rollout/vllm_async_server.py", 593,
             "max_possible_tokens = self.config.max_model_len - len(prompt_ids)"),
        Cite(V070, "verl/workers/rollout/vllm_rollout/vllm_async_server.py", 198,
             "self.config.max_model_len = self.model_config.hf_config.max_position_embeddings"),
    ),
)
def _max_model_len(ctx: VerdictCtx) -> Iterable[Finding]:
    """vLLM: max_model_len above the model's max_position_embeddings fails at rollout start (0.9.1); without
    an explicit max_model_len verl uses max_position_embeddings and silently cuts responses (G8)."""
    model = _model(ctx)
    if model is None or not model.max_position_embeddings or ctx.spec.train.rollout_engine != "vllm":
        return
    ctxlen = model.max_position_embeddings
    t = ctx.spec.train
    want = t.max_prompt_length + t.max_response_length
    key = "actor_rollout_ref.rollout.max_model_len"
    emitted = None
    if ctx.version == "0.9.1":  # the last one wins, as in Hydra (0.7.0 always uses max_position_embeddings)
        for o in ctx.command.overrides:
            if o.key.lstrip("+~") == key:
                emitted = o.raw.partition("=")[2].strip() if o.raw is not None else o.value
    try:
        explicit = int(emitted) if emitted not in (None, "null", "None") else None
    except (TypeError, ValueError):
        explicit = None
    name = model.name or model.path
    if explicit is not None and explicit > ctxlen:
        yield error(
            "max_model_len_over_context",
            f"the rollout's max_model_len {explicit} (max_prompt_length + max_response_length = "
            f"{t.max_prompt_length} + {t.max_response_length}) is above {name}'s max_position_embeddings "
            f"{ctxlen}: verl {ctx.version}'s vLLM server raises 'max_model_len ({explicit}) should be less than or "
            f"equal to max_position_embeddings ({ctxlen})' at start-up (vllm_async_server.py:1107)",
            "train.max_response_length",
            f"lower train.max_response_length to at most {ctxlen - t.max_prompt_length}",
        )
        return
    limit = explicit if explicit is not None else ctxlen
    if want > limit:
        yield warning(
            "generation_capped",
            f"max_prompt_length + max_response_length = {want} is above the rollout's max_model_len {limit}"
            + ("" if explicit is not None else f" ({name}'s max_position_embeddings, which verl uses when it is unset)")
            + f": vLLM clamps every response to {limit} - prompt tokens (at most {limit - t.max_prompt_length} for a "
            f"full prompt), below max_response_length {t.max_response_length}",
            "train.max_response_length",
            f"lower train.max_response_length to {limit - t.max_prompt_length}",
        )


@fact_rule(
    "memory_fit",
    ("memory_device_fit", "memory_kv_cache", "memory_kv_cache_queue", "memory_host_fit", "memory_estimate_partial",
     "memory_estimate_skipped"),
    needs=(MODEL,),
)
def _memory(ctx: VerdictCtx) -> Iterable[Finding]:
    """The memory fit per phase, with the device memory and RAM of this host when known (U1); on a device
    another process holds, its free memory, not its total (U21)."""
    from verlctl.checks.memory import (
        estimate_for_command,
        hbm_free_from_machine,
        hbm_from_machine,
        host_from_machine,
        memory_findings,
    )

    hbm, host = hbm_from_machine(ctx.spec, ctx.facts.machine), host_from_machine(ctx.facts.machine)
    free, note = hbm_free_from_machine(ctx.spec, ctx.facts.machine)  # a busy device: only its free memory (U21)
    est, why = estimate_for_command(ctx.resolved, ctx.command, hbm, host, free, note)
    ctx.memory = est
    return memory_findings(est, why)


@fact_rule(
    "weight_bucket", ("weight_bucket_too_small", "weight_bucket_ipc_unknown"), needs=(MODEL,),
    cites=(Cite(V091, "verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py", 141, "assert not self.use_shm"),
           Cite(V091, "verl/workers/rollout/vllm_rollout/vllm_rollout.py", 143, "self.use_shm = not is_support_ipc()"),
           Cite(V091, "verl/plugin/platform/platform_npu.py", 176, "if hardware_version == AscendHardwareVersion.A5:"),
           Cite(V091, "verl/utils/device.py", 342, 'if version.parse(software_base) >= version.parse("25.3.rc1"):'),
           Cite(V091, "verl/trainer/config/engine/fsdp.yaml", 33, "model_dtype: fp32"),
           Cite(V091, "verl/trainer/config/engine/megatron.yaml", 120, "dtype: bfloat16")),
)
def _bucket(ctx: VerdictCtx) -> Iterable[Finding]:
    """verl 0.9.1 on NPU without IPC: the largest synced tensor fits the weight-sync bucket (decided from npu-smi
    and the image's CANN where they were read, a warning naming them where not)."""
    from verlctl.checks.field_checks import IpcFacts, check_weight_bucket
    from verlctl.checks.memory import ModelShape

    shape = ctx.memory.shape if ctx.memory else (
        ModelShape.from_model_dir(ctx.spec.paths.model) if ctx.spec.paths.model else None)
    ipc = IpcFacts.from_facts(ctx.facts.machine.npu, ctx.facts.image_versions)
    return check_weight_bucket(ctx.spec, ctx.version, shape, ipc)


# ------------------------------------------------------------------------------------------------ this host


@fact_rule("model_path", ("model_missing", "model_not_dir", "model_unreadable", "model_incomplete",
                          "model_warnings", "model_unchecked"), needs=(HOST,))
def _model_path(ctx: VerdictCtx) -> Iterable[Finding]:
    """paths.model is a complete Hugging Face model directory on this host."""
    from verlctl.checks.model_checks import check_model_path

    return check_model_path(ctx.spec, ctx.facts.model)


@fact_rule("datasets", ("dataset_missing", "dataset_not_file", "dataset_unreadable", "dataset_not_parquet",
                        "dataset_schema_unchecked", "dataset_schema_skipped"), needs=(DATASETS,), families=("dataset.",))
def _datasets(ctx: VerdictCtx) -> Iterable[Finding]:
    """Every dataset file exists, is parquet, and has the columns verl reads."""
    from verlctl.checks.dataset_checks import check_datasets

    return check_datasets(ctx.facts.datasets, ctx.facts.docker, ctx.spec.container.runtime)


@fact_rule(
    "dataset_rows", ("dataset_smaller_than_batch",), needs=(DATASETS,),
    cites=(Cite(V070, "verl/trainer/ppo/ray_trainer.py", 414, '"Train dataloader is empty!"'),
           Cite(V091, "verl/trainer/ppo/ray_trainer.py", 427, '"Train dataloader is empty!"')),
)
def _rows(ctx: VerdictCtx) -> Iterable[Finding]:
    """The training files hold at least one batch (U2)."""
    from verlctl.checks.field_checks import check_dataset_rows
    from verlctl.detect.datasets import DatasetInfo

    rows = [c.verl_schema.num_rows if isinstance(c.verl_schema, DatasetInfo) else None
            for c in ctx.facts.datasets if c.field == "paths.train_files"]
    return check_dataset_rows(ctx.spec, rows)


@fact_rule("prompt_lengths", ("prompt_too_long", "prompt_length_unchecked"), needs=(MODEL, DATASETS))
def _prompts(ctx: VerdictCtx) -> Iterable[Finding]:
    """The first prompts, counted with the model's tokenizer, fit max_prompt_length."""
    from verlctl.checks.field_checks import check_prompt_lengths

    return check_prompt_lengths(ctx.spec, ctx.facts.prompt_lengths)


@fact_rule("checkpoint_dir", ("checkpoint_not_dir", "checkpoint_not_writable", "checkpoint_unchecked",
                              "checkpoint_size_unknown", "checkpoint_space", "checkpoint_space_low",
                              "checkpoint_space_unknown"), needs=(HOST,), cites=CHECKPOINT_CITES)
def _ckpt(ctx: VerdictCtx) -> Iterable[Finding]:
    """The checkpoint directory is writable and has room for one checkpoint as verl saves it by default
    (model, optimizer state, by strategy: U22)."""
    from verlctl.checks.checkpoints import check_checkpoints

    return check_checkpoints(ctx.spec, ctx.facts.checkpoint, ctx.facts.model)


@fact_rule("log_dir", ("log_space", "log_space_unknown"), needs=(HOST,))
def _logs(ctx: VerdictCtx) -> Iterable[Finding]:
    """paths.logs has room for the run's logs (and for a checkpoint too when both share a file system: U22)."""
    from verlctl.checks.checkpoints import check_log_space, checkpoint_bytes, model_params

    spec, facts = ctx.spec, ctx.facts
    shared = None
    if facts.log_shares_checkpoint_fs and spec.train.save_freq != -1:
        params = model_params(facts.model, spec)
        shared = checkpoint_bytes(params, spec.strategy) if params else None
    return check_log_space(spec, facts.log_disk, shared)


@fact_rule("checkpoint_storage", ("checkpoints_not_shared", "checkpoints_shared"), needs=(HOST,))
def _storage(ctx: VerdictCtx) -> Iterable[Finding]:
    """Multi-node: the checkpoints are on storage every node sees (U2)."""
    from verlctl.checks.storage import check_checkpoint_storage

    return check_checkpoint_storage(ctx.spec, ctx.facts.storage)


@fact_rule("resume_point", ("resume_past_steps",), needs=(HOST,),
           cites=("verl RayPPOTrainer._load_checkpoint / fit: global_steps starts after the resumed step and the "
                  "loop stops once it passes total_training_steps",))
def _resume(ctx: VerdictCtx) -> Iterable[Finding]:
    """A checkpoint at or past train.steps: trainer.resume_mode=auto resumes there and the run ends at once (N10)."""
    step, steps = ctx.facts.resume_step, ctx.spec.train.steps
    if step is not None and steps is not None and step >= steps:  # steps None: epochs decide
        yield error(
            "resume_past_steps",
            f"{ctx.spec.paths.checkpoints} holds global_step_{step}, at or past train.steps {steps}: verl resumes "
            "from it (trainer.resume_mode=auto) and the run finishes at once, training nothing",
            "train.steps",
            f"raise train.steps above {step}, or move {ctx.spec.paths.checkpoints} away (or use a new "
            "paths.checkpoints) to start fresh",
        )


@fact_rule("devices", ("device_missing", "device_unhealthy", "device_busy", "device_busy_unchecked",
                       "npu_smi_missing", "npu_smi_failed",
                       "nvidia_smi_missing", "nvidia_smi_failed"), needs=(HOST,))
def _devices(ctx: VerdictCtx) -> Iterable[Finding]:
    """The chosen devices exist, are healthy and are not busy."""
    from verlctl.checks.devices import check_devices

    return check_devices(ctx.spec, ctx.facts.machine, ctx.facts.holders, running_runs(ctx))


def running_runs(ctx: VerdictCtx) -> dict[int, list[str]]:
    """Device -> this user's running verlctl runs on it (empty when the live runs were not collected)."""
    out: dict[int, list[str]] = {}
    for r in ctx.facts.live_runs or []:
        if r.state == "running":
            for d in r.devices:
                out.setdefault(d, []).append(r.run_id)
    return out


@fact_rule("run_devices", ("device_busy", "device_run_unknown"), needs=(LIVE,))
def _run_devices(ctx: VerdictCtx) -> Iterable[Finding]:
    """The devices of this user's live verlctl runs count as busy, whether or not the device tool shows them
    yet (O5); a run whose state cannot be decided is a warning naming it."""
    from verlctl.checks.devices import run_devices_findings

    if ctx.facts.live_runs is None:
        return
    yield from run_devices_findings(ctx.spec, ctx.facts.machine, running_runs(ctx))
    for r in ctx.facts.live_runs:
        if r.state != "running":
            kind = "NPU" if ctx.spec.device == "npu" else "GPU"
            yield warning(
                "device_run_unknown",
                f"{kind} {', '.join(map(str, r.devices))} may be in use by your verlctl run {r.run_id}: its state "
                f"could not be decided ({r.why or r.state})",
                "cluster.devices",
                f"`verlctl status {r.run_id}` checks it; `verlctl stop {r.run_id}` ends it",
            )


@fact_rule("device_kind", ("device_not_here",), needs=(HOST,))
def _device_kind(ctx: VerdictCtx) -> Iterable[Finding]:
    """The spec's device kind is the one this host has (a GPU host gets no Ascend run by default, U19)."""
    from verlctl.detect.gpu import GpuInfo
    from verlctl.detect.npu import NpuInfo

    m = ctx.facts.machine
    npus = len(m.npu.devices) if isinstance(m.npu, NpuInfo) else 0
    gpus = len(m.gpu.devices) if isinstance(m.gpu, GpuInfo) else 0
    spec = ctx.spec
    if spec.device == "npu" and not npus and gpus:
        yield error("device_not_here", f"device is npu but this host has {gpus} NVIDIA GPU(s) and no Ascend NPU",
                    "device", "set device: gpu (and a CUDA verl image in container.image)")
    elif spec.device == "gpu" and not gpus and npus:
        yield error("device_not_here", f"device is gpu but this host has {npus} Ascend NPU(s) and no NVIDIA GPU",
                    "device", "set device: npu")


@fact_rule("device_nodes", ("device_nodes_missing",), needs=(HOST, DOCKER),
           cites=("runtime/containers.py plan_container: launch refuses a missing /dev/davinciN (without "
                  "container.privileged)",))
def _device_nodes(ctx: VerdictCtx) -> Iterable[Finding]:
    """The NPU device nodes of cluster.devices exist on this host (launch maps them into the container, N1)."""
    missing = ctx.facts.device_nodes_missing
    spec = ctx.spec
    # container.runtime host: training opens the devices itself (npu-smi's list is what the devices rule reads)
    if not missing or spec.device != "npu" or spec.container.runtime != "docker" or spec.container.privileged:
        return
    yield error(
        "device_nodes_missing",
        f"device node{'s' if len(missing) > 1 else ''} {', '.join(missing)} do{'' if len(missing) > 1 else 'es'} "
        f"not exist on this host (cluster.devices = {spec.cluster.devices}): the NPUs cannot be used",
        "cluster.devices",
        "check `npu-smi info` and cluster.devices (the Ascend driver creates /dev/davinciN), or use "
        "container.privileged: true",
    )


@fact_rule("network", ("socket_ifname_down", "socket_ifname_unknown", "master_addr_not_local",
                       "master_addr_not_on_ifname", "master_addr_unresolved", "not_head", "network_unchecked"),
           needs=(HOST,))
def _network(ctx: VerdictCtx) -> Iterable[Finding]:
    """socket_ifname exists and is up; on the head, master_addr is this machine's."""
    from verlctl.checks.network import check_network

    return check_network(ctx.spec, ctx.facts.machine.network, ctx.facts.master_ips)


@fact_rule("shm", ("shm_too_small",), needs=(HOST,))
def _shm(ctx: VerdictCtx) -> Iterable[Finding]:
    """/dev/shm holds Ray's object store (a container verlctl creates shares the host's)."""
    from verlctl.checks.field_checks import check_shm
    from verlctl.checks.memory import host_from_machine
    from verlctl.detect.machine import SystemInfo
    from verlctl.detect.system import DiskSpace

    spec, facts = ctx.spec, ctx.facts
    host = host_from_machine(facts.machine)
    host_bytes = int((spec.cluster.host_memory_gib or host or 0) * 2**30) or None
    new_container = spec.container.runtime == "docker" and facts.docker is not None and not facts.docker.exists
    if (new_container or spec.container.runtime == "host") and isinstance(facts.machine.system, SystemInfo):
        shm = facts.machine.system.shm
        if isinstance(shm, DiskSpace):
            where = "this host (the new container shares it)" if new_container else "this host"
            return check_shm(spec, shm.total_bytes, host_bytes, where)
    return []


# ------------------------------------------------------------------------------------------------ docker, image


@fact_rule("docker", ("docker_engine", "container_absent", "image_missing", "image_pull", "container_state",
                      "container_image", "container_mount_missing", "container_not_yours"), needs=(DOCKER,))
def _docker(ctx: VerdictCtx) -> Iterable[Finding]:
    """The engine answers, the image is here (or pulled), a reused container is this user's and mounts the
    spec's paths (U4: what the real launch refuses)."""
    from verlctl.checks.container import check_docker

    d = ctx.facts.docker
    out = check_docker(ctx.spec, d, ctx.resolved.explicit("container.image"))
    if d is not None and d.foreign and d.exists:
        out.insert(0, error(
            "container_not_yours",
            f"a container named {d.container} already exists and {d.foreign}: verlctl does not reuse it by default",
            "container.name",
            f"to reuse it deliberately, name it: --set container.name={d.container} (or container.name in the "
            "spec); otherwise choose another container.name",
        ))
    if d is not None and d.pull and not d.exists:
        out = [f.model_copy(update={"code": "image_pull", "severity": f.severity.INFO,
                                    "message": f"image {d.image} is not present locally: launch pulls it (--pull)",
                                    "hint": None})
               if f.code == "image_missing" else f for f in out]
    return out


@fact_rule("recipe", ("recipe_missing",), needs=(IMAGE,))
def _recipe(ctx: VerdictCtx) -> Iterable[Finding]:
    """The recipe entry file (0.7.0 DAPO / one-step-off) is in the work dir."""
    from verlctl.checks.container import check_recipe

    return check_recipe(ctx.spec, ctx.facts.recipe_missing)


@fact_rule("image_versions", ("image_python_unsupported", "image_ray_missing", "image_ray_too_old"), needs=(IMAGE,))
def _versions(ctx: VerdictCtx) -> Iterable[Finding]:
    """Python and Ray where training runs satisfy the targeted verl's requirements."""
    from verlctl.checks.container import check_image_versions

    field = "container.image" if ctx.spec.container.runtime == "docker" else "container.runtime"
    return check_image_versions(ctx.version, ctx.facts.image_versions, field)


@fact_rule("known_defects_image", ("known_defect", "known_defect_table"), needs=(IMAGE,))
def _known_defects_image(ctx: VerdictCtx) -> Iterable[Finding]:
    """The known-defect table's entries with a version condition, matched against the versions read inside the
    image (verl/known_defects.yaml; the entries that need no version are the spec rule ``known_defects``)."""
    from verlctl.checks.defects import known_defect_findings

    if ctx.facts.image_versions is None:
        return []
    field = "container.image" if ctx.spec.container.runtime == "docker" else "container.runtime"
    on = {name for name in ctx.command.features if ctx.on(name)}
    return known_defect_findings(ctx.spec, on, ctx.facts.image_versions, field, versioned_only=True)


@fact_rule(
    "target_preflight",
    ("target_package_missing", "target_preflight_failed", "target_preflight_skipped", "target_preflight_unfinished"),
    needs=(TARGET,),
    cites=("transformers PreTrainedModel._check_and_enable_flash_attn_2: ImportError 'FlashAttention2 has been "
           "toggled on, but it cannot be used due to the following error: the package for FlashAttention2 "
           "doesn't seem to be installed' when importlib.util.find_spec('flash_attn') is None "
           "(verl/packages.py)",
           "run_training.sh: cd to the work dir, python3 -m <entry> with the override list (orchestrator/preflight.py "
           "composes that list with the target's own verl + Hydra, then runs verl's validate_config)"),
)
def _target_preflight(ctx: VerdictCtx) -> Iterable[Finding]:
    """Where training runs (the running container, a throw-away container of the image, this host's python3):
    the packages the overrides need, the entry's imports, the overrides composed with the target's verl + Hydra
    and verl's validate_config (RV4-3: one look-up for check, launch --dry-run and launch)."""
    from verlctl.checks.container import target_lookup_findings

    return target_lookup_findings(ctx.spec, ctx.facts.target_lookup)


# ------------------------------------------------------------------------------------------------ live ports


@fact_rule("hccl_ports", ("hccl_ports_in_use",), needs=(LIVE,))
def _hccl(ctx: VerdictCtx) -> Iterable[Finding]:
    """Another job holds the run's fixed HCCL ports (A4)."""
    from verlctl.checks.field_checks import check_hccl_ports, hccl_port_ranges

    if ctx.spec.device != "npu" or ctx.facts.hccl_ports_busy is None:
        return []
    return check_hccl_ports(ctx.facts.hccl_ports_busy, hccl_port_ranges(ctx.spec, ctx.command.env))


@fact_rule("checkpoint_in_use", ("checkpoint_in_use",), needs=(LIVE,))
def _checkpoint_in_use(ctx: VerdictCtx) -> Iterable[Finding]:
    """No run may start on a checkpoint directory a live run uses (A5): the lock start_verl.sh holds there, or a
    run recorded here that is not stopped."""
    from verlctl.checks.ownership import checkpoint_in_use

    return checkpoint_in_use(ctx.spec, ctx.facts.checkpoint_users or [])


@fact_rule("ray_ports", ("ray_ports_in_use",), needs=(LIVE,))
def _ray_ports(ctx: VerdictCtx) -> Iterable[Finding]:
    """cluster.ray_port / dashboard_port are free on this host: `ray start --head` fails on a bound one (U20)."""
    busy = ctx.facts.ray_ports_busy
    if not busy:
        return
    c = ctx.spec.cluster
    names = {c.ray_port: "cluster.ray_port", c.dashboard_port: "cluster.dashboard_port"}
    which = ", ".join(f"{names.get(p, 'port')} {p}" for p in busy)
    yield error(
        "ray_ports_in_use",
        f"{which} already bound on this host (another user's Ray, or another run): the Ray head cannot start",
        names.get(busy[0], "cluster.ray_port"),
        "choose free ports: --set cluster.ray_port=N --set cluster.dashboard_port=M (e.g. 6800 and 8300)",
    )


# ------------------------------------------------------------------------------------------------ nodes


@fact_rule("node_preflight", ("node_unchecked", "nodes_image_differs", "nodes_python_differs", "nodes_ray_differs",
                              "image_python_unsupported", "image_ray_missing", "image_ray_too_old",
                              "checkpoint_marker_unwritten", "checkpoint_not_shared", "node_no_route_to_head",
                              "node_route_not_on_ifname", "hccl_ports_in_use", "shm_too_small"), needs=(NODES,))
def _nodes(ctx: VerdictCtx) -> Iterable[Finding]:
    """Multi-node: every node has the same image, Python and Ray, sees the head's checkpoint marker, routes to
    the head, has the HCCL ports free (the facts of every node: ``orchestrator/node_preflight.py``, in launch)."""
    from verlctl.checks.field_checks import hccl_port_ranges
    from verlctl.checks.nodes import node_findings

    if ctx.facts.nodes is None:
        return []
    ranges = hccl_port_ranges(ctx.spec, ctx.command.env) if ctx.spec.device == "npu" else {}
    return node_findings(ctx.spec, ctx.facts.nodes, ctx.version, ctx.facts.node_marker, ranges)
