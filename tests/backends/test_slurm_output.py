"""The Slurm backend reads a job's output file (backends/slurm.py): ``output_tail`` (what a verdict reads: the
file's last bytes), ``show_output`` (``verlctl logs`` of a Slurm run: the last N lines, or the whole file) and
``await_end`` (a cancelled job must be known to have ended before a resubmission). The output files are real
files; tests/backends/test_slurm_cluster.py follows a real job's output with ``logs -f``.

A job's state comes from TEST DOUBLES of squeue / scontrol / sacct (``slurm_support.controller_doubles``), as in
tests/backends/test_slurm_unanswered.py: a real slurmctld cannot be made to time out, or hold a job in
COMPLETING, on demand."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_support import controller_doubles as controller

RUN = "20260101-000000-exp-job0"


def _ref(tmp_path: Path, job_id: str = "41"):  # type: ignore[no-untyped-def]
    from verlctl.runtime.records import SlurmJobRef

    return SlurmJobRef(number=1, job_id=job_id, job_name="verlctl-exp", submitted_at=1.0,
                       output=str(tmp_path / f"slurm-{job_id}.out"))


def _record(tmp_path: Path, jobs: list) -> object:  # type: ignore[type-arg]
    from verlctl.runtime.records import RunRecord

    return RunRecord.model_validate({
        "run_id": RUN, "created_at": 4102444800.0, "runtime": "slurm", "workdir": str(tmp_path),
        "scripts_dir": str(tmp_path), "run_log": "", "train_log": "", "checkpoints": str(tmp_path / "ckpt"),
        "experiment": "exp", "verl_version": "0.7.0", "pgid": None, "attempts": [], "slurm_jobs": jobs})


def test_output_tail_is_the_files_last_bytes_and_nothing_before_the_file_exists(tmp_path: Path) -> None:
    from verlctl.backends import slurm

    ref = _ref(tmp_path)
    assert slurm.output_tail(ref) == "" and slurm.output_size(ref) is None and slurm.read_output(ref) == b""
    body = b"".join(b"line %06d\n" % i for i in range(40000))  # 480 kB: more than the default 256 KiB tail
    Path(ref.output).write_bytes(body)
    assert slurm.output_size(ref) == len(body)
    assert slurm.output_tail(ref, max_bytes=24) == "line 039998\nline 039999\n"
    assert slurm.output_tail(ref).encode() == body[-256 * 1024:]
    assert slurm.output_tail(ref, max_bytes=len(body) + 5).encode() == body  # a short file: all of it
    assert slurm.read_output(ref, offset=len(body) - 12) == b"line 039999\n"
    assert slurm.read_output(ref, offset=0, max_bytes=12) == b"line 000000\n"
    Path(ref.output).write_bytes(b"one\ntwo\n")
    assert slurm.output_tail(ref) == "one\ntwo\n"
    big = b"y" * (5 << 20)  # more than one read: read_output's default is 4 MiB from the start
    Path(ref.output).write_bytes(big)
    assert slurm.read_output(ref) == big[: 4 << 20]


def test_logs_prints_the_last_lines_or_the_whole_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from verlctl.backends import slurm

    ref = _ref(tmp_path)
    body = b"".join(b"line %06d\n" % i for i in range(40000))
    Path(ref.output).write_bytes(body)
    record = _record(tmp_path, [_ref(tmp_path, "40"), ref])  # the current job is the last one
    assert slurm.show_output(record, False, 2, lambda r: False) == 0
    assert capsys.readouterr().out == "line 039998\nline 039999\n"
    # more lines than the last 256 KiB hold: the whole lines in them, none cut in part
    assert slurm.show_output(record, False, 40000, lambda r: False) == 0
    window = body[-slurm.TAIL_BYTES:]
    assert capsys.readouterr().out.encode() == window[window.index(b"\n") + 1:]
    assert slurm.TAIL_BYTES == 256 * 1024
    aligned = b"".join(b"line %010d\n" % i for i in range(20000))  # 16-byte lines: the window starts on one
    Path(ref.output).write_bytes(aligned)
    assert slurm.show_output(record, False, 40000, lambda r: False) == 0
    shown = capsys.readouterr().out.encode()
    assert shown == aligned[-slurm.TAIL_BYTES:] and shown.startswith(b"line 0000003616\n")  # whole, not dropped
    # an empty line just before the window is not one of the window's lines
    tail = b"Y\n" * (slurm.TAIL_BYTES // 2)
    Path(ref.output).write_bytes(b"head\n\n" + tail)
    assert slurm.show_output(record, False, 10 ** 6, lambda r: False) == 0
    assert capsys.readouterr().out.encode() == tail
    Path(ref.output).write_bytes(b"one\ntwo\nthree\n")  # shorter than the 256 KiB it reads from the end
    assert slurm.show_output(record, False, 2, lambda r: False) == 0
    assert capsys.readouterr().out == "two\nthree\n"
    Path(ref.output).write_bytes(body)
    assert slurm.show_output(record, False, 0, lambda r: False) == 0  # -n 0: the whole file, beyond 256 KiB
    assert capsys.readouterr().out.encode() == body
    # a file larger than one read (4 MiB), with a character split between two reads: read whole, in bounded memory
    big = b"x" * ((4 << 20) - 1) + "\u00e9 end\n".encode()
    Path(ref.output).write_bytes(big)
    assert slurm.show_output(record, False, 0, lambda r: False) == 0
    assert capsys.readouterr().out.encode() == big




def test_logs_of_a_run_without_output_or_without_a_job_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verlctl.backends import slurm
    from verlctl.errors import VerlctlError

    controller(tmp_path, monkeypatch, "PENDING")
    with pytest.raises(VerlctlError) as err:
        slurm.show_output(_record(tmp_path, []), False, 10, lambda r: False)
    assert err.value.message == f"run {RUN} has no Slurm job"
    ref = _ref(tmp_path, "43")
    with pytest.raises(VerlctlError) as err:
        slurm.show_output(_record(tmp_path, [ref]), False, 10, lambda r: False)
    assert err.value.message == f"no output at {ref.output} yet (Slurm job 43 is PENDING)"


def test_a_cancelled_job_slurm_says_nothing_about_is_not_taken_for_ended(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from verlctl.backends import slurm
    from verlctl.errors import RuntimeFailure

    controller(tmp_path, monkeypatch, "TIMEOUT")
    with pytest.raises(RuntimeFailure) as err:
        slurm.await_end(_ref(tmp_path, "44"), timeout=0)
    assert err.value.message == "Slurm job 44 was cancelled but Slurm did not say whether it ended after 0s"
    assert "squeue --jobs=44" in err.value.hint and "scancel 44" in err.value.hint


def test_a_cancelled_job_is_awaited_until_slurm_says_it_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verlctl.backends import slurm
    from verlctl.errors import RuntimeFailure

    queue = controller(tmp_path, monkeypatch, "RUNNING", "COMPLETING", "CANCELLED")
    monkeypatch.setattr(slurm.time, "sleep", lambda s: None)
    slurm.await_end(_ref(tmp_path, "45"), timeout=60)  # returns once Slurm says CANCELLED
    assert queue.read_text() == "CANCELLED\n"  # it asked three times
    controller(tmp_path, monkeypatch, "COMPLETING")
    with pytest.raises(RuntimeFailure) as err:
        slurm.await_end(_ref(tmp_path, "46"), timeout=0)
    assert err.value.message == "Slurm job 46 was cancelled but Slurm still reports it COMPLETING after 0s"


def test_a_cancelled_job_is_asked_about_once_a_second(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verlctl.backends import slurm
    from verlctl.errors import RuntimeFailure

    controller(tmp_path, monkeypatch, "RUNNING")
    with pytest.raises(RuntimeFailure):
        slurm.await_end(_ref(tmp_path, "47"), timeout=1.5)
    asked = (tmp_path / "asked").read_text().splitlines()
    assert 2 <= len(asked) <= 3 and set(asked) == {"--noheader --jobs=47 --format=%T|%r|%N|%j"}, asked


def test_cancel_sends_scancel_only_to_a_live_job_of_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verlctl.backends import slurm

    controller(tmp_path, monkeypatch, "COMPLETED", "RUNNING")
    assert slurm.cancel(_ref(tmp_path, "48")) is False  # already ended: nothing sent
    assert not (tmp_path / "scancelled").exists()
    assert slurm.cancel(_ref(tmp_path, "48")) is True
    assert (tmp_path / "scancelled").read_text() == "-- 48\n"
    assert slurm.job_state(_ref(tmp_path, "48")).state == "RUNNING"


def test_the_job_name_is_read_whole_from_the_script() -> None:
    from verlctl.backends import slurm

    assert slurm.job_name_of("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --job-name=verlctl-a=b\n") == "verlctl-a=b"


def test_logs_follow_the_job_onto_its_resubmission_until_it_ended_and_no_watcher_follows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``logs -f``: new output as it comes; after 5 idle seconds, the record is read again (a resubmitted job is
    followed from its start) and the job's state asked; it ends once the job ended and no watcher follows. The
    world moves in the sleeps between reads."""
    from verlctl.backends import slurm
    from verlctl.runtime.records import load_run

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    controller(tmp_path, monkeypatch, "RUNNING", "COMPLETED")
    first, second = _ref(tmp_path, "50"), _ref(tmp_path, "51")
    Path(first.output).write_text("a\n")
    record = _record(tmp_path, [first])
    record.save()  # type: ignore[attr-defined]
    sleeps: list[float] = []
    real_sleep = slurm.time.sleep  # the time module's: subprocess's own short waits keep it

    def tick(s: float) -> None:
        if s != 1.0:
            return real_sleep(s)
        sleeps.append(s)
        if len(sleeps) == 1:
            with open(first.output, "a") as f:
                f.write("b\n")
        if len(sleeps) == 6:  # the watcher resubmits
            Path(second.output).write_text("c\n")
            current = load_run(RUN)
            current.slurm_jobs.append(second)
            current.save()

    watcher = iter([True, False])
    monkeypatch.setattr(slurm.time, "sleep", tick)
    assert slurm.show_output(record, True, 10, lambda r: next(watcher)) == 0  # type: ignore[arg-type]
    assert capsys.readouterr().out == "a\nb\n[verlctl] following the resubmitted Slurm job 51\nc\n"
    assert sleeps == [1.0] * 12
    assert (tmp_path / "asked").read_text().split() .count("--jobs=51") == 2

    def interrupt(s: float) -> None:
        if s != 1.0:
            return real_sleep(s)
        raise KeyboardInterrupt

    monkeypatch.setattr(slurm.time, "sleep", interrupt)
    assert slurm.show_output(load_run(RUN), True, 1, lambda r: True) == 0  # Ctrl-C ends a follow quietly
    assert capsys.readouterr().out == "c\n"


def test_logs_follow_of_a_job_that_has_written_nothing_yet_prints_its_output_from_the_first_byte(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``logs -f`` of a pending job (no output file yet): the file it then writes is shown whole."""
    from verlctl.backends import slurm

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    controller(tmp_path, monkeypatch, "COMPLETED")
    ref = _ref(tmp_path, "60")
    record = _record(tmp_path, [ref])
    record.save()  # type: ignore[attr-defined]
    real_sleep = slurm.time.sleep

    def tick(s: float) -> None:
        if s != 1.0:
            return real_sleep(s)
        if not Path(ref.output).exists():
            Path(ref.output).write_text("first line\n")

    monkeypatch.setattr(slurm.time, "sleep", tick)
    assert slurm.show_output(record, True, 10, lambda r: False) == 0  # type: ignore[arg-type]
    assert capsys.readouterr().out == "first line\n"
