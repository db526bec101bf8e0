"""A KubeRay ``ray.io/v1`` RayJob plus a ConfigMap holding the two launch scripts (plain dicts; PyYAML dumps them).

The scripts are the ones :func:`verlctl.render.render.render` writes for ``plan``; the RayJob's entrypoint runs
``start_verl.sh`` on the head pod with ``VERLCTL_RAY_RUNNING=1``: KubeRay has started Ray in every pod, so the
script only waits until every worker's devices have joined, then runs ``run_training.sh``.

What the manifest relies on, in KubeRay (github.com/ray-project/kuberay at feeaf72; the CRD schema is in
``tests/fixtures/kuberay/ray.io_rayjobs.yaml``):

- ``controllers/ray/common/pod.go`` ``addWellKnownAcceleratorResources``: container limits whose name ends in
  ``gpu`` become ``num-gpus``; only ``aws.amazon.com/neuroncore`` and ``google.com/tpu`` become custom Ray
  resources. Ascend is not mapped, so an NPU worker gets ``resources: '{"NPU": n}'`` in ``rayStartParams``
  (the single-quoted JSON form the operator writes itself), and a GPU worker an explicit ``num-gpus``.
- ``pod.go`` ``convertParamMap``: every ``rayStartParams`` value is pasted unquoted into the container's
  ``bash -lc`` command line, so only shell-inert values are accepted here.
- ``pod.go`` ``GetHeadPort`` (workers join ``headGroupSpec.rayStartParams.port``) and ``common/job.go``
  (the submitter reaches the head container's port named ``dashboard``): the spec's Ray and dashboard ports.
- ``pod.go`` ``addEmptyDir``: the operator adds its own ``/dev/shm`` only when nothing is mounted there, so the
  ``dshm`` volume here (sized from ``container.shm_size``) is the one the pods get.
- ``apis/ray/v1/rayjob_types.go``: ``ttlSecondsAfterFinished`` works only with ``shutdownAfterJobFinishes``;
  each ``backoffLimit`` retry creates a new RayCluster (so retries only with checkpoints to resume from).
- ``controllers/ray/utils/validation.go`` ``ValidateRayJobMetadata``: the name is a DNS-1035 label of at most
  47 characters.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from verlctl.errors import SpecError
from verlctl.render.render import START_SCRIPT, TRAIN_SCRIPT, Rendered
from verlctl.spec.model import RunSpec
from verlctl.verl.environment import CANN_ENV_SCRIPTS, SECRET_ENV
from verlctl.verl.hydra_syntax import shell_quote

API_VERSION = "ray.io/v1"
#: Where the ConfigMap with the scripts is mounted in the head pod.
SCRIPTS_DIR = "/opt/verlctl"
#: The device plugin's resource when the spec names none.
DEFAULT_RESOURCE = {"npu": "huawei.com/Ascend910", "gpu": "nvidia.com/gpu"}
#: Which devices a pod sees is the device plugin's decision; the spec's device ids describe a bare host.
PLUGIN_DECIDES = frozenset({"ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"})
#: The key inside the SwanLab Secret.
SECRET_KEY = "api-key"
#: KubeRay's client-server port (the head service exposes it by this name).
CLIENT_PORT = 10001
MAX_NAME = 47  # utils.MaxRayJobNameLength
MAX_NODES = 4096

#: A rayStartParams value that bash leaves as is (it is pasted into `bash -lc` unquoted).
_INERT = re.compile(r"[A-Za-z0-9_.,:/@+=%-]*")
_PARAM_NAME = re.compile(r"[a-z][a-z0-9-]*")
_DOCKER_SIZE = re.compile(r"(\d+)([bkmg]?)b?", re.IGNORECASE)


@dataclass(frozen=True)
class RayJobOptions:
    nodes: int
    device_resource: str
    pvc: str
    swanlab_secret: str
    ttl_s: int
    retries: int


def worker_names(nodes: int) -> list[str]:
    """Stand-ins for ``cluster.nodes`` while composing: verl counts nodes, Kubernetes names the pods later."""
    return [f"rayjob-worker-{i}" for i in range(1, nodes + 1)]


def check_nodes(nodes: int) -> None:
    if not 1 <= nodes <= MAX_NODES:
        raise SpecError(f"must be 1 to {MAX_NODES} worker pods; got {nodes}: give --nodes 1 or more", "--nodes")


def options_for(spec: RunSpec, nodes: int) -> RayJobOptions:
    """The export's settings, each refused with one line naming its field and the fix."""
    k = spec.kubernetes
    pvc, resource = pod_settings(spec, nodes)
    if spec.device == "npu" and resource.lower().endswith("gpu"):
        raise SpecError(
            f"{resource} ends in 'gpu', which KubeRay hands to Ray as GPUs, but device is npu: give the Ascend "
            "device plugin's resource (e.g. huawei.com/Ascend910) or --device gpu",
            "kubernetes.device_resource",
        )
    for arg in spec.cluster.ray_start_args:
        name, _, value = arg[2:].partition("=")
        if not _PARAM_NAME.fullmatch(name) or not _INERT.fullmatch(value):
            raise SpecError(
                f"{arg!r} cannot be a KubeRay rayStartParams entry (it reaches `bash -lc` unquoted): use "
                "--name=value with letters, digits and . , : / @ + = % - _ only",
                "cluster.ray_start_args",
            )
    return RayJobOptions(nodes, resource, pvc, k.swanlab_secret, k.ttl_s, k.retries)


def pod_settings(spec: RunSpec, nodes: int) -> tuple[str, str]:
    """What every Kubernetes export needs, each refused with one line naming its field and the fix: the node
    count, the checkpoint PVC, a device resource of the spec's device kind, retries only with checkpoints, the
    /dev/shm size. The PVC and the device resource."""
    k = spec.kubernetes
    check_nodes(nodes)
    if k.pvc is None:
        raise SpecError(
            "a PersistentVolumeClaim for the checkpoints is needed (the pods' own disks go with them): "
            "give --pvc NAME or set kubernetes.pvc",
            "kubernetes.pvc",
        )
    resource = k.device_resource or DEFAULT_RESOURCE[spec.device]
    if spec.device == "gpu" and "ascend" in resource.lower():
        raise SpecError(
            f"{resource} is an Ascend NPU resource, but device is gpu: give the GPU device plugin's resource "
            "(e.g. nvidia.com/gpu) or --device npu",
            "kubernetes.device_resource",
        )
    if k.retries and spec.train.save_freq <= 0:
        raise SpecError(
            f"{k.retries} retries would each start over from step 0: no checkpoint is saved "
            f"(train.save_freq={spec.train.save_freq}); set train.save_freq > 0 or kubernetes.retries=0",
            "kubernetes.retries",
        )
    shm_quantity(spec.container.shm_size)
    return k.pvc, resource


def shm_quantity(size: str) -> str:
    """Docker's ``--shm-size`` form (``64g``, binary units) as a Kubernetes quantity (``64Gi``)."""
    found = _DOCKER_SIZE.fullmatch(size.strip())
    if not found or int(found.group(1)) == 0:
        raise SpecError(
            f"{size!r} is not a size: give a number with b, k, m or g (e.g. 64g) for the /dev/shm emptyDir",
            "container.shm_size",
        )
    unit = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}[found.group(2).lower()]
    return f"{int(found.group(1))}{unit}"


def job_name(experiment: str | None) -> str:
    """The RayJob's name from the experiment: a DNS-1035 label of at most 47 characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", (experiment or "").lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"verl-{name}".rstrip("-")
    return name[:MAX_NAME].rstrip("-")


def pod_env(rendered: Rendered, spec: RunSpec, swanlab_secret: str) -> list[dict[str, Any]]:
    """The env block of every pod: the scripts' exports and SwanLab's settings; the key only by reference (the
    Secret ``swanlab_secret``, key ``api-key``)."""
    env: list[dict[str, Any]] = [
        {"name": k, "value": v} for k, v in rendered.command.env.items() if k not in PLUGIN_DECIDES
    ]
    env += [{"name": k, "value": v} for k, v in rendered.command.env_file.items() if k not in SECRET_ENV]
    sw = spec.logging.swanlab
    if sw.enabled and sw.mode == "cloud":
        env.append({
            "name": "SWANLAB_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": swanlab_secret, "key": SECRET_KEY}},
        })
    return env


def _ray_params(args: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for arg in args:
        name, eq, value = arg[2:].partition("=")
        out[name] = value if eq else "true"
    return out


def _prelude(spec: RunSpec) -> list[str]:
    """Container args KubeRay runs before its own `ray start` (same shell): the CANN environment on NPU."""
    if spec.device != "npu":
        return []
    scripts = " ".join(shell_quote(s) for s in CANN_ENV_SCRIPTS)
    return [f'for f in {scripts}; do if [ -f "$f" ]; then . "$f"; fi; done; true']


def manifests(spec: RunSpec, rendered: Rendered, opts: RayJobOptions) -> list[dict[str, Any]]:
    """The ConfigMap and the RayJob, in the order ``kubectl apply`` should create them."""
    name = job_name(spec.logging.experiment)
    config_map = f"{name}-scripts"
    per_node = len(spec.cluster.devices)
    npu = spec.device == "npu"
    checkpoints = spec.paths.checkpoints or ""
    env = pod_env(rendered, spec, opts.swanlab_secret)
    volumes = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_quantity(spec.container.shm_size)}},
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": opts.pvc}},
    ]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "checkpoints", "mountPath": checkpoints}]
    prelude = _prelude(spec)

    def container(role: str, extra_mounts: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
        c: dict[str, Any] = {"name": f"ray-{role}", "image": spec.container.image}
        if prelude:
            c["args"] = list(prelude)
        c["env"] = [dict(e) for e in env]
        c["volumeMounts"] = [*mounts, *extra_mounts]
        c.update(more)
        return c

    head_ports = [
        {"name": "gcs-server", "containerPort": spec.cluster.ray_port},
        {"name": "dashboard", "containerPort": spec.cluster.dashboard_port},
        {"name": "client", "containerPort": CLIENT_PORT},
    ]
    head = {
        # No Ray work on the head (KubeRay's rayStartParams guidance); the workers hold every device.
        "rayStartParams": {
            "num-cpus": "0",
            "port": str(spec.cluster.ray_port),
            "dashboard-port": str(spec.cluster.dashboard_port),
            "dashboard-host": "0.0.0.0",
        },
        "template": {"spec": {
            "containers": [container(
                "head", [{"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True}], ports=head_ports
            )],
            "volumes": [
                *volumes,
                {"name": "scripts", "configMap": {"name": config_map, "defaultMode": 0o555}},
            ],
        }},
    }
    devices = {opts.device_resource: str(per_node)}
    worker_params = _ray_params(spec.cluster.ray_start_args)
    if npu:
        worker_params["resources"] = "'" + json.dumps({"NPU": per_node}) + "'"
    else:
        worker_params["num-gpus"] = str(per_node)
    worker = {
        "groupName": spec.device,
        "replicas": opts.nodes,
        "minReplicas": opts.nodes,
        "maxReplicas": opts.nodes,
        "rayStartParams": worker_params,
        "template": {"spec": {
            "containers": [container("worker", [], resources={"limits": dict(devices), "requests": dict(devices)})],
            "volumes": [dict(v) for v in volumes],
        }},
    }
    run = f"{SCRIPTS_DIR}/{START_SCRIPT}"
    job_spec: dict[str, Any] = {
        # start_verl.sh waits until nodes x devices have joined Ray, then runs run_training.sh.
        "entrypoint": f"VERLCTL_ROLE=head VERLCTL_RAY_RUNNING=1 bash {shell_quote(run)}",
        "submissionMode": "K8sJobMode",
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": opts.ttl_s,
    }
    if opts.retries:
        job_spec["backoffLimit"] = opts.retries
    job_spec["rayClusterSpec"] = {"headGroupSpec": head, "workerGroupSpecs": [worker]}
    labels = {"app.kubernetes.io/managed-by": "verlctl"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": config_map, "labels": dict(labels)},
            "data": {n: rendered.files[n] for n in (START_SCRIPT, TRAIN_SCRIPT)},
        },
        {"apiVersion": API_VERSION, "kind": "RayJob", "metadata": {"name": name, "labels": labels}, "spec": job_spec},
    ]


def dump(docs: list[dict[str, Any]]) -> str:
    """YAML documents; multi-line strings (the scripts) as literal blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True  # every object written out in full: no &anchors for kubectl to puzzle over

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump_all(docs, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=120,
                         allow_unicode=True)
