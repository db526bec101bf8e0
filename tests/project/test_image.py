"""Real-engine tests of the locally built test image and of the stand-in trainer (a TEST DOUBLE for verl).

All tests share one container with a small Ray head (module scope), so they run on one xdist worker.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from conftest import FIXTURES

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("verlctl-test-image")]

FIXTURE = (
    FIXTURES / "npu-smi" / "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt"
)
RAY_HEAD = (
    "ray start --head --resources='{\"NPU\": 8}' --num-cpus=2 --disable-usage-stats --port=6766 "
    "--dashboard-port=8260 --include-dashboard=false --object-store-memory=100000000"
)
FAST = {"VERLCTL_STANDIN_STEP_SECONDS": "0.05"}
CONSOLE = "trainer.logger=[console]"


@pytest.fixture(scope="module")
def ray_box(module_container_factory: Any) -> Any:
    """One test-image container with a Ray head (8 NPU resources) started inside it."""
    box = module_container_factory(name="ray-head", shm_size="512m")
    started = module_container_factory.exec(box, ["bash", "-c", RAY_HEAD], timeout=120)
    assert started.exit_code == 0, started.output
    return box


def standin(factory: Any, box: Any, module: str, *args: str, env: dict[str, str] | None = None) -> Any:
    return factory.exec(
        box, ["python3", "-m", module, *args], env={**FAST, **(env or {})}, workdir="/verl", timeout=180
    )


def read(factory: Any, box: Any, path: str) -> str:
    result = factory.exec(box, ["cat", path])
    assert result.exit_code == 0, result.output
    return result.stdout


def step_lines(stdout: str) -> list[int]:
    return [
        int(line.split(" - ", 1)[0].removeprefix("step:"))
        for line in stdout.splitlines()
        if line.startswith("step:")
    ]


def test_image_has_deps_verl_metadata_and_npu_smi_double(module_container_factory: Any, ray_box: Any) -> None:
    f = module_container_factory
    probe = (
        "import importlib.metadata as m, ray, hydra, swanlab, pyarrow; "
        "import verl; print(m.version('verl'), verl.__file__)"
    )
    result = f.exec(ray_box, ["python3", "-c", probe], workdir="/verl")
    assert result.exit_code == 0, result.output
    # The /verl shadow package is what `import verl` finds; the installed wheel's metadata still says 0.7.0.
    assert result.stdout.split() == ["0.7.0", "/verl/verl/__init__.py"]
    assert read(f, ray_box, "/verl/verl/trainer/config/ppo_trainer.yaml").startswith("#")

    npu_smi = f.exec(ray_box, ["npu-smi", "info"])
    expected = FIXTURE.read_text(encoding="utf-8").split("\n# ---\n", 1)[1]
    assert npu_smi.exit_code == 0
    assert npu_smi.stdout == expected
    assert f.exec(ray_box, ["npu-smi", "info", "-l"]).exit_code == 2


def test_standin_composes_real_config_and_rejects_misspelled_key(
    module_container_factory: Any, ray_box: Any
) -> None:
    f = module_container_factory
    ckpt = "/tmp/compose/proj/exp"
    good = [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.n=4",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.compilation_config.cudagraph_mode=FULL_DECODE_ONLY",
        "trainer.device=npu",
        "trainer.total_training_steps=1",
        f"trainer.default_local_dir={ckpt}",
        CONSOLE,
    ]
    ok = standin(f, ray_box, "verl.trainer.main_ppo", *good)
    assert ok.exit_code == 0, ok.output
    assert step_lines(ok.stdout) == [1]
    assert "Training Progress: 100%|██████████| 1/1 [" in ok.stderr

    bad = standin(f, ray_box, "verl.trainer.main_ppo", *good, "actor_rollout_ref.rollout.nn=4")
    assert bad.exit_code == 1
    assert bad.stderr.startswith(
        "Could not override 'actor_rollout_ref.rollout.nn'.\n"
        "To append to your config use +actor_rollout_ref.rollout.nn=4\n"
        "Key 'nn' is not in struct\n"
    ), bad.stderr
    assert bad.stderr.endswith(
        "\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
    )
    assert "Error executing job" not in bad.stderr  # composition errors do not get that line in Hydra/verl

    records = [json.loads(x) for x in read(f, ray_box, "/tmp/compose/proj/standin_argv.jsonl").splitlines()]
    assert [r["argv"] for r in records] == [good, [*good, "actor_rollout_ref.rollout.nn=4"]]
    assert records[0]["entry"] == "verl.trainer.main_ppo" and records[0]["cwd"] == "/verl"

    # The recipe entry points compose against the overlay configs with their cwd-relative searchpath.
    for module, args in [
        ("recipe.dapo.main_dapo", ["--config-name=dapo_megatron_trainer"]),
        ("recipe.one_step_off_policy.main_ppo", ["trainer.n_gpus_per_node=4", "rollout.n_gpus_per_node=4"]),
    ]:
        run = standin(
            f, ray_box, module, *args, "trainer.total_training_steps=1", "trainer.save_freq=-1", CONSOLE
        )
        assert run.exit_code == 0, f"{module}: {run.output}"


def test_standin_checks_ray_device_count(module_container_factory: Any, ray_box: Any) -> None:
    run = standin(module_container_factory, ray_box, "verl.trainer.main_ppo", "trainer.nnodes=2", CONSOLE)
    assert run.exit_code == 1
    assert "ValueError: Total available GPUs 8 is less than total desired GPUs 16" in run.stderr
    assert "Error executing job with overrides: ['trainer.nnodes=2'," in run.stderr


def test_standin_writes_checkpoints_and_resumes(module_container_factory: Any, ray_box: Any) -> None:
    f = module_container_factory
    ckpt = "/tmp/resume/proj/exp"
    common = ["trainer.save_freq=2", f"trainer.default_local_dir={ckpt}", CONSOLE]
    first = standin(f, ray_box, "verl.trainer.main_ppo", "trainer.total_training_steps=4", *common)
    assert first.exit_code == 0, first.output
    assert step_lines(first.stdout) == [1, 2, 3, 4]
    assert "Training from scratch" in first.stdout
    assert read(f, ray_box, f"{ckpt}/latest_checkpointed_iteration.txt") == "4"
    listing = f.exec(ray_box, ["bash", "-c", f"cd {shlex.quote(ckpt)} && ls -d global_step_*/actor"])
    assert listing.stdout.split() == ["global_step_2/actor", "global_step_4/actor"]

    second = standin(f, ray_box, "verl.trainer.main_ppo", "trainer.total_training_steps=6", *common)
    assert second.exit_code == 0, second.output
    assert f"Load from checkpoint folder: {ckpt}/global_step_4\n" in second.stdout
    assert f"Resuming from {ckpt}/global_step_4\n" in second.stdout
    assert step_lines(second.stdout) == [5, 6]
    assert "training/global_step:6" in second.stdout
    assert "Training Progress:  67%|██████▋   | 4/6 [00:00<?, ?it/s]" in second.stderr
    assert read(f, ray_box, f"{ckpt}/latest_checkpointed_iteration.txt") == "6"


def test_standin_oom_injection_unless_overrides_present(module_container_factory: Any, ray_box: Any) -> None:
    f = module_container_factory
    fix = [
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "+actor_rollout_ref.model.enable_gradient_checkpointing=True",
    ]
    env = {"VERLCTL_STANDIN_OOM_AT_STEP": "2", "VERLCTL_STANDIN_OOM_UNLESS": ";".join(fix)}
    base = ["trainer.total_training_steps=3", "trainer.resume_mode=disable", CONSOLE]

    oom = standin(f, ray_box, "verl.trainer.main_ppo", *base, env=env)
    assert oom.exit_code == 1
    assert step_lines(oom.stdout) == [1]
    assert "Error executing job with overrides: [" in oom.stderr
    assert "ray.exceptions.RayTaskError(RuntimeError): " in oom.stderr
    assert "ray::WorkerDict.actor_rollout_update_actor()" in oom.stderr
    assert "\nRuntimeError: NPU out of memory. Tried to allocate " in oom.stderr

    # The UNLESS items match with or without the leading +/++ on either side.
    received = ["++" + fix[0], fix[1].lstrip("+")]
    fixed = standin(f, ray_box, "verl.trainer.main_ppo", *base, *received, env=env)
    assert fixed.exit_code == 0, fixed.output
    assert step_lines(fixed.stdout) == [1, 2, 3]

    always = standin(
        f, ray_box, "verl.trainer.main_ppo", *base, *received, env={**env, "VERLCTL_STANDIN_OOM_ALWAYS": "1"}
    )
    assert always.exit_code == 1 and "NPU out of memory" in always.stderr

    exit_at = standin(f, ray_box, "verl.trainer.main_ppo", *base, env={"VERLCTL_STANDIN_EXIT_AT_STEP": "3"})
    assert exit_at.exit_code == 1 and step_lines(exit_at.stdout) == [1, 2]
    assert "RuntimeError: verlctl stand-in: injected failure at step 3" in exit_at.stderr
