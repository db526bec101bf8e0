"""A Slurm controller that does not answer (a busy slurmctld: squeue and scontrol time out) is never taken for a
job that ended (review N8): `cancel` asks again, then refuses with one line naming the job and sends no scancel;
the start-up retry therefore never submits a second job beside a first that may still run.

squeue / scontrol / sacct / scancel here are TEST DOUBLES of a controller that times out (a real slurmctld cannot
be made to time out on demand in a test); tests/backends/test_slurm_cluster.py runs the real cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_support import controller_doubles


@pytest.fixture
def busy_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    controller_doubles(tmp_path, monkeypatch, "TIMEOUT")
    return tmp_path


def test_an_unanswered_state_is_not_an_ended_job(busy_controller: Path) -> None:
    from verlctl.errors import RuntimeFailure
    from verlctl.runtime import slurm

    st = slurm.known_state("1001")
    assert st.state == "UNKNOWN" and not st.answered
    with pytest.raises(RuntimeFailure) as err:
        slurm.cancel("1001", "verlctl-run")
    assert "Slurm did not answer about job 1001" in err.value.message and "scancel 1001" in (err.value.hint or "")
    assert not (busy_controller / "scancelled").exists()


def test_a_job_id_slurm_has_forgotten_is_an_answer(busy_controller: Path) -> None:
    # "Invalid job id" is slurmctld answering: the job ended long ago (stop of an old run is not refused)
    for tool in ("squeue", "scontrol"):
        (busy_controller / "bin" / tool).write_text(
            "#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    from verlctl.runtime import slurm

    st = slurm.known_state("1001")
    assert st.answered and not st.live
    assert slurm.cancel("1001", "verlctl-run") is False
