"""Checks on the spec alone: the rules verl really enforces (``reference/verl.md`` §3.2) and the seeds'.

Two rules of the first seed are not enforced by verl (``gen_tp == train_tp`` and
``(tp*pp) % devices_per_node == 0``); they never block a run: an informational note explains the real rule.
"""

from __future__ import annotations

from verlctl.checks.findings import Finding, error, info, warning
from verlctl.spec.resolve import ResolvedSpec
from verlctl.verl.compose import FeatureState


def check_spec(resolved: ResolvedSpec, features: dict[str, FeatureState]) -> list[Finding]:
    spec = resolved.spec
    t = spec.train
    out: list[Finding] = []
    nnodes = max(1, len(spec.cluster.nodes))
    per_node = len(spec.cluster.devices)
    oso = spec.mode == "one_step_off_policy"
    train_per_node = (t.trainer_devices or per_node) if oso else per_node
    total = nnodes * train_per_node
    dynamic = features["dynamic_batch"].on

    # one-step-off: the trainer and the rollout share each node's devices.
    if oso:
        rollout_per_node = t.rollout_devices or 0
        if (t.trainer_devices or 0) + rollout_per_node > per_node:
            out.append(
                error(
                    "device_split",
                    f"trainer_devices ({t.trainer_devices}) + rollout_devices ({rollout_per_node}) exceed the "
                    f"{per_node} devices per node in cluster.devices",
                    "train.trainer_devices",
                    "lower trainer_devices/rollout_devices or list more devices",
                )
            )
        rollout_total = nnodes * rollout_per_node
    else:
        rollout_total = total

    # 1. Total training devices divisible by TP*PP*CP (Megatron).
    dp = total
    if spec.strategy == "megatron":
        mp = t.tensor_parallel * t.pipeline_parallel * t.context_parallel
        if total % mp:
            out.append(
                error(
                    "parallel_divisibility",
                    f"{total} training devices are not divisible by TP*PP*CP = "
                    f"{t.tensor_parallel}*{t.pipeline_parallel}*{t.context_parallel} = {mp}",
                    "train.tensor_parallel",
                    f"choose TP*PP*CP dividing {total}: {_divisors(total)}",
                )
            )
            dp = 0
        else:
            dp = total // mp
        # The seed's rule (tp*pp) % devices_per_node == 0 is not verl's.
        if (t.tensor_parallel * t.pipeline_parallel) % train_per_node:
            out.append(
                info(
                    "seed_rule_tp_pp_per_node",
                    f"TP*PP = {t.tensor_parallel * t.pipeline_parallel} is not a multiple of the {train_per_node} "
                    "devices per node: fine — verl only requires the total device count to be divisible by "
                    "TP*PP*CP (the seed's rule is not enforced; official NPU scripts use e.g. TP4*PP2 on 16 NPUs)",
                    "train.tensor_parallel",
                )
            )

    # 2./3. Rollout: TP divides the rollout devices; a replica spanning nodes uses whole nodes.
    rtp = t.rollout_tensor_parallel or t.tensor_parallel
    if rollout_total and rollout_total % rtp:
        out.append(
            error(
                "rollout_divisibility",
                f"rollout world size {rollout_total} is not divisible by the rollout TP {rtp} "
                "(verl: 'rollout world_size ... is not divisible by infer_world_size')",
                "train.rollout_tensor_parallel",
                f"choose a rollout TP dividing {rollout_total}: {_divisors(rollout_total)}",
            )
        )
    rollout_per_node_eff = (t.rollout_devices or per_node) if oso else per_node
    if rtp > rollout_per_node_eff and rtp % rollout_per_node_eff:
        out.append(
            error(
                "rollout_replica_nodes",
                f"a rollout replica of TP {rtp} spans nodes but is not a multiple of the "
                f"{rollout_per_node_eff} devices per node",
                "train.rollout_tensor_parallel",
                f"use a rollout TP <= {rollout_per_node_eff} or a multiple of it",
            )
        )
    if spec.strategy == "megatron" and rtp != t.tensor_parallel:
        out.append(
            info(
                "seed_rule_gen_tp",
                f"rollout TP {rtp} differs from training TP {t.tensor_parallel}: fine — verl reshards weights "
                "between the two meshes; the seed's 'gen_tp == train_tp' rule is not enforced by verl",
                "train.rollout_tensor_parallel",
            )
        )

    # GRPO/DAPO need several responses per prompt.
    if t.responses_per_prompt < 2:
        out.append(
            error(
                "rollout_n",
                f"{spec.algorithm.upper()} needs responses_per_prompt > 1 (got {t.responses_per_prompt}): "
                "group-relative advantages of a single response are zero",
                "train.responses_per_prompt",
                "use 4, 8 or 16",
            )
        )

    # 4. Batch arithmetic (verl/utils/config.py validate_config, ActorConfig.validate, worker normalisation).
    mini = t.mini_batch_size or t.train_batch_size
    if t.train_batch_size < mini:
        out.append(
            error(
                "mini_batch_size",
                f"train_batch_size ({t.train_batch_size}) must be >= mini_batch_size ({mini})",
                "train.mini_batch_size",
                f"use a mini batch <= {t.train_batch_size}",
            )
        )
    elif t.train_batch_size % mini:
        out.append(
            warning(
                "mini_batch_uneven",
                f"train_batch_size ({t.train_batch_size}) is not a multiple of mini_batch_size ({mini}): "
                "the last mini batch of every step is smaller",
                "train.mini_batch_size",
            )
        )
    if dp:
        seqs = t.train_batch_size * t.responses_per_prompt
        if seqs % dp:
            out.append(
                error(
                    "batch_dp_divisibility",
                    f"train_batch_size*responses_per_prompt = {seqs} sequences cannot be split evenly over "
                    f"{dp} data-parallel ranks (verl: 'only support equal chunk')",
                    "train.train_batch_size",
                    "make train_batch_size*responses_per_prompt a multiple of the data-parallel size",
                )
            )
        norm_mini = mini * t.responses_per_prompt // dp
        if norm_mini <= 0:
            out.append(
                error(
                    "mini_batch_normalized",
                    f"mini_batch_size*responses_per_prompt/DP = {mini}*{t.responses_per_prompt}/{dp} is 0 "
                    "(verl: 'ppo_mini_batch_size ... should be larger than 0 after normalization')",
                    "train.mini_batch_size",
                    "raise mini_batch_size or responses_per_prompt, or use fewer data-parallel ranks",
                )
            )
        elif not dynamic:
            micro = t.micro_batch_size_per_device
            if norm_mini % micro:
                out.append(
                    error(
                        "micro_batch_divisibility",
                        f"normalized mini batch {norm_mini} (mini*n/DP) is not divisible by "
                        f"micro_batch_size_per_device {micro}",
                        "train.micro_batch_size_per_device",
                        f"use a micro batch dividing {norm_mini}: {_divisors(norm_mini)}",
                    )
                )
            if spec.strategy == "megatron" and seqs % (dp * micro):
                out.append(
                    error(
                        "batch_micro_divisibility",
                        f"{seqs} sequences are not divisible by DP*micro = {dp}*{micro} "
                        "(verl validate_config: real_train_batch_size % minimal_bsz)",
                        "train.train_batch_size",
                    )
                )

    if oso and spec.algorithm == "dapo":
        out.append(
            info(
                "oso_dapo_sampling",
                "one_step_off_policy DAPO: clip-higher, token-level loss and overlong shaping are used; "
                "dynamic sampling (filter_groups) is not (the one-step-off trainer does not implement it)",
                "mode",
            )
        )
    if oso and rollout_total and total and (t.responses_per_prompt * t.train_batch_size) % total:
        out.append(
            warning(
                "oso_batch_rule",
                "one-step-off: responses_per_prompt*train_batch_size should be divisible by the training "
                f"devices ({total}) (verl docs/advance/one_step_off.md)",
                "train.train_batch_size",
            )
        )

    # Cluster.
    c = spec.cluster
    if c.nodes and c.master_addr and c.master_addr not in c.nodes:
        out.append(
            warning(
                "master_not_a_node",
                f"master_addr {c.master_addr} is not in cluster.nodes; the first node is usually the head",
                "cluster.master_addr",
            )
        )
    if c.ray_port == c.dashboard_port:
        out.append(error("ports", "ray_port and dashboard_port must differ", "cluster.dashboard_port"))

    # Checkpoints and recovery.
    if t.save_freq == -1 or t.save_freq > t.steps:
        why = "never" if t.save_freq == -1 else f"every {t.save_freq} steps (> {t.steps} steps)"
        if t.save_freq == -1:
            out.append(
                warning(
                    "no_checkpoints",
                    f"checkpoints are saved {why}: an automatic restart (OOM recovery) starts again from step 0",
                    "train.save_freq",
                    "set train.save_freq to a positive number of steps",
                )
            )

    # SwanLab.
    sw = spec.logging.swanlab
    if sw.enabled and sw.mode == "cloud":
        if not sw.host:
            out.append(
                error(
                    "swanlab_host",
                    "SwanLab cloud mode needs a host",
                    "logging.swanlab.host",
                    "set SWANLAB_HOST=http://HOST:PORT, logging.swanlab.host, or use --no-swanlab",
                )
            )
        if sw.api_key is None or not sw.api_key.get_secret_value():
            out.append(
                error(
                    "swanlab_api_key",
                    "SwanLab cloud mode needs an API key",
                    "logging.swanlab.api_key",
                    "export SWANLAB_API_KEY (kept out of files and argv), or use mode offline/local",
                )
            )
    if not spec.logging.console and not sw.enabled:
        out.append(info("logger_console", "no logger selected: console logging is kept on", "logging.console"))

    # Recovery categories must be known ones.
    from verlctl.failures import CATEGORIES

    for cat in spec.recovery.restart_on:
        if cat not in CATEGORIES:
            out.append(
                error(
                    "restart_category",
                    f"unknown failure category {cat!r}",
                    "recovery.restart_on",
                    f"known: {', '.join(CATEGORIES)}",
                )
            )
    return out


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0) if n > 0 else "-"
