"""N3 (issue 22): a Slurm job step mounts each Ascend driver path only where it exists on the node, so Docker
never creates an empty root-owned directory (``/etc/ascend_install.info``, ``/usr/local/dcmi``, ...) on a node
that lacks one. The job's own ``run_step`` runs with a test double for ``srun`` (runs its command here) and for
``docker`` (records its argv), in a private mount namespace whose ``/usr/local`` is a fresh tmpfs."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from test_export_slurm import export
from verlctl.runtime.containers import NPU_DRIVER_MOUNTS

SRUN = '#!/bin/bash\n# test double of srun: drop its options, run the step here\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n'
DOCKER = '#!/bin/bash\n# test double of docker: record the argv, one word a line\nprintf "%s\\n" "$@" >"$DOCKER_ARGV"\n'


def run_step_argv(tmp_path: Path, script: str, present: list[str]) -> list[str]:
    """docker's argv from the job's run_step, on a 'node' where only ``present`` (under /usr/local) exist."""
    body = script.split("run_step() {", 1)[1].split("\n}\n", 1)[0]
    on_node = next(ln for ln in script.splitlines() if ln.startswith("ON_NODE="))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("srun", SRUN), ("docker", DOCKER)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    argv_file = tmp_path / "docker.argv"
    make = "; ".join(f"mkdir -p -- {shlex.quote(os.path.dirname(p))} && touch -- {shlex.quote(p)}"
                     if p.endswith("npu-smi") else f"mkdir -p -- {shlex.quote(p)}" for p in present)
    driver = f"""set -euo pipefail
mount -t tmpfs tmpfs /usr/local
{make or ':'}
{on_node}
JOB_ID=7; JOB_DIR={shlex.quote(str(tmp_path))}
run_step() {{{body}
}}
run_step node1 head
"""
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "DOCKER_ARGV": str(argv_file)}
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", "--fork", "bash", "-c", driver],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    return argv_file.read_text().splitlines()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)")
def test_the_step_mounts_only_the_driver_paths_that_exist_on_the_node(tmp_path: Path) -> None:
    res, out = export(tmp_path)
    assert res.code == 0, res.err
    script = out.read_text()
    present = ["/usr/local/Ascend/driver", "/usr/local/bin/npu-smi"]
    argv = run_step_argv(tmp_path, script, present)
    mounts = [a for a in argv if a.startswith("--volume=") and a.endswith(":ro")]
    assert mounts == [f"--volume={p}:{p}:ro" for p in present], argv
    assert argv[0] == "run" and "--" in argv and argv.index("--") > max(argv.index(m) for m in mounts)
    assert argv[argv.index("--") + 1].startswith("quay.io/") and argv[-1].endswith("/start_verl.sh")
    assert not Path("/usr/local/Ascend").exists() and not Path("/etc/ascend_install.info").exists()
    # A node with none of them: no driver mount at all, the devices still passed.
    (tmp_path / "none").mkdir()
    argv = run_step_argv(tmp_path / "none", script, [])
    assert not [a for a in argv if a.endswith(":ro") and any(p in a for p in NPU_DRIVER_MOUNTS)], argv
    assert "--device=/dev/davinci0" in argv


def test_no_driver_path_is_mounted_unconditionally(tmp_path: Path) -> None:
    res, out = export(tmp_path)
    assert res.code == 0, res.err
    script = out.read_text()
    for p in NPU_DRIVER_MOUNTS:
        assert f"--volume={p}:{p}:ro" not in script, p


def test_gpu_and_privileged_steps_have_no_driver_list(tmp_path: Path) -> None:
    for extra in (["--device", "gpu", "--strategy", "fsdp"], ["--set", "container.privileged=true"]):
        res, out = export(tmp_path, *extra, name=f"job-{len(extra)}.sbatch")
        assert res.code == 0, res.err
        assert "ON_NODE" not in out.read_text()
