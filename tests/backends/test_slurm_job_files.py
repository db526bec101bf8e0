"""The Slurm backend writes a run's job files itself (backends/slurm.py, ``write_job``): the sbatch script of every
job (0755), the env file with the secrets once, with the first job, 0600 from the start (a resubmission keeps it:
the recorded spec has no secrets to render it again from), and the rendered files into the run's record (a
resubmission's under ``attempt-N/``). Removing the env file leaves the rest."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

RUN = "20260101-000000-exp-job0"


def _record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from verlctl.runtime.records import RunRecord

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    return RunRecord.model_validate({
        "run_id": RUN, "created_at": 4102444800.0, "runtime": "slurm", "workdir": str(tmp_path),
        "scripts_dir": str(tmp_path / "logs" / "verlctl-slurm" / RUN), "run_log": "", "train_log": "",
        "checkpoints": str(tmp_path / "ckpt"), "experiment": "exp", "verl_version": "0.7.0", "pgid": None,
        "attempts": [], "slurm_jobs": []})


def test_the_first_job_writes_the_env_file_0600_and_a_resubmission_keeps_it(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from verlctl.backends import slurm
    from verlctl.runtime.records import SlurmJobRef

    record = _record(tmp_path, monkeypatch)
    record.save()
    job_dir = Path(record.scripts_dir)
    n, script = slurm.write_job(record, "#!/bin/bash\n#SBATCH --job-name=verlctl-exp\n", "SWANLAB_API_KEY=k\n",
                                {"start_verl.sh": "echo start\n"})
    assert (n, script) == (1, job_dir / "job-1.sbatch")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    env = job_dir / slurm.ENV_FILE
    assert env.read_text() == "SWANLAB_API_KEY=k\n" and stat.S_IMODE(env.stat().st_mode) == 0o600
    assert record.read_file("start_verl.sh") == b"echo start\n"
    assert record.read_file(slurm.JOB_SCRIPT).decode().startswith("#!/bin/bash")
    assert slurm.job_name_of(script.read_text()) == "verlctl-exp"

    record.slurm_jobs.append(SlurmJobRef(number=1, job_id="41", job_name="verlctl-exp", submitted_at=1.0,
                                         output=str(job_dir / "slurm-41.out")))
    n, script = slurm.write_job(record, "#!/bin/bash\n#SBATCH --job-name=verlctl-exp\n", "SWANLAB_API_KEY=other\n",
                                {"start_verl.sh": "echo again\n"})
    assert (n, script.name) == (2, "job-2.sbatch")
    assert env.read_text() == "SWANLAB_API_KEY=k\n"  # kept, not rendered again
    assert (record.dir / "attempt-2" / "start_verl.sh").read_bytes() == b"echo again\n"

    slurm.remove_env_file(record)
    assert not env.exists() and script.exists()
    slurm.remove_env_file(record)  # already gone: nothing to say


def test_the_job_directory_needs_an_absolute_paths_logs() -> None:
    from verlctl.backends import slurm
    from verlctl.errors import VerlctlError

    assert slurm.job_dir_for("/shared/logs", RUN) == Path("/shared/logs/verlctl-slurm") / RUN
    with pytest.raises(VerlctlError) as err:
        slurm.job_dir_for("logs", RUN)
    assert "paths.logs 'logs'" in err.value.message and "absolute" in err.value.message
