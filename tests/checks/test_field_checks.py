"""The field-failure checks of ``verlctl check`` (reference/field-failures-and-scale-out.md §1): weight-sync
bucket (A11), /dev/shm (G5), fewer rows than one batch ("Train dataloader is empty!"), HCCL ports already bound
(A4, with real sockets), prompts longer than max_prompt_length (a real tokenizer and parquet file)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from verlctl.checks import field_checks as fc
from verlctl.checks.facts import CheckFacts
from verlctl.checks.findings import Severity
from verlctl.checks.memory import ModelShape
from verlctl.detect.check_probes import DatasetCheck, check_dataset_file
from verlctl.detect.common import Unavailable
from verlctl.detect.machine import MachineState
from verlctl.spec.resolve import load_spec

import verlcompose
from conftest import BASE_PATHS, FIXTURES
from launch_support import write_parquet

# Qwen/Qwen3-8B's config.json sizes (also in verl-project/verl@7de1304f tests/utils/test_flops_counter.py).
QWEN3_8B = {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936}


def spec(**flags: Any):
    return load_spec(None, flags={**BASE_PATHS, **flags}, environ={})


def codes(findings) -> dict[str, Any]:
    return {f.code: f for f in findings}


# ------------------------------------------------------------------ weight-sync bucket (A11)


BUCKET = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"
NO_IPC = fc.IpcFacts(a5=False, hdk="25.0.rc1.1", cann="8.3.rc1")  # the 910B4 capture's driver: below 25.3.rc1
IPC = fc.IpcFacts(a5=False, hdk="25.3.rc1.2", cann="8.3.rc1")


def test_bucket_too_small_without_ipc_for_an_fp32_actor() -> None:
    """FSDP syncs fp32 master weights: Qwen3-8B's embedding (2374 MB) overflows the 2048 MB bucket, and without
    IPC verl asserts at the first weight sync."""
    shape = ModelShape.from_config(QWEN3_8B)
    s = spec(verl_version="0.9.1", device="npu", strategy="fsdp").spec
    found = fc.check_weight_bucket(s, "0.9.1", shape, NO_IPC)
    assert [f.code for f in found] == ["weight_bucket_too_small"]
    f = found[0]
    assert f.severity is Severity.ERROR and f.field == "extra_overrides"
    assert "151936 x 4096" in f.message and "2048 MB" in f.message and "fp32" in f.message and "2374 MB" in f.message
    assert "HDK 25.0.rc1.1" in f.message and "25.3.rc1" in f.message
    assert f.hint is not None and f.hint.startswith(f"add extra_overrides: {BUCKET}=4096")
    assert "/dev/shm" in f.hint  # colocated: the shm fallback's bucket is host memory
    # The advised override clears it, and composes against verl 0.9.1's real config.
    fixed = spec(verl_version="0.9.1", device="npu", strategy="fsdp", extra_overrides=[f"{BUCKET}=4096"]).spec
    assert fc.check_weight_bucket(fixed, "0.9.1", shape, NO_IPC) == []
    # verl 0.7.0 (the key is read by SGLang only) and GPU (CUDA IPC: no bucket assert) are not affected.
    assert fc.check_weight_bucket(spec(device="npu", strategy="fsdp").spec, "0.7.0", shape, NO_IPC) == []
    gpu = spec(verl_version="0.9.1", device="gpu", strategy="fsdp").spec
    assert fc.check_weight_bucket(gpu, "0.9.1", shape, NO_IPC) == []


@pytest.mark.parametrize("strategy", ["megatron", "fsdp", "fsdp2"])
def test_bucket_follows_the_dtype_the_strategy_syncs(strategy: str) -> None:
    """Megatron syncs bf16 parameters (1187 MB: fits), FSDP fp32 (2374 MB: does not); an override of the
    engine's dtype is followed."""
    shape = ModelShape.from_config(QWEN3_8B)
    s = spec(verl_version="0.9.1", device="npu", strategy=strategy).spec
    codes_ = [f.code for f in fc.check_weight_bucket(s, "0.9.1", shape, NO_IPC)]
    assert codes_ == ([] if strategy == "megatron" else ["weight_bucket_too_small"])
    key, other = fc.SYNC_DTYPE_KEY[strategy], "fp32" if strategy == "megatron" else "bf16"
    flipped = spec(verl_version="0.9.1", device="npu", strategy=strategy, extra_overrides=[f"{key}={other}"]).spec
    assert [f.code for f in fc.check_weight_bucket(flipped, "0.9.1", shape, NO_IPC)] == (
        ["weight_bucket_too_small"] if strategy == "megatron" else [])


@pytest.mark.parametrize(("strategy", "extra"), [
    ("megatron", []), ("fsdp", ["actor_rollout_ref.actor.fsdp_config.model_dtype=bf16"])])
def test_a_bf16_tensor_is_sized_at_two_bytes(strategy: str, extra: list[str]) -> None:
    """A hidden size of 8192: the bf16 embedding (151936 x 8192 x 2 = 2374 MB) overflows the bucket too."""
    shape = ModelShape.from_config({**QWEN3_8B, "hidden_size": 8192})
    s = spec(verl_version="0.9.1", device="npu", strategy=strategy, extra_overrides=extra).spec
    (f,) = fc.check_weight_bucket(s, "0.9.1", shape, NO_IPC)
    assert "2374 MB" in f.message and ("bfloat16" in f.message or "bf16" in f.message)
    assert f.hint is not None and f.hint.startswith(f"add extra_overrides: {BUCKET}=4096")


def test_bucket_with_ipc_unknown_is_a_warning_naming_the_facts() -> None:
    """``plan`` knows neither the driver nor the image's CANN: a warning naming both, never a refusal."""
    shape = ModelShape.from_config(QWEN3_8B)
    s = spec(verl_version="0.9.1", device="npu", strategy="fsdp").spec
    found = fc.check_weight_bucket(s, "0.9.1", shape, fc.IpcFacts())
    assert [(f.code, f.severity) for f in found] == [("weight_bucket_ipc_unknown", Severity.WARNING)]
    assert "HDK" in found[0].message and "CANN" in found[0].message and "npu-smi" in found[0].message
    # the driver read (too old) decides without the image; a new driver still needs the image's CANN
    assert [f.code for f in fc.check_weight_bucket(s, "0.9.1", shape, fc.IpcFacts(False, "24.1.0", None))] == [
        "weight_bucket_too_small"]
    half = fc.check_weight_bucket(s, "0.9.1", shape, fc.IpcFacts(False, "25.3.rc1", None))
    assert [f.code for f in half] == ["weight_bucket_ipc_unknown"] and "CANN" in half[0].message
    assert "driver (HDK) version" not in half[0].message and "read: HDK 25.3.rc1" in half[0].message
    # IPC present (new driver and CANN, or an A5 chip): verl sends the large tensor directly
    assert fc.check_weight_bucket(s, "0.9.1", shape, IPC) == []
    assert fc.check_weight_bucket(s, "0.9.1", shape, fc.IpcFacts(True, None, None)) == []
    assert fc.check_weight_bucket(s, "0.9.1", shape, fc.IpcFacts(False, "25.5.0", "8.2.rc2")) != []


@pytest.mark.parametrize("mode", ["one_step_off_policy", "separate_async", "fully_async"])
def test_bucket_advice_in_disaggregated_modes_says_the_two_device_buffers(mode: str) -> None:
    """The HCCL checkpoint engine holds a send and a receive buffer of the bucket size on each device
    (hccl_checkpoint_engine.py:139-140): the advice says what the larger bucket costs there."""
    shape = ModelShape.from_config(QWEN3_8B)
    s = spec(verl_version="0.9.1", device="npu", strategy="fsdp", mode=mode, **{"train.tensor_parallel": 2}).spec
    (f,) = fc.check_weight_bucket(s, "0.9.1", shape, NO_IPC)
    assert f.hint is not None and "2 x 4096 MB of device memory" in f.hint and "2 x 2048 MB" in f.hint


def _verls_ipc_check() -> Any:
    """verl 0.9.1's own check_ipc_version_support, compiled from its source (utils/device.py imports torch)."""
    import ast
    import logging
    import re

    from packaging import version

    src = (verlcompose.verl_root("0.9.1") / "verl" / "utils" / "device.py").read_text(encoding="utf-8")
    fn = next(n for n in ast.parse(src).body
              if isinstance(n, ast.FunctionDef) and n.name == "check_ipc_version_support")
    ns: dict[str, Any] = {"re": re, "version": version, "logger": logging.getLogger("verl-ipc")}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "device.py", "exec"), ns)
    return ns["check_ipc_version_support"]


def test_ipc_decision_is_verls_on_every_version_pair() -> None:
    if not verlcompose.available("0.9.1"):
        pytest.skip("verl 0.9.1 not installed")
    verl = _verls_ipc_check()
    hdks = ["23.0.rc3", "24.1.0", "25.0.rc1.1", "25.2.1", "25.3.rc1", "25.3.rc1.2", "25.3.0", "25.5.t3.b001",
            "25.5.0", "26.0.rc2"]
    canns = ["8.0.rc3", "8.2.rc1", "8.3.rc1", "8.3.RC1", "8.3.0", "8.3.rc2", "8.5.0", "9.0.0"]
    for hdk in hdks:
        for cann in canns:
            assert fc.IpcFacts(False, hdk, cann).supported() is verl(hdk.lower(), cann.lower()), (hdk, cann)


def test_ipc_facts_come_from_npu_smi_and_the_image() -> None:
    from verlctl.detect.check_probes import ImageVersions
    from verlctl.detect.npu import parse_npu_smi_info

    text = (FIXTURES / "npu-smi" / "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt")
    npu = parse_npu_smi_info(text.read_text(encoding="utf-8"))
    image = ImageVersions(where="container c", stack={"cann": "8.3.RC1"})
    facts = fc.IpcFacts.from_facts(npu, image)
    assert facts == fc.IpcFacts(False, "25.0.rc1.1", "8.3.RC1") and facts.supported() is False
    assert fc.IpcFacts.from_facts(None, None) == fc.IpcFacts() and fc.IpcFacts().supported() is None
    assert fc.IpcFacts.from_facts(Unavailable(probe="npu", code="not_found", reason="no npu-smi"), image).supported() is None
    # the chip name of `npu-smi info -t board` marks an A5; a table without its version line leaves the driver unknown
    from verlctl.detect.npu_kv import NpuBoard

    a5 = npu.model_copy(update={"boards": [NpuBoard(npu_id=0, chip_name="Ascend950PR")]})
    assert fc.IpcFacts.from_facts(a5, None).supported() is True
    blind = fc.IpcFacts.from_facts(npu.model_copy(update={"driver_version": None}), image)
    assert blind.supported() is None and blind.unknown() == [
        "the NPU driver (HDK) version and chip, from npu-smi on the training host"]
    assert fc.IpcFacts(False, "25.3.rc1", None).read() == "HDK 25.3.rc1, not an A5 chip"


def _need(what: str, ok: bool) -> None:
    """Present in CI (.ci/run installs it): a skip there would hide a failure."""
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"{what} missing (.ci/run installs it)")
        pytest.skip(f"{what} not installed here")


def _has_tokenizers() -> bool:
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


def test_advised_bucket_key_composes_in_verl_0_9_1() -> None:
    _need("verl 0.9.1 config tree", verlcompose.available("0.9.1"))
    key = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"
    cfg = verlcompose.compose("0.9.1", "verl/trainer/config", "ppo_trainer", [f"{key}=4096"])
    assert cfg["actor_rollout_ref"]["rollout"]["checkpoint_engine"]["update_weights_bucket_megabytes"] == 4096


# ------------------------------------------------------------------ /dev/shm (G5)


def test_shm_smaller_than_rays_object_store_is_a_warning() -> None:
    s = spec().spec
    ram = 256 << 30
    small = fc.check_shm(s, 64 << 20, ram, "this host")  # Docker's default 64 MiB
    assert [f.code for f in small] == ["shm_too_small"]
    assert small[0].severity is Severity.WARNING and "77G" in (small[0].hint or "")
    assert fc.check_shm(s, 128 << 30, ram, "this host") == []
    # Ray caps its object store at 200 GB: a 2 TB host does not need 600 GB of /dev/shm.
    assert fc.check_shm(s, 200 * 10**9, 2 << 40, "this host") == []


def test_shm_check_reads_this_hosts_dev_shm(tmp_path: Path) -> None:
    """verlctl's containers run with ipc=host: the host's /dev/shm (measured by the system probe) is theirs."""
    from verlctl.detect.check_probes import DockerFacts
    from verlctl.detect.machine import SystemInfo
    from verlctl.detect.system import shm_space

    real = shm_space()
    _need("a measurable /dev/shm", hasattr(real, "total_bytes"))
    assert not isinstance(real, Unavailable)
    ram_gib = real.total_bytes / 2**30 / 0.3 * 2  # a host whose RAM makes this /dev/shm too small
    s = spec(**{"cluster.host_memory_gib": ram_gib})
    facts = CheckFacts(machine=MachineState(system=SystemInfo(shm=real)),
                       docker=DockerFacts(image="img", container="absent"))  # the container will be created
    _, found = fc.memory_and_field_findings(s, facts)
    assert "the new container shares it" in codes(found)["shm_too_small"].message
    big = spec(**{"cluster.host_memory_gib": real.total_bytes / 2**30})  # 30 % of it fits easily
    assert "shm_too_small" not in codes(fc.memory_and_field_findings(big, facts)[1])


# ------------------------------------------------------------------ "Train dataloader is empty!"


def _dataset_facts(tmp_path: Path, rows: int) -> CheckFacts:
    path = tmp_path / "train.parquet"
    write_parquet(path, rows=rows)
    check = check_dataset_file("paths.train_files", str(path), 20.0)
    return CheckFacts(machine=MachineState(), datasets=[check])


@pytest.mark.parametrize(("rows", "batch", "blocked"), [(8, 32, True), (32, 32, False), (40, 32, False)])
def test_fewer_rows_than_one_batch(tmp_path: Path, rows: int, batch: int, blocked: bool) -> None:
    facts = _dataset_facts(tmp_path, rows)
    assert isinstance(facts.datasets[0], DatasetCheck)
    s = spec(**{"paths.train_files": str(tmp_path / "train.parquet"), "train.train_batch_size": batch,
                "container.runtime": "host"})
    _, found = fc.memory_and_field_findings(s, facts)
    got = codes(found).get("dataset_smaller_than_batch")
    assert (got is not None) is blocked
    if got:
        assert got.severity is Severity.ERROR and got.field == "train.train_batch_size"
        assert "Train dataloader is empty!" in got.message and got.hint == "lower train.train_batch_size to at most 8, or add training data"


def test_dapo_generation_batch_counts(tmp_path: Path) -> None:
    facts = _dataset_facts(tmp_path, 32)
    s = spec(**{"paths.train_files": str(tmp_path / "train.parquet"), "train.train_batch_size": 16,
                "train.gen_batch_size": 48, "container.runtime": "host"})
    _, found = fc.memory_and_field_findings(s, facts)
    assert codes(found)["dataset_smaller_than_batch"].field == "train.gen_batch_size"


# ------------------------------------------------------------------ HCCL ports (A4)


def _bound_port() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("0.0.0.0", 0))
    sock.listen(1)
    return sock


def test_hccl_port_range_already_bound() -> None:
    holder = _bound_port()
    try:
        port = holder.getsockname()[1]
        assert fc.ports_in_use([port]) == [port]
        # The whole range busy: HCCL cannot bind at all.
        s = spec(device="npu", env={"HCCL_HOST_SOCKET_PORT_RANGE": f"{port}-{port}"})
        _, found = fc.memory_and_field_findings(s, CheckFacts(machine=MachineState()))
        f = codes(found)["hccl_ports_in_use"]
        assert f.severity is Severity.ERROR and f.field == "env" and str(port) in f.message
        assert "EJ0003" in f.message
        # Part of it busy: a warning.
        s2 = spec(device="npu", env={"HCCL_HOST_SOCKET_PORT_RANGE": f"{port}-{port + 1}"})
        _, found2 = fc.memory_and_field_findings(s2, CheckFacts(machine=MachineState()))
        busy = codes(found2).get("hccl_ports_in_use")
        if busy is not None:  # port + 1 may be taken by someone else on a shared machine
            assert str(port) in busy.message
    finally:
        holder.close()
    assert fc.ports_in_use([port]) == []  # released: nothing left behind


def test_auto_port_range_is_not_probed() -> None:
    assert fc.parse_port_range("auto") == [] and fc.parse_port_range("60000-60050")[-1] == 60050
    assert fc.parse_port_range("1-70000") == [] and fc.parse_port_range("9-3") == []
    s = spec(device="npu", env={"HCCL_HOST_SOCKET_PORT_RANGE": "auto", "HCCL_NPU_SOCKET_PORT_RANGE": "auto"})
    assert fc.hccl_port_ranges(s.spec, {}) == {}
    # verlctl's own defaults (verl/environment.py) are probed when the user sets nothing.
    assert set(fc.hccl_port_ranges(spec(device="npu").spec, {"HCCL_HOST_SOCKET_PORT_RANGE": "60000-60050"})) == {
        "HCCL_HOST_SOCKET_PORT_RANGE"}


# ------------------------------------------------------------------ prompt lengths (tokenizers)

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def _tokenizer_model(d: Path) -> None:
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "<|im_start|>": 1, "<|im_end|>": 2, "user": 3, "assistant": 4, "what": 5, "is": 6}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken("<|im_start|>", special=True), AddedToken("<|im_end|>", special=True)])
    d.mkdir(parents=True)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))


def _prompts(path: Path, words: list[int]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    prompts = [[{"role": "user", "content": " ".join(["what"] * n)}] for n in words]
    pq.write_table(pa.table({"prompt": prompts}), path)


def test_prompt_lengths_with_the_models_tokenizer(tmp_path: Path) -> None:
    _need("tokenizers", _has_tokenizers())
    model = tmp_path / "model"
    _tokenizer_model(model)
    data = tmp_path / "train.parquet"
    _prompts(data, [10, 20, 100])
    got = fc.measure_prompts(str(model), str(data), 64)
    # <|im_start|> user what*n <|im_end|> <|im_start|> assistant = n + 5 tokens.
    assert isinstance(got, fc.PromptLengths) and (got.sampled, got.over, got.longest) == (3, 1, 105)
    grpo = fc.check_prompt_lengths(spec(algorithm="grpo", **{"train.max_prompt_length": 64}).spec, got)
    assert [(f.code, f.severity) for f in grpo] == [("prompt_too_long", Severity.ERROR)]
    assert "longest 105" in grpo[0].message and grpo[0].hint and "raise train.max_prompt_length to 105" in grpo[0].hint
    dapo = fc.check_prompt_lengths(spec(algorithm="dapo", **{"train.max_prompt_length": 64}).spec, got)
    assert dapo[0].severity is Severity.WARNING and "data.truncation=left" in dapo[0].message
    assert fc.check_prompt_lengths(spec().spec, fc.measure_prompts(str(model), str(data), 105)) == []


def test_prompt_lengths_in_check_and_the_reasons_it_skips(tmp_path: Path) -> None:
    _need("tokenizers", _has_tokenizers())
    model = tmp_path / "model"
    _tokenizer_model(model)
    data = tmp_path / "train.parquet"
    _prompts(data, [200])
    s = spec(**{"paths.model": str(model), "paths.train_files": str(data), "train.max_prompt_length": 128,
                "train.train_batch_size": 1, "container.runtime": "host"})
    facts = CheckFacts(machine=MachineState(), datasets=[check_dataset_file("paths.train_files", str(data), 20.0)])
    _, found = fc.memory_and_field_findings(s, facts)
    assert "prompt_too_long" in codes(found)
    # A directory without tokenizer.json: one info line naming why.
    (model / "tokenizer.json").unlink()
    _, found = fc.memory_and_field_findings(s, facts)
    skipped = codes(found)["prompt_length_unchecked"]
    assert skipped.severity is Severity.INFO and "no tokenizer.json" in skipped.message


def test_prompt_lengths_without_tokenizers_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_tokenizers(name: str, *args: Any, **kw: Any) -> Any:
        if name == "tokenizers":
            raise ImportError("No module named 'tokenizers'", name="tokenizers")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_tokenizers)
    got = fc.measure_prompts(str(tmp_path), str(tmp_path / "x.parquet"), 10)
    assert got == "tokenizers is not installed here (pip install 'verlctl[prompts]')"
    assert fc.check_prompt_lengths(spec().spec, got)[0].code == "prompt_length_unchecked"
