"""Machine checks of `verlctl check`: real files, real mounts, real captures through the real parsers.

The docker side (image, container, mounts, in-container checks) is in tests/checks/test_check_docker.py; the
command line in tests/checks/test_check_cli.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from verlctl.checks.checkpoints import CHECKPOINT_BYTES_PER_PARAM, check_checkpoints
from verlctl.checks.devices import check_devices
from verlctl.checks.findings import Finding, Severity
from verlctl.checks.machine_checks import machine_findings
from verlctl.checks.model_checks import check_model_fit
from verlctl.checks.network import check_network
from verlctl.commands.check import spec_findings
from verlctl.detect.check_probes import CheckpointProbe, probe_checkpoint_dir
from verlctl.detect.gpu import parse_nvidia_smi
from verlctl.detect.machine import MachineState
from verlctl.detect.models import inspect_model
from verlctl.detect.network import NetworkInfo, host_ips, parse_ip_addr, probe_network
from verlctl.detect.npu import parse_npu_smi_info, probe_npu
from verlctl.orchestrator.machine_facts import collect_facts
from verlctl.spec.resolve import ResolvedSpec, load_spec

from conftest import FIXTURES, fixture_text
from launch_support import write_model, write_run_files

ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------


def resolve(**flags: Any) -> ResolvedSpec:
    return load_spec(None, flags=flags, environ={})


def found(findings: list[Finding], code: str) -> list[Finding]:
    return [f for f in findings if f.code == code]


def only(findings: list[Finding], code: str) -> Finding:
    hits = found(findings, code)
    assert len(hits) == 1, f"expected one {code}, got {[f.line() for f in findings]}"
    return hits[0]


def run_check(resolved: ResolvedSpec) -> list[Finding]:
    """What `verlctl check` computes: the spec checks, then the machine checks on real probes."""
    spec_found, vpp_on = spec_findings(resolved)
    return spec_found + machine_findings(resolved, collect_facts(resolved, budget_s=10), vpp_on)


def write_model_config(d: Path, **config: Any) -> Path:
    """A model dir (launch_support.write_model) whose config.json has the given shape."""
    write_model(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(config)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def write_big_model(d: Path, params: int) -> Path:
    """A model dir whose safetensors header declares ``params`` parameters (the data is not written)."""
    write_model(d)
    header = json.dumps({"w": {"dtype": "BF16", "shape": [params], "data_offsets": [0, 2 * params]}}).encode()
    (d / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    return d


def write_parquet_without_prompt(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"data_source": ["x"], "question": ["1+1?"], "reward_model": [{"ground_truth": "2"}]}), path
    )


@pytest.fixture
def workspace(tmp_path: Path) -> dict[str, Any]:
    """A complete single-node spec on real files; runtime host (no docker) unless a test changes it."""
    return {
        **write_run_files(tmp_path),
        "paths.checkpoints": str(tmp_path / "ckpt" / "exp"),
        "container.runtime": "host",
        "train.tensor_parallel": 2,
        "train.pipeline_parallel": 1,
    }


def mount_tmpfs(target: Path, options: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Any]:
    mounted: list[Path] = []

    def make(name: str, options: str) -> Path:
        target = tmp_path / name
        mount_tmpfs(target, options)
        mounted.append(target)
        return target

    yield make
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], check=False)


MACHINE_CODES = {
    "model_missing", "model_incomplete", "model_not_dir", "dataset_missing", "dataset_not_parquet",
    "dataset_not_file", "dataset.prompt_missing", "checkpoint_not_writable", "checkpoint_space",
    "checkpoint_space_low", "model_tp_heads", "model_rollout_tp_heads", "model_layers_pp", "model_layers_vpp",
    "socket_ifname_unknown", "socket_ifname_down",
}  # fmt: skip


# --------------------------------------------------------------------------------------------------
# paths.model
# --------------------------------------------------------------------------------------------------


def test_a_complete_workspace_has_no_path_or_model_findings(workspace: dict[str, Any]) -> None:
    findings = run_check(resolve(**workspace))
    assert not {f.code for f in findings} & MACHINE_CODES, [f.line() for f in findings]


def test_missing_model_path(workspace: dict[str, Any], tmp_path: Path) -> None:
    workspace["paths.model"] = str(tmp_path / "models" / "Qwen3-absent")
    f = only(run_check(resolve(**workspace)), "model_missing")
    assert (f.severity, f.field) == (ERROR, "paths.model")
    assert f.message == f"{tmp_path / 'models' / 'Qwen3-absent'} does not exist"


def test_model_dir_without_config_json_says_what_is_missing(workspace: dict[str, Any]) -> None:
    model = Path(workspace["paths.model"])
    (model / "config.json").unlink()
    (model / "tokenizer.json").unlink()
    f = only(run_check(resolve(**workspace)), "model_incomplete")
    assert (f.severity, f.field) == (ERROR, "paths.model")
    assert "no config.json" in f.message and "no tokenizer files" in f.message
    assert "no weights" not in f.message


def test_model_path_that_is_a_file(workspace: dict[str, Any]) -> None:
    workspace["paths.model"] = workspace["paths.train_files"]
    f = only(run_check(resolve(**workspace)), "model_not_dir")
    assert f.field == "paths.model"


# --------------------------------------------------------------------------------------------------
# paths.train_files / paths.val_files
# --------------------------------------------------------------------------------------------------


def test_parquet_without_prompt_column(workspace: dict[str, Any]) -> None:
    write_parquet_without_prompt(Path(workspace["paths.train_files"]))
    findings = run_check(resolve(**workspace))
    f = only(findings, "dataset.prompt_missing")
    assert (f.severity, f.field) == (ERROR, "paths.train_files")
    assert f.message.startswith(f"{workspace['paths.train_files']} [column prompt]: no 'prompt' column")
    assert not [x for x in findings if x.field == "paths.val_files"]  # the val file is fine


def test_missing_unparseable_and_directory_dataset_paths(workspace: dict[str, Any], tmp_path: Path) -> None:
    text = tmp_path / "data" / "notes.parquet"
    text.write_text("prompt,answer\n")
    workspace["paths.train_files"] = [str(tmp_path / "data" / "absent.parquet"), str(text)]
    workspace["paths.val_files"] = str(tmp_path / "data")
    findings = run_check(resolve(**workspace))
    missing = only(findings, "dataset_missing")
    assert (missing.field, missing.message) == ("paths.train_files", f"{tmp_path / 'data' / 'absent.parquet'} does not exist")
    assert only(findings, "dataset_not_parquet").field == "paths.train_files"
    assert only(findings, "dataset_not_file").field == "paths.val_files"


# --------------------------------------------------------------------------------------------------
# paths.checkpoints
# --------------------------------------------------------------------------------------------------


def test_writable_checkpoint_dir_leaves_nothing_behind(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    probe = probe_checkpoint_dir(str(tmp_path / "ckpt" / "a" / "b"))
    assert isinstance(probe, CheckpointProbe)
    assert (probe.writable, probe.exists, probe.checked_path) == (True, False, str(tmp_path / "ckpt"))
    assert probe.free_bytes and probe.free_bytes > 0
    assert list((tmp_path / "ckpt").iterdir()) == []  # the write test removed its file


def test_checkpoint_dir_on_a_read_only_mount(workspace: dict[str, Any], tmpfs: Any) -> None:
    ro = tmpfs("ro", "ro,size=1m")
    workspace["paths.checkpoints"] = str(ro / "ckpt" / "exp")
    f = only(run_check(resolve(**workspace)), "checkpoint_not_writable")
    assert (f.severity, f.field) == (ERROR, "paths.checkpoints")
    assert f.message == f"{ro}, the nearest existing parent of {ro / 'ckpt' / 'exp'}, is not writable: Read-only file system"


_PROBE_JSON = "import sys; from verlctl.detect.check_probes import probe_checkpoint_dir as p; print(p(sys.argv[1]).model_dump_json())"


def test_checkpoint_dir_without_write_permission(workspace: dict[str, Any], tmp_path: Path) -> None:
    """Root ignores mode bits: the probe runs without CAP_DAC_OVERRIDE (util-linux setpriv), as a user would."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs util-linux setpriv to drop CAP_DAC_OVERRIDE")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    argv = [sys.executable, "-c", _PROBE_JSON, str(locked / "exp")]
    if os.geteuid() == 0:
        argv = [setpriv, "--bounding-set=-dac_override,-dac_read_search", *argv]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    finally:
        locked.chmod(0o755)
    probe = CheckpointProbe.model_validate_json(proc.stdout)
    assert (probe.writable, probe.error) == (False, "Permission denied")
    resolved = resolve(**{**workspace, "paths.checkpoints": str(locked / "exp")})
    f = only(check_checkpoints(resolved.spec, probe, None), "checkpoint_not_writable")
    assert f.field == "paths.checkpoints" and "Permission denied" in f.message
    assert list(locked.iterdir()) == []


def test_checkpoint_space_error_warning_and_ok(workspace: dict[str, Any], tmpfs: Any, tmp_path: Path) -> None:
    params = 200_000  # one checkpoint: 200000 × 14 bytes = 2.8 MB
    write_big_model(tmp_path / "models" / "big", params)
    workspace["paths.model"] = str(tmp_path / "models" / "big")
    assert inspect_model(workspace["paths.model"]).param_count == params
    results = {}
    for size in ("1m", "8m", "64m"):
        disk = tmpfs(f"disk-{size}", f"size={size}")
        workspace["paths.checkpoints"] = str(disk / "exp")
        findings = run_check(resolve(**workspace))
        results[size] = [f for f in findings if f.field == "paths.checkpoints"]
    err = only(results["1m"], "checkpoint_space")
    assert err.severity is ERROR
    assert "1.0 MiB free" in err.message and f"about {params * CHECKPOINT_BYTES_PER_PARAM / 2**20:.1f} MiB" in err.message
    assert "bf16 weights + fp32 master weights + Adam m and v" in err.message
    low = only(results["8m"], "checkpoint_space_low")
    assert low.severity is WARNING and "room for 2 checkpoint(s)" in low.message
    assert results["64m"] == []


def test_no_space_check_when_checkpoints_are_never_saved(workspace: dict[str, Any], tmpfs: Any, tmp_path: Path) -> None:
    write_big_model(tmp_path / "models" / "big", 200_000)
    disk = tmpfs("small", "size=1m")
    spec = resolve(**{**workspace, "paths.model": str(tmp_path / "models" / "big"), "paths.checkpoints": str(disk),
                      "train.save_freq": -1}).spec
    probe = probe_checkpoint_dir(str(disk))
    assert check_checkpoints(spec, probe, inspect_model(str(tmp_path / "models" / "big"))) == []


# --------------------------------------------------------------------------------------------------
# cluster.devices: real npu-smi / nvidia-smi captures through the real parsers
# --------------------------------------------------------------------------------------------------


def npu_state(name: str) -> MachineState:
    return MachineState(npu=parse_npu_smi_info(fixture_text(FIXTURES / "npu-smi" / name)))


def devices_findings(state: MachineState, devices: list[int], device: str = "npu") -> list[Finding]:
    spec = resolve(**{"cluster.devices": devices, "device": device}).spec
    return check_devices(spec, state)


def test_busy_npus_are_an_error_listing_pids_and_names_unless_shared() -> None:
    state = npu_state("info-910B1-8card-23.0.rc2.b090-training-busy-elided.txt")
    findings = devices_findings(state, [0, 7])
    assert [(f.code, f.severity, f.field) for f in findings] == [("device_busy", ERROR, "cluster.devices")] * 2
    shared = check_devices(resolve(**{"cluster.devices": [0, 7], "cluster.allow_busy_devices": True}).spec, state)
    assert [(f.code, f.severity) for f in shared] == [("device_busy", WARNING)] * 2
    assert findings[0].message == "NPU 0 is in use by 1 process(es): 2441447 (python)"
    assert findings[1].message == "NPU 7 is in use by 1 process(es): 2441454 (python)"


def test_the_busy_rule_reads_who_holds_a_device_from_the_facts_and_never_looks_itself() -> None:
    """Issue 15: who holds a busy device is a fact the caller collects (``CheckFacts.holders``); the rule
    names the holders it is given and imports nothing of the runtime."""
    import ast

    import verlctl.checks.devices as devices_module
    from verlctl.checks.devices import busy_pids

    state = npu_state("info-910B1-8card-23.0.rc2.b090-training-busy-elided.txt")
    spec = resolve(**{"cluster.devices": [0, 7], "device": "npu"}).spec
    assert busy_pids(spec, state) == [2441447, 2441448, 2441454]  # every process npu-smi shows
    told = {2441447: "pid 2441447 (python) is verlctl run r1: `verlctl stop r1` frees the device"}
    first, second = check_devices(spec, state, told)
    assert first.hint is not None and first.hint.endswith(told[2441447])
    assert second.hint is not None and "2441447" not in second.hint and "verlctl stop" not in second.hint
    tree = ast.parse(Path(devices_module.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m and m.startswith("verlctl.runtime") for m in imported)


def test_npus_not_in_the_output_are_errors_with_the_choices() -> None:
    state = npu_state("info-910B1-8card-23.0.rc2.b090-training-busy-elided.txt")  # NPUs 1-6 elided
    findings = devices_findings(state, [0, 1, 2, 3, 4, 5, 6, 7])
    # one finding for the six missing NPUs, not six
    [missing] = found(findings, "device_missing")
    assert missing.message == ("6 NPUs (1, 2, 3, 4, 5, 6) are not in the output of npu-smi info "
                               "(it shows NPU 0, 7)")
    assert missing.hint == "choose cluster.devices from: 0, 7"


def test_an_npu_with_warning_health_is_an_error_naming_it() -> None:
    state = npu_state("info-910A-1card-WARNING-health-23.0.rc3-modelarts.txt")
    f = only(devices_findings(state, [1]), "device_unhealthy")
    assert (f.severity, f.field) == (ERROR, "cluster.devices")
    assert f.message == "NPU 1 (910A) health is Warning, not OK"
    assert only(devices_findings(state, [0]), "device_missing").hint == "choose cluster.devices from: 1"


def test_idle_healthy_npus_give_no_findings() -> None:
    state = npu_state("info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt")
    assert devices_findings(state, list(range(8))) == []


def test_a3_chips_are_addressed_by_their_phy_id() -> None:
    state = npu_state("info-a3-26.0.rc2-tail-process-section-with-container-pid-vllm-ascend-issue12980.txt")
    assert devices_findings(state, [15]) == []  # NPU 7 chip 1 = device 15
    assert only(devices_findings(state, [7]), "device_missing").hint == "choose cluster.devices from: 15"


def test_busy_gpu_from_a_real_nvidia_smi_table() -> None:
    busy = MachineState(gpu=parse_nvidia_smi(fixture_text(FIXTURES / "nvidia-smi" / "default-580-1gpu-h200-busy-1proc-verlctl-device-check.txt")))
    f = only(devices_findings(busy, [0], "gpu"), "device_busy")
    assert f.message == "GPU 0 is in use by 1 process(es): 431 (python3)"
    idle = MachineState(gpu=parse_nvidia_smi(fixture_text(FIXTURES / "nvidia-smi" / "default-580-1gpu-h200-idle-verlctl-device-check.txt")))
    assert devices_findings(idle, [0], "gpu") == []
    assert only(devices_findings(idle, [0, 1], "gpu"), "device_missing").message.startswith("GPU 1 is not in the output of nvidia-smi")


def test_npu_device_without_npu_smi_is_an_error_on_the_host_and_a_warning_in_a_container() -> None:
    state = MachineState(npu=probe_npu(binary="/nonexistent/bin/npu-smi"))  # the real probe, really not found
    host = resolve(**{"cluster.devices": [0], "device": "npu", "container.runtime": "host"}).spec
    f = only(check_devices(host, state), "npu_smi_missing")
    assert (f.severity, f.field) == (ERROR, "device")
    assert "npu-smi is not on PATH" in f.message and "NPU driver tool is missing" in f.message
    # in a container, launch checks the container's own npu-smi before training starts
    f = only(devices_findings(state, [0]), "npu_smi_missing")
    assert (f.severity, f.field) == (WARNING, "device")
    assert "launch checks npu-smi inside the container" in f.message


# --------------------------------------------------------------------------------------------------
# The model's shape against TP / PP / VPP
# --------------------------------------------------------------------------------------------------


def vllm_fixture_line() -> str:
    name = "divisible-attention-heads-tp-valueerror-fsdrive-issue21.txt"
    path = FIXTURES / "errors" / name
    if not path.exists():
        path = Path("/work/shared/fixtures/errors") / name
    return fixture_text(path).splitlines()[-1].removeprefix("ValueError: ").rstrip(".")


def test_tp_not_dividing_heads(workspace: dict[str, Any], tmp_path: Path) -> None:
    write_model_config(tmp_path / "models" / "m12", num_attention_heads=12, num_key_value_heads=2, num_hidden_layers=28)
    workspace.update({"paths.model": str(tmp_path / "models" / "m12"), "train.tensor_parallel": 8})
    findings = run_check(resolve(**workspace))
    train = only(findings, "model_tp_heads")
    assert (train.severity, train.field) == (ERROR, "train.tensor_parallel")
    assert "12 attention heads, not divisible by the training TP 8" in train.message
    assert train.hint == "valid training TP for this model: 1, 2"
    rollout = only(findings, "model_rollout_tp_heads")
    assert (rollout.severity, rollout.field) == (ERROR, "train.rollout_tensor_parallel")
    assert vllm_fixture_line() in rollout.message  # vLLM's own words, from the real capture
    assert rollout.hint == "valid rollout TP for this model: 1, 2, 4, 6"  # KV heads 2 are replicated for 4 and 6


def test_kv_heads_not_divisible_by_training_tp(workspace: dict[str, Any]) -> None:
    # write_model: 8 heads, 4 KV heads. TP 8: Megatron needs 4 % 8 == 0; vLLM replicates the 4 KV heads.
    findings = run_check(resolve(**{**workspace, "train.tensor_parallel": 8, "train.pipeline_parallel": 1}))
    train = only(findings, "model_tp_heads")
    assert "4 key/value heads (query groups), not divisible by the training TP 8" in train.message
    assert not found(findings, "model_rollout_tp_heads")


def test_fsdp_has_no_training_tp_rule_but_keeps_the_rollout_one(workspace: dict[str, Any], tmp_path: Path) -> None:
    write_model_config(tmp_path / "models" / "m12", num_attention_heads=12, num_key_value_heads=12)
    spec = resolve(**{**workspace, "paths.model": str(tmp_path / "models" / "m12"), "strategy": "fsdp",
                      "train.rollout_tensor_parallel": 8}).spec
    codes = [f.code for f in check_model_fit(spec, inspect_model(str(tmp_path / "models" / "m12")))]
    assert codes == ["model_rollout_tp_heads"]


def test_pp_not_dividing_layers(workspace: dict[str, Any], tmp_path: Path) -> None:
    write_model_config(tmp_path / "models" / "m28", num_hidden_layers=28)
    workspace.update({"paths.model": str(tmp_path / "models" / "m28"), "train.pipeline_parallel": 3})
    f = only(run_check(resolve(**workspace)), "model_layers_pp")
    assert (f.severity, f.field) == (ERROR, "train.pipeline_parallel")
    assert f.message == "m28 has 28 layers, which do not split evenly over PP 3 pipeline stages"
    assert f.hint is not None and f.hint.startswith("valid PP for this model: 1, 2, 4, 7 ")


def test_vpp_needs_layers_divisible_by_pp_times_vpp_size(workspace: dict[str, Any], tmp_path: Path) -> None:
    write_model_config(tmp_path / "models" / "m28", num_hidden_layers=28)
    workspace.update({"paths.model": str(tmp_path / "models" / "m28"), "train.pipeline_parallel": 2,
                      "features.vpp_size": 4})
    assert not found(run_check(resolve(**workspace)), "model_layers_vpp")  # vpp is off by default
    f = only(run_check(resolve(**{**workspace, "features.enable": "vpp"})), "model_layers_vpp")
    assert (f.severity, f.field) == (ERROR, "features.vpp_size")
    assert "layers must be divisible by PP × vpp_size = 8" in f.message
    assert f.hint == "valid vpp_size with PP 2: 2, 7, 14; valid PP with vpp_size 4: 1, 7; or turn vpp off"
    assert not found(run_check(resolve(**{**workspace, "features.enable": "vpp", "features.vpp_size": 7})), "model_layers_vpp")


def test_uneven_pipeline_layout_skips_the_even_split_rule(workspace: dict[str, Any], tmp_path: Path) -> None:
    write_model_config(tmp_path / "models" / "m28", num_hidden_layers=28)
    spec = resolve(**{**workspace, "train.pipeline_parallel": 3, "extra_overrides": [
        "actor_rollout_ref.actor.megatron.override_transformer_config.num_layers_in_first_pipeline_stage=8"]}).spec
    assert check_model_fit(spec, inspect_model(str(tmp_path / "models" / "m28"))) == []


# --------------------------------------------------------------------------------------------------
# cluster.socket_ifname / cluster.master_addr
# --------------------------------------------------------------------------------------------------


def test_unknown_socket_ifname_on_this_machine(workspace: dict[str, Any]) -> None:
    network = probe_network()
    assert isinstance(network, NetworkInfo)
    f = only(run_check(resolve(**{**workspace, "cluster.socket_ifname": "verlctl-nope0"})), "socket_ifname_unknown")
    assert (f.severity, f.field) == (ERROR, "cluster.socket_ifname")
    assert f.message == "network interface verlctl-nope0 does not exist on this machine"
    up = [i.name for i in network.interfaces if not i.is_loopback and i.is_up]
    assert f.hint is not None and all(name in f.hint for name in up)


def test_master_addr_must_be_on_socket_ifname_on_the_head(workspace: dict[str, Any]) -> None:
    network = probe_network()
    assert isinstance(network, NetworkInfo)
    iface = next((i for i in network.interfaces if not i.is_loopback and i.is_up and i.ipv4), None)
    if iface is None:
        pytest.skip("no up interface with an IPv4 address here")
    ok = run_check(resolve(**{**workspace, "cluster.socket_ifname": iface.name,
                              "cluster.master_addr": iface.ipv4_addresses[0]}))
    assert not [f for f in ok if f.field in ("cluster.socket_ifname", "cluster.master_addr")]
    bad = only(run_check(resolve(**{**workspace, "cluster.socket_ifname": iface.name,
                                    "cluster.master_addr": "127.0.0.1"})), "master_addr_not_on_ifname")
    assert bad.field == "cluster.master_addr" and "is on interface lo" in bad.message
    foreign = only(run_check(resolve(**{**workspace, "cluster.master_addr": "192.0.2.254"})), "master_addr_not_local")
    assert foreign.field == "cluster.master_addr"


def captured_network() -> NetworkInfo:
    interfaces, warnings = parse_ip_addr(fixture_text(FIXTURES / "network" / "ip-addr-multi-nic-bond-partial-sglang-issue3514.txt"))
    return NetworkInfo(interfaces=interfaces, host_ips=host_ips(interfaces), warnings=warnings)


def test_socket_ifname_down_from_a_real_ip_addr_capture() -> None:
    network = captured_network()
    f = only(check_network(resolve(**{"cluster.socket_ifname": "ens16f0"}).spec, network), "socket_ifname_down")
    assert (f.severity, f.field) == (ERROR, "cluster.socket_ifname")
    assert check_network(resolve(**{"cluster.socket_ifname": "enp151s0f0np0"}).spec, network) == []  # an altname
    off = check_network(resolve(**{"cluster.socket_ifname": "ens8f0np0", "cluster.master_addr": "127.0.0.1"}).spec, network)
    assert [f.code for f in off] == ["master_addr_not_on_ifname"]


def test_a_worker_node_is_not_asked_to_carry_the_head_address() -> None:
    spec = resolve(**{"cluster.nodes": "192.0.2.10,192.0.2.11", "cluster.socket_ifname": "ens8f0np0"}).spec
    findings = check_network(spec, captured_network(), ["192.0.2.10"])
    assert [(f.code, f.severity) for f in findings] == [("not_head", INFO)]


# --------------------------------------------------------------------------------------------------
# Python / Ray where training runs, against what verl requires (issue 13)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.7.0", "0.9.1"])
def test_the_requirements_table_is_what_the_verl_wheel_declares(version: str) -> None:
    from verlctl.verl.requirements import REQUIREMENTS

    from verlcompose import verl_root

    meta = verl_root(version) / f"verl-{version}.dist-info" / "METADATA"
    if not meta.is_file():
        pytest.skip(f"the verl {version} wheel is not under .cache/verl")
    lines = meta.read_text(encoding="utf-8").splitlines()
    python = next(ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Requires-Python:"))
    ray = next(ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Requires-Dist: ray[default]") and ";" not in ln)
    req = REQUIREMENTS[version]
    assert sorted(python.split(",")) == sorted(req.python_text.split(","))
    assert ray == "ray[default]" + req.ray_text


def test_image_versions_findings_from_the_facts() -> None:
    from verlctl.checks.facts import CheckFacts
    from verlctl.detect.check_probes import ImageVersions

    resolved = resolve(**{"container.runtime": "host", "verl_version": "0.9.1"})

    def codes(python: str, ray: str | None) -> list[str]:
        facts = CheckFacts(machine=MachineState(), image_versions=ImageVersions(where="this host's python3",
                                                                                  python=python, ray=ray))
        return [f.code for f in machine_findings(resolved, facts) if f.code.startswith("image_")]

    assert codes("3.12.9", "2.41.0") == []
    assert codes("3.13.1", "2.41.0") == ["image_python_unsupported"]  # 0.9.1: <3.13
    assert codes("3.10.12", "2.40.9") == ["image_ray_too_old"]
    assert codes("3.10.12", "2.49.0rc1") == []
    assert codes("3.10.12", None) == ["image_ray_missing"]
    f = next(f for f in machine_findings(resolved, CheckFacts(machine=MachineState(), image_versions=ImageVersions(
        where="this host's python3", python="3.9.2", ray="2.41.0"))) if f.code == "image_python_unsupported")
    assert f.field == "container.runtime" and "Python 3.9.2 in this host's python3" in f.message


def test_many_missing_gpus_are_one_finding() -> None:
    idle = MachineState(gpu=parse_nvidia_smi(fixture_text(FIXTURES / "nvidia-smi" / "default-580-1gpu-h200-idle-verlctl-device-check.txt")))
    [f] = devices_findings(idle, [0, 1, 2, 3], "gpu")
    assert f.code == "device_missing" and f.message.startswith("3 GPUs (1, 2, 3) are not in the output of nvidia-smi")
