"""Slurm as a runtime: what a job step's container needs, and (``SlurmJob``) submit / state / output / cancel.

Knows nothing of verl: it runs the batch script it is given with ``sbatch --parsable``, reads the state of
that one job with ``squeue`` / ``sacct``, and cancels that job id only (``scancel -- ID``).
"""

from __future__ import annotations

from pathlib import PurePosixPath

from verlctl.spec.model import RunSpec


def docker_step_args(spec: RunSpec) -> list[str]:
    """``docker run`` options (mounts and devices) for a job step's container on a Slurm node.

    The paths are the spec's (the same on every node: shared storage); nothing is checked on this host,
    which may not be a node of the cluster. Network and IPC are the host's; ``--init`` reaps Ray's children.
    """
    from verlctl.runtime.containers import NPU_DRIVER_MOUNTS, NPU_SHARED_DEVICES, spec_mount_needs

    args = [f"--shm-size={spec.container.shm_size}", f"--workdir={spec.container.workdir}"]
    workdir = PurePosixPath(spec.container.workdir)
    seen: set[str] = set()
    for m in spec.container.mounts:
        args.append(f"--volume={m}")
        seen.add(m.split(":")[1] if ":" in m else m)
    for path, _why, _must in spec_mount_needs(spec):
        pp = PurePosixPath(path)
        if not pp.is_absolute() or pp == workdir or workdir in pp.parents or path in seen:
            continue
        seen.add(path)
        args.append(f"--volume={path}:{path}")
    if spec.device == "gpu":
        ids = ",".join(str(d) for d in spec.cluster.devices)
        args.append(f'--gpus="device={ids}"')
    elif spec.container.privileged:
        args.append("--privileged")
    else:
        args += [f"--device=/dev/davinci{d}" for d in spec.cluster.devices]
        args += [f"--device={d}" for d in NPU_SHARED_DEVICES]
        args += [f"--volume={p}:{p}:ro" for p in NPU_DRIVER_MOUNTS]
    return args
