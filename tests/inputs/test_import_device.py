"""``verlctl import`` takes the device from the script, or asks: ``trainer.device=`` or the script's ``DEVICE``
variable, then which of ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES it exports, then what only an Ascend
(vllm-ascend, HCCL, the NPU profiler) or a CUDA stack reads, then the script's own name and folders (verl's
``*_npu.sh``, ``tests/special_npu/``). A GPU script is never assumed to be NPU: where nothing says (verl's
``recipe/dapo/test_dapo_7b_math.sh``) or the evidence disagrees, the import refuses and asks for ``--device``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from verlctl.importer import import_script
from verlctl.inputs.verl_script import ImportFailure

from conftest import FIXTURES, run_cli

OFFICIAL = FIXTURES / "official-scripts"
GPU_SCRIPT = "0.7.0/recipe/dapo/test_dapo_7b_math.sh"  # verl's own GPU script: no device word anywhere
ENVIRON = {"HOME": "/home/verl", "PWD": "/verl"}


def _variant(tmp_path: Path, first_lines: str, rel: str = GPU_SCRIPT, name: str = "run.sh") -> Path:
    """The official script with lines of the user's own before its body (its commands unchanged)."""
    text = (OFFICIAL / rel).read_text(encoding="utf-8").split("\n", 2)
    p = tmp_path / name
    p.write_text("\n".join([text[0], text[1], first_lines, text[2]]), encoding="utf-8")
    return p


def test_a_gpu_script_that_does_not_say_its_device_is_not_assumed_to_be_npu(tmp_path: Path) -> None:
    with pytest.raises(ImportFailure, match=r"the device is not evident from the script .* pass --device npu or "
                                            "--device gpu"):
        import_script(OFFICIAL / GPU_SCRIPT, "0.7.0", dict(ENVIRON))
    out = tmp_path / "run.yaml"
    res = run_cli("import", str(OFFICIAL / GPU_SCRIPT), "-o", str(out), env={**ENVIRON, "PATH": "/usr/bin:/bin"})
    assert res.code == 2 and "--device npu or --device gpu" in res.err and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1 and not out.exists()
    res = run_cli("import", str(OFFICIAL / GPU_SCRIPT), "-o", str(out), "--device", "gpu",
                  env={**ENVIRON, "PATH": "/usr/bin:/bin"})
    assert res.code == 0, res.err
    assert yaml.safe_load(out.read_text())["device"] == "gpu"
    res = run_cli("import", str(OFFICIAL / GPU_SCRIPT), "-o", str(tmp_path / "x.yaml"), "--device", "tpu")
    assert res.code == 2 and "--device: invalid value 'tpu': use npu or gpu" in res.err


@pytest.mark.parametrize(
    ("lines", "device", "source"),
    [
        ("export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "gpu", "export CUDA_VISIBLE_DEVICES"),
        ("export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3", "npu", "export ASCEND_RT_VISIBLE_DEVICES"),
        ("DEVICE=gpu", "gpu", "the script's DEVICE=gpu"),
        ("DEVICE=npu", "npu", "the script's DEVICE=npu"),
        ("export NCCL_DEBUG=INFO", "gpu", "export NCCL_DEBUG"),
        ("export HCCL_CONNECT_TIMEOUT=1500", "npu", "export HCCL_CONNECT_TIMEOUT"),
        ("export VLLM_ASCEND_ENABLE_NZ=0", "npu", "export VLLM_ASCEND_ENABLE_NZ"),
        ("source /usr/local/Ascend/ascend-toolkit/set_env.sh", "npu",
         "source /usr/local/Ascend/ascend-toolkit/set_env.sh"),
        # the stronger evidence decides: the DEVICE variable over an exported hint
        ("DEVICE=gpu\nexport HCCL_CONNECT_TIMEOUT=1500", "gpu", "the script's DEVICE=gpu"),
        ("export CUDA_VISIBLE_DEVICES=0,1\nexport HCCL_CONNECT_TIMEOUT=1500", "gpu", "export CUDA_VISIBLE_DEVICES"),
    ],
)
def test_the_scripts_own_evidence_decides(tmp_path: Path, lines: str, device: str, source: str) -> None:
    r = import_script(_variant(tmp_path, lines), "0.7.0", dict(ENVIRON))
    assert r.document["device"] == device
    assert r.mapped.sources["device"] == source


@pytest.mark.parametrize(
    "lines",
    ["export CUDA_VISIBLE_DEVICES=0,1\nexport ASCEND_RT_VISIBLE_DEVICES=0,1",
     "export NCCL_DEBUG=INFO\nexport HCCL_CONNECT_TIMEOUT=1500"],
)
def test_evidence_that_disagrees_is_asked_about(tmp_path: Path, lines: str) -> None:
    with pytest.raises(ImportFailure, match=r"the script names both devices .*: pass --device npu or --device gpu"):
        import_script(_variant(tmp_path, lines), "0.7.0", dict(ENVIRON))
    r = import_script(_variant(tmp_path, lines), "0.7.0", dict(ENVIRON), "npu")
    assert r.document["device"] == "npu" and r.mapped.sources["device"] == "--device"
    assert any(n.startswith("device npu (--device), although the script says otherwise") for n in r.notes)


def test_trainer_device_in_the_command_wins(tmp_path: Path) -> None:
    p = tmp_path / "run.sh"
    p.write_text("export HCCL_CONNECT_TIMEOUT=1500\npython3 -m verl.trainer.main_ppo trainer.device=cuda "
                 "algorithm.adv_estimator=grpo actor_rollout_ref.model.path=/m trainer.n_gpus_per_node=8\n",
                 encoding="utf-8")
    r = import_script(p, "0.9.1", {})
    assert r.document["device"] == "gpu" and r.mapped.sources["device"] == "trainer.device=cuda"
    # over the visible-devices variable too (what verl reads decides)
    p.write_text(p.read_text(encoding="utf-8").replace("export HCCL_CONNECT_TIMEOUT=1500",
                                                       "export ASCEND_RT_VISIBLE_DEVICES=0,1"), encoding="utf-8")
    r = import_script(p, "0.9.1", {})
    assert r.document["device"] == "gpu" and r.mapped.sources["device"] == "trainer.device=cuda"


def test_the_device_case_script_takes_its_device_from_its_DEVICE_variable() -> None:
    rel = "0.9.0/examples/grpo_trainer/run_qwen3_8b_fsdp.sh"
    for given, device in (("npu", "npu"), ("gpu", "gpu")):
        r = import_script(OFFICIAL / rel, None, {**ENVIRON, "DEVICE": given})
        assert r.document["device"] == device, given
        assert r.mapped.sources["device"] == f"the script's DEVICE={given}"


def test_verls_npu_scripts_without_device_settings_are_npu_by_their_name(tmp_path: Path) -> None:
    """verl's examples/grpo_trainer/run_qwen2_5_7b_grpo_npu.sh sets no device variable: its name says NPU."""
    rel = "0.7.0/examples/grpo_trainer/run_qwen2_5_7b_grpo_npu.sh"
    r = import_script(OFFICIAL / rel, "0.7.0", dict(ENVIRON))
    assert r.document["device"] == "npu"
    assert r.mapped.sources["device"] == "the script's path (run_qwen2_5_7b_grpo_npu.sh)"
    # the same file under a name and folder that say nothing: asked
    (tmp_path / "jobs" / "rl").mkdir(parents=True)
    plain = tmp_path / "jobs" / "rl" / "train.sh"  # the last three parts of the path are read
    shutil.copyfile(OFFICIAL / rel, plain)
    with pytest.raises(ImportFailure, match="the device is not evident"):
        import_script(plain, "0.7.0", dict(ENVIRON))


def test_a_gpu_models_name_in_the_script_name_says_gpu() -> None:
    """tests/fixtures/memory/qwen2-70b_grpo_32_h800_fsdp_vllm.sh (verl's H800 example) used to import as NPU."""
    r = import_script(FIXTURES / "memory" / "qwen2-70b_grpo_32_h800_fsdp_vllm.sh",
                      "0.7.0", dict(ENVIRON))
    assert r.document["device"] == "gpu"
    assert r.mapped.sources["device"] == "the script's path (qwen2-70b_grpo_32_h800_fsdp_vllm.sh)"


@pytest.mark.parametrize(
    ("override", "device"),
    [("+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=ascend", "npu"),
     ("global_profiler.tool=npu", "npu"),
     ("actor_rollout_ref.actor.profiler.tool_config.npu.level=level0", "npu"),
     ("+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=flashinfer", None)],
)
def test_values_only_an_ascend_stack_reads_say_npu(tmp_path: Path, override: str, device: str | None) -> None:
    (tmp_path / "jobs" / "rl").mkdir(parents=True)
    p = tmp_path / "jobs" / "rl" / "train.sh"
    p.write_text(f"python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo {override} "
                 "actor_rollout_ref.model.path=/m trainer.n_gpus_per_node=8\n", encoding="utf-8")
    if device is None:
        with pytest.raises(ImportFailure, match="the device is not evident"):
            import_script(p, "0.9.1", {})
        return
    r = import_script(p, "0.9.1", {})
    assert (r.document["device"], r.mapped.sources["device"]) == (device, override)


def test_the_source_names_at_most_three_pieces_of_evidence() -> None:
    r = import_script(OFFICIAL / "0.9.0/tests/special_npu/run_qwen3_8b_grpo_profiling.sh", "0.9.1", dict(ENVIRON))
    assert r.document["device"] == "npu"
    assert r.mapped.sources["device"].startswith("actor_rollout_ref.actor.profiler.tool_config.npu.discrete=True, ")
    assert r.mapped.sources["device"].endswith(" (and 6 more)")
