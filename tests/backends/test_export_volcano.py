"""`verlctl export volcano` and `launch --backend volcano`: a Volcano Job that validates against Volcano's own Job
CRD, the Kubernetes client's models and the checks of Volcano's job admission on the fields it uses; gang
scheduling, devices, the labels and rank annotations MindCluster reads on NPU, restarts that resume; the pods'
commands run start_verl.sh as every other backend does.

No cluster exists here (no kubectl, no API server): what can be checked is checked with the real artefacts. The CRD
is volcano-sh/volcano's at ed72c7c (tests/fixtures/volcano/batch.volcano.sh_jobs.yaml); the admission checks are
those of pkg/webhooks/admission/jobs/validate (admit_job.go, util.go) at that commit, restated below.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_support import crd_validator, round_trip, schema_errors

from conftest import FIXTURES, clean_env, run_cli
from scripts_harness import DOUBLES

CRD = FIXTURES / "volcano" / "batch.volcano.sh_jobs.yaml"
BASE = {"paths": {"model": "/data/models/Qwen3-8B", "train_files": "/data/train.parquet",
                  "val_files": "/data/val.parquet", "checkpoints": "/data/ckpt/run1"},
        "logging": {"experiment": "dapo_Qwen3-8B"}}
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: pkg/webhooks/admission/jobs/validate/util.go: policyEventMap / policyActionMap (the ones users may set).
EVENTS = {"*", "PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted", "TaskFailed", "JobUpdated"}
ACTIONS = {"AbortJob", "RestartJob", "RestartTask", "RestartPod", "RestartPartition", "TerminateJob", "CompleteJob",
           "ResumeJob"}
#: pkg/controllers/job/plugins/factory.go: the plugins Volcano's controller knows.
PLUGINS = {"ssh", "env", "svc", "tensorflow", "mpi", "pytorch", "hcclrank", "ray"}


@pytest.fixture(scope="module")
def job_schema() -> Any:
    return crd_validator(CRD, "https://github.com/volcano-sh/volcano commit ed72c7c", "Job", "v1alpha1")


def admission_errors(job: dict[str, Any]) -> list[str]:
    """Volcano's job admission (validateJobCreate, validatePolicies) on the fields this manifest uses."""
    errors: list[str] = []
    spec = job["spec"]
    tasks = spec.get("tasks") or []
    if not tasks:
        errors.append("No task specified in job spec")
    names = [t["name"] for t in tasks]
    if len(set(names)) != len(names):
        errors.append(f"duplicated task name {names}")
    total = 0
    for t in tasks:
        if not DNS1123_LABEL.fullmatch(t["name"]):
            errors.append(f"task name {t['name']!r} is not a DNS-1123 label")
        if t["replicas"] < 0:
            errors.append(f"'replicas' < 0 in task: {t['name']}")
        total += t["replicas"]
        errors += policy_errors(t.get("policies", []))
        # the pod's hostname is its name, <job>-<task>-<index> (helpers.MakePodName): a DNS-1123 label
        longest = f"{job['metadata']['name']}-{t['name']}-{max(t['replicas'] - 1, 0)}"
        if not DNS1123_LABEL.fullmatch(longest):
            errors.append(f"pod name {longest!r} is not a DNS-1123 label")
    if spec.get("minAvailable", 0) < 0 or spec.get("minAvailable", 0) > total:
        errors.append("job 'minAvailable' should not be greater than total replicas in tasks")
    if spec.get("maxRetry", 0) < 0:
        errors.append("'maxRetry' cannot be less than zero.")
    errors += policy_errors(spec.get("policies", []))
    errors += [f"unable to find job plugin: {p}" for p in spec.get("plugins", {}) if p not in PLUGINS]
    return errors


def policy_errors(policies: list[dict[str, Any]]) -> list[str]:
    errors, seen = [], set()
    for p in policies:
        event, action = p.get("event"), p.get("action")
        if event not in EVENTS:
            errors.append(f"invalid policy event {event}")
        if action not in ACTIONS:
            errors.append(f"invalid policy action {action}")
        if event in seen:
            errors.append(f"duplicate event {event} across different policy")
        seen.add(event)
    return errors


def validate(docs: list[dict[str, Any]], schema: Any, device: str = "npu") -> dict[str, Any]:
    """Every check this machine can make of the manifest; the Job."""
    kinds = [(d["apiVersion"], d["kind"]) for d in docs]
    expected = [("v1", "ConfigMap")] * (2 if device == "npu" else 1) + [("batch.volcano.sh/v1alpha1", "Job")]
    assert kinds == expected, kinds
    for config_map in docs[:-1]:
        assert round_trip(config_map, "V1ConfigMap") == config_map
    job = docs[-1]
    errors = schema_errors(schema, job)
    assert not errors, errors
    assert not admission_errors(job), admission_errors(job)
    assert round_trip(job["metadata"], "V1ObjectMeta") == job["metadata"]
    for task in job["spec"]["tasks"]:
        template = task["template"]
        assert round_trip(template, "V1PodTemplateSpec") == template
        volumes = {v["name"] for v in template["spec"]["volumes"]}
        for c in template["spec"]["containers"]:
            assert {m["name"] for m in c["volumeMounts"]} <= volumes, c["name"]
    return job


def spec_file(tmp_path: Path) -> Path:
    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump(copy.deepcopy(BASE)), encoding="utf-8")
    return p


def export(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[Any, list[dict[str, Any]]]:
    out = tmp_path / "volcano-job.yaml"
    res = run_cli("export", "volcano", "-c", str(spec_file(tmp_path)), "-o", str(out), *args, env=env)
    assert res.code == 0, res.out + res.err
    return res, list(yaml.safe_load_all(out.read_text(encoding="utf-8")))


def env_of(task: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in task["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("retries", [0, 3], ids=["no-retries", "retries"])
@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("device", ["npu", "gpu"])
def test_the_job_validates_and_gang_schedules_nodes_times_devices(
        tmp_path: Path, job_schema: Any, device: str, nodes: int, retries: int) -> None:
    args = ["--device", device, "--nodes", str(nodes), "--pvc", "verl-shared"]
    if device == "gpu":
        args += ["--strategy", "fsdp", "--set", "cluster.devices=0,1,2,3"]
    if retries:
        args += ["--set", "train.save_freq=2", "--set", f"kubernetes.retries={retries}"]
    res, docs = export(tmp_path, *args)
    job = validate(docs, job_schema, device)
    per_node = 8 if device == "npu" else 4
    resource = "huawei.com/Ascend910" if device == "npu" else "nvidia.com/gpu"
    spec = job["spec"]
    tasks = {t["name"]: t for t in spec["tasks"]}
    assert list(tasks) == (["head", "worker"] if nodes > 1 else ["head"])
    assert tasks["head"]["replicas"] == 1 and sum(t["replicas"] for t in tasks.values()) == nodes
    assert spec["minAvailable"] == nodes and spec["schedulerName"] == "volcano" and spec["queue"] == "default"
    for task in tasks.values():
        pod = task["template"]["spec"]
        (container,) = pod["containers"]
        assert container["resources"] == {"limits": {resource: str(per_node)}, "requests": {resource: str(per_node)}}
        assert pod["restartPolicy"] == "Never"
        (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term == {"labelSelector": {"matchLabels": {"volcano.sh/job-name": job["metadata"]["name"]}},
                        "topologyKey": "kubernetes.io/hostname"}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
        assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "verl-shared"}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/dev/shm"] == "dshm" and mounts["/data/ckpt/run1"] == "checkpoints"
        assert mounts["/opt/verlctl"] == "scripts"
        # the head starts Ray on the address Kubernetes gives the pod (the downward API)
        assert env_of(task)["VERLCTL_POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    # the head completes the job; a failed or evicted pod restarts it (resuming) or ends it
    assert tasks["head"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    action = "RestartJob" if retries else "TerminateJob"
    assert spec["policies"] == [{"event": "PodFailed", "action": action}, {"event": "PodEvicted", "action": action}]
    assert spec.get("maxRetry") == (retries or None)
    # verl is told exactly what the pods hold
    train = docs[0]["data"]["run_training.sh"]
    assert f"trainer.nnodes={nodes}" in train and f"trainer.n_gpus_per_node={per_node}" in train
    assert "trainer.resume_mode=auto" in train
    assert f"{nodes} pod(s) x {per_node} {resource} = {nodes * per_node} devices" in res.out


def test_npu_jobs_carry_what_mindcluster_and_the_device_plugin_read(tmp_path: Path, job_schema: Any) -> None:
    _, docs = export(tmp_path, "--nodes", "2", "--pvc", "verl-shared", "--set", "kubernetes.ring_controller=ascend-910")
    job = validate(docs, job_schema)
    name = job["metadata"]["name"]
    labels = job["metadata"]["labels"]
    assert labels["ring-controller.atlas"] == "ascend-910" and labels["fault-scheduling"] == "force"
    rank_table = docs[1]
    assert rank_table["metadata"]["name"] == f"rings-config-{name}"
    assert rank_table["metadata"]["labels"]["ring-controller.atlas"] == "ascend-910"
    assert rank_table["data"] == {"hccl.json": '{"status":"initializing"}'}
    assert job["spec"]["plugins"] == {"svc": [], "env": [], "hcclrank": ["--master=head", "--worker=worker"]}
    for task in job["spec"]["tasks"]:
        template = task["template"]
        assert template["metadata"]["labels"]["ring-controller.atlas"] == "ascend-910"
        assert env_of(task)["ASCEND_VISIBLE_DEVICES"]["valueFrom"] == {
            "fieldRef": {"fieldPath": "metadata.annotations['huawei.com/Ascend910']"}}
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["ascend-rank-table"]["configMap"] == {"name": f"rings-config-{name}"}
        mounts = {m["mountPath"]: m["name"] for m in template["spec"]["containers"][0]["volumeMounts"]}
        assert mounts["/user/serverid/devindex/config"] == "ascend-rank-table"
        # which devices a pod sees is the device plugin's decision
        assert "ASCEND_RT_VISIBLE_DEVICES" not in env_of(task)


def test_gpu_jobs_carry_no_ascend_labels(tmp_path: Path, job_schema: Any) -> None:
    _, docs = export(tmp_path, "--device", "gpu", "--strategy", "fsdp", "--nodes", "2", "--pvc", "verl-shared")
    job = validate(docs, job_schema, "gpu")
    assert "ring-controller.atlas" not in job["metadata"]["labels"] and "fault-scheduling" not in job["metadata"]["labels"]
    assert job["spec"]["plugins"] == {"svc": [], "env": []}
    for task in job["spec"]["tasks"]:
        assert "ASCEND_VISIBLE_DEVICES" not in env_of(task) and "CUDA_VISIBLE_DEVICES" not in env_of(task)


def test_a_long_experiment_name_still_gives_pod_names_that_are_hostnames(tmp_path: Path, job_schema: Any) -> None:
    _, docs = export(tmp_path, "--nodes", "2", "--pvc", "verl-shared", "--set", "logging.experiment=" + "Q" * 90)
    job = validate(docs, job_schema)
    # the most pods an export takes is 4096: the last worker is <job>-worker-4094
    assert DNS1123_LABEL.fullmatch(f"{job['metadata']['name']}-worker-4094")
    assert job["metadata"]["name"] == "q" * 47


def test_swanlab_key_is_a_secret_reference_never_its_value(tmp_path: Path, job_schema: Any) -> None:
    key = "sk-volcano-7d1f0c9e2b"
    env = clean_env(SWANLAB_API_KEY=key, SWANLAB_HOST="http://swanlab.internal:8000")
    res, docs = export(tmp_path, "--nodes", "2", "--pvc", "verl-shared",
                       "--set", "kubernetes.swanlab_secret=team-swanlab", env=env)
    validate(docs, job_schema)
    assert key not in (tmp_path / "volcano-job.yaml").read_text(encoding="utf-8") and key not in res.out + res.err
    for task in docs[-1]["spec"]["tasks"]:
        assert env_of(task)["SWANLAB_API_KEY"] == {
            "name": "SWANLAB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "team-swanlab", "key": "api-key"}}}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pod_command(task: dict[str, Any], scripts: Path) -> str:
    """The container's command as written; only the ConfigMap's mount point is this test's directory."""
    argv = task["template"]["spec"]["containers"][0]["command"]
    assert argv[:2] == ["bash", "-c"]
    assert "/opt/verlctl/start_verl.sh" in argv[2]
    return argv[2].replace(shlex.quote("/opt/verlctl"), shlex.quote(str(scripts)))


def _run(command: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": f"{DOUBLES}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": os.environ.get("HOME", "/root"),
            "VERLCTL_TEST_RECORD": str(tmp_path / "record"), "VERLCTL_TEST_ENV_NAMES": "",
            "VERLCTL_RAY_TMP": str(tmp_path / "raytmp"), "VERLCTL_TEST_PYTHON": sys.executable, **env}
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=full, timeout=120)


@pytest.mark.parametrize("joined", [16, 8], ids=["all-joined", "half-joined"])
def test_the_head_pod_starts_ray_on_its_own_address_waits_for_every_pod_then_trains(
        tmp_path: Path, joined: int) -> None:
    """The head task's command with the pod IP Kubernetes gives it (here 127.0.0.1): start_verl.sh runs the Ray
    head on that address (the `ray` double), waits for 2 x 8 NPUs, then trains; with half of them it stops."""
    workdir = tmp_path / "verl"
    (workdir / "recipe" / "dapo").mkdir(parents=True)
    (workdir / "recipe" / "dapo" / "main_dapo.py").write_text("# recipe entry\n")
    _, docs = export(tmp_path, "--nodes", "2", "--pvc", "verl-shared", "--set", f"paths.logs={tmp_path / 'logs'}",
                     "--set", f"container.workdir={workdir}", "--set", f"cluster.ray_port={_free_port()}",
                     "--set", "cluster.join_timeout_s=4", "--set", f"paths.checkpoints={tmp_path / 'ckpt'}")
    scripts = tmp_path / "opt-verlctl"
    scripts.mkdir()
    for name, text in docs[0]["data"].items():
        (scripts / name).write_text(text, encoding="utf-8")
    ray_log = tmp_path / "ray.log"
    head = {t["name"]: t for t in docs[-1]["spec"]["tasks"]}["head"]
    proc = _run(_pod_command(head, scripts), tmp_path, VERLCTL_POD_IP="127.0.0.1",
                VERLCTL_TEST_RAY_LOG=str(ray_log), VERLCTL_TEST_RAY_DEVICES=str(joined))
    started = ray_log.read_text(encoding="utf-8")
    assert "start --head" in started and "--node-ip-address=127.0.0.1" in started, started
    if joined == 16:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "all 16 NPU devices joined Ray" in proc.stdout
        argv = (tmp_path / "record").read_bytes().decode().split("\0")
        assert "trainer.nnodes=2" in argv
    else:
        assert proc.returncode == 1
        assert "only 8 of 16 NPU devices joined Ray within 4s" in proc.stderr
        assert not (tmp_path / "record").exists()  # training never started


def test_a_worker_pod_whose_head_never_resolves_stops_with_one_line(tmp_path: Path) -> None:
    """The worker's look-up of the head (the svc plugin's name) is bounded: it gives up with the name it waited
    for. (Shown with the bound lowered to 3 s in the command text; the name does not resolve here.)"""
    _, docs = export(tmp_path, "--nodes", "2", "--pvc", "verl-shared")
    worker = {t["name"]: t for t in docs[-1]["spec"]["tasks"]}["worker"]
    name = docs[-1]["metadata"]["name"]
    command = _pod_command(worker, tmp_path).replace("SECONDS + 600", "SECONDS + 3")
    proc = _run(command, tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"[verlctl] the head {name}-head-0.{name} did not resolve within 600s"
    assert not (tmp_path / "record").exists()


@pytest.mark.parametrize("command", [["export", "volcano"], ["launch", "--backend", "volcano"]],
                         ids=["export", "launch"])
def test_a_spec_with_errors_lists_them_exits_2_and_writes_nothing(tmp_path: Path, command: list[str]) -> None:
    out = tmp_path / "out" / "volcano-job.yaml"
    out.parent.mkdir()
    res = run_cli(*command, "-c", str(spec_file(tmp_path)), "-o", str(out), "--set", "kubernetes.pvc=verl-shared",
                  "--set", "train.tensor_parallel=3")
    assert res.code == 2 and "Traceback" not in res.out + res.err, res.err
    assert "parallel_divisibility" in res.out + res.err and "nothing was written" in res.err
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize(("args", "expected"), [
    (["--queue", "Team A"], "error: kubernetes.queue: 'Team A' is not a Kubernetes name"),
    (["--nodes", "0"], "error: --nodes: must be 1 to 4096 worker pods; got 0"),
    (["--set", "kubernetes.ring_controller=ascend 910b"], "error: kubernetes.ring_controller: 'ascend 910b' is not"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], expected: str) -> None:
    out = tmp_path / "out" / "volcano-job.yaml"
    out.parent.mkdir()
    res = run_cli("export", "volcano", "-c", str(spec_file(tmp_path)), "-o", str(out), "--pvc", "verl-shared", *args)
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert res.code != 0 and len(lines) == 1 and lines[0].startswith(expected), res.err
    assert list(out.parent.iterdir()) == []


def test_launch_writes_the_manifest_export_writes_and_status_is_kubectls(tmp_path: Path) -> None:
    from verlctl.backends.base import NotOnBackend
    from verlctl.orchestrator.runs import run_named

    spec = spec_file(tmp_path)
    exported, launched = tmp_path / "exported.yaml", tmp_path / "launched.yaml"
    assert run_cli("export", "volcano", "-c", str(spec), "-o", str(exported), "--pvc", "verl-shared").code == 0
    res = run_cli("launch", "--backend", "volcano", "-c", str(spec), "-o", str(launched),
                  "--set", "kubernetes.pvc=verl-shared")
    assert res.code == 0, res.err
    assert launched.read_text(encoding="utf-8") == exported.read_text(encoding="utf-8")
    assert f"kubectl apply --filename={launched}" in res.out
    with pytest.raises(NotOnBackend, match="kubectl's") as err:
        run_named("volcano").status("dapo-qwen3-8b")
    assert "kubectl get vcjob dapo-qwen3-8b" in str(err.value.hint)
