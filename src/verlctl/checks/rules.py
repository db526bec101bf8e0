"""The spec rules as named units: each has its finding codes, severity, the verl versions it applies to and,
where it mirrors a verl assert, the citation (file:line per version, with the assert's text).

``RULES`` lists them in the order they report; :func:`verlctl.checks.spec_checks.check_spec` runs them.
``tests/checks/test_rule_parity.py`` checks every citation against the verl source under ``.cache/verl/<version>``.
Sources: ``reference/verl.md`` §3.2, ``reference/fidelity-audit.md`` §2.5.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

from verlctl.checks.findings import Finding, Severity, error, info, warning
from verlctl.spec.model import RunSpec
from verlctl.spec.resolve import ResolvedSpec
from verlctl.verl.compose import FeatureState
from verlctl.verl.modes import V1_SUCCESSOR, is_disaggregated, legacy_trainer_note

V070 = "0.7.0"
V091 = "0.9.1"
#: The actor's Ulysses sequence-parallel size (both versions), and 0.9.1's engine copy of it.
SP_KEY = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
SP_ENGINE_KEY = "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"


@dataclass(frozen=True)
class Cite:
    """A verl source line a rule mirrors: ``path`` under the version's wheel root, 1-based ``line``, and a
    fragment of the text that this line holds."""

    version: str
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"verl {self.version} {self.path}:{self.line}"


def _filled(value: int | None) -> int:
    """A size that resolve always fills where it is read: the trainer / rollout devices of a disaggregated mode
    (``spec.resolve.derive``), the rollout nodes of a node split (its condition)."""
    assert value is not None
    return value


@dataclass
class RuleCtx:
    """What a rule looks at: the spec, the feature states, the target verl version, derived sizes."""

    resolved: ResolvedSpec
    features: dict[str, FeatureState]
    version: str

    @property
    def spec(self) -> RunSpec:
        return self.resolved.spec

    def on(self, name: str) -> bool:
        st = self.features.get(name)
        return bool(st and st.on and st.applicable)

    @property
    def oso(self) -> bool:
        """A disaggregated mode (one-step-off, separate_async, fully_async): trainer and rollout split devices."""
        return is_disaggregated(self.spec.mode)

    @property
    def nnodes(self) -> int:
        return self.spec.cluster.node_count

    @property
    def node_split(self) -> bool:
        return self.oso and self.spec.train.rollout_nodes is not None

    @property
    def trainer_nnodes(self) -> int:
        return max(1, self.nnodes - _filled(self.spec.train.rollout_nodes)) if self.node_split else self.nnodes

    @property
    def rollout_nnodes(self) -> int:
        return _filled(self.spec.train.rollout_nodes) if self.node_split else self.nnodes

    @property
    def per_node(self) -> int:
        return len(self.spec.cluster.devices)

    @property
    def train_per_node(self) -> int:
        return _filled(self.spec.train.trainer_devices) if self.oso else self.per_node

    @property
    def total(self) -> int:
        """Training devices (the trainer's world size)."""
        return self.trainer_nnodes * self.train_per_node

    @property
    def rollout_total(self) -> int:
        return self.rollout_nnodes * _filled(self.spec.train.rollout_devices) if self.oso else self.total

    @property
    def rollout_tp(self) -> int:
        t = self.spec.train
        return t.rollout_tensor_parallel or t.tensor_parallel

    @property
    def model_parallel(self) -> int:
        t = self.spec.train
        return t.tensor_parallel * t.pipeline_parallel * t.context_parallel if self.spec.strategy == "megatron" else 1

    @cached_property
    def sequence_parallel(self) -> int:
        """The actor's Ulysses sequence-parallel size (FSDP only: Megatron's sequence parallelism is TP's):
        ``actor.ulysses_sequence_parallel_size`` (both versions), else 0.9.1's engine key
        ``actor.fsdp_config.ulysses_sequence_parallel_size``; 1 when unset or unreadable."""
        if self.spec.strategy == "megatron":
            return 1
        keys = [f"{SP_KEY}"] + ([f"{SP_ENGINE_KEY}"] if self.version == V091 else [])
        values: dict[str, str] = {}
        for raw in self.spec.extra_overrides:
            key, _, value = raw.partition("=")
            values[key.lstrip("+~").strip()] = value.strip().strip("'\"")
        for key in keys:
            try:
                sp = int(values.get(key, "1"))
            except ValueError:
                continue
            if sp > 1:
                return sp
        return 1

    @property
    def dp_divisor(self) -> int:
        """What the trainer's devices are divided by to get its data-parallel size, as verl divides them:
        TP*PP*CP for Megatron (``mpu.get_data_parallel_world_size``), the Ulysses SP size for FSDP
        (0.7.0 ``fsdp_workers.py:172`` ``dp = world_size // self.ulysses_sequence_parallel_size``; 0.9.1
        ``engine/fsdp/transformer_impl.py:652``)."""
        return self.model_parallel * self.sequence_parallel

    @cached_property
    def dp(self) -> int:
        """Data-parallel size of the trainer (the one divisor every rule that divides by DP uses); 0 when
        :attr:`dp_divisor` does not divide the devices."""
        div = self.dp_divisor
        return self.total // div if self.total % div == 0 else 0

    @property
    def mini(self) -> int:
        t = self.spec.train
        return t.mini_batch_size or t.train_batch_size

    @property
    def sequences(self) -> int:
        t = self.spec.train
        return t.train_batch_size * t.responses_per_prompt


@dataclass(frozen=True)
class Rule:
    name: str
    codes: tuple[str, ...]  # every finding code the rule can emit
    severity: Severity  # the severity of its main finding
    check: Callable[[RuleCtx], Iterable[Finding]]
    versions: frozenset[str] | None = None  # None: every version
    cites: tuple[Cite, ...] = ()  # the verl asserts it mirrors, per version

    def applies(self, version: str) -> bool:
        return self.versions is None or version in self.versions

    def run(self, ctx: RuleCtx) -> list[Finding]:
        if not self.applies(ctx.version):
            return []
        out = list(self.check(ctx))
        unknown = {f.code for f in out} - set(self.codes)
        assert not unknown, f"rule {self.name} emitted undeclared codes {unknown}"
        return out


RULES: list[Rule] = []


def rule(
    name: str,
    codes: tuple[str, ...],
    severity: Severity,
    *,
    versions: Iterable[str] | None = None,
    cites: tuple[Cite, ...] = (),
) -> Callable[[Callable[[RuleCtx], Iterable[Finding]]], Callable[[RuleCtx], Iterable[Finding]]]:
    def register(fn: Callable[[RuleCtx], Iterable[Finding]]) -> Callable[[RuleCtx], Iterable[Finding]]:
        RULES.append(
            Rule(name, codes, severity, fn, frozenset(versions) if versions else None, cites)
        )
        return fn

    return register


def _divisors(n: int) -> str:
    """The divisors of a positive size (a device count, or a normalized mini batch a rule has checked > 0)."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _cited(ctx: RuleCtx, name: str) -> str:
    """' (verl 0.9.1 path:line)' for the rule's citation of this version (every rule cites each version it
    applies to: tests/checks/test_rule_parity.py)."""
    lines = [f"{c.path}:{c.line}" for r in RULES if r.name == name for c in r.cites if c.version == ctx.version]
    return f" (verl {ctx.version} {', '.join(lines)})"


# ------------------------------------------------------------------------------------------------ devices


@rule("device_split", ("device_split", "node_split"), Severity.ERROR)
def _device_split(ctx: RuleCtx) -> Iterable[Finding]:
    """One-step-off: the trainer and the rollout share each node's devices, or split the nodes."""
    t = ctx.spec.train
    if ctx.node_split:
        rn = _filled(t.rollout_nodes)
        if rn >= ctx.nnodes:
            yield error(
                "node_split",
                f"rollout_nodes ({rn}) must leave at least one of the {ctx.nnodes} nodes in cluster.nodes for training",
                "train.rollout_nodes",
                f"use rollout_nodes <= {ctx.nnodes - 1}, or list more nodes",
            )
        for name, value in (("trainer_devices", t.trainer_devices), ("rollout_devices", t.rollout_devices)):
            if _filled(value) > ctx.per_node:
                yield error(
                    "device_split",
                    f"{name} ({value}) exceeds the {ctx.per_node} devices per node in cluster.devices",
                    f"train.{name}",
                    f"use at most {ctx.per_node}",
                )
        return
    if ctx.oso and ctx.train_per_node + _filled(t.rollout_devices) > ctx.per_node:
        yield error(
            "device_split",
            f"trainer_devices ({t.trainer_devices}) + rollout_devices ({t.rollout_devices}) exceed the "
            f"{ctx.per_node} devices per node in cluster.devices",
            "train.trainer_devices",
            "lower trainer_devices/rollout_devices or list more devices",
        )


@rule(
    "parallel_divisibility",
    ("parallel_divisibility", "seed_rule_tp_pp_per_node"),
    Severity.ERROR,
    cites=(
        Cite(V070, "verl/utils/config.py", 96, "n_gpus % (model_parallel_size * config.actor_rollout_ref.actor.megatron"),
        Cite(V091, "verl/utils/config.py", 110, "n_gpus % (model_parallel_size * config.actor_rollout_ref.actor.megatron"),
        Cite(V070, "verl/workers/fsdp_workers.py", 172, "dp = world_size // self.ulysses_sequence_parallel_size"),
        Cite(V091, "verl/workers/engine/fsdp/transformer_impl.py", 652,
             "return torch.distributed.get_world_size() // self.ulysses_sequence_parallel_size"),
    ),
)
def _parallel(ctx: RuleCtx) -> Iterable[Finding]:
    """Megatron: the training devices are divisible by TP*PP*CP; the seed's per-node rule is not verl's. FSDP:
    by the Ulysses SP size (verl builds a (DP, SP) device mesh of them)."""
    if ctx.spec.strategy != "megatron":
        sp = ctx.sequence_parallel
        if ctx.total % sp:
            yield error(
                "parallel_divisibility",
                f"{ctx.total} training devices are not divisible by the Ulysses sequence-parallel size {sp} "
                f"(verl builds a (data-parallel, SP) device mesh of them){_cited(ctx, 'parallel_divisibility')}",
                "extra_overrides",
                f"set {SP_KEY} to one of {_divisors(ctx.total)}",
            )
        return
    t = ctx.spec.train
    mp = ctx.model_parallel
    if ctx.total % mp:
        yield error(
            "parallel_divisibility",
            f"{ctx.total} training devices are not divisible by TP*PP*CP = "
            f"{t.tensor_parallel}*{t.pipeline_parallel}*{t.context_parallel} = {mp}",
            "train.tensor_parallel",
            f"choose TP*PP*CP dividing {ctx.total}: {_divisors(ctx.total)}",
        )
    if (t.tensor_parallel * t.pipeline_parallel) % ctx.train_per_node:
        yield info(
            "seed_rule_tp_pp_per_node",
            f"TP*PP = {t.tensor_parallel * t.pipeline_parallel} is not a multiple of the {ctx.train_per_node} "
            "devices per node: fine — verl only requires the total device count to be divisible by "
            "TP*PP*CP (some launch scripts also ask for TP*PP to be a multiple of the devices per node; verlctl "
            "does not; official NPU scripts use e.g. TP4*PP2 on 16 NPUs)",
            "train.tensor_parallel",
        )


@rule(
    "rollout_divisibility",
    ("rollout_divisibility",),
    Severity.ERROR,
    cites=(
        Cite(V070, "verl/workers/megatron_workers.py", 506, "is not divisible by infer_world_size"),
        Cite(V070, "verl/workers/fsdp_workers.py", 619, "is not divisible by infer_world_size"),
        Cite(V091, "verl/workers/engine_workers.py", 660, "is not divisible by infer_world_size"),
    ),
)
def _rollout_div(ctx: RuleCtx) -> Iterable[Finding]:
    """The rollout TP divides the rollout devices."""
    rtp, total = ctx.rollout_tp, ctx.rollout_total
    if total and total % rtp:
        yield error(
            "rollout_divisibility",
            f"rollout world size {total} is not divisible by the rollout TP {rtp} "
            f"(verl: 'rollout world_size ... is not divisible by infer_world_size'){_cited(ctx, 'rollout_divisibility')}",
            "train.rollout_tensor_parallel",
            f"choose a rollout TP dividing {total}: {_divisors(total)}",
        )


@rule(
    "rollout_replica_nodes",
    ("rollout_replica_nodes",),
    Severity.ERROR,
    cites=(
        Cite(V070, "verl/workers/rollout/replica.py", 101, "assert self.world_size % self.gpus_per_node == 0"),
        Cite(V091, "verl/workers/rollout/replica.py", 114, "assert self.world_size % self.gpus_per_replica_node == 0"),
    ),
)
def _replica_nodes(ctx: RuleCtx) -> Iterable[Finding]:
    """A rollout replica spanning nodes uses whole nodes."""
    t = ctx.spec.train
    per = (t.rollout_devices or ctx.per_node) if ctx.oso else ctx.per_node
    rtp = ctx.rollout_tp
    if rtp > per and rtp % per:
        yield error(
            "rollout_replica_nodes",
            f"a rollout replica of TP {rtp} spans nodes but is not a multiple of the {per} devices per node"
            + _cited(ctx, "rollout_replica_nodes"),
            "train.rollout_tensor_parallel",
            f"use a rollout TP <= {per} or a multiple of it",
        )


@rule("seed_rule_gen_tp", ("seed_rule_gen_tp",), Severity.INFO)
def _gen_tp(ctx: RuleCtx) -> Iterable[Finding]:
    """The seed's gen_tp == train_tp is not a verl rule (verl reshards)."""
    t = ctx.spec.train
    if ctx.spec.strategy == "megatron" and ctx.rollout_tp != t.tensor_parallel:
        yield info(
            "seed_rule_gen_tp",
            f"rollout TP {ctx.rollout_tp} differs from training TP {t.tensor_parallel}: fine — verl reshards "
            "weights between the two meshes (some launch scripts require gen_tp == train_tp; verl does not)",
            "train.rollout_tensor_parallel",
        )


@rule(
    "vpp_mbridge",
    ("vpp_mbridge_unverified",),
    Severity.WARNING,
    versions=(V091,),
    cites=(Cite(V091, "verl/workers/engine/megatron/transformer_impl.py", 191, 'use_mbridge, "use_mbridge must be True"'),),
)
def _vpp_mbridge(ctx: RuleCtx) -> Iterable[Finding]:
    """0.9.1 asserts use_mbridge; the Ascend docs say VPP needs it off: mbridge stays on, unverified on NPU."""
    if ctx.on("vpp") and ctx.spec.device == "npu" and ctx.spec.strategy == "megatron":
        yield warning(
            "vpp_mbridge_unverified",
            "vpp on Ascend with verl 0.9.1: the Ascend docs say VPP needs use_mbridge=False, but 0.9.1's Megatron "
            f"engine asserts 'use_mbridge must be True'{_cited(ctx, 'vpp_mbridge')}, so mbridge stays on: "
            "VPP with mbridge is unverified on NPU",
            "features",
            "turn vpp off if the actor fails to build its model, or use verl 0.7.0",
        )


# ------------------------------------------------------------------------------------------------ batches


@rule(
    "rollout_n",
    ("rollout_n",),
    Severity.WARNING,
    cites=(
        Cite(V070, "verl/trainer/ppo/core_algos.py", 312, "if len(id2score[idx]) == 1:"),
        Cite(V091, "verl/trainer/ppo/core_algos.py", 315, "if len(id2score[idx]) == 1:"),
    ),
)
def _rollout_n(ctx: RuleCtx) -> Iterable[Finding]:
    """One response per prompt: verl runs it (a group of one gets mean 0, std 1, so its advantage is its own
    score; verl's NPU profiling CI runs GRPO so), but the advantage is no longer group-relative."""
    t = ctx.spec.train
    if t.responses_per_prompt < 2:
        yield warning(
            "rollout_n",
            f"{ctx.spec.algorithm.upper()} with responses_per_prompt {t.responses_per_prompt}: each group holds one "
            "response, whose advantage verl takes as its raw score (mean 0, std 1 for a group of one"
            f"{_cited(ctx, 'rollout_n')}): it runs, but nothing is compared within a group",
            "train.responses_per_prompt",
            "for training use 4, 8 or 16; one is fine for a profiling or smoke run",
        )


#: verl 0.7.0's entry points that run ``validate_config`` (and so ``ActorConfig.validate``'s mini <= train check
#: without dynamic batching): main_ppo (``trainer/main_ppo.py:292``) and the one-step-off recipe
#: (``recipe/one_step_off_policy/main_ppo.py:153``); the DAPO recipe's ``main_dapo`` does not call it.
VALIDATING_070 = ("verl.trainer.main_ppo", "recipe.one_step_off_policy.main_ppo")


def _validates_config(ctx: RuleCtx) -> bool:
    from verlctl.verl.entrypoints import entry_for

    spec = ctx.spec
    try:
        return entry_for(ctx.version, spec.algorithm, spec.mode, spec.strategy).module in VALIDATING_070
    except ValueError:
        return True  # the mode does not exist in this version: mode_version reports it


@rule(
    "mini_batch_size",
    ("mini_batch_size", "mini_batch_iterator", "mini_batch_uneven", "mini_batch_over_batch"),
    Severity.ERROR,
    cites=(
        Cite(V070, "verl/workers/config/actor.py", 201, "if train_batch_size < self.ppo_mini_batch_size:"),
        Cite(V091, "verl/workers/config/actor.py", 225, "if train_batch_size < self.ppo_mini_batch_size:"),
        Cite(V091, "verl/utils/tensordict_utils.py", 588,
             "assert tensordict.batch_size[0] % mini_batch_size == 0"),
        Cite(V070, "verl/protocol.py", 827, "assert self.batch.batch_size[0] % mini_batch_size == 0"),
        Cite(V070, "verl/workers/actor/megatron_actor.py", 370, "mini_batch_size=self.config.ppo_mini_batch_size,"),
        Cite(V070, "verl/workers/actor/dp_actor.py", 430, "mini_batches = data.split(self.config.ppo_mini_batch_size)"),
        Cite(V070, "verl/workers/actor/dp_actor.py", 465,
             "loss_scale_factor = response_mask.shape[0] / self.config.ppo_mini_batch_size"),
    ),
)
def _mini(ctx: RuleCtx) -> Iterable[Finding]:
    """The mini batch against the batch, as verl's actor update takes it. verl 0.9.1's engine workers (every
    mode) and 0.7.0's Megatron actor cut each rank's share of the batch with an iterator that asserts the share
    is a whole number of per-rank mini batches (``make_iterator``): a mini batch above the batch, or one that
    does not divide it, stops the first update. verl 0.7.0's FSDP actor splits the batch instead (the last
    mini batch is smaller; a mini batch above the batch is one mini batch of the whole batch, its loss scaled by
    rows / ppo_mini_batch_size), so there it runs, unless ``validate_config`` (without dynamic batching) refuses
    a mini batch above the batch first. The separate / fully async modes have their own batch rule."""
    t = ctx.spec.train
    over = t.train_batch_size < ctx.mini
    iterator = ctx.version == V091 or ctx.spec.strategy == "megatron"
    if iterator and ctx.spec.mode in ("separate_async", "fully_async") and not over:
        return  # async_batch_sync_step: train_batch_size == parameter_sync_step * mini_batch_size
    n = t.responses_per_prompt
    share, mini_share = (ctx.sequences // ctx.dp, ctx.mini * n // ctx.dp) if ctx.dp else (0, 0)
    who = "engine workers assert" if ctx.version == V091 else "Megatron actor asserts"
    where = f"verl {ctx.version}'s {who} it in the first update's mini-batch iterator{_cited(ctx, 'mini_batch_size')}"
    if over and (iterator or (_validates_config(ctx) and not ctx.on("dynamic_batch"))):
        yield error(
            "mini_batch_size",
            f"train_batch_size ({t.train_batch_size}) must be >= mini_batch_size ({ctx.mini})"
            + (f" ({where}: 'make_iterator ... % mini_batch_size == 0')" if iterator else
               " (verl validate_config: 'train_batch_size ... must be >= actor.ppo_mini_batch_size')"),
            "train.mini_batch_size",
            f"use a mini batch <= {t.train_batch_size}",
        )
    elif over:
        yield warning(
            "mini_batch_over_batch",
            f"mini_batch_size ({ctx.mini}) is above train_batch_size ({t.train_batch_size}): verl {ctx.version}'s FSDP "
            "actor then updates once per step on the whole batch and scales its loss by rows / mini batch, so each "
            f"update is {t.train_batch_size}/{ctx.mini} of a full one{_cited(ctx, 'mini_batch_size')}",
            "train.mini_batch_size",
            f"use a mini batch <= {t.train_batch_size} (a mini batch equal to the batch is one full update per step)",
        )
    elif t.train_batch_size % ctx.mini and iterator and mini_share and share % mini_share:
        yield error(
            "mini_batch_iterator",
            f"train_batch_size ({t.train_batch_size}) is not a multiple of mini_batch_size ({ctx.mini}): each of the "
            f"{ctx.dp} data-parallel ranks gets {share} sequences, not a whole number of mini batches of {mini_share} "
            f"({where})",
            "train.mini_batch_size",
            f"use a mini_batch_size dividing {t.train_batch_size}: {_divisors(t.train_batch_size)}",
        )
    elif t.train_batch_size % ctx.mini:
        yield warning(
            "mini_batch_uneven",
            f"train_batch_size ({t.train_batch_size}) is not a multiple of mini_batch_size ({ctx.mini}): "
            "the last mini batch of every step is smaller",
            "train.mini_batch_size",
        )


@rule(
    "batch_dp_divisibility",
    ("batch_dp_divisibility",),
    Severity.ERROR,
    cites=(
        Cite(V070, "verl/protocol.py", 886, "only support equal chunk"),
        Cite(V091, "verl/protocol.py", 872, "only support equal chunk"),
    ),
)
def _batch_dp(ctx: RuleCtx) -> Iterable[Finding]:
    """train_batch_size*n splits evenly over the data-parallel ranks."""
    if ctx.dp and ctx.sequences % ctx.dp:
        yield error(
            "batch_dp_divisibility",
            f"train_batch_size*responses_per_prompt = {ctx.sequences} sequences cannot be split evenly over "
            f"{ctx.dp} data-parallel ranks (verl: 'only support equal chunk'){_cited(ctx, 'batch_dp_divisibility')}",
            "train.train_batch_size",
            "make train_batch_size*responses_per_prompt a multiple of the data-parallel size",
        )


@rule(
    "mini_batch_dp",
    ("mini_batch_dp",),
    Severity.ERROR,
    versions=(V091,),
    cites=(
        Cite(V091, "verl/workers/engine_workers.py", 267, "assert mini_batch_size % self.engine.get_data_parallel_size() == 0"),
    ),
)
def _mini_dp(ctx: RuleCtx) -> Iterable[Finding]:
    """0.9.1 engine workers: the mini batch (ppo_mini_batch_size*n sequences) splits over the DP ranks."""
    n = ctx.spec.train.responses_per_prompt
    if ctx.dp and (ctx.mini * n) % ctx.dp:
        yield error(
            "mini_batch_dp",
            f"mini_batch_size*responses_per_prompt = {ctx.mini}*{n} = {ctx.mini * n} sequences are not divisible "
            f"by the {ctx.dp} data-parallel ranks (verl: 'assert mini_batch_size % "
            f"self.engine.get_data_parallel_size() == 0'){_cited(ctx, 'mini_batch_dp')}",
            "train.mini_batch_size",
            f"make mini_batch_size*responses_per_prompt a multiple of {ctx.dp}",
        )


@rule(
    "mini_batch_normalized",
    ("mini_batch_normalized",),
    Severity.ERROR,
    versions=(V070,),  # 0.9.1: covered by mini_batch_dp (mini*n divisible by DP)
    cites=(Cite(V070, "verl/workers/fsdp_workers.py", 244, "assert self.config.actor.ppo_mini_batch_size > 0"),),
)
def _mini_norm(ctx: RuleCtx) -> Iterable[Finding]:
    """mini*n/DP > 0 after the worker's normalisation."""
    n = ctx.spec.train.responses_per_prompt
    if ctx.dp and ctx.mini * n // ctx.dp <= 0:
        yield error(
            "mini_batch_normalized",
            f"mini_batch_size*responses_per_prompt/DP = {ctx.mini}*{n}/{ctx.dp} is 0 "
            "(verl: 'ppo_mini_batch_size ... should be larger than 0 after normalization')",
            "train.mini_batch_size",
            "raise mini_batch_size or responses_per_prompt, or use fewer data-parallel ranks",
        )


@rule(
    "micro_batch_divisibility",
    ("micro_batch_divisibility",),
    Severity.ERROR,
    cites=(
        Cite(V070, "verl/workers/fsdp_workers.py", 256,
             "assert self.config.actor.ppo_mini_batch_size % self.config.actor.ppo_micro_batch_size_per_gpu == 0"),
        Cite(V091, "verl/workers/config/actor.py", 233, "if self.ppo_mini_batch_size % self.ppo_micro_batch_size != 0:"),
    ),
)
def _micro(ctx: RuleCtx) -> Iterable[Finding]:
    """The normalized mini batch (mini*n/DP) is divisible by the micro batch. verl 0.7.0's FSDP worker asserts
    it whenever the micro size is set (verlctl always sets it), even with dynamic batching."""
    t = ctx.spec.train
    if not ctx.dp:
        return  # TP*PP*CP does not divide the devices: parallel_divisibility says so
    norm = ctx.mini * t.responses_per_prompt // ctx.dp
    always = ctx.version == V070 and ctx.spec.strategy in ("fsdp", "fsdp2")
    if norm > 0 and (always or not ctx.on("dynamic_batch")) and norm % t.micro_batch_size_per_device:
        why = " (verl 0.7.0's FSDP worker asserts it even with dynamic batching)" if ctx.on("dynamic_batch") else ""
        yield error(
            "micro_batch_divisibility",
            f"normalized mini batch {norm} (mini*n/DP) is not divisible by micro_batch_size_per_device "
            f"{t.micro_batch_size_per_device}{why}{_cited(ctx, 'micro_batch_divisibility')}",
            "train.micro_batch_size_per_device",
            f"use a micro batch dividing {norm}: {_divisors(norm)}",
        )


@rule(
    "batch_micro_divisibility",
    ("batch_micro_divisibility",),
    Severity.ERROR,
    cites=(
        Cite(V070, "verl/utils/config.py", 110, "assert real_train_batch_size % minimal_bsz == 0"),
        Cite(V091, "verl/utils/config.py", 124, "assert real_train_batch_size % minimal_bsz == 0"),
    ),
)
def _batch_micro(ctx: RuleCtx) -> Iterable[Finding]:
    """Megatron without dynamic batching: train_batch_size*n divisible by DP*micro (validate_config)."""
    t = ctx.spec.train
    micro = t.micro_batch_size_per_device
    if ctx.spec.strategy == "megatron" and ctx.dp and not ctx.on("dynamic_batch") and ctx.sequences % (ctx.dp * micro):
        yield error(
            "batch_micro_divisibility",
            f"{ctx.sequences} sequences are not divisible by DP*micro = {ctx.dp}*{micro} "
            f"(verl validate_config: real_train_batch_size % minimal_bsz){_cited(ctx, 'batch_micro_divisibility')}",
            "train.train_batch_size",
        )


@rule(
    "agent_loop_chunks",
    ("agent_loop_chunks",),
    Severity.ERROR,
    versions=(V070,),
    cites=(
        Cite(V070, "verl/experimental/agent_loop/agent_loop.py", 949, "prompts.chunk(len(self.agent_loop_workers))"),
        Cite(V070, "verl/protocol.py", 886, "only support equal chunk"),
        Cite(V070, "verl/trainer/config/rollout/rollout.yaml", 209, "num_workers: 8"),
    ),
)
def _agent_chunks(ctx: RuleCtx) -> Iterable[Finding]:
    """0.7.0 sync: the generation batch (train or DAPO gen batch, x n) splits into agent.num_workers equal chunks."""
    if ctx.oso:
        return
    t = ctx.spec.train
    workers = _agent_workers(ctx.spec)
    gen = ctx.spec.algorithm == "dapo" and t.gen_batch_size is not None
    name = "gen_batch_size" if gen else "train_batch_size"
    batch = t.gen_batch_size if gen and t.gen_batch_size else t.train_batch_size
    seqs = batch * t.responses_per_prompt
    if seqs % workers:
        yield error(
            "agent_loop_chunks",
            f"{name}*responses_per_prompt = {batch}*{t.responses_per_prompt} = {seqs} sequences cannot be split "
            f"into {workers} equal chunks for the agent-loop workers (actor_rollout_ref.rollout.agent.num_workers; "
            f"verl: 'only support equal chunk'){_cited(ctx, 'agent_loop_chunks')}",
            f"train.{name}",
            f"make {name}*responses_per_prompt a multiple of {workers}",
        )


def _agent_workers(spec: RunSpec) -> int:
    for raw in spec.extra_overrides:
        key, _, value = raw.partition("=")
        if key.lstrip("+~") == "actor_rollout_ref.rollout.agent.num_workers":
            try:
                return max(1, int(value))
            except ValueError:
                break
    return 8


@rule("oso_notes", ("oso_dapo_sampling", "oso_batch_rule", "oso_noset"), Severity.WARNING)
def _oso(ctx: RuleCtx) -> Iterable[Finding]:
    """One-step-off: DAPO without dynamic sampling; the docs' batch rule; no NOSET (see verl/environment.py)."""
    if not ctx.oso:
        return
    noset = "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"
    if ctx.spec.device == "npu" and str(ctx.spec.env.get(noset, "")).strip().lower() not in ("", "0", "false"):
        yield warning(
            "oso_noset",
            f"{ctx.spec.mode} with env.{noset} set: Ray then leaves every NPU visible to every worker, and the "
            "disaggregated rollout and trainer can put tensors on the wrong device ('Expects tensor to be on the "
            "compute device npu:N, was on npu:0'; verl#2971); verl's one-step-off NPU script leaves it unset",
            f"env.{noset}",
            f"remove env.{noset} (verlctl does not set it in one-step-off mode)",
        )
    if ctx.spec.algorithm == "dapo" and ctx.spec.mode in ("one_step_off_policy", "fully_async"):
        yield info(
            "oso_dapo_sampling",
            f"{ctx.spec.mode} DAPO: clip-higher, token-level loss and overlong shaping are used; "
            f"dynamic sampling (filter_groups) is not (the {ctx.spec.mode} trainer does not implement it)",
            "mode",
        )
    if ctx.spec.mode == "one_step_off_policy" and ctx.rollout_total and ctx.total and ctx.sequences % ctx.total:
        yield warning(
            "oso_batch_rule",
            "one-step-off: responses_per_prompt*train_batch_size should be divisible by the training "
            f"devices ({ctx.total}) (verl docs/advance/one_step_off.md)",
            "train.train_batch_size",
        )


@rule(
    "legacy_trainer",
    ("legacy_trainer_mode",),
    Severity.WARNING,
    versions=(V091,),
    cites=(
        Cite(V091, "verl/trainer/ppo/ray_trainer.py", 285, "Legacy trainer is deprecated, and wil be removed"),
        Cite(V091, "verl/experimental/separation/ray_trainer.py", 52, "class SeparateRayPPOTrainer(RayPPOTrainer):"),
        Cite(V091, "verl/experimental/one_step_off_policy/ray_trainer.py", 49,
             "class OneStepOffRayTrainer(SeparateRayPPOTrainer):"),
        Cite(V091, "verl/experimental/fully_async_policy/fully_async_trainer.py", 54,
             "class FullyAsyncTrainer(SeparateRayPPOTrainer):"),
    ),
)
def _legacy_trainer(ctx: RuleCtx) -> Iterable[Finding]:
    """0.9.1's one-step-off and fully-async trainers subclass the legacy RayPPOTrainer, which verl marks for
    removal; the V1 trainer's separate_async is what verl points users to (verl/modes.py LEGACY_TRAINER)."""
    note = legacy_trainer_note(ctx.spec.mode, ctx.version)
    if note is None:
        return
    yield warning(
        "legacy_trainer_mode",
        f"{note}{_cited(ctx, 'legacy_trainer')}; a later verl may move this mode out of verl/experimental",
        "mode",
        f"mode: {V1_SUCCESSOR} (the V1 equivalent: a standalone rollout pool, weights synced every "
        "train.parameter_sync_step steps); this mode still runs on verl 0.9.1",
    )


# ------------------------------------------------------------------------------------------------ the rest


@rule("cluster", ("master_not_a_node", "ports"), Severity.ERROR)
def _cluster(ctx: RuleCtx) -> Iterable[Finding]:
    """The head is one of the nodes; Ray's two ports differ."""
    c = ctx.spec.cluster
    if c.nodes and c.master_addr and c.master_addr not in c.nodes:
        yield warning(
            "master_not_a_node",
            f"master_addr {c.master_addr} is not in cluster.nodes; the first node is usually the head",
            "cluster.master_addr",
        )
    if c.ray_port == c.dashboard_port:
        yield error("ports", "ray_port and dashboard_port must differ", "cluster.dashboard_port")


@rule("checkpoints", ("no_checkpoints", "checkpoints_after_last_step"), Severity.WARNING)
def _checkpoints(ctx: RuleCtx) -> Iterable[Finding]:
    """A run without checkpoints restarts from step 0 after an automatic restart."""
    t = ctx.spec.train
    if t.save_freq == -1:
        yield warning(
            "no_checkpoints",
            "checkpoints are saved never: an automatic restart (OOM recovery) starts again from step 0",
            "train.save_freq",
            "set train.save_freq to a positive number of steps",
        )
    elif t.steps is not None and t.save_freq > t.steps:
        yield warning(
            "checkpoints_after_last_step",
            f"checkpoints are saved every {t.save_freq} steps (> {t.steps} steps): only the final step is saved "
            "(verl also saves at the last step), so an automatic restart (OOM recovery) starts again from step 0",
            "train.save_freq",
            f"set train.save_freq to at most {t.steps}",
        )


@rule("swanlab", ("swanlab_host", "swanlab_api_key", "logger_console"), Severity.ERROR)
def _swanlab(ctx: RuleCtx) -> Iterable[Finding]:
    """SwanLab cloud mode needs a host and an API key."""
    sw = ctx.spec.logging.swanlab
    if sw.enabled and sw.mode == "cloud":
        if not sw.host:
            yield error(
                "swanlab_host",
                "SwanLab cloud mode needs a host",
                "logging.swanlab.host",
                "set SWANLAB_HOST=http://HOST:PORT, logging.swanlab.host, or use --no-swanlab",
            )
        if sw.api_key is None or not sw.api_key.get_secret_value():
            yield error(
                "swanlab_api_key",
                "SwanLab cloud mode needs an API key",
                "logging.swanlab.api_key",
                "export SWANLAB_API_KEY (kept out of files and argv), or use mode offline/local",
            )
    if not ctx.spec.logging.console and not sw.enabled:
        yield info("logger_console", "no logger selected: console logging is kept on", "logging.console")


@rule("restart_category", ("restart_category",), Severity.ERROR)
def _restart(ctx: RuleCtx) -> Iterable[Finding]:
    """Recovery categories must be known ones."""
    from verlctl.failures import CATEGORIES

    for cat in ctx.spec.recovery.restart_on:
        if cat not in CATEGORIES:
            yield error(
                "restart_category",
                f"unknown failure category {cat!r}",
                "recovery.restart_on",
                f"known: {', '.join(CATEGORIES)}",
            )


def _ray_num_cpus(args: list[str]) -> int | None:
    """The ``--num-cpus=N`` that cluster.ray_start_args gives (its validator admits only ``--name[=value]``)."""
    value: str | None = None
    for a in args:
        if a.startswith("--num-cpus="):
            value = a.partition("=")[2]
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


@rule(
    "ray_cpus",
    ("ray_cpus_short", "ray_init_on_started_ray"),
    Severity.ERROR,
    cites=(
        Cite(V091, "verl/single_controller/ray/base.py", 146, 'bundle = {"CPU": self.max_colocate_count}'),
        Cite(V091, "verl/single_controller/ray/base.py", 192, "max_colocate_count: int = 3"),
        Cite(V091, "verl/trainer/main_ppo.py", 149, "tq.init(config.transfer_queue)"),
        Cite(V091, "verl/trainer/config/transfer_queue/transfer_queue.yaml", 29, "num_data_storage_units: 8"),
        Cite(V091, "verl/experimental/one_step_off_policy/main_ppo.py", 33, "@ray.remote(num_cpus=10"),
        Cite(V070, "verl/single_controller/ray/base.py", 127, 'bundle = {"CPU": self.max_colocate_count}'),
        Cite(V070, "verl/trainer/ppo/ray_trainer.py", 93, "max_colocate_count=3"),
        Cite(V070, "verl/trainer/main_ppo.py", 80, "ray.remote(num_cpus=1)(TaskRunner)"),
    ),
)
def _ray_cpus(ctx: RuleCtx) -> Iterable[Finding]:
    """Ray's logical CPUs cover what verl's actors hold (else one never schedules and verl hangs silently);
    verl's own ray.init must not size the Ray that start_verl.sh already started."""
    from verlctl.verl.entrypoints import entry_for
    from verlctl.verl.ray_cpus import cpu_demand

    spec = ctx.spec
    try:
        module = entry_for(ctx.version, spec.algorithm, spec.mode, spec.strategy).module
    except ValueError:
        return  # the mode does not exist in this version: mode_version reports it
    need = cpu_demand(ctx.version, module, list(spec.extra_overrides), ctx.per_node)
    given = _ray_num_cpus(list(spec.cluster.ray_start_args))
    if given is not None and given < max(need.head, need.worker):
        yield error(
            "ray_cpus_short",
            f"cluster.ray_start_args gives Ray --num-cpus={given}, but verl {ctx.version}'s actors hold {need.head} "
            f"logical CPUs on the head ({need.describe()}){_cited(ctx, 'ray_cpus')}: an actor would never be "
            "scheduled and verl waits without a message",
            "cluster.ray_start_args",
            f"use --num-cpus={need.head} or more (logical CPUs only schedule; they need not be cores), or drop "
            "--num-cpus: start_verl.sh then raises Ray's count to what verl needs where the node has fewer cores",
        )
    for raw in spec.extra_overrides:
        name, _, value = raw.partition("=")
        key = name.lstrip("+~")
        if key in ("ray_kwargs.ray_init.num_cpus", "ray_kwargs.ray_init.num_gpus") and \
                value.strip().lower() not in ("null", "none", "~", ""):
            yield error(
                "ray_init_on_started_ray",
                f"extra_overrides sets {key}, but verl's ray.init joins the Ray that start_verl.sh started, and Ray "
                "refuses it there ('When connecting to an existing cluster, num_cpus and num_gpus must not be "
                "provided', ray/_private/worker.py)",
                "extra_overrides",
                "remove it; give Ray's CPU count as cluster.ray_start_args: [--num-cpus=N] (devices come from "
                "cluster.devices)",
            )


@rule("image_device", ("image_for_npu",), Severity.WARNING)
def _image_device(ctx: RuleCtx) -> Iterable[Finding]:
    """A GPU run on the default image, which is Ascend's (910B) and has no CUDA, is named before anything starts
    (U19). A warning, not an error: verlctl has no CUDA image of its own to default to, and a user's container
    of that name may well be a CUDA one; the launch's own image checks then decide."""
    from verlctl.spec.model import DEFAULT_IMAGE

    c = ctx.spec.container
    if ctx.spec.device == "gpu" and c.runtime == "docker" and c.image == DEFAULT_IMAGE:
        yield warning(
            "image_for_npu",
            f"device is gpu but container.image is the default, {DEFAULT_IMAGE}: an Ascend (910B) image without "
            "CUDA, so training on the GPUs cannot start",
            "container.image",
            "set container.image to a CUDA verl image of the target verl version (verl's docker/ images, e.g. "
            "verlai/verl:...), or device: npu",
        )


#: verl's version the demo device layer (src/verlctl/demo/device_layer.py) is written against: it registers a
#: platform through verl 0.9.1's platform registry (verl/plugin/platform), which 0.7.0 does not have.
CPU_LAYER_VERSIONS = ("0.9.1",)


@rule("cpu_device", ("cpu_device_runtime", "cpu_device_version", "python_env_not_host"), Severity.ERROR)
def _cpu_device(ctx: RuleCtx) -> Iterable[Finding]:
    """``device: cpu`` is the demo device layer: it runs verl 0.9.1 on this host (no container, no scheduler);
    ``container.python_env`` is a host-runtime setting."""
    spec = ctx.spec
    if spec.device == "cpu" and spec.container.runtime != "host":
        yield error("cpu_device_runtime", "device: cpu (the demo device layer) runs on this host only, but "
                    f"container.runtime is {spec.container.runtime}", "container.runtime",
                    "set container.runtime: host and container.python_env to the environment `verlctl demo` made, "
                    "or device: npu / gpu")
    if spec.device == "cpu" and ctx.version not in CPU_LAYER_VERSIONS:
        yield error("cpu_device_version", f"device: cpu (the demo device layer) needs verl "
                    f"{', '.join(CPU_LAYER_VERSIONS)} (its platform registry), not {ctx.version}", "verl_version",
                    f"set verl_version: {CPU_LAYER_VERSIONS[-1]}")
    if spec.container.python_env and spec.container.runtime != "host":
        yield error("python_env_not_host", "container.python_env is set but container.runtime is "
                    f"{spec.container.runtime}: it names a Python environment on this host", "container.python_env",
                    "remove container.python_env, or set container.runtime: host")


@rule(
    "cpu_fsdp1", ("cpu_device_fsdp1",), Severity.ERROR,
    cites=(Cite(V091, "verl/workers/engine/fsdp/transformer_impl.py", 444, "sync_module_states=True"),
           Cite(V070, "verl/workers/fsdp_workers.py", 529, "sync_module_states=True")),
)
def _cpu_fsdp1(ctx: RuleCtx) -> Iterable[Finding]:
    """``device: cpu`` with ``strategy: fsdp`` (FSDP1): verl wraps the model in torch's FSDP with
    ``sync_module_states=True``, which torch refuses for a module on the CPU (a CPU run is a decision, so its
    strategy must be one that runs there: FSDP2)."""
    spec = ctx.spec
    if spec.device == "cpu" and spec.strategy == "fsdp":
        yield error(
            "cpu_device_fsdp1",
            "strategy fsdp (FSDP1) on device: cpu fails at model init, after Ray and the rollout are up: verl wraps "
            f"the model in torch's FSDP with sync_module_states=True{_cited(ctx, 'cpu_fsdp1')}, and torch refuses a "
            "module on the CPU: \"ValueError: The module has CPU parameters or buffers when "
            "`sync_module_states=True`, which requires them to be on GPU\" (torch/distributed/fsdp/_init_utils.py "
            "_check_module_states_for_sync_module_states)",
            "strategy",
            "set strategy: fsdp2 (FSDP2's fully_shard runs on the CPU, as in verlctl demo), or run on GPUs with "
            "device: gpu",
        )


def all_codes() -> set[str]:
    return {c for r in RULES for c in r.codes}
