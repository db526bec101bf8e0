"""render/rayjob.py in process: what a mutation sample showed unguarded (docs/development/mutation.md). The CLI
path, the CRD schema and the Kubernetes client's models are in tests/backends/test_export_rayjob.py; these build the
manifests the way `export rayjob` does (plan, render, manifests) and look at the values."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from verlctl.errors import SpecError
from verlctl.plan import make_plan
from verlctl.render import rayjob
from verlctl.render.render import render
from verlctl.spec.resolve import load_spec
from verlctl.verl.environment import CANN_ENV_SCRIPTS

PATHS = {"paths.model": "/data/models/Qwen3-8B", "paths.train_files": "/data/train.parquet",
         "paths.val_files": "/data/val.parquet", "paths.checkpoints": "/data/ckpt/run1",
         "kubernetes.pvc": "verl-shared"}
GPU = {"device": "gpu", "strategy": "fsdp", "cluster.devices": [0, 1, 2, 3]}


def export(nodes: int = 2, environ: dict[str, str] | None = None, **flags: Any) -> list[dict[str, Any]]:
    """The ConfigMap and the RayJob as `verlctl export rayjob` makes them (commands/export_rayjob.py)."""
    resolved = load_spec(None, flags={**PATHS, **flags, "cluster.nodes": rayjob.worker_names(nodes)},
                         environ=environ or {})
    spec = resolved.spec
    opts = rayjob.options_for(spec, nodes)
    pod = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"master_addr": None})})
    rendered = render(dataclasses.replace(resolved, spec=pod), make_plan(resolved).command)
    return rayjob.manifests(spec, rendered, opts)


def pods(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = job["spec"]["rayClusterSpec"]
    (worker,) = cluster["workerGroupSpecs"]
    return {"head": cluster["headGroupSpec"], "worker": worker}


def container(group: dict[str, Any]) -> dict[str, Any]:
    (c,) = group["template"]["spec"]["containers"]
    return c


def spec_error(nodes: int = 2, **flags: Any) -> SpecError:
    with pytest.raises(SpecError) as exc:
        export(nodes, **flags)
    return exc.value


@pytest.mark.parametrize("size,quantity", [("64g", "64Gi"), ("512m", "512Mi"), ("1024k", "1024Ki"),
                                           ("4096b", "4096"), ("100", "100"), (" 8G ", "8Gi"), ("2gb", "2Gi")])
def test_docker_shm_sizes_become_kubernetes_quantities(size: str, quantity: str) -> None:
    assert rayjob.shm_quantity(size) == quantity


@pytest.mark.parametrize("size", ["0g", "0", "g", "64t", "-1g", "1.5g", ""])
def test_what_is_not_a_size_is_refused_naming_the_field(size: str) -> None:
    with pytest.raises(SpecError) as exc:
        rayjob.shm_quantity(size)
    assert exc.value.field == "container.shm_size" and repr(size) in str(exc.value)


def test_the_shm_volume_has_the_specs_size_in_every_pod() -> None:
    _, job = export(**{"container.shm_size": "512m"})
    for group in pods(job).values():
        (dshm,) = [v for v in group["template"]["spec"]["volumes"] if v["name"] == "dshm"]
        assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": "512Mi"}


@pytest.mark.parametrize("experiment,name", [
    ("dapo_Qwen3-8B", "dapo-qwen3-8b"), ("9_DAPO.Qwen3-8B", "verl-9-dapo-qwen3-8b"), ("", "verl"), (None, "verl"),
    ("--x--", "x"), ("___", "verl"), ("a" * 60, "a" * 47), ("a" * 46 + "-b", "a" * 46),
])
def test_the_job_name_is_a_dns_1035_label_of_at_most_47_characters(experiment: str | None, name: str) -> None:
    assert rayjob.job_name(experiment) == name


def test_node_counts_outside_1_to_4096_are_refused() -> None:
    rayjob.check_nodes(1)
    rayjob.check_nodes(4096)
    for bad in (0, 4097):
        with pytest.raises(SpecError) as exc:
            rayjob.check_nodes(bad)
        assert exc.value.field == "--nodes" and f"got {bad}" in str(exc.value)
    assert rayjob.worker_names(3) == ["rayjob-worker-1", "rayjob-worker-2", "rayjob-worker-3"]


def test_npu_pods_source_the_cann_environment_before_ray_and_gpu_pods_do_not() -> None:
    _, job = export()
    for group in pods(job).values():
        (prelude,) = container(group)["args"]
        assert prelude.startswith("for f in " + " ".join(CANN_ENV_SCRIPTS) + "; do")
        assert prelude.endswith("; true")
    _, gpu_job = export(**GPU)
    for group in pods(gpu_job).values():
        assert "args" not in container(group)


def test_the_resource_names_the_device_kind_it_belongs_to() -> None:
    assert spec_error(**{"kubernetes.device_resource": "example.com/fastgpu"}).field == "kubernetes.device_resource"
    assert spec_error(**GPU, **{"kubernetes.device_resource": "example.com/ASCEND-310"}).field == \
        "kubernetes.device_resource"
    # a GPU resource of another name is fine on GPU, an Ascend one on NPU
    assert container(pods(export(**GPU, **{"kubernetes.device_resource": "amd.com/gpu"})[1])["worker"])[
        "resources"]["limits"] == {"amd.com/gpu": "4"}
    assert container(pods(export(**{"kubernetes.device_resource": "huawei.com/Ascend310P"})[1])["worker"])[
        "resources"]["requests"] == {"huawei.com/Ascend310P": "8"}


def test_retries_need_checkpoints_and_are_the_backoff_limit() -> None:
    err = spec_error(**{"kubernetes.retries": 1, "train.save_freq": 0})
    assert err.field == "kubernetes.retries" and "train.save_freq=0" in str(err)
    _, job = export(**{"kubernetes.retries": 1, "train.save_freq": 5, "kubernetes.ttl_s": 0})
    assert job["spec"]["backoffLimit"] == 1 and job["spec"]["ttlSecondsAfterFinished"] == 0
    _, none = export(**{"kubernetes.retries": 0, "train.save_freq": 0})
    assert "backoffLimit" not in none["spec"]


def test_ray_start_args_become_params_a_bare_flag_true() -> None:
    _, job = export(**GPU, **{"cluster.ray_start_args": ["--num-cpus=32", "--disable-usage-stats"]})
    params = pods(job)["worker"]["rayStartParams"]
    assert params == {"num-cpus": "32", "disable-usage-stats": "true", "num-gpus": "4"}
    for bad in (["--Num-cpus=2"], ["--num-cpus=2 3"], ["--x=a;b"]):
        assert spec_error(**{"cluster.ray_start_args": bad}).field == "cluster.ray_start_args"


def test_the_head_exposes_the_specs_ports_by_kuberays_names() -> None:
    _, job = export(**{"cluster.ray_port": 7000, "cluster.dashboard_port": 9000})
    head = pods(job)["head"]
    assert head["rayStartParams"] == {"num-cpus": "0", "port": "7000", "dashboard-port": "9000",
                                      "dashboard-host": "0.0.0.0"}
    assert container(head)["ports"] == [{"name": "gcs-server", "containerPort": 7000},
                                        {"name": "dashboard", "containerPort": 9000},
                                        {"name": "client", "containerPort": 10001}]
    assert container(head)["name"] == "ray-head" and container(pods(job)["worker"])["name"] == "ray-worker"
    assert "ports" not in container(pods(job)["worker"])


def test_swanlab_key_reference_only_in_cloud_mode() -> None:
    host = {"logging.swanlab.host": "http://swanlab.internal:8000"}
    env = {"SWANLAB_API_KEY": "sk-test-not-a-real-key"}

    def names(**flags: Any) -> set[str]:
        _, job = export(environ=env, **host, **flags)
        return {e["name"] for e in container(pods(job)["worker"])["env"]}

    assert "SWANLAB_API_KEY" in names()
    assert "SWANLAB_API_KEY" not in names(**{"logging.swanlab.mode": "local"})
    assert "SWANLAB_API_KEY" not in names(**{"logging.swanlab.enabled": False})


def test_every_object_is_labelled_and_the_scripts_are_the_two_launch_scripts() -> None:
    config_map, job = export(**{"logging.experiment": "dapo_Qwen3-8B"})
    labels = {"app.kubernetes.io/managed-by": "verlctl"}
    assert config_map["metadata"] == {"name": "dapo-qwen3-8b-scripts", "labels": labels}
    assert job["metadata"] == {"name": "dapo-qwen3-8b", "labels": labels}
    assert sorted(config_map["data"]) == ["run_training.sh", "start_verl.sh"]
    assert job["spec"]["submissionMode"] == "K8sJobMode"


def test_dump_writes_every_object_in_full_and_scripts_as_literal_blocks() -> None:
    import yaml

    docs = export()
    text = rayjob.dump(docs)
    assert "&id" not in text and "*id" not in text  # no YAML anchors/aliases for the shared env and labels
    assert "start_verl.sh: |" in text
    assert list(yaml.safe_load_all(text)) == docs


def test_dump_keeps_non_ascii_text_literal_in_the_script_blocks() -> None:
    import yaml

    docs = [{"data": {"run.sh": "echo 'résumé ✓'\ntrue\n"}}]
    text = rayjob.dump(docs)
    assert "run.sh: |" in text and "echo 'résumé ✓'" in text
    assert list(yaml.safe_load_all(text)) == docs
