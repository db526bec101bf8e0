"""verl 0.9.1's async trainers as verlctl modes (issue 23): colocate_async, separate_async (the V1 trainer's
trainer.v1.trainer_mode) and fully_async (verl.experimental.fully_async_policy)."""

from __future__ import annotations

import itertools

import pytest

from verlctl.plan import make_plan
from verlctl.spec.model import DISAGGREGATED_MODES
from verlctl.spec.resolve import load_spec
from verlctl.verl import modes
from verlctl.verl.effects import readers

from conftest import BASE_PATHS, FIXTURES, run_cli

ASYNC = ("colocate_async", "separate_async", "fully_async")


def plan(**flags):
    return make_plan(load_spec(None, flags={**BASE_PATHS, "cluster.devices": list(range(8)), **flags}, environ={}))


def ovs(p) -> dict[str, str]:
    return {t.split("=", 1)[0]: t.split("=", 1)[1] for t in p.command.override_texts()}


def test_the_disaggregated_modes_are_verl_knowledge() -> None:
    assert frozenset(DISAGGREGATED_MODES) == modes.DISAGGREGATED
    assert [m for m in modes.MODES if modes.is_disaggregated(m)] == ["one_step_off_policy", "separate_async",
                                                                    "fully_async"]
    assert not modes.is_disaggregated("sync") and not modes.is_disaggregated("colocate_async")
    assert not modes.is_disaggregated("nonsense")


@pytest.mark.parametrize("mode", ASYNC)
def test_the_async_modes_exist_in_091_only(mode: str) -> None:
    p = plan(mode=mode, verl_version="0.7.0", strategy="fsdp")
    bad = [f for f in p.findings if f.code == "mode_version"]
    assert len(bad) == 1 and not p.ok
    assert "verl_version: 0.9.1" in (bad[0].hint or "")
    if mode == "fully_async":  # verl 0.7.0's source tree has it as a recipe: not "does not exist"
        assert "not supported by verlctl on verl 0.7.0" in bad[0].message
        assert "recipe/fully_async_policy" in bad[0].message and "only, not in" not in bad[0].message
    else:  # the V1 trainer is 0.9.1's
        assert "verl 0.9.1 only" in bad[0].message and "no V1 trainer" in bad[0].message
    auto = plan(mode=mode, verl_version="auto", strategy="fsdp", **{"train.tensor_parallel": 2})
    assert auto.command.version == "0.9.1" and not [f for f in auto.findings if f.code == "mode_version"]


def test_plan_refuses_an_async_mode_on_070_in_one_line(tmp_path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("paths: {model: /m/Q, train_files: /d/t.parquet, val_files: /d/v.parquet}\nmode: fully_async\n"
                    "strategy: fsdp\n", encoding="utf-8")
    res = run_cli("plan", "-c", str(spec), "-o", str(tmp_path / "out"))
    assert res.code != 0 and "Traceback" not in res.out + res.err
    assert "mode_version" in res.out and "not supported by verlctl on verl 0.7.0" in " ".join(res.out.split())
    assert not (tmp_path / "out").exists()


def test_separate_async_keys() -> None:
    p = plan(mode="separate_async", verl_version="0.9.1", strategy="megatron", **{"train.tensor_parallel": 2})
    assert p.ok, [f.line() for f in p.findings]
    o = ovs(p)
    assert p.command.entry.module == "verl.trainer.main_ppo" and "transfer_queue" in p.command.entry.imports
    assert o["trainer.use_v1"] == "True" and o["trainer.v1.trainer_mode"] == "separate_async"
    # train_batch_size 32 = parameter_sync_step (verl's default 4) x mini batch 8
    assert o["trainer.v1.separate_async.parameter_sync_step"] == "4" and o["actor_rollout_ref.actor.ppo_mini_batch_size"] == "8"
    # the device split: 4 trainer + 4 rollout devices (the seed's TRAINER_GPUS / ROLLOUT_GPUS)
    assert o["trainer.n_gpus_per_node"] == "4" and o["actor_rollout_ref.rollout.n_gpus_per_node"] == "4"
    assert o["actor_rollout_ref.rollout.nnodes"] == "1"
    assert o["actor_rollout_ref.rollout.checkpoint_engine.backend"] == "nccl"
    assert "rollout.nnodes" not in o and "actor_rollout_ref.hybrid_engine" not in o
    assert "trainer.v1.separate_async.num_warmup_batches" not in o  # verl's default stands
    p2 = plan(mode="separate_async", verl_version="0.9.1", strategy="fsdp",
              **{"train.mini_batch_size": 16, "train.num_warmup_batches": 1.5, "train.checkpoint_engine": "nixl"})
    o2 = ovs(p2)
    assert o2["trainer.v1.separate_async.parameter_sync_step"] == "2"
    assert o2["trainer.v1.separate_async.num_warmup_batches"] == "1.5"
    assert o2["actor_rollout_ref.rollout.checkpoint_engine.backend"] == "nixl"


def test_colocate_async_keys() -> None:
    p = plan(mode="colocate_async", verl_version="0.9.1", strategy="fsdp", **{"train.num_warmup_batches": 2})
    o = ovs(p)
    assert o["trainer.v1.trainer_mode"] == "colocate_async" and o["trainer.v1.colocate_async.num_warmup_batches"] == "2.0"
    assert o["trainer.n_gpus_per_node"] == "8"  # colocated: every device trains and rolls out
    assert "actor_rollout_ref.rollout.n_gpus_per_node" not in o and "trainer.v1.separate_async.parameter_sync_step" not in o


def test_fully_async_keys() -> None:
    p = plan(mode="fully_async", verl_version="0.9.1", strategy="fsdp",
             **{"train.steps": 5, "train.staleness_threshold": 0.5, "cluster.nodes": ["192.0.2.1", "192.0.2.2"],
                "train.rollout_nodes": 1})
    assert p.ok, [f.line() for f in p.findings]
    o = ovs(p)
    assert p.command.entry.module == "verl.experimental.fully_async_policy.fully_async_main"
    assert p.command.entry.config_name == "fully_async_ppo_trainer"
    assert o["data.train_batch_size"] == "0" and o["actor_rollout_ref.hybrid_engine"] == "False"
    assert o["async_training.trigger_parameter_sync_step"] == "4" and o["async_training.staleness_threshold"] == "0.5"
    assert o["rollout.total_rollout_steps"] == str(5 * 32)  # 5 trainer steps of 32 prompts
    # whole-node split: one rollout node, one trainer node, each with all 8 devices
    assert (o["rollout.nnodes"], o["rollout.n_gpus_per_node"]) == ("1", "8")
    assert (o["trainer.nnodes"], o["trainer.n_gpus_per_node"]) == ("1", "8")


def test_every_key_of_the_async_modes_has_a_reader_on_its_mode_path() -> None:
    missing: dict[str, set[str]] = {}
    planned = 0
    for mode, strategy, algorithm, device, mask, engine in itertools.product(
        ASYNC, ("megatron", "fsdp", "fsdp2"), ("dapo", "grpo"), ("npu", "gpu"), ("0000000", "1111100"),
        ("vllm", "sglang"),
    ):
        flags = {"verl_version": "0.9.1", "mode": mode, "strategy": strategy, "algorithm": algorithm,
                 "device": device, "features.mask": mask, "train.rollout_engine": engine,
                 "train.num_warmup_batches": 1, "train.staleness_threshold": 0.2, "train.checkpoint_engine": "nccl"}
        if device == "gpu":  # the default image is Ascend's (image_for_npu)
            flags["container.image"] = "verlai/verl:vllm-cuda"
        if mode != "colocate_async":
            flags["train.tensor_parallel"] = 2
        p = plan(**flags)
        if not p.ok:
            continue
        planned += 1
        for line in p.command.overrides:
            if line.section in ("extra", "config group"):
                continue
            if not readers(line.key, "0.9.1", strategy, engine, mode):
                missing.setdefault(line.key, set()).add(f"{mode} {strategy} {engine}")
    assert planned > 100
    assert not missing, "\n".join(f"{k}: no reader on {sorted(v)}" for k, v in sorted(missing.items()))


def test_mode_readers_are_per_mode() -> None:
    """A key read on one mode's code path only has no reader on another's."""
    assert readers("async_training.staleness_threshold", "0.9.1", "fsdp", "vllm", "fully_async")
    assert not readers("async_training.staleness_threshold", "0.9.1", "fsdp", "vllm", "separate_async")
    assert not readers("trainer.v1.separate_async.num_warmup_batches", "0.9.1", "fsdp", "vllm", "colocate_async")
    assert readers("rollout.nnodes", "0.9.1", "fsdp", "vllm", "fully_async")
    assert not readers("rollout.nnodes", "0.9.1", "fsdp", "vllm", "separate_async")


def test_each_mode_names_its_processes() -> None:
    assert {"FullyAsyncRollouter", "FullyAsyncTrainer", "MessageQueue"} <= set(modes.MODES["fully_async"].processes)
    assert set(modes.process_names()) >= {"TaskRunnerV1", "OneStepTaskRunner", "FullyAsyncRollouter"}


@pytest.mark.parametrize("mode", ["one_step_off_policy", "separate_async", "fully_async"])
def test_the_checklist_has_the_device_split_line_for_every_disaggregated_mode(mode: str) -> None:
    from verlctl.report import device_split_line

    r = load_spec(None, flags={**BASE_PATHS, "verl_version": "0.9.1", "mode": mode, "train.rollout_devices": 2},
                  environ={})
    line = device_split_line(r)
    assert line is not None and line.startswith(f"device split ({mode}): 6 trainer + 2 rollout devices per node of 8")
    assert "cluster.devices - rollout_devices" in line  # the trainer's count is derived, with its source
    assert device_split_line(load_spec(None, flags={**BASE_PATHS, "verl_version": "0.9.1", "mode": "colocate_async"},
                                       environ={})) is None


@pytest.mark.parametrize("actor", [p for p in modes.process_names()])
def test_the_watcher_knows_a_dead_process_of_every_mode(actor: str) -> None:
    """Each mode's own Ray actors (the rollouter, the message queue, ...): their death is diagnosed as a dead
    actor, and their log lines are read as Ray-forwarded lines of that actor."""
    from verlctl.monitor.diagnose import diagnose_bytes
    from verlctl.monitor.events import RAY_PREFIX_RE

    log = (f"({actor} pid=4242) [ASYNC MAIN] step 3 started\n"
           f"ray.exceptions.RayTaskError(ActorDiedError): ray::{actor}.fit() (pid=4242, ip=10.0.0.2, "
           f"actor_id=0123, repr=<{actor} object at 0x7f>)\n").encode()
    m = RAY_PREFIX_RE.match(log.decode().splitlines()[0])
    assert m is not None and m.group("actor") == actor
    d = diagnose_bytes(log)
    assert any(f.category == "ray_actor_died" for f in d.findings), [f.category for f in d.findings]


def test_each_mode_lists_its_own_processes_and_their_sides() -> None:
    assert modes.process_names("sync") == ()
    fa = modes.process_names("fully_async")
    assert fa[:4] == ("FullyAsyncTaskRunner", "FullyAsyncRollouter", "FullyAsyncTrainer", "MessageQueue")
    assert "vLLMHttpServer" in fa and "FullyAsyncRollouter" not in modes.process_names("separate_async")
    assert "vLLMHttpServer" not in modes.process_names()  # every mode's own actors only
    died = "ray.exceptions.RayTaskError(ActorDiedError): ray::FullyAsyncRollouter.fit() (pid=1, ip=10.0.0.2)"
    assert modes.process_in("fully_async", died) == modes.PROCESSES["FullyAsyncRollouter"]
    assert modes.process_in("separate_async", died) is None  # not a process of that mode
    assert modes.process_in("fully_async", "(FullyAsyncTrainer pid=7) NPU out of memory").name == "FullyAsyncTrainer"
    assert modes.process_in("fully_async", "FullyAsyncTrainer finished") is None  # named, but not as an actor
    assert modes.describe_process("fully_async", died) == "the rollouter (FullyAsyncRollouter) of this fully_async run"
    assert modes.describe_process("sync", died) is None


@pytest.mark.parametrize(("mode", "line", "side"), [
    ("fully_async", "(FullyAsyncRollouter pid=3) NPU out of memory", "rollout"),
    ("fully_async", "(FullyAsyncTrainer pid=3) NPU out of memory", "trainer"),
    ("fully_async", "(MessageQueue pid=3) NPU out of memory", None),  # holds no device memory
    ("separate_async", "(vLLMHttpServer pid=3) NPU out of memory", "rollout"),
    ("separate_async", "(DetachActorWorker pid=3) NPU out of memory", "trainer"),
    ("colocate_async", "(vLLMHttpServer pid=3) NPU out of memory", None),  # colocated: every device is shared
    ("fully_async", "(WorkerDict pid=3) NPU out of memory", None),
])
def test_the_device_side_of_an_oom(mode: str, line: str, side: str | None) -> None:
    assert modes.device_side(mode, line) == side


def _oom(mode: str, side: str | None, **features: bool):  # type: ignore[no-untyped-def]
    from verlctl.monitor.recovery import History, decide

    spec = load_spec(None, flags={**BASE_PATHS, "verl_version": "0.9.1", "mode": mode, "strategy": "fsdp",
                                  "train.rollout_devices": 4, "train.rollout_tensor_parallel": 2,
                                  "train.rollout_memory_utilization": 0.6}, environ={}).spec
    return decide("device_oom", spec, {"offload": False, "recompute": False, **features}, History(), side)


def test_the_oom_ladder_offloads_the_side_that_ran_out() -> None:
    trainer = _oom("fully_async", "trainer")
    assert trainer.restart and trainer.add_feature == "offload" and not trainer.notices
    colocated = _oom("colocate_async", None)
    assert colocated.restart and colocated.add_feature == "offload"
    rollout = _oom("fully_async", "rollout")
    assert not rollout.restart and rollout.add_feature is None
    assert [n.split(":")[0] for n in rollout.notices] == ["offload skipped by the OOM ladder",
                                                          "recompute skipped by the OOM ladder"]
    assert "the rollout's devices ran out (fully_async gives each its own devices)" in rollout.notices[0]
    assert rollout.reason.startswith("out of memory on the rollout's own devices")
    assert rollout.advice == ["lower train.rollout_memory_utilization from 0.6 to 0.5",
                              "raise train.rollout_tensor_parallel from 2 to 4 (the model's weights and KV cache "
                              "spread over more rollout devices)",
                              "shorten train.max_response_length from 8192 to 4096"]
    done = _oom("fully_async", "trainer", offload=True, recompute=True)
    assert not done.restart and done.reason.startswith("out of memory and the OOM ladder has no rung left")


# checks/async_rules.py: its tables (Assert rows) read by one function; what each row says and cites.
def _async_findings(mode: str, *extra: str, **train):  # type: ignore[no-untyped-def]
    from verlctl.commands.check import spec_findings

    flags = {**BASE_PATHS, "verl_version": "0.9.1", "strategy": "fsdp", "mode": mode, "cluster.devices": list(range(8)),
             "extra_overrides": list(extra), **{f"train.{k}": v for k, v in train.items()}}
    return [f for f in spec_findings(load_spec(None, flags=flags, environ={}))[0]
            if f.code.startswith(("async_", "fully_async_"))]


def test_a_clean_async_plan_breaks_no_assert_of_its_trainer() -> None:
    for mode in ("separate_async", "fully_async"):
        assert _async_findings(mode) == [], mode
    # a spec whose mini-batch does not divide the batch: only that, no staleness / sync-step assert on top
    assert [f.code for f in _async_findings("fully_async", mini_batch_size=5)] == ["async_batch_sync_step"]
    # the hybrid switch alone (no disaggregated rollout) is fine
    assert _async_findings("separate_async", "actor_rollout_ref.rollout.disaggregation.enabled=True") == []


def test_each_async_assert_names_its_key_value_and_verl_line() -> None:
    (f,) = _async_findings("fully_async", "data.train_batch_size=32")
    assert f.message.startswith("data.train_batch_size is 32: the fully async rollouter streams prompts one at a "
                                "time and asserts data.train_batch_size == 0 (verl 0.9.1 "
                                "verl/experimental/fully_async_policy/fully_async_rollouter.py:351)"), f.message
    (f,) = _async_findings("fully_async", "data.gen_batch_size=2")
    assert "asserts data.gen_batch_size == 1 (verl 0.9.1" in f.message and f.message.count(":352)") == 1
    (f,) = _async_findings("fully_async", "async_training.staleness_threshold=True")  # a boolean is no number
    assert f.code == "fully_async_staleness" and f.field == "extra_overrides"
    assert f.hint == "use train.staleness_threshold (>= 0) instead of the override"
    (f,) = _async_findings("separate_async", "actor_rollout_ref.rollout.nnodes=0")
    assert f.message == ("actor_rollout_ref.rollout.nnodes is 0: separate_async runs the rollout on its own pool and "
                         "asserts it is > 0 (verl 0.9.1 verl/trainer/ppo/v1/trainer_separate_async.py:64)")
    assert f.hint == ("remove the actor_rollout_ref.rollout.nnodes override (verlctl sets it from "
                      "train.rollout_devices / train.rollout_nodes)")
    sep = _async_findings("separate_async", parameter_sync_step=3, mini_batch_size=8)
    fa = _async_findings("fully_async", parameter_sync_step=3, mini_batch_size=8)
    assert sep[0].message.endswith(" (verl 0.9.1 verl/trainer/ppo/v1/trainer_separate_async.py:59)"), sep[0].message
    assert fa[0].message.endswith("trains parameter_sync_step mini-batches per weight sync"), fa[0].message


def test_the_async_rules_cite_each_assert_once_in_verl_order() -> None:
    from dataclasses import FrozenInstanceError

    from verlctl.checks import async_rules
    from verlctl.checks.rules import RULES

    cites = {r.name: [(c.path.rsplit("/", 1)[1], c.line) for c in r.cites] for r in RULES}
    assert cites["fully_async_asserts"] == [("fully_async_rollouter.py", 350), ("fully_async_trainer.py", 76)] + [
        ("fully_async_rollouter.py", n) for n in (351, 352, 353, 354, 733)]
    assert cites["separate_async_pool"] == [("trainer_separate_async.py", n) for n in (64, 65, 68, 100)]
    with pytest.raises(FrozenInstanceError):
        async_rules.FULLY_ASYNC[0].code = "x"  # type: ignore[misc]


def test_fully_async_bounds_the_run_by_rollout_steps_not_an_unread_trainer_key() -> None:
    """fully_async's trainer takes its step count from the rollouter (fully_async_main.py:90-92
    set_total_train_steps): trainer.total_training_steps is read by nothing there and is not rendered; the run is
    bounded by rollout.total_rollout_steps. Every other mode keeps the trainer key."""
    fa = plan(mode="fully_async", verl_version="0.9.1", strategy="fsdp", **{"train.tensor_parallel": 2,
                                                                            "train.steps": 5})
    keys = {o.partition("=")[0] for o in fa.command.override_texts()}
    assert fa.ok and "trainer.total_training_steps" not in keys and "rollout.total_rollout_steps" in keys
    for mode in ("sync", "separate_async", "one_step_off_policy", "colocate_async"):
        other = plan(mode=mode, verl_version="0.9.1", strategy="fsdp", **{"train.tensor_parallel": 2, "train.steps": 5})
        assert "trainer.total_training_steps=5" in other.command.override_texts(), mode


@pytest.mark.parametrize(("version", "exported"), [("0.7.0", True), ("0.9.1", False)])
def test_vllm_use_v1_only_where_vllm_knows_it(version: str, exported: bool) -> None:
    """vLLM 0.24 (verl 0.9.1's stack) has no VLLM_USE_V1 and calls it an unknown variable."""
    p = plan(verl_version=version, strategy="fsdp")
    assert ("VLLM_USE_V1" in p.command.env) is exported


@pytest.mark.parametrize(("rel", "mode"), [
    ("0.9.0/verl/experimental/one_step_off_policy/shell/grpo_qwen3_8b_gsm8k_fsdp2_8_8_npu.sh", "one_step_off_policy"),
    ("0.9.0/verl/experimental/fully_async_policy/shell/dapo_30b_a3b_math_fsdp_npu.sh", "fully_async"),
])
def test_legacy_trainer_modes_on_091_name_the_v1_successor(rel: str, mode: str) -> None:
    """verl 0.9.1 marks the trainer of these modes for removal (ray_trainer.py:285): plan warns with the citation,
    and import offers separate_async."""

    from verlctl.importer import import_script

    script = FIXTURES / "official-scripts" / rel
    result = import_script(script, "0.9.1", {"HOME": "/home/verl", "PWD": "/verl"})
    assert result.mapped.tree.get("mode") == mode
    assert any("separate_async" in n and "marks deprecated and for removal" in n for n in result.notes), result.notes
    p = plan(mode=mode, verl_version="0.9.1", strategy="fsdp", **{"train.tensor_parallel": 2})
    (f,) = [f for f in p.findings if f.code == "legacy_trainer_mode"]
    assert f.severity.value == "warning" and "verl 0.9.1 verl/trainer/ppo/ray_trainer.py:285" in f.message
    assert (f.hint or "").startswith("mode: separate_async")
    assert not [f for f in plan(mode=mode, verl_version="0.7.0", strategy="fsdp", **{"train.tensor_parallel": 2}).findings
                if f.code == "legacy_trainer_mode"]
    assert not [f for f in plan(mode="separate_async", verl_version="0.9.1", strategy="fsdp",
                                **{"train.tensor_parallel": 2}).findings if f.code == "legacy_trainer_mode"]
