"""A real Slurm cluster for the tests: Debian's slurmctld + slurmd + munge, each node a container.

Why containers, not several slurmd on this host: a job step runs the stand-in trainer under Ray, and both live
only in the test image (tests/image); Debian's slurmd is not built with --enable-multiple-slurmd either, and
one host's processes would share one network address (Ray nodes would collide on it). So the nodes are
containers of ``verlctl-test-slurm:<hash>`` (the test image plus Slurm, tests/image/build_slurm.sh) on a Docker
network of their own: one runs slurmctld, ``nodes`` run slurmd. They bind-mount one shared directory at the
same path as on this host (the job's scripts, checkpoints, logs and output files: the shared storage of a real
cluster). One munged runs on this host with a key made here; its socket sits in the shared directory, so the
daemons in the containers and sbatch/squeue/scancel here (``SLURM_CONF`` = the generated slurm.conf, with
``AuthInfo=socket=...``) all use it. No accounting daemon: a job's state comes from squeue, then from
``scontrol show job`` (kept ``MinJobAge`` seconds after it ends).

``start_cluster`` starts everything and ``SlurmCluster.stop`` removes exactly what it started (its containers
by id, its network by id, its munged by its verified pid file); the containers carry the docker_support
session labels, so a crashed session's leftovers are removed by the next one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import docker_support

BUILD_SLURM = docker_support.REPO_ROOT / "tests" / "image" / "build_slurm.sh"
SLURM_CONF_TEMPLATE = """\
ClusterName=verlctl{suffix}
SlurmctldHost={ctl}({ctl_ip})
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile={logs}/slurmctld.log
SlurmdLogFile={logs}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MinJobAge=3600
KillWait=15
SlurmctldTimeout=60
SlurmdTimeout=120
InactiveLimit=0
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def build_image(test_image: str) -> str:
    proc = subprocess.run([str(BUILD_SLURM), test_image], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"tests/image/build_slurm.sh failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout.strip().splitlines()[-1]


@dataclass
class SlurmCluster:
    shared: Path  # the same path on this host and in every node
    conf: Path
    nodes: list[str]
    node_ips: dict[str, str]
    client: Any
    containers: list[Any] = field(default_factory=list)
    network_id: str | None = None
    munged_pid: int | None = None
    munged_pidfile: Path | None = None

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment with the cluster's config, for sbatch/squeue/scancel (and verlctl)."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        env.update(extra)
        return env

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env(), timeout=timeout)

    def wait_idle(self, deadline_s: float = 180) -> None:
        """Until every node is idle (up and without a job): sinfo answers with only idle nodes."""
        end = time.monotonic() + deadline_s
        last = ""
        while time.monotonic() < end:
            res = self.run("sinfo", "--noheader", "--Node", "--format=%N %t")
            last = res.stdout + res.stderr
            states = [ln.split()[1] for ln in res.stdout.splitlines() if len(ln.split()) == 2]
            if res.returncode == 0 and len(states) == len(self.nodes) and all(s == "idle" for s in states):
                return
            time.sleep(1)
        raise RuntimeError(f"Slurm nodes not idle within {deadline_s}s: {last}\n{self.logs_tail()}")

    def logs_tail(self) -> str:
        out = []
        for p in sorted((self.shared / "slurm-logs").glob("*.log")):
            out.append(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)

    def stop(self) -> None:
        for c in self.containers:
            with contextlib.suppress(Exception):
                c.remove(force=True)
        self.containers = []
        if self.network_id:
            with contextlib.suppress(Exception):
                self.client.networks.get(self.network_id).remove()
            self.network_id = None
        if self.munged_pid and self.munged_pidfile is not None:
            with contextlib.suppress(OSError, ValueError):
                # Only the munged this cluster started: its pid file still names it and it runs munged.
                pid = int(self.munged_pidfile.read_text().strip())
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                if pid == self.munged_pid and comm == "munged":
                    os.kill(pid, signal.SIGTERM)
            self.munged_pid = None


def _labels() -> dict[str, str]:
    return {
        docker_support.LABEL: "1",
        docker_support.SESSION_LABEL: docker_support.SESSION_ID,
        docker_support.OWNER_LABEL: docker_support.OWNER,
    }


def _start_munged(shared: Path) -> tuple[int, Path]:
    munged = shutil.which("munged") or "/usr/sbin/munged"
    if not Path(munged).exists():
        raise RuntimeError("munged is not installed (apt-get install munge slurm-wlm, or run .ci/run)")
    mdir = shared / "munge"
    mdir.mkdir(mode=0o700)
    key = mdir / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    pidfile = mdir / "munged.pid"
    subprocess.run(
        [munged, "--force", f"--key-file={key}", f"--socket={mdir / 'munge.sock'}", f"--pid-file={pidfile}",
         f"--log-file={mdir / 'munged.log'}", f"--seed-file={mdir / 'munged.seed'}"],
        check=True, capture_output=True, timeout=30,
    )
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if pidfile.exists() and pidfile.read_text().strip().isdigit() and (mdir / "munge.sock").exists():
            return int(pidfile.read_text().strip()), pidfile
        time.sleep(0.1)
    raise RuntimeError(f"munged did not start: {(mdir / 'munged.log').read_text(errors='replace')[-2000:]}")


def remove_dead_networks(client: Any) -> None:
    """Networks a crashed test process left (its containers are removed by docker_support); only ours."""
    for net in client.networks.list(filters={"label": [docker_support.LABEL]}):
        labels = net.attrs.get("Labels") or {}
        if net.name.startswith("verlctl-test-slurm-") and not docker_support.owner_alive({"Labels": labels}):
            with contextlib.suppress(Exception):
                net.remove()


def start_cluster(client: Any, image: str, shared: Path, nodes: int = 2) -> SlurmCluster:
    """slurmctld and ``nodes`` slurmd, up and idle (or an error naming what failed; nothing left behind)."""
    remove_dead_networks(client)
    suffix = secrets.token_hex(3)
    shared.mkdir(parents=True, exist_ok=True)
    shared.chmod(0o755)
    (shared / "slurm-logs").mkdir()
    names = [f"vsn{suffix}-{i + 1}" for i in range(nodes)]
    ctl = f"vsc{suffix}"
    cluster = SlurmCluster(shared, shared / "slurm.conf", names, {}, client)
    try:
        cluster.munged_pid, cluster.munged_pidfile = _start_munged(shared)
        net = client.networks.create(f"verlctl-test-slurm-{suffix}", driver="bridge", labels=_labels())
        cluster.network_id = net.id
        for name in [ctl, *names]:
            c = client.containers.run(
                image, ["sleep", "infinity"], detach=True, init=True, name=f"verlctl-test-slurm-{name}",
                hostname=name, network=net.name, labels=_labels(), shm_size="1g",
                volumes={str(shared): {"bind": str(shared), "mode": "rw"}},
                environment={"SLURM_CONF": str(cluster.conf)},
            )
            cluster.containers.append(c)
        ips = {}
        for c, name in zip(cluster.containers, [ctl, *names], strict=True):
            c.reload()
            ips[name] = c.attrs["NetworkSettings"]["Networks"][net.name]["IPAddress"]
        cluster.node_ips = {n: ips[n] for n in names}
        node_lines = "\n".join(f"NodeName={n} NodeAddr={ips[n]} CPUs={os.cpu_count() or 1} RealMemory=1000 "
                               "State=UNKNOWN" for n in names)
        cluster.conf.write_text(SLURM_CONF_TEMPLATE.format(
            suffix=suffix, ctl=ctl, ctl_ip=ips[ctl], munge_socket=shared / "munge" / "munge.sock",
            logs=shared / "slurm-logs", nodes=node_lines))
        hosts = "".join(f"{ip} {n}\n" for n, ip in ips.items())
        for c, name in zip(cluster.containers, [ctl, *names], strict=True):
            # Every node resolves every other by name (srun, scontrol show hostnames, Ray's addresses).
            c.exec_run(["bash", "-c", f"printf %s '{hosts}' >> /etc/hosts"])
            daemon = ["slurmctld"] if name == ctl else ["slurmd", "-N", name]
            res = c.exec_run(["bash", "-c", f"mkdir -p /var/spool/slurmctld /var/spool/slurmd && "
                              f"{' '.join(daemon)} -f {cluster.conf}"])
            if res.exit_code != 0:
                raise RuntimeError(f"{daemon[0]} on {name} failed: {res.output.decode(errors='replace')}")
        cluster.wait_idle()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def ray_processes(cluster: SlurmCluster) -> dict[str, list[str]]:
    """Ray's daemons still running on each node (gcs_server, raylet): none once a job has ended."""
    out = {}
    for c in cluster.containers[1:]:
        out[c.name] = [ln for ln in docker_support.ps_in(c, "args=").splitlines() if "gcs_server" in ln or "raylet" in ln]
    return out


#: What squeue / scontrol / sacct say when slurmctld does not answer in time.
CONTROLLER_TIMED_OUT = "slurm_load_jobs error: Socket timed out on send/recv operation"


def controller_doubles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *states: str) -> Path:
    """TEST DOUBLES of squeue / scontrol / sacct: squeue answers the next of ``states`` each time it is asked (the
    last one again once they run out); ``TIMEOUT`` answers as a controller that timed out (all three tools)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    queue = tmp_path / "states"
    queue.write_text("".join(f"{s}\n" for s in states))
    (bindir / "squeue").write_text(
        "#!/bin/sh\n"
        f"q={queue}\n"
        f'echo "$@" >> {tmp_path / "asked"}\n'
        's=$(head -n 1 "$q"); [ "$(wc -l < "$q")" -gt 1 ] && sed -i 1d "$q"\n'
        f'[ "$s" = TIMEOUT ] && {{ echo "{CONTROLLER_TIMED_OUT}" >&2; exit 1; }}\n'
        'echo "$s|None|node1|verlctl-exp"\n')
    for tool in ("scontrol", "sacct"):
        (bindir / tool).write_text(f"#!/bin/sh\necho '{CONTROLLER_TIMED_OUT}' >&2\nexit 1\n")
    (bindir / "scancel").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'scancelled'}\n")
    for p in bindir.iterdir():
        p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    from verlctl.runtime import slurm as runtime_slurm

    monkeypatch.setattr(runtime_slurm, "STATE_RETRY_S", 0.01)
    return queue
