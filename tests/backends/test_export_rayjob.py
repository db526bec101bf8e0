"""`verlctl export rayjob` (issue 14, KubeRay): the manifest validates against KubeRay's own CRD schema and the
Kubernetes client's models, requests nodes x devices, keeps secrets out, and bad input writes nothing.

No cluster exists here. What can be checked is checked with the real artefacts: the RayJob CRD of kuberay at
feeaf72 (tests/fixtures/kuberay/ray.io_rayjobs.yaml, validated with jsonschema; an unknown field counts as an
error, as the API server would silently prune it), the Kubernetes Python client's models (a pod template that
loses a field when read into V1PodTemplateSpec fails), and the scripts in the ConfigMap run with the test
doubles of `ray` and of the training step (tests/doubles/bin).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_support import crd_validator, round_trip, schema_errors

from conftest import FIXTURES, clean_env, run_cli
from scripts_harness import run_start_script

CRD = FIXTURES / "kuberay" / "ray.io_rayjobs.yaml"
BASE = {"paths": {"model": "/data/models/Qwen3-8B", "train_files": "/data/train.parquet",
                  "val_files": "/data/val.parquet", "checkpoints": "/data/ckpt/run1"},
        "logging": {"experiment": "dapo_Qwen3-8B"}}


# ---------------------------------------------------------------------------------------------------------
# The validators


@pytest.fixture(scope="module")
def rayjob_schema() -> Any:
    return crd_validator(CRD, "https://github.com/ray-project/kuberay commit feeaf72", "RayJob", "v1")


def validate(docs: list[dict[str, Any]], schema: Any) -> None:
    """Every check this machine can make of a manifest; raises on the first problem."""
    config_map, job = docs
    assert config_map["kind"] == "ConfigMap" and config_map["apiVersion"] == "v1"
    assert round_trip(config_map, "V1ConfigMap") == config_map
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    errors = schema_errors(schema, job)
    assert not errors, errors
    assert round_trip(job["metadata"], "V1ObjectMeta") == job["metadata"]
    # KubeRay's ValidateRayJobMetadata: a DNS-1035 label of at most 47 characters.
    name = job["metadata"]["name"]
    assert len(name) <= 47 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name), name
    # KubeRay's ValidateRayJobSpec / ValidateRayClusterSpec (utils/validation.go) on the fields used here.
    spec = job["spec"]
    assert spec.get("ttlSecondsAfterFinished", 0) >= 0 and spec.get("backoffLimit", 0) >= 0
    assert spec["shutdownAfterJobFinishes"] is True or "ttlSecondsAfterFinished" not in spec
    cluster = spec["rayClusterSpec"]
    assert cluster["headGroupSpec"]["template"]["spec"]["containers"]
    for group in cluster["workerGroupSpecs"]:  # no autoscaling: both bounds set, replicas inside them
        assert group["template"]["spec"]["containers"]
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], group["groupName"]
    for template in [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]:
        assert round_trip(template, "V1PodTemplateSpec") == template
        assert round_trip(template["spec"], "V1PodSpec") == template["spec"]
        volumes = {v["name"] for v in template["spec"]["volumes"]}
        for c in template["spec"]["containers"]:
            assert {m["name"] for m in c["volumeMounts"]} <= volumes, c["name"]


# ---------------------------------------------------------------------------------------------------------
# Helpers


def spec_file(tmp_path: Path, **extra: Any) -> Path:
    data = copy.deepcopy(BASE)
    for key, value in extra.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump(data), encoding="utf-8")
    return p


def export(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[Any, list[dict[str, Any]]]:
    out = tmp_path / "rayjob.yaml"
    res = run_cli("export", "rayjob", "-c", str(spec_file(tmp_path)), "-o", str(out), *args, env=env)
    assert res.code == 0, res.out + res.err
    return res, list(yaml.safe_load_all(out.read_text(encoding="utf-8")))


def one_line_error(res: Any) -> str:
    assert res.code != 0, (res.out, res.err)
    assert "Traceback" not in res.out + res.err, res.err
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.err
    return lines[0]


def worker_group(job: dict[str, Any]) -> dict[str, Any]:
    (group,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    return group


def devices_requested(job: dict[str, Any], resource: str) -> int:
    """Every pod's device limit times its replicas (the head counts once)."""
    cluster = job["spec"]["rayClusterSpec"]
    total = 0
    for replicas, template in [(1, cluster["headGroupSpec"]["template"]),
                               *((g["replicas"], g["template"]) for g in cluster["workerGroupSpecs"])]:
        for c in template["spec"]["containers"]:
            limits = c.get("resources", {}).get("limits", {})
            requests = c.get("resources", {}).get("requests", {})
            assert limits.get(resource) == requests.get(resource)
            total += replicas * int(limits.get(resource, 0))
    return total


def kuberay_ray_start_argv(params: dict[str, str]) -> list[str]:
    """The arguments `ray start` receives in the pod: KubeRay's convertParamMap (pod.go) pastes
    `` --key=value `` unquoted, in key order, into the container's `bash -lc` command line; bash parses it."""
    flags = "".join(f" --{k} " if v.lower() == "true" else f" --{k}={v} " for k, v in sorted(params.items())
                    if v.lower() != "false")
    proc = subprocess.run(["bash", "-c", f"printf '%s\\0' {flags}"], capture_output=True, text=True, check=True,
                          timeout=30)
    return proc.stdout.split("\0")[:-1]


def ray_resources(params: dict[str, str]) -> dict[str, float]:
    """rayStartParams.resources as KubeRay's getResourcesMap reads it (pod.go: trim quotes, JSON)."""
    return json.loads(params["resources"].strip("'\"` ")) if "resources" in params else {}


# ---------------------------------------------------------------------------------------------------------
# Valid exports


@pytest.mark.parametrize("resume", [False, True], ids=["no-resume", "resume"])
@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("device", ["npu", "gpu"])
def test_exported_rayjob_validates_and_requests_nodes_times_devices(
        tmp_path: Path, rayjob_schema: Any, device: str, nodes: int, resume: bool) -> None:
    args = ["--device", device, "--nodes", str(nodes), "--pvc", "verl-shared"]
    if device == "gpu":
        args += ["--strategy", "fsdp", "--set", "cluster.devices=0,1,2,3"]
    if resume:
        args += ["--set", "train.save_freq=2", "--set", "kubernetes.retries=3"]
    res, docs = export(tmp_path, *args)
    validate(docs, rayjob_schema)
    config_map, job = docs
    per_node = 8 if device == "npu" else 4
    resource = "huawei.com/Ascend910" if device == "npu" else "nvidia.com/gpu"
    assert devices_requested(job, resource) == nodes * per_node
    group = worker_group(job)
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == nodes
    params = group["rayStartParams"]
    head_params = job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]
    assert head_params["num-cpus"] == "0" and head_params["port"] == "6766"
    if device == "npu":  # KubeRay maps no Ascend resource: the NPU resource is given to Ray explicitly
        assert ray_resources(params) == {"NPU": per_node} and "num-gpus" not in params
        assert kuberay_ray_start_argv(params) == [f'--resources={{"NPU": {per_node}}}']
    else:
        assert params["num-gpus"] == str(per_node) and ray_resources(params) == {}
        assert kuberay_ray_start_argv(params) == [f"--num-gpus={per_node}"]
    # The training command asks verl for exactly what the pods hold.
    train = config_map["data"]["run_training.sh"]
    assert f"trainer.nnodes={nodes}" in train and f"trainer.n_gpus_per_node={per_node}" in train
    assert f"NNODES={nodes}\nDEVICES_PER_NODE={per_node}\n" in config_map["data"]["start_verl.sh"]
    spec = job["spec"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] == 600
    assert spec.get("backoffLimit") == (3 if resume else None)
    assert "trainer.resume_mode=auto" in train
    # /dev/shm is a memory emptyDir and the checkpoints are on the PVC, in every pod.
    for template in [spec["rayClusterSpec"]["headGroupSpec"]["template"], group["template"]]:
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
        assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "verl-shared"}
        mounts = {m["mountPath"]: m["name"] for m in template["spec"]["containers"][0]["volumeMounts"]}
        assert mounts["/dev/shm"] == "dshm" and mounts["/data/ckpt/run1"] == "checkpoints"
    assert f"{nodes} worker pod(s) x {per_node} {resource} = {nodes * per_node} devices" in res.out


def test_custom_device_resource_and_pvc_from_the_spec(tmp_path: Path, rayjob_schema: Any) -> None:
    spec = spec_file(tmp_path, kubernetes={"pvc": "team-nfs", "device_resource": "huawei.com/ascend-1980"})
    out = tmp_path / "job.yaml"
    res = run_cli("export", "rayjob", "-c", str(spec), "-o", str(out), "--nodes", "2",
                  "--set", "cluster.ray_start_args=[--num-cpus=64,--object-store-memory=10000000000]")
    assert res.code == 0, res.out + res.err
    docs = list(yaml.safe_load_all(out.read_text(encoding="utf-8")))
    validate(docs, rayjob_schema)
    job = docs[1]
    assert kuberay_ray_start_argv(worker_group(job)["rayStartParams"]) == [
        "--num-cpus=64", "--object-store-memory=10000000000", '--resources={"NPU": 8}']
    assert devices_requested(job, "huawei.com/ascend-1980") == 16
    assert devices_requested(job, "huawei.com/Ascend910") == 0
    claims = [v["persistentVolumeClaim"]["claimName"] for v in worker_group(job)["template"]["spec"]["volumes"]
              if "persistentVolumeClaim" in v]
    assert claims == ["team-nfs"]


def test_the_configmap_carries_the_plan_scripts_and_the_entrypoint_runs_them(tmp_path: Path) -> None:
    """The ConfigMap's scripts are the ones `plan` renders for the same spec (one render, not a copy)."""
    _, (config_map, job) = export(tmp_path, "--nodes", "2", "--pvc", "verl-shared")
    plan_dir = tmp_path / "plan"
    res = run_cli("plan", "-c", str(tmp_path / "run.yaml"), "--set", "cluster.nodes=rayjob-worker-1,rayjob-worker-2",
                  "-o", str(plan_dir))
    assert res.code == 0, res.out + res.err
    assert config_map["data"]["run_training.sh"] == (plan_dir / "run_training.sh").read_text(encoding="utf-8")
    # start_verl.sh differs only in the head's address, found by the head pod itself.
    planned = (plan_dir / "start_verl.sh").read_text(encoding="utf-8")
    assert config_map["data"]["start_verl.sh"] == planned.replace("MASTER_ADDR=rayjob-worker-1", "MASTER_ADDR=''")
    assert job["spec"]["entrypoint"] == "VERLCTL_ROLE=head VERLCTL_RAY_RUNNING=1 bash /opt/verlctl/start_verl.sh"
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert {"name": "scripts", "mountPath": "/opt/verlctl", "readOnly": True} in head["containers"][0]["volumeMounts"]
    assert {"name": "scripts", "configMap": {"name": config_map["metadata"]["name"], "defaultMode": 0o555}} \
        in head["volumes"]


def _listen() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", 0))
    sock.listen(16)
    return sock, int(sock.getsockname()[1])


@pytest.mark.parametrize("joined", [16, 8], ids=["all-joined", "half-joined"])
def test_entrypoint_waits_for_every_device_on_kuberays_ray_and_never_starts_its_own(
        tmp_path: Path, joined: int) -> None:
    """The entrypoint on the head pod: KubeRay started Ray (here: a port that listens, and the `ray` double's
    `ray status`); start_verl.sh must not run `ray start`, must wait for 2 x 8 NPUs, then train."""
    workdir = tmp_path / "verl"
    (workdir / "recipe" / "dapo").mkdir(parents=True)
    (workdir / "recipe" / "dapo" / "main_dapo.py").write_text("# recipe entry\n")
    gcs, port = _listen()
    try:
        _, (config_map, job) = export(
            tmp_path, "--nodes", "2", "--pvc", "verl-shared", "--set", f"container.workdir={workdir}",
            "--set", f"paths.logs={tmp_path / 'logs'}", "--set", f"cluster.ray_port={port}",
            "--set", "cluster.join_timeout_s=4",
            # each case its own checkpoint dir: start_verl.sh holds its lock for the whole attempt (A5)
            "--set", f"paths.checkpoints={tmp_path / 'ckpt'}")
        scripts = tmp_path / "opt-verlctl"
        scripts.mkdir()
        for name, text in config_map["data"].items():
            (scripts / name).write_text(text, encoding="utf-8")
        ray_log = tmp_path / "ray.log"
        # The entrypoint as written: its variable assignments, then bash on the mounted start_verl.sh.
        *assignments, shell, script = shlex.split(job["spec"]["entrypoint"])
        assert shell == "bash" and script == "/opt/verlctl/start_verl.sh"
        entry_env = dict(a.split("=", 1) for a in assignments)
        rec = run_start_script(scripts, tmp_path / "record", ["HCCL_CONNECT_TIMEOUT"], {
            **entry_env, "VERLCTL_TEST_RAY_LOG": str(ray_log), "VERLCTL_TEST_RAY_DEVICES": str(joined)})
    finally:
        gcs.close()
    assert not ray_log.exists(), ray_log.read_text()  # no `ray start` of its own
    if joined == 16:
        assert rec.proc.returncode == 0, rec.proc.stdout + rec.proc.stderr
        assert "all 16 NPU devices joined Ray" in rec.proc.stdout
        assert "trainer.nnodes=2" in rec.argv and rec.env == {"HCCL_CONNECT_TIMEOUT": "3600"}
    else:
        assert rec.proc.returncode == 1
        assert "only 8 of 16 NPU devices joined Ray within 4s" in rec.proc.stderr
        assert rec.argv == []  # training never started


def test_swanlab_key_is_a_secret_reference_never_its_value(tmp_path: Path, rayjob_schema: Any) -> None:
    key = "sk-rayjob-7d1f0c9e2b"
    env = clean_env(SWANLAB_API_KEY=key, SWANLAB_HOST="http://swanlab.internal:8000")
    res, docs = export(tmp_path, "--pvc", "verl-shared", "--set", "kubernetes.swanlab_secret=team-swanlab", env=env)
    validate(docs, rayjob_schema)
    text = (tmp_path / "rayjob.yaml").read_text(encoding="utf-8")
    assert key not in text and key not in res.out + res.err
    for template in [docs[1]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"],
                     worker_group(docs[1])["template"]]:
        env_block = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
        assert env_block["SWANLAB_API_KEY"] == {
            "name": "SWANLAB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "team-swanlab", "key": "api-key"}}}
        assert env_block["SWANLAB_HOST"]["value"] == "http://swanlab.internal:8000"
        assert env_block["HCCL_CONNECT_TIMEOUT"]["value"] == "3600"
        # Which devices a pod sees is the device plugin's decision, not the bare host's ids.
        assert "ASCEND_RT_VISIBLE_DEVICES" not in env_block
    assert "kubectl create secret generic team-swanlab --from-file=api-key=/dev/stdin" in res.out


def test_hostile_values_round_trip_literally(tmp_path: Path, rayjob_schema: Any) -> None:
    hostile = "a'b\"c $(touch pwned) `x` ; \\ {NPU}: #"
    ckpt = "/data/ck pt/it's $(touch pwned2)"
    _, docs = export(tmp_path, "--pvc", "verl-shared", "--set", f"env.HOSTILE={hostile}",
                     "--set", f"paths.checkpoints={ckpt}", "--set", "logging.experiment=9_DAPO.Qwen3-8B")
    validate(docs, rayjob_schema)
    container = worker_group(docs[1])["template"]["spec"]["containers"][0]
    env_block = {e["name"]: e.get("value") for e in container["env"]}
    assert env_block["HOSTILE"] == hostile
    assert {"name": "checkpoints", "mountPath": ckpt} in container["volumeMounts"]
    assert docs[1]["metadata"]["name"] == "verl-9-dapo-qwen3-8b"
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_dry_run_prints_the_kubectl_apply_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "sub dir" / "job.yaml"
    out.parent.mkdir()
    res = run_cli("export", "rayjob", "-c", str(spec_file(tmp_path)), "--pvc", "verl-shared", "-o", str(out),
                  "--dry-run")
    assert res.code == 0, res.out + res.err
    assert f"would run: kubectl apply --filename='{out}'" in res.out
    assert f"would write {out}" in res.out
    assert list(out.parent.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------
# The validation can fail


def _mutations() -> list[tuple[str, Any]]:
    def rename(d: dict[str, Any], old: str, new: str) -> None:
        d[new] = d.pop(old)

    def head_container(job: dict[str, Any]) -> dict[str, Any]:
        return job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]

    return [
        ("misspelt top-level field", lambda job: rename(job["spec"], "shutdownAfterJobFinishes",
                                                        "shutdownAfterJobFinish")),
        ("replicas as text", lambda job: worker_group(job).__setitem__("replicas", "two")),
        ("no groupName", lambda job: worker_group(job).pop("groupName")),
        ("rayStartParams value not a string", lambda job: worker_group(job)["rayStartParams"].__setitem__(
            "num-gpus", 4)),
        ("misspelt container field", lambda job: rename(head_container(job), "volumeMounts", "volumeMount")),
        ("container without a name", lambda job: head_container(job).pop("name")),
        ("bad device quantity", lambda job: worker_group(job)["template"]["spec"]["containers"][0]["resources"]
         ["limits"].__setitem__("nvidia.com/gpu", "eight")),
        ("mount of no volume", lambda job: head_container(job)["volumeMounts"].append(
            {"name": "nowhere", "mountPath": "/x"})),
        ("name too long for KubeRay", lambda job: job["metadata"].__setitem__("name", "v" * 48)),
    ]


@pytest.mark.parametrize("what,mutate", _mutations(), ids=[m[0] for m in _mutations()])
def test_a_broken_manifest_fails_validation(tmp_path: Path, rayjob_schema: Any, what: str, mutate: Any) -> None:
    _, docs = export(tmp_path, "--device", "gpu", "--strategy", "fsdp", "--nodes", "2", "--pvc", "verl-shared")
    validate(docs, rayjob_schema)
    broken = copy.deepcopy(docs)
    mutate(broken[1])
    with pytest.raises((AssertionError, ValueError, TypeError)):
        validate(broken, rayjob_schema)


# ---------------------------------------------------------------------------------------------------------
# Bad input: one line naming the field and the fix, a non-zero exit, nothing written


BAD = [
    (["--nodes", "0"], "--nodes: must be 1 to 4096 worker pods; got 0: give --nodes 1 or more"),
    (["--nodes", "-3"], "--nodes: must be 1 to 4096 worker pods; got -3"),
    (["--device-resource", "Ascend910"], "kubernetes.device_resource: 'Ascend910' is not a Kubernetes extended "
     "resource name: give the device plugin's domain/name, e.g. huawei.com/Ascend910"),
    (["--device-resource", "huawei.com/Ascend 910"], "kubernetes.device_resource: 'huawei.com/Ascend 910' is not"),
    (["--device-resource", "kubernetes.io/npu"], "kubernetes.device_resource: 'kubernetes.io/npu' is not"),
    (["--device-resource", "nvidia.com/gpu"], "kubernetes.device_resource: nvidia.com/gpu ends in 'gpu', which "
     "KubeRay hands to Ray as GPUs, but device is npu"),
    (["--device", "gpu", "--strategy", "fsdp", "--device-resource", "huawei.com/Ascend910"],
     "kubernetes.device_resource: huawei.com/Ascend910 is an Ascend NPU resource, but device is gpu"),
    (["--pvc", "Verl_Shared"], "kubernetes.pvc: 'Verl_Shared' is not a PVC name: lower-case letters, digits and "
     "inner '-', at most 63 characters"),
    (["--pvc", "a" * 64], "kubernetes.pvc: '" + "a" * 64 + "' is not a PVC name"),
    (["--pvc", "-x"], "kubernetes.pvc: '-x' is not a PVC name"),
    (["--set", "kubernetes.retries=2", "--set", "train.save_freq=-1"], "kubernetes.retries: 2 retries would each "
     "start over from step 0: no checkpoint is saved (train.save_freq=-1); set train.save_freq > 0"),
    (["--set", "cluster.ray_start_args=[--num-cpus=$(reboot)]"], "cluster.ray_start_args: '--num-cpus=$(reboot)' "
     "cannot be a KubeRay rayStartParams entry"),
    (["--set", "container.shm_size=0g"], "container.shm_size: '0g' is not a size: give a number with b, k, m or g "
     "(e.g. 64g) for the /dev/shm emptyDir"),
]


@pytest.mark.parametrize("args,expected", BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], expected: str) -> None:
    spec = spec_file(tmp_path)
    out = tmp_path / "out" / "rayjob.yaml"
    out.parent.mkdir()
    full = ["--pvc", "verl-shared", *args] if "--pvc" not in args else args
    res = run_cli("export", "rayjob", "-c", str(spec), "-o", str(out), *full)
    line = one_line_error(res)
    assert line.startswith(f"error: {expected}"), line
    assert list(out.parent.iterdir()) == []


def test_missing_pvc_is_one_line(tmp_path: Path) -> None:
    res = run_cli("export", "rayjob", "-c", str(spec_file(tmp_path)), "-o", str(tmp_path / "j.yaml"))
    assert one_line_error(res) == (
        "error: kubernetes.pvc: a PersistentVolumeClaim for the checkpoints is needed (the pods' own disks go "
        "with them): give --pvc NAME or set kubernetes.pvc")
    assert not (tmp_path / "j.yaml").exists()


def test_out_onto_a_directory_or_a_symlink_is_refused(tmp_path: Path) -> None:
    spec = spec_file(tmp_path)
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    dangling = tmp_path / "dangling.yaml"
    dangling.symlink_to(tmp_path / "nowhere.yaml")
    directory = tmp_path / "dir"
    directory.mkdir()
    before = sorted(os.listdir(tmp_path))
    cases = [
        (directory, f"error: -o {directory}: is a directory; give a file name, e.g. -o {directory / 'rayjob.yaml'}"),
        (link, f"error: -o {link}: is a symbolic link: nothing was written; pass --force to replace the link itself"),
        (dangling, f"error: -o {dangling}: is a symbolic link"),
        (tmp_path / "no" / "such" / "job.yaml", f"error: -o {tmp_path / 'no' / 'such' / 'job.yaml'}: the directory "
         f"{tmp_path / 'no' / 'such'} does not exist; create it or give another path"),
    ]
    for out, expected in cases:
        for extra in ([], ["--dry-run"]):
            res = run_cli("export", "rayjob", "-c", str(spec), "--pvc", "verl-shared", "-o", str(out), *extra)
            assert one_line_error(res).startswith(expected), (out, res.err)
    assert sorted(os.listdir(tmp_path)) == before and os.listdir(directory) == []
    assert target.read_text() == "keep me\n" and os.readlink(link) == str(target)
    assert not (tmp_path / "nowhere.yaml").exists()


def test_export_help_lists_rayjob() -> None:
    res = run_cli("export", "--help")
    assert res.code == 0 and "rayjob" in res.out


def test_operations_guide_documents_export_rayjob_and_its_options() -> None:
    from verlctl import guides

    text = guides.operations_md()
    assert "| [`verlctl export rayjob`](#verlctl-export-rayjob) |" in text
    section = text.split("\n## verlctl export rayjob\n", 1)[1].split("\n## ", 1)[0]
    for option in ("--out, -o", "--nodes", "--device-resource", "--pvc", "--dry-run", "--set", "--device"):
        assert f"| `{option}` |" in section, option


# ---------------------------------------------------------------------------------------------------------
# What the backend refuses, defaults and writes


@pytest.mark.parametrize("command", [["export", "rayjob"], ["launch", "--backend", "kuberay"]],
                         ids=["export", "launch"])
def test_a_spec_with_errors_lists_them_exits_2_and_writes_no_manifest(tmp_path: Path, command: list[str]) -> None:
    out = tmp_path / "out" / "rayjob.yaml"
    out.parent.mkdir()
    res = run_cli(*command, "-c", str(spec_file(tmp_path)), "-o", str(out), "--set", "kubernetes.pvc=verl-shared",
                  "--set", "train.tensor_parallel=3")
    assert res.code == 2, (res.out, res.err)
    assert "Traceback" not in res.out + res.err
    assert "parallel_divisibility" in res.out + res.err
    assert "nothing was written" in res.err
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("listed,pods", [([], 1), (["10.0.0.1", "10.0.0.2"], 2)], ids=["no-nodes", "two-nodes"])
def test_without_nodes_the_pod_count_is_the_specs_node_count_else_one(
        tmp_path: Path, rayjob_schema: Any, listed: list[str], pods: int) -> None:
    extra = ["--set", f"cluster.nodes=[{','.join(listed)}]"] if listed else []
    res, docs = export(tmp_path, "--pvc", "verl-shared", *extra)
    validate(docs, rayjob_schema)
    group = worker_group(docs[1])
    assert group["replicas"] == pods
    assert f"{pods} worker pod(s) x 8 huawei.com/Ascend910 = {pods * 8} devices" in res.out


def test_an_out_of_range_node_count_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    """50 million pods would be 50 million names before a later check: refused first, in bounded memory (the
    interpreter runs under a 1.5 GiB address-space limit; building the names would need several GiB)."""
    import sys

    spec = spec_file(tmp_path)
    out = tmp_path / "rayjob.yaml"
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20)); "
            "from verlctl.cli import main; sys.argv = ['verlctl'] + sys.argv[1:]; main()")
    proc = subprocess.run([sys.executable, "-c", code, "export", "rayjob", "-c", str(spec), "-o", str(out),
                           "--pvc", "verl-shared", "--nodes", "50000000"],
                          capture_output=True, text=True, env=clean_env(), timeout=120, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "--nodes: must be 1 to 4096 worker pods; got 50000000" in proc.stderr
    assert not out.exists()


def test_the_manifest_is_readable_by_all_and_writable_by_its_owner_only(tmp_path: Path) -> None:
    export(tmp_path, "--pvc", "verl-shared")
    assert (tmp_path / "rayjob.yaml").stat().st_mode & 0o777 == 0o644


def test_an_unwritable_target_names_the_reason_not_a_temporary_file(tmp_path: Path) -> None:
    """The write fails after the checks of -o (its directory vanishes under it: a file where the directory was)."""
    from verlctl.backends.kuberay import KubeRayExport, resolve
    from verlctl.errors import VerlctlError
    from verlctl.orchestrator.runs import ManifestRun

    target = tmp_path / "gone" / "rayjob.yaml"
    target.parent.mkdir()
    resolved, nodes = resolve(spec_file(tmp_path), {"kubernetes.pvc": "verl-shared"}, {}, None)
    run = ManifestRun("kuberay")
    request = run.prepare(resolved, KubeRayExport(target, nodes, dry_run=False))
    target.parent.rmdir()
    target.parent.write_text("a file now\n")
    with pytest.raises(VerlctlError) as err:
        run.submit(request)
    assert str(err.value) == f"-o {target}: cannot write it: Not a directory"


def test_launch_json_names_the_manifest_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "rayjob.yaml"
    res = run_cli("launch", "--backend", "kuberay", "-c", str(spec_file(tmp_path)), "-o", str(out),
                  "--set", "kubernetes.pvc=verl-shared", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["outcome"] == "written" and doc["manifest"] == str(out.absolute())
    job = next(d for d in yaml.safe_load_all(out.read_text(encoding="utf-8")) if d["kind"] == "RayJob")
    assert doc["request"]["run_id"] == job["metadata"]["name"], doc["request"]  # the name kubectl takes


def test_launch_json_names_the_job_as_the_cluster_does_also_for_a_spec_with_errors(tmp_path: Path) -> None:
    """``request.run_id`` is the job's name in the cluster (a DNS label made from the experiment), whether the
    manifest was written or the spec's errors held it back."""
    out = tmp_path / "job.yaml"
    spec = spec_file(tmp_path, logging={"experiment": "My_Exp.1"})
    for extra, code in (((), 0), (("--set", "train.tensor_parallel=3"), 2)):
        res = run_cli("launch", "--backend", "volcano", "-c", str(spec), "-o", str(out), "--set",
                      "kubernetes.pvc=verl-shared", *extra, "--dry-run", "--json")
        assert res.code == code, res.out + res.err
        doc = json.loads(res.out)
        assert doc.get("error", {}).get("details", doc)["request"]["run_id"] == "my-exp-1", doc
