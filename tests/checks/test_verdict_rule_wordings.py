"""The verdict rules' messages as a user reads them: where a generation cap comes from, missing device nodes in
one grammatical line, a host whose devices are not known, and `launch --pull` turning only the missing image into
a note."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_a_capped_generation_names_where_its_limit_comes_from(tmp_path: Path) -> None:
    """verl 0.9.1, max_model_len unset: the cap is the model's max_position_embeddings (said so); set
    explicitly: the cap is that value, and the message does not blame the model."""
    from test_finding_codes import CTX, verdict_rule, with_model

    flags = {"train.max_prompt_length": 1024, "train.max_response_length": 4096}
    unset = verdict_rule("max_model_len", with_model, CTX, verl_version="0.9.1", **flags)(tmp_path / "a")
    [f] = [f for f in unset if f.code == "generation_capped"]
    assert "above the rollout's max_model_len 4096 (shaped's max_position_embeddings, which verl uses when it is " \
           "unset): vLLM clamps every response to 4096 - prompt tokens (at most 3072" in f.message, f.message
    explicit = verdict_rule("max_model_len", with_model, CTX, verl_version="0.9.1", **flags, extra_overrides=[
        "actor_rollout_ref.rollout.max_model_len=3000"])(tmp_path / "b")
    [f] = [f for f in explicit if f.code == "generation_capped"]
    assert "above the rollout's max_model_len 3000: vLLM clamps every response to 3000 - prompt tokens " \
           "(at most 1976" in f.message, f.message
    assert "max_position_embeddings" not in f.message


@pytest.mark.parametrize(("devices", "words"), [
    ([4095], "device node /dev/davinci4095 does not exist on this host (cluster.devices = [4095])"),
    ([4094, 4095], "device nodes /dev/davinci4094, /dev/davinci4095 do not exist on this host "
                   "(cluster.devices = [4094, 4095])"),
])
def test_missing_device_nodes_are_named_in_one_grammatical_line(tmp_path: Path, devices: list[int],
                                                                  words: str) -> None:
    from test_finding_codes import nodes_probe, verdict_rule

    got = verdict_rule("device_nodes", nodes_probe, **{"cluster.devices": devices, "device": "npu",
                                                       "container.runtime": "docker"})(tmp_path)
    [f] = [f for f in got if f.code == "device_nodes_missing"]
    assert f.message.startswith(words), f.message


def test_a_host_whose_devices_are_not_known_is_not_called_a_gpu_host(tmp_path: Path) -> None:
    """Neither npu-smi nor nvidia-smi answered (MachineState without device info): the device kind is not
    judged; a GPU host with no NPU is (U19)."""
    from test_finding_codes import H100, machine_of, verdict_rule
    from verlctl.checks.facts import CheckFacts
    from verlctl.detect.machine import MachineState

    unknown = verdict_rule("device_kind", lambda t, r: CheckFacts(machine=MachineState()), device="npu")(tmp_path / "a")
    assert [f.code for f in unknown] == []
    gpu_host = verdict_rule("device_kind", machine_of(H100), device="npu")(tmp_path / "b")
    assert [f.code for f in gpu_host] == ["device_not_here"]
    assert "this host has 8 NVIDIA GPU(s) and no Ascend NPU" in gpu_host[0].message


@pytest.mark.parametrize("pull", [False, True])
def test_launch_pull_turns_only_the_missing_image_into_a_note(tmp_path: Path, pull: bool) -> None:
    """`launch --pull` (DockerFacts.pull): the absent image is a note that launch pulls it, not an error; a
    reused container that is not this user's stays an error either way."""
    from test_finding_codes import verdict_rule
    from verlctl.checks.facts import CheckFacts
    from verlctl.detect.check_probes import DockerFacts
    from verlctl.detect.machine import MachineState

    def facts(t: Path, r) -> CheckFacts:  # type: ignore[no-untyped-def]
        return CheckFacts(machine=MachineState(), docker=DockerFacts(
            image=r.spec.container.image, container=r.spec.container.name, engine_version="27.5.1",
            image_present=False, exists=False, pull=pull))

    got = verdict_rule("docker", facts, **{"container.image": "example/verl:1", "container.runtime": "docker"})(tmp_path)
    image = [(f.code, f.severity.value) for f in got if f.field == "container.image"]
    if pull:
        assert image == [("image_pull", "info")], got
        [f] = [f for f in got if f.code == "image_pull"]
        assert f.message == "image example/verl:1 is not present locally: launch pulls it (--pull)"
    else:
        assert image == [("image_missing", "error")], got
