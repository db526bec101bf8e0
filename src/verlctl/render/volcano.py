"""A Volcano ``batch.volcano.sh/v1alpha1`` Job for Ascend (or GPU) clusters, plus a ConfigMap with the two launch
scripts and, on NPU, the rank-table ConfigMap MindCluster fills in (plain dicts; PyYAML dumps them).

Every pod runs ``start_verl.sh`` as the SSH and Slurm backends do: the head task's one pod starts the Ray head on
its own address (``VERLCTL_ROLE=head``, ``VERLCTL_MASTER_ADDR`` = the pod IP from the downward API), waits until
every pod's devices have joined and runs ``run_training.sh``; each worker pod looks the head up by the name
Volcano's ``svc`` plugin gives it and joins. Every pod holds ``cluster.devices`` devices: ``nodes`` pods hold
``nodes x devices``, as verl is told (``trainer.nnodes``).

What the manifest relies on, in Volcano (github.com/volcano-sh/volcano at ed72c7c; the Job CRD schema is in
``tests/fixtures/volcano/batch.volcano.sh_jobs.yaml``):

- ``pkg/controllers/job/helpers/helpers.go`` ``PodNameFmt`` (``<job>-<task>-<index>``) and
  ``pkg/controllers/job/plugins/svc/svc.go`` ``OnPodCreate`` (hostname = the pod name, subdomain = the job name,
  a headless Service named after the job): the head is ``<job>-head-0.<job>`` for every worker.
- ``pkg/controllers/job/plugins/distributed-framework/hcclrank/hcclrank.go`` (Volcano 1.13 and later): on NPU,
  each pod's ``hccl/rankIndex`` annotation (the head task first, then the workers by index), which MindCluster
  and the Ascend device plugin read. Volcano's ``ray`` plugin is not used: it replaces the containers' command
  with a bare ``ray start`` (no device resources, no verl).
- ``minAvailable`` = every pod: gang scheduling, all pods start together or none does.
- ``policies``: ``PodFailed``/``PodEvicted`` restart the whole job (``RestartJob``, up to ``maxRetry`` times:
  ``kubernetes.retries``, each resuming from the last checkpoint) or end it (``TerminateJob`` with no retries;
  ``maxRetry`` is then left to the admission's default, ``pkg/webhooks/admission/jobs/mutate/mutate_job.go``);
  the head task's ``TaskCompleted`` completes the job (the workers' ``ray start --block`` would run forever).

What MindCluster reads on an NPU job (its Volcano-job guide, "full-NPU scheduling" and "Job-level
rescheduling"): the ``ring-controller.atlas`` label on the Job, on every pod and on a ConfigMap named
``rings-config-<job>`` whose ``hccl.json`` it fills in with the rank table (mounted at
``/user/serverid/devindex/config``); ``fault-scheduling: force`` for its job-level rescheduling of a pod on a
faulty NPU; ``ASCEND_VISIBLE_DEVICES`` from the annotation the Ascend device plugin writes with the devices it
gave the pod (Ascend Docker Runtime reads it). verl itself does not read the rank table: its workers form their
HCCL groups through Ray and torch.distributed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verlctl.render.rayjob import (
    SCRIPTS_DIR,
    check_nodes,
    job_name,
    pod_env,
    pod_settings,
    shm_quantity,
)
from verlctl.render.render import START_SCRIPT, TRAIN_SCRIPT, Rendered
from verlctl.spec.model import RunSpec
from verlctl.verl.hydra_syntax import shell_quote

API_VERSION = "batch.volcano.sh/v1alpha1"
#: Where MindCluster's rank table is mounted (its Volcano-job guide).
RANK_TABLE_DIR = "/user/serverid/devindex/config"
#: Seconds a worker pod waits for the head's name to resolve (the headless Service is created with the job).
HEAD_LOOKUP_S = 600


@dataclass(frozen=True)
class VolcanoOptions:
    nodes: int  # pods, each with every device of cluster.devices
    device_resource: str
    pvc: str
    swanlab_secret: str
    retries: int
    queue: str
    ring_controller: str


def pod_names(nodes: int) -> list[str]:
    """Stand-ins for ``cluster.nodes`` while composing: verl counts nodes, Volcano names the pods later."""
    check_nodes(nodes)
    return [f"volcano-pod-{i}" for i in range(nodes)]


def options_for(spec: RunSpec, nodes: int) -> VolcanoOptions:
    """The export's settings, each refused with one line naming its field and the fix."""
    pvc, resource = pod_settings(spec, nodes)
    k = spec.kubernetes
    return VolcanoOptions(nodes, resource, pvc, k.swanlab_secret, k.retries, k.queue, k.ring_controller)


def head_host(name: str) -> str:
    """The head pod's DNS name inside the job (Volcano's svc plugin)."""
    return f"{name}-head-0.{name}"


def _head_command() -> str:
    return f'VERLCTL_ROLE=head VERLCTL_MASTER_ADDR="$VERLCTL_POD_IP" exec bash {shell_quote(SCRIPTS_DIR)}/{START_SCRIPT}'


def _worker_command(name: str) -> str:
    host = shell_quote(head_host(name))
    return (
        f"deadline=$((SECONDS + {HEAD_LOOKUP_S})); "
        f"until head=\"$(getent hosts {host} | awk '{{print $1; exit}}')\" && [ -n \"$head\" ]; do "
        f"[ \"$SECONDS\" -lt \"$deadline\" ] || {{ echo \"[verlctl] the head {head_host(name)} did not resolve "
        f"within {HEAD_LOOKUP_S}s\" >&2; exit 1; }}; sleep 2; done; "
        f'VERLCTL_ROLE=worker VERLCTL_MASTER_ADDR="$head" exec bash {shell_quote(SCRIPTS_DIR)}/{START_SCRIPT}'
    )


def manifests(spec: RunSpec, rendered: Rendered, opts: VolcanoOptions) -> list[dict[str, Any]]:
    """The ConfigMaps and the Job, in the order ``kubectl apply`` should create them."""
    # Volcano names each pod <job>-<task>-<index> and uses it as the pod's hostname (a DNS-1123 label of at most
    # 63 characters): the RayJob's name rule (at most 47 characters) leaves room for "-worker-4095".
    name = job_name(spec.logging.experiment)
    scripts_map = f"{name}-scripts"
    per_node = len(spec.cluster.devices)
    npu = spec.device == "npu"
    labels: dict[str, str] = {"app.kubernetes.io/managed-by": "verlctl"}
    pod_labels = dict(labels)
    if npu:
        labels["ring-controller.atlas"] = pod_labels["ring-controller.atlas"] = opts.ring_controller
        labels["fault-scheduling"] = "force"
    env = pod_env(rendered, spec, opts.swanlab_secret)
    env.append({"name": "VERLCTL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if npu and opts.device_resource.startswith("huawei.com/"):
        env.append({"name": "ASCEND_VISIBLE_DEVICES",
                    "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{opts.device_resource}']"}}})
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_quantity(spec.container.shm_size)}},
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": opts.pvc}},
        {"name": "scripts", "configMap": {"name": scripts_map, "defaultMode": 0o555}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "checkpoints", "mountPath": spec.paths.checkpoints or ""},
        {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
    ]
    if npu:
        volumes.append({"name": "ascend-rank-table", "configMap": {"name": f"rings-config-{name}"}})
        mounts.append({"name": "ascend-rank-table", "mountPath": RANK_TABLE_DIR})
    devices = {opts.device_resource: str(per_node)}

    def task(role: str, replicas: int, command: str, **more: Any) -> dict[str, Any]:
        container = {
            "name": "verl",
            "image": spec.container.image,
            "command": ["bash", "-c", command],
            "env": [dict(e) for e in env],
            "resources": {"limits": dict(devices), "requests": dict(devices)},
            "volumeMounts": [dict(m) for m in mounts],
        }
        pod: dict[str, Any] = {
            "restartPolicy": "Never",  # the job's policies restart it as a whole
            "containers": [container],
            "volumes": [dict(v) for v in volumes],
            # one pod per host: each holds every device of cluster.devices
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"volcano.sh/job-name": name}},
                "topologyKey": "kubernetes.io/hostname",
            }]}},
        }
        return {"name": role, "replicas": replicas, "template": {"metadata": {"labels": dict(pod_labels)},
                                                                 "spec": pod}, **more}

    tasks = [task("head", 1, _head_command(), policies=[{"event": "TaskCompleted", "action": "CompleteJob"}])]
    if opts.nodes > 1:
        tasks.append(task("worker", opts.nodes - 1, _worker_command(name)))
    failure = "RestartJob" if opts.retries else "TerminateJob"
    plugins: dict[str, list[str]] = {"svc": [], "env": []}
    if npu:  # the head's rank 0, each worker 1 + its index: the hccl/rankIndex annotation
        plugins["hcclrank"] = ["--master=head", "--worker=worker"]
    job_spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": opts.queue,
        "minAvailable": opts.nodes,
        "policies": [{"event": "PodFailed", "action": failure}, {"event": "PodEvicted", "action": failure}],
        "plugins": plugins,
        "tasks": tasks,
    }
    if opts.retries:  # left out, Volcano's admission sets 3; with TerminateJob no retry happens
        job_spec["maxRetry"] = opts.retries
    docs: list[dict[str, Any]] = [{
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": scripts_map, "labels": {"app.kubernetes.io/managed-by": "verlctl"}},
        "data": {n: rendered.files[n] for n in (START_SCRIPT, TRAIN_SCRIPT)},
    }]
    if npu:
        docs.append({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"rings-config-{name}",
                         "labels": {"app.kubernetes.io/managed-by": "verlctl",
                                    "ring-controller.atlas": opts.ring_controller}},
            "data": {"hccl.json": '{"status":"initializing"}'},
        })
    docs.append({"apiVersion": API_VERSION, "kind": "Job", "metadata": {"name": name, "labels": labels},
                 "spec": job_spec})
    return docs
