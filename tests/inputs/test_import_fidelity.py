"""``verlctl import`` does what the script did (issue 23, G1/G2/N4/G3/G6/G9): a key the script leaves at verl's
default stays there, epochs stay epochs, offload keys stay those keys, a multi-node script spans its nodes."""

from __future__ import annotations

import textwrap
from pathlib import Path

from verlctl.importer import import_script
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec

ENTRY = "python3 -m verl.trainer.main_ppo"
BASE = """\
    export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
    {entry} \\
        algorithm.adv_estimator=grpo \\
        data.train_files=/d/train.parquet data.val_files=/d/val.parquet \\
        data.train_batch_size=32 \\
        actor_rollout_ref.model.path=/m/Qwen3-8B \\
        actor_rollout_ref.actor.strategy=fsdp2 \\
        actor_rollout_ref.actor.ppo_mini_batch_size=16 \\
        actor_rollout_ref.actor.use_kl_loss=True \\
        actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=4 \\
        trainer.device=npu trainer.n_gpus_per_node=8 \\
        {extra}
"""


def imported(tmp_path: Path, extra: str, version: str = "0.9.1"):
    p = tmp_path / "run.sh"
    p.write_text(textwrap.dedent(BASE).format(entry=ENTRY, extra=extra), encoding="utf-8")
    return import_script(p, version, {"HOME": "/home/u"})


def keys(result) -> dict[str, str]:
    out = {}
    for a in result.command_argv:
        if "=" in a and not a.startswith("-"):
            k, _, v = a.partition("=")
            out[k.lstrip("+")] = v
    return out


def test_g1_a_script_training_by_epochs_keeps_its_epochs(tmp_path: Path) -> None:
    r = imported(tmp_path, "trainer.total_epochs=15")
    assert r.document["train"]["steps"] is None
    k = keys(r)
    assert "trainer.total_training_steps" not in k and k["trainer.total_epochs"] == "15"
    r2 = imported(tmp_path / "b", "trainer.total_training_steps=7") if (tmp_path / "b").mkdir() is None else None
    assert r2 is not None and r2.document["train"]["steps"] == 7 and keys(r2)["trainer.total_training_steps"] == "7"


def test_g2_default_on_features_the_script_leaves_alone_are_not_written(tmp_path: Path) -> None:
    k = keys(imported(tmp_path, "trainer.total_epochs=1"))
    for key in ("actor_rollout_ref.actor.use_dynamic_bsz", "actor_rollout_ref.model.use_remove_padding",
                "actor_rollout_ref.model.enable_gradient_checkpointing",
                "actor_rollout_ref.model.override_config.attn_implementation"):
        assert key not in k, key
    (tmp_path / "b").mkdir()
    k2 = keys(imported(tmp_path / "b", "actor_rollout_ref.actor.use_dynamic_bsz=True"))
    assert k2["actor_rollout_ref.actor.use_dynamic_bsz"] == "True"  # what the script sets is kept


def test_n4_param_offload_imports_as_that_key_without_activation_offload(tmp_path: Path) -> None:
    r = imported(tmp_path, "actor_rollout_ref.actor.fsdp_config.param_offload=True "
                           "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True")
    k = keys(r)
    assert k["actor_rollout_ref.actor.fsdp_config.param_offload"] == "True"
    assert k["actor_rollout_ref.actor.fsdp_config.optimizer_offload"] == "True"
    assert "actor_rollout_ref.model.enable_activation_offload" not in k
    assert "offload" not in (r.document.get("features", {}).get("enable") or [])


def test_g3_val_before_train_stays_at_verls_default(tmp_path: Path) -> None:
    r = imported(tmp_path, "trainer.total_epochs=1")
    assert r.document["train"]["val_before_train"] is True
    (tmp_path / "b").mkdir()
    assert imported(tmp_path / "b", "trainer.val_before_train=False").document["train"]["val_before_train"] is False


def test_g6_a_multi_node_script_spans_its_nodes(tmp_path: Path) -> None:
    r = imported(tmp_path, "trainer.nnodes=4")
    assert r.document["cluster"]["nnodes"] == 4
    assert not [e for e in r.extras if e.startswith("trainer.nnodes")]
    assert keys(r)["trainer.nnodes"] == "4"
    assert any("list the 4 node addresses in cluster.nodes" in n for n in r.notes)


def test_g9_plan_refuses_an_extra_override_of_a_managed_key() -> None:
    flags = {"paths.model": "/m/Q", "paths.train_files": "/d/t.parquet", "paths.val_files": "/d/v.parquet",
             "extra_overrides": ["trainer.nnodes=4"]}
    p = make_plan(load_spec(None, flags=flags, environ={}))
    bad = [f for f in p.findings if f.code == "managed_override"]
    assert not p.ok and len(bad) == 1
    assert "trainer.nnodes=1" in bad[0].message and "cluster.nodes" in (bad[0].hint or "")


def test_g7_a_v1_separate_async_script_imports_as_that_mode_on_091(tmp_path: Path) -> None:
    """No --verl-version: the 0.9-only keys (trainer.use_v1, trainer.v1.*, rollout.checkpoint_engine) say 0.9.1."""
    p = tmp_path / "sep.sh"
    p.write_text(textwrap.dedent(f"""\
        export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
        {ENTRY} trainer.use_v1=True trainer.v1.trainer_mode=separate_async \\
            trainer.v1.separate_async.parameter_sync_step=4 trainer.v1.separate_async.num_warmup_batches=1 \\
            algorithm.adv_estimator=grpo data.train_files=/d/t.parquet data.val_files=/d/v.parquet \\
            data.train_batch_size=16 actor_rollout_ref.model.path=/m/Qwen3-8B \\
            actor_rollout_ref.actor.strategy=fsdp2 actor_rollout_ref.actor.ppo_mini_batch_size=4 \\
            actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=4 \\
            actor_rollout_ref.rollout.nnodes=1 actor_rollout_ref.rollout.n_gpus_per_node=4 \\
            actor_rollout_ref.rollout.checkpoint_engine.backend=nccl \\
            trainer.device=npu trainer.nnodes=1 trainer.n_gpus_per_node=4 trainer.total_epochs=1
        """), encoding="utf-8")
    r = import_script(p, None, {"HOME": "/home/u"})
    d = r.document
    assert (d["verl_version"], d["mode"]) == ("0.9.1", "separate_async")
    assert (d["train"]["trainer_devices"], d["train"]["rollout_devices"]) == (4, 4)
    assert d["train"]["parameter_sync_step"] == 4 and d["train"]["checkpoint_engine"] == "nccl"
    k = keys(r)
    assert k["trainer.v1.trainer_mode"] == "separate_async" and k["actor_rollout_ref.rollout.n_gpus_per_node"] == "4"
    assert not [e for e in r.extras if e.startswith(("trainer.v1.", "actor_rollout_ref.rollout.n", "trainer.n"))]
    plan = make_plan(load_spec(None, flags={k: v for k, v in _flat(d).items()}, environ={}))
    assert plan.ok, [f.line() for f in plan.findings if f.severity.value == "error"]


def _flat(doc: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in doc.items():
        if isinstance(v, dict) and k != "env":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_g3_a_script_without_batch_size_or_n_imports_verls_defaults(tmp_path: Path) -> None:
    """verl trains on data.train_batch_size=1024 prompts with rollout.n=1 unless told otherwise
    (verl/trainer/config/data/legacy_data.yaml:42, rollout/rollout.yaml n: 1), not verlctl's 32 x 8."""
    p = tmp_path / "run.sh"
    p.write_text(textwrap.dedent(BASE).format(entry=ENTRY, extra="trainer.total_epochs=1")
                 .replace("data.train_batch_size=32 \\\n", "").replace("actor_rollout_ref.rollout.n=4 ", ""),
                 encoding="utf-8")
    r = import_script(p, "0.9.1", {"HOME": "/home/u"})
    assert (r.document["train"]["train_batch_size"], r.document["train"]["responses_per_prompt"]) == (1024, 1)
    assert keys(r)["data.train_batch_size"] == "1024" and keys(r)["actor_rollout_ref.rollout.n"] == "1"
    assert (imported(tmp_path / "b", "trainer.total_epochs=1") if (tmp_path / "b").mkdir() is None else None
            ).document["train"]["train_batch_size"] == 32  # what the script sets stands


def test_g3_presets_the_script_leaves_to_verl_are_not_written(tmp_path: Path) -> None:
    """GRPO's filter_overlong_prompts, and with dynamic batching the micro-batch sizes and token budgets: the
    script leaves them to verl, so the spec lists them in verl_defaults and verlctl writes none of them."""
    r = imported(tmp_path, "trainer.total_epochs=1 actor_rollout_ref.actor.use_dynamic_bsz=True")
    left = r.document["verl_defaults"]
    assert {"data.filter_overlong_prompts", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"} <= set(left), left
    k = keys(r)
    assert not set(left) & set(k), set(left) & set(k)
    assert k["actor_rollout_ref.actor.use_dynamic_bsz"] == "True"
    # without dynamic batching verl needs a micro-batch size: verlctl's stays
    (tmp_path / "b").mkdir()
    r2 = imported(tmp_path / "b", "trainer.total_epochs=1")
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" not in r2.document.get("verl_defaults", [])
    assert keys(r2)["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "1"
    # the spec plans: verl_defaults is a field the plan reads back
    plan = make_plan(load_spec(None, flags={**_flat(r.document), "paths.model": "/m/Qwen3-8B"}, environ={}))
    assert plan.command is not None and "data.filter_overlong_prompts" not in {
        o.key for o in plan.command.overrides}
    assert not [f for f in plan.findings if f.code == "verl_defaults_key"]


def test_what_verlctl_sets_on_purpose_is_listed_with_its_code(tmp_path: Path) -> None:
    r = imported(tmp_path, "trainer.total_epochs=1")
    assert [(code, text.split("=")[0]) for code, text, _ in r.declared] == [
        ("npu_no_torch_compile", "actor_rollout_ref.actor.fsdp_config.use_torch_compile"),
        ("npu_no_torch_compile", "actor_rollout_ref.ref.fsdp_config.use_torch_compile"),
        ("checkpoints_on_host", "trainer.default_local_dir")]
    assert any(n.startswith("verlctl sets trainer.default_local_dir=") and n.endswith("[checkpoints_on_host]")
               for n in r.notes)
