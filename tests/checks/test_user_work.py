"""Never lose the user's work: checkpoints and logs default to host directories mounted into the container,
multi-node checkpoints must be on shared storage, nobody's personal paths are defaults, and secrets are never
echoed (a key at the wrong path) or accepted from the spec file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from test_multinode_docker import ssh_home as _ssh_home  # noqa: F401 - the private sshd fixture
from verlctl.checks.findings import Severity
from verlctl.checks.storage import StorageFacts, check_checkpoint_storage, collect_storage, mount_of
from verlctl.runtime import containers
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS, ROOT, clean_env, run_cli
from launch_support import ensure_npu_device_nodes, remove_container, write_run_files

KEY = "SECRETKEY-adv-7f3c9e41"
PERSONAL = ("h4380", "TrainingMaster", "verl_hlm")


# ---------------------------------------------------------------- default output directories


def test_default_checkpoint_and_log_dirs_are_host_dirs_under_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    r = load_spec(None, flags=dict(BASE_PATHS), environ={})
    spec = r.spec
    assert spec.paths.checkpoints == f"{tmp_path}/checkpoints/verlctl/dapo_Qwen3-8B_megatron"
    assert spec.paths.logs == f"{tmp_path}/logs/verlctl/dapo_Qwen3-8B_megatron"
    assert spec.logging.swanlab.log_dir == f"{spec.paths.logs}/swanlog"
    assert str(r.origin("paths.checkpoints")).startswith("derived (<current directory")
    for path in (spec.paths.checkpoints, spec.paths.logs):
        assert not path.startswith(spec.container.workdir)
    # A new container mounts both at the same path (read-write), so removing it keeps them.
    _mounts, added, problems = containers.plan_mounts(spec.model_copy(update={"paths": spec.paths.model_copy(
        update={"model": None, "train_files": None, "val_files": None})}))
    assert not problems
    binds = {m.target: m for m in added}
    assert binds[spec.paths.checkpoints].host == spec.paths.checkpoints and binds[spec.paths.checkpoints].mode == "rw"
    assert binds[spec.paths.logs].host == spec.paths.logs


def test_checkpoints_written_in_a_new_container_survive_its_removal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_engine: Any, test_image: str
) -> None:
    monkeypatch.chdir(tmp_path)
    ensure_npu_device_nodes()  # the default spec is an 8-NPU host: its container maps /dev/davinci0-7
    name = f"verlctl-test-userwork-{tmp_path.name[-10:]}".replace("_", "-")
    flags = {**write_run_files(tmp_path), "container.name": name, "container.image": test_image}
    spec = load_spec(None, flags=flags, environ={}).spec
    plan = containers.plan_container(docker_engine, spec, allow_pull=False)
    assert not plan.exists
    try:
        c = containers.create_container(docker_engine, spec, plan, containers.labels_for("run-u", "exp"), {})
        binds = {m["Destination"]: m for m in c.attrs["Mounts"]}
        assert binds[spec.paths.checkpoints]["Source"] == spec.paths.checkpoints and binds[spec.paths.checkpoints]["RW"]
        assert spec.paths.logs in binds
        containers.start_container(c)
        step = f"{spec.paths.checkpoints}/global_step_1"
        res = c.exec_run(["sh", "-c", 'mkdir -p -- "$1" && echo 1 > "$2"', "sh", step,
                          f"{spec.paths.checkpoints}/latest_checkpointed_iteration.txt"])
        assert res.exit_code == 0, res.output
    finally:
        remove_container(docker_engine, name)
    assert (Path(spec.paths.checkpoints) / "latest_checkpointed_iteration.txt").read_text() == "1\n"
    assert (Path(spec.paths.checkpoints) / "global_step_1").is_dir()


def test_reusing_a_container_that_does_not_mount_the_checkpoints_is_a_blocking_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, container_factory: Any, test_image: str
) -> None:
    from verlctl.checks.machine_checks import machine_findings
    from verlctl.orchestrator.machine_facts import collect_facts

    monkeypatch.chdir(tmp_path)
    flags = write_run_files(tmp_path)
    container = container_factory(test_image, volumes={str(tmp_path): {"bind": str(tmp_path / "data"), "mode": "ro"}})
    resolved = load_spec(None, flags={**flags, "container.name": container.name, "container.image": test_image},
                         environ={})
    findings = machine_findings(resolved, collect_facts(resolved, budget_s=20))
    missing = {f.field: f for f in findings if f.code == "container_mount_missing"}
    ck = missing["paths.checkpoints"]
    assert ck.severity is Severity.ERROR
    assert resolved.spec.paths.checkpoints in ck.message
    assert "use another container.name (a new container gets every mount)" in (ck.hint or "")
    assert missing["paths.logs"].severity is Severity.ERROR


# ---------------------------------------------------------------- multi-node: shared storage


def multi(tmp_path: Path, nodes: list[str], **flags: Any) -> Any:
    return load_spec(None, flags={**BASE_PATHS, "cluster.nodes": nodes, **flags}, environ={}).spec


def test_multi_node_checkpoints_on_local_storage_are_a_blocking_finding(tmp_path: Path) -> None:
    spec = multi(tmp_path, ["10.250.0.1", "10.250.0.2"], **{"paths.checkpoints": str(tmp_path / "ck" / "exp")})
    facts = collect_storage(spec, here={"10.250.0.1"})
    assert facts is not None and facts.checked_path == str(tmp_path.resolve())
    [f] = check_checkpoint_storage(spec, facts)
    assert (f.code, f.severity, f.field) == ("checkpoints_not_shared", Severity.ERROR, "paths.checkpoints")
    assert f"{tmp_path / 'ck' / 'exp'} is on {facts.fstype} ({facts.mountpoint}), a file system local" in f.message
    assert "resuming from a checkpoint after a restart" in f.message and "will not work" in f.message
    assert "every node mounts at the same path (e.g. an NFS export" in (f.hint or "")
    # Inside each node's container: never shared.
    inside = multi(tmp_path, ["10.250.0.1", "10.250.0.2"], **{"paths.checkpoints": "/verl/checkpoints/x"})
    [g] = check_checkpoint_storage(inside, collect_storage(inside, here=set()))
    assert g.code == "checkpoints_not_shared" and "inside each node's own container" in g.message


def test_multi_node_check_cli_refuses_local_checkpoints_and_accepts_nodes_that_are_this_machine(
    tmp_path: Path,
) -> None:
    spec = {"paths": {"model": str(tmp_path / "m"), "train_files": str(tmp_path / "t.parquet"),
                      "val_files": str(tmp_path / "t.parquet"), "checkpoints": str(tmp_path / "ck")},
            "cluster": {"nodes": ["10.250.0.1", "10.250.0.2"]}, "container": {"runtime": "host"}}
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump(spec))
    res = run_cli("check", "-c", str(f), "--json", env=clean_env())
    codes = {(x["code"], x["severity"]) for x in res.json()["findings"]}
    assert ("checkpoints_not_shared", "error") in codes, res.out
    spec["cluster"]["nodes"] = ["127.0.0.1", "127.0.0.2"]  # both "nodes" are this machine: one file system
    f.write_text(yaml.safe_dump(spec))
    res = run_cli("check", "-c", str(f), "--json", env=clean_env())
    assert not [x for x in res.json()["findings"] if x["code"] in ("checkpoints_not_shared", "checkpoints_shared")], res.out


# A /proc/self/mountinfo captured on a machine with an NFS home (NFS cannot be served here); the line format is
# proc(5)'s: the file system type and source follow the " - " separator, and octal escapes encode spaces.
MOUNTINFO = """\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
45 22 0:40 / /mnt/nfs rw,relatime shared:30 - nfs4 fileserver:/export/ckpt rw,vers=4.2
46 45 0:41 / /mnt/nfs/local\\040scratch rw,relatime shared:31 - xfs /dev/sdb1 rw
"""


def test_checkpoints_on_nfs_are_shared_and_a_local_mount_below_it_is_not() -> None:
    assert mount_of("/mnt/nfs/team/exp", MOUNTINFO) == ("/mnt/nfs", "nfs4", "fileserver:/export/ckpt")
    assert mount_of("/mnt/nfs/local scratch/exp", MOUNTINFO) == ("/mnt/nfs/local scratch", "xfs", "/dev/sdb1")
    assert mount_of("/home/x", MOUNTINFO) == ("/", "ext4", "/dev/vda1")
    spec = load_spec(None, flags={**BASE_PATHS, "cluster.nodes": ["10.250.0.1", "10.250.0.2"],
                                  "paths.checkpoints": "/mnt/nfs/team/exp"}, environ={}).spec
    facts = StorageFacts(path="/mnt/nfs/team/exp", checked_path="/mnt/nfs", fstype="nfs4", mountpoint="/mnt/nfs",
                         source="fileserver:/export/ckpt")
    [f] = check_checkpoint_storage(spec, facts)
    assert (f.code, f.severity) == ("checkpoints_shared", Severity.INFO)
    local = facts.model_copy(update={"fstype": "xfs"})
    assert [g.code for g in check_checkpoint_storage(spec, local)] == ["checkpoints_not_shared"]


# ---------------------------------------------------------------- nobody's personal defaults


def test_the_seed_authors_paths_and_names_are_nobodys_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = load_spec(None, flags={**BASE_PATHS, "logging.swanlab.enabled": True}, environ={}).spec
    dumped = yaml.safe_dump(spec.model_dump(mode="json"))
    for word in PERSONAL:
        assert word not in dumped
    assert spec.logging.swanlab.workspace is None  # SwanLab's default: the user's own workspace
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "src").rglob("*.j2"), ROOT / "examples" / "run.yaml"]:
        text = path.read_text(encoding="utf-8")
        for word in PERSONAL:
            assert word not in text, f"{word} in {path}"
    from verlctl.render.render import render
    from verlctl.verl.compose import build_command

    resolved = load_spec(None, flags={**BASE_PATHS, "logging.swanlab.host": "http://10.0.0.9:8000",
                                      "logging.swanlab.mode": "offline"}, environ={})
    env_file = render(resolved, build_command(resolved)).env_file
    assert "SWANLAB_WORKSPACE" not in env_file
    assert f"SWANLAB_LOG_DIR={resolved.spec.paths.logs}/swanlog" in env_file


# ---------------------------------------------------------------- secrets


@pytest.mark.parametrize("where", ["logging.swanlab", "logging", "logging.swanlab.api_key.value"])
def test_a_key_given_at_the_wrong_path_is_not_echoed(tmp_path: Path, where: str) -> None:
    res = run_cli("plan", "--set", f"paths.model={tmp_path}", "--set", "paths.train_files=/d/t.parquet",
                  "--set", "paths.val_files=/d/v.parquet", "--set", f"{where}={KEY}", env=clean_env())
    assert res.code == 2
    assert KEY not in res.out + res.err
    assert "Traceback" not in res.err and where in res.err
    assert "value not shown" in res.err


def test_other_errors_still_show_the_value(tmp_path: Path) -> None:
    res = run_cli("plan", "--set", "paths.model=/m", "--set", "paths.train_files=/d/t.parquet",
                  "--set", "paths.val_files=/d/v.parquet", "--set", "train.steps=ten", env=clean_env())
    assert res.code == 2 and "'ten'" in res.err


def test_an_api_key_in_the_spec_file_is_refused_with_the_way_to_pass_it(tmp_path: Path) -> None:
    spec = {"paths": {"model": "/m", "train_files": "/d/t.parquet", "val_files": "/d/v.parquet"},
            "logging": {"swanlab": {"host": "http://10.0.0.9:8000", "api_key": KEY}}}
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump(spec))
    for cmd in ("plan", "check"):
        res = run_cli(cmd, "-c", str(f), env=clean_env())
        assert res.code == 2, res.out + res.err
        assert KEY not in res.out + res.err
        lines = [ln for ln in res.err.splitlines() if ln.strip()]
        assert re.match(r"^error: logging\.swanlab\.api_key: a secret in the spec file .*run\.yaml is refused", lines[0])
        assert "export SWANLAB_API_KEY" in res.err and "Traceback" not in res.err
    # null (what spec.resolved.yaml writes for a secret) is not a key
    spec["logging"]["swanlab"]["api_key"] = None
    f.write_text(yaml.safe_dump(spec))
    assert load_spec(f, environ={"SWANLAB_API_KEY": KEY}).spec.logging.swanlab.api_key is not None


@pytest.mark.docker
def test_multi_node_launch_refuses_checkpoints_inside_the_containers_before_changing_anything(
    launch_env: Any, docker_engine: Any, request: pytest.FixtureRequest
) -> None:
    from test_multinode_docker import WORKER, _local_ip

    home = request.getfixturevalue("_ssh_home")  # a private sshd on 127.0.0.2 (test_multinode_docker.py)
    env = launch_env
    env.spec["cluster"].update({"nodes": [_local_ip(), WORKER], "devices": [0, 1, 2, 3],
                                "ssh_config": str(home / ".ssh" / "config")})
    env.spec["paths"]["checkpoints"] = "/verl/checkpoints/exp"  # each node's own container: not shared
    res = env.cli("launch", "-c", str(env.spec_file), "--yes")
    assert res.code == 2, res.out + res.err
    out = " ".join((res.out + res.err).split())
    assert "checkpoints_not_shared" in out and "inside each node's own container" in out
    assert "will not work" in out and "every node mounts at the same path" in out
    assert res.err.strip().splitlines()[-1] == "error: the spec has errors (listed above): nothing was changed"
    assert not docker_engine.containers.list(all=True, filters={"name": env.name})
