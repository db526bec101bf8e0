"""The watcher's verdicts, on the host runtime: what it says when it starts, silence while healthy, host-RAM
OOM is not device OOM, a resume that trains 0 steps is a failure, a recovery that cannot relaunch gives up
with the reason (events and `status`).

The training is a TEST DOUBLE: a bash script printing verl's log lines (verl's training step cannot run
here). Everything else is real: `verlctl watch` and `status` as subprocesses, the run records, the process
group (its own session), the log file, a real SIGKILL for exit 137.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from verlctl.runtime.executor import HostExecutor
from verlctl.runtime.records import Attempt, RunRecord, new_run_id

from conftest import clean_env, run_cli
from launch_support import write_run_files

KEY = "swl-RECOVERY-KEY-0c1d9e"
OOM_LINE = ("RuntimeError: NPU out of memory. Tried to allocate 1.50 GiB (NPU 0; 29.50 GiB total capacity; "
            "26.91 GiB already allocated; 26.91 GiB current active; 1.12 GiB free; 27.35 GiB reserved in total "
            "by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
            "fragmentation.")


def free_ports() -> list[str]:
    """Ray ports nothing listens on: a launch that finds the default 6766 bound on the host (a Ray double of a
    test beside it, or anyone's Ray) rightly says ray_ports_in_use."""
    from launch_support import free_port

    return ["--set", f"cluster.ray_port={free_port()}", "--set", f"cluster.dashboard_port={free_port()}"]


def _progress(n: int, total: int) -> str:
    return f"Training Progress: {100 * n // total:3d}%|          | {n}/{total} [00:01<00:04,  1.00s/it]"


class HostRuns:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "state"
        self.paths = write_run_files(root)
        self.ckpt = root / "ckpt"
        self.records: list[RunRecord] = []

    def env(self) -> dict[str, str]:
        return clean_env(VERLCTL_STATE_DIR=str(self.state), COLUMNS="200")

    def start(self, lines: list[str], *, tail: str = 'echo "[verlctl 10:00:09] training finished"', pause: float = 0.3,
              resumed_from: str | None = None, cloud: bool = False, env_file: str = "",
              top: dict[str, Any] | None = None, train: dict[str, Any] | None = None) -> RunRecord:
        from verlctl.plan import make_plan
        from verlctl.spec.resolve import load_spec

        spec: dict[str, Any] = {
            "paths": {"model": self.paths["paths.model"], "train_files": self.paths["paths.train_files"],
                      "val_files": self.paths["paths.val_files"], "checkpoints": str(self.ckpt),
                      "logs": str(self.root / "logs")},
            "container": {"runtime": "host"},
            "cluster": {"devices": [0, 1, 2, 3]},
            "train": {"steps": 5, "save_freq": 1, "tensor_parallel": 2, **(train or {})},
            **(top or {}),
        }
        if cloud:
            spec["logging"] = {"swanlab": {"enabled": True, "mode": "cloud", "host": "http://127.0.0.1:9",
                                           "log_dir": str(self.root / "logs" / "swanlab")}}
        (self.root / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
        resolved = load_spec(self.root / "spec.yaml", environ={"SWANLAB_API_KEY": KEY} if cloud else {})
        rendered = make_plan(resolved).render()
        assert KEY not in rendered.files["spec.resolved.yaml"]
        run_id = new_run_id("hostwatch")
        scripts = self.root / "scripts" / run_id
        scripts.mkdir(parents=True)
        fd = os.open(scripts / "verlctl.env", os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, env_file.encode())
        os.close(fd)
        # each line's bytes as given (ANSI colours, tqdm's blocks): quoted for the shell, printed by printf
        body = "\n".join(f"printf '%s\\n' {shlex.quote(ln)}; sleep {pause}" for ln in lines) + "\n" + tail + "\n"
        (scripts / "trainer_double.sh").write_text(body, encoding="utf-8")
        run_log = self.root / "logs" / f"verlctl-{run_id}.log"
        # Started with an identity, as `launch` does: the watcher sees the group alive while the double prints.
        ref = HostExecutor().start_group(["bash", str(scripts / "trainer_double.sh")], str(run_log),
                                         f"{run_id}/1/{os.urandom(8).hex()}")
        pgid = ref.pgid
        record = RunRecord(run_id=run_id, created_at=time.time(), runtime="host", workdir=str(self.root),
                           scripts_dir=str(scripts), run_log=str(run_log), train_log="",
                           checkpoints=str(self.ckpt), experiment="hostwatch", verl_version="0.7.0", pgid=pgid,
                           attempts=[Attempt(number=1, pgid=pgid, started_at=time.time(),
                                             resumed_from=resumed_from, marker=ref.marker,
                                             leader_start=ref.start)])
        os.environ["VERLCTL_STATE_DIR"] = str(self.state)
        record.save()
        (record.dir / "spec.resolved.yaml").write_text(rendered.files["spec.resolved.yaml"], encoding="utf-8")
        record.event("started", pgid=pgid, attempt=1, reason="launch", resumed_from=resumed_from)
        self.records.append(record)
        return record

    def watch(self, record: RunRecord):  # type: ignore[no-untyped-def]
        return run_cli("watch", record.run_id, env=self.env(), timeout=180)

    def status(self, record: RunRecord) -> dict[str, Any]:
        res = run_cli("status", record.run_id, "--json", env=self.env(), timeout=120)
        assert res.code == 0, res.out + res.err
        return json.loads(res.out)

    def events(self, record: RunRecord) -> list[dict[str, Any]]:
        return record.events()


def host_runs_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostRuns]:
    """The body of a `host_runs` fixture (`yield from host_runs_in(...)`): the runs it started, stopped at the
    end."""
    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    runs = HostRuns(tmp_path)
    yield runs
    ex = HostExecutor()
    for r in runs.records:
        for a in r.attempts:
            if a.ref is not None and ex.group_alive(a.ref):
                ex.stop_group(a.ref, grace_s=2)


@pytest.fixture
def host_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    yield from host_runs_in(tmp_path, monkeypatch)


def test_watch_says_what_it_follows_and_stays_silent_while_healthy(host_runs: HostRuns) -> None:
    lines = ["Total training steps: 5"] + [_progress(i, 5) for i in range(6)]
    record = host_runs.start(lines)
    res = host_runs.watch(record)
    assert res.code == 0, res.out + res.err
    out = [ln for ln in res.out.splitlines() if ln.strip()]
    # the start line, then nothing while the run is healthy, then the end
    assert len(out) == 2 and out[1].startswith("verlctl watch: the run finished"), res.out
    assert f"watching run {record.run_id}" in out[0] and f"process group {record.pgid}" in out[0], out[0]
    assert record.run_log in out[0] and "Silent while healthy" in out[0], out[0]
    assert [e["event"] for e in host_runs.events(record)][-1] == "finished"
    # finished: no attempt reads the env file (the SwanLab key) again, and the double left it in place
    assert not (Path(record.scripts_dir) / "verlctl.env").exists()
    assert (Path(record.scripts_dir) / "trainer_double.sh").exists()


def test_exit_137_without_oom_evidence_is_killed_by_signal_9_not_host_oom(host_runs: HostRuns) -> None:
    """O2: a `kill -9` of the training is "killed by signal 9 (SIGKILL)"; OOM is named as one possibility only
    (the kernel log and the cgroup's oom_kill counter say no OOM kill happened), and no offload is added."""
    lines = ["Total training steps: 5", _progress(0, 5), "step:1 - actor/pg_loss:0.1 - training/global_step:1",
             _progress(1, 5)]
    # A user's `kill -9`: the training command dies with 137 and prints nothing about memory.
    tail = ("bash -c 'kill -9 $$'; s=$?; echo \"[verlctl 10:00:05] start_verl.sh exits with status $s\"; "
            "exit \"$s\"")
    record = host_runs.start(lines, tail=tail)
    res = host_runs.watch(record)
    assert res.code == 1, res.out + res.err
    events = host_runs.events(record)
    kinds = [e["event"] for e in events]
    assert "recovery" not in kinds, kinds
    alert = next(e for e in events if e["event"] == "alert")
    assert alert["category"] == "killed", alert
    assert "killed by signal 9 (SIGKILL, exit 137)" in alert["message"], alert
    assert "OOM is one possibility only" in alert["message"] and "host RAM)" not in alert["message"], alert
    assert "oom_kill counter shows no new OOM kill" in alert["message"], alert
    gave_up = next(e for e in events if e["event"] == "gave_up")
    assert gave_up["category"] == "killed"
    assert "offload" not in " ".join(e.get("add_feature") or "" for e in events)
    st = host_runs.status(record)
    assert st["state"] == "failed" and st["gave_up"]["category"] == "killed", st
    assert "host ran out of RAM" not in json.dumps(st), st
    assert not (Path(record.scripts_dir) / "verlctl.env").exists()  # given up: no relaunch reads the key


def test_a_resume_that_trains_no_step_and_exits_0_is_a_failure(host_runs: HostRuns) -> None:
    ckpt = str(host_runs.ckpt / "global_step_3")
    lines = ["Total training steps: 5", f"Load from checkpoint folder: {ckpt}", "Setting global step to 3",
             _progress(3, 5)]
    record = host_runs.start(lines, resumed_from=ckpt)
    res = host_runs.watch(record)
    assert res.code == 1, res.out + res.err
    events = host_runs.events(record)
    failed = next(e for e in events if e["event"] == "resume_failed")
    assert "trained 0 steps" in failed["reason"] and "global_step_3" in failed["reason"], failed
    assert "finished" not in [e["event"] for e in events]
    st = host_runs.status(record)
    assert st["state"] == "failed" and st["state_why"].startswith("the watcher gave up"), st
    assert "trained 0 steps" in st["gave_up"]["reason"]
    res = run_cli("status", record.run_id, env=host_runs.env(), timeout=120)
    assert "gave up: attempt 1 exited 0 having trained 0 steps" in res.out, res.out


def test_a_resume_that_advances_past_its_checkpoint_finishes(host_runs: HostRuns) -> None:
    ckpt = str(host_runs.ckpt / "global_step_3")
    lines = ["Total training steps: 5", f"Load from checkpoint folder: {ckpt}", _progress(3, 5),
             "step:4 - training/global_step:4", _progress(4, 5), "step:5 - training/global_step:5", _progress(5, 5)]
    record = host_runs.start(lines, resumed_from=ckpt)
    res = host_runs.watch(record)
    assert res.code == 0, res.out + res.err
    events = host_runs.events(record)
    assert next(e for e in events if e["event"] == "resume_advanced")["step"] == 4
    assert events[-1]["event"] == "finished"


def test_an_oom_recovery_that_cannot_relaunch_gives_up_with_the_reason(host_runs: HostRuns) -> None:
    # A SwanLab cloud run whose env file in the target lost the key: the relaunch cannot log in.
    lines = ["Total training steps: 5", _progress(0, 5), "step:1 - training/global_step:1", _progress(1, 5),
             "Traceback (most recent call last):", OOM_LINE]
    tail = 'echo "[verlctl 10:00:05] start_verl.sh exits with status 1"; exit 1'
    record = host_runs.start(lines, tail=tail, cloud=True, env_file="SWANLAB_MODE=cloud\n")
    res = host_runs.watch(record)
    assert res.code == 1, res.out + res.err
    assert "Traceback" not in res.err
    events = host_runs.events(record)
    gave_up = next(e for e in events if e["event"] == "gave_up")
    assert gave_up["reason"].startswith("gave up: cannot relaunch: SwanLab cloud mode needs an API key"), gave_up
    assert gave_up["category"] == "device_oom"
    st = host_runs.status(record)
    assert st["gave_up"]["reason"].startswith("gave up: cannot relaunch"), st
    assert KEY not in (record.dir / "events.jsonl").read_text() + res.out + res.err


def test_host_oom_never_climbs_the_offload_rung(tmp_path: Path) -> None:
    from verlctl.monitor.recovery import History, decide
    from verlctl.spec.resolve import load_spec

    flags = {**write_run_files(tmp_path), "container.runtime": "host"}
    spec = load_spec(None, flags=flags, environ={}).spec
    # After a device OOM the ladder added offload; then host RAM ran out.
    d = decide("host_oom", spec, {"offload": False, "recompute": False}, History())
    assert not d.restart and d.add_feature is None
    d = decide("host_oom", spec, {"offload": True}, History(oom_retries=1, added=["offload"]))
    assert not d.restart and d.add_feature is None
    assert d.advice[0].startswith("turn offload off") and "the OOM ladder added offload" in d.advice[0], d.advice
    spec = load_spec(None, flags={**flags, "recovery.restart_on": ["host_oom"], "recovery.max_restarts": 1},
                     environ={}).spec
    d = decide("host_oom", spec, {"offload": False}, History())
    assert d.restart and d.add_feature is None and "without adding offload" in d.reason


def test_the_launch_checklist_says_whether_training_resumes_or_starts_fresh(tmp_path: Path) -> None:
    flags = write_run_files(tmp_path)
    ckpt = tmp_path / "ckpt"
    workdir = tmp_path / "verl"  # DAPO on 0.7.0 runs recipe/dapo/main_dapo.py from the work dir (rule recipe)
    (workdir / "recipe" / "dapo").mkdir(parents=True)
    (workdir / "recipe" / "dapo" / "main_dapo.py").write_text("")
    args = ["launch", "--dry-run", *[a for k, v in flags.items() for a in ("--set", f"{k}={v}")],
            "--set", "container.runtime=host", "--set", f"paths.checkpoints={ckpt}",
            "--set", f"paths.logs={tmp_path / 'logs'}", "--set", f"container.workdir={workdir}", *free_ports()]
    # a host-runtime NPU launch needs the host's npu-smi (else npu_smi_missing is an error, as in `check`)
    from test_check_cli import npu_smi_double

    tools = npu_smi_double(tmp_path, "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt")
    # the host's python3 needs Ray (image_ray_missing, as in `check`): a distribution's metadata says it is there
    site = tmp_path / "site"
    (site / "ray-2.49.0.dist-info").mkdir(parents=True)
    (site / "ray-2.49.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: ray\nVersion: 2.49.0\n")
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), COLUMNS="300", PATH=f"{tools}:{os.environ['PATH']}",
                    PYTHONPATH=str(site))
    res = run_cli(*args, env=env)
    assert res.code == 0, res.out + res.err
    assert f"training starts fresh (no checkpoint in {ckpt})" in res.out, res.out
    (ckpt / "global_step_2" / "actor").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("2")
    res = run_cli(*args, env=env)
    assert res.code == 0, res.out + res.err
    assert f"training resumes from global_step_2 in {ckpt}" in res.out, res.out


def test_a_key_file_that_cannot_be_removed_is_one_warning_naming_it(host_runs: HostRuns) -> None:
    from verlctl.backends.docker import remove_key_files

    record = host_runs.start(["Total training steps: 5"])
    env_file = Path(record.scripts_dir) / "verlctl.env"
    said: list[str] = []
    assert remove_key_files(record, HostExecutor(), said.append) == [] and said == []
    assert not env_file.exists()
    env_file.mkdir()  # `rm -f` refuses a directory: a real failure of the removal
    (env_file / "x").write_text("k")
    warnings = remove_key_files(record, HostExecutor(), said.append)
    assert len(warnings) == 1 and said == [f"warning: {warnings[0]}"], said
    assert warnings[0].startswith(f"could not remove {env_file} in ") and "Is a directory" in warnings[0], warnings
    assert remove_key_files(record, None, said.append) == []  # no executor (a gone target): nothing to try


def test_the_removal_warning_is_bounded_and_printed_literally(host_runs: HostRuns) -> None:
    """stop's console path: a path with rich markup in it is printed as is; rm's message is cut at 200."""
    import io

    from rich.console import Console

    from verlctl.orchestrator.inspect import _remove_key_files

    record = host_runs.start(["Total training steps: 5"])
    deep = Path(record.scripts_dir) / "[bold]x[/bold]" / ("d" * 120) / ("e" * 120)
    (deep / "verlctl.env").mkdir(parents=True)
    record.scripts_dir = str(deep)
    out = io.StringIO()
    warnings = _remove_key_files(record, HostExecutor(), Console(file=out, width=2000))
    prefix = f"could not remove {deep}/verlctl.env in {HostExecutor().describe()}: "
    assert len(warnings) == 1 and warnings[0].startswith(prefix), warnings
    assert len(warnings[0]) == len(prefix) + 200  # rm's message names the long path twice: cut to 200
    assert out.getvalue() == f"warning: {warnings[0]}\n"  # "[bold]" stays literal


@pytest.mark.docker
def test_a_key_file_in_a_gone_container_is_a_warning_not_an_error(host_runs: HostRuns, docker_engine) -> None:  # type: ignore[no-untyped-def]
    """The watcher gives up on a run whose container was removed: the removal says so and goes on."""
    from verlctl.backends.docker import remove_key_files
    from verlctl.runtime.executor import DockerExecutor

    record = host_runs.start(["Total training steps: 5"])
    gone = DockerExecutor(docker_engine, "0" * 64, "verlctl-test-gone-container")
    said: list[str] = []
    warnings = remove_key_files(record, gone, said.append)
    assert len(warnings) == 1 and said == [f"warning: {warnings[0]}"], said
    assert warnings[0].startswith(f"could not remove {record.scripts_dir}/verlctl.env in "), warnings
    assert "verlctl-test-gone-container" in warnings[0] and "cannot run rm" in warnings[0], warnings


def test_stop_reports_a_watcher_that_saw_the_stop_mark_and_ended_first(host_runs: HostRuns,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Under load the watcher can see the run marked stopped and end before stop would signal it (CI saw it
    with Slurm): stop still says it stopped the watcher, which was following the run when stop began."""
    import io

    from rich.console import Console

    from verlctl.orchestrator.inspect import stop_run, watcher_alive
    from verlctl.orchestrator.watcher_process import spawn_watcher

    lines = ["Total training steps: 400"] + [_progress(i, 400) for i in range(400)]
    record = host_runs.start(lines, pause=0.2)
    pid = spawn_watcher(record, None)
    deadline = time.monotonic() + 60
    while not any(e["event"] == "watch_started" for e in host_runs.events(record)):
        assert time.monotonic() < deadline, host_runs.events(record)
        time.sleep(0.2)
    assert watcher_alive(record)
    saved = RunRecord.save

    def save_then_let_the_watcher_end(self: RunRecord) -> None:
        saved(self)
        if self.stopped:  # the mark is written: wait until the watcher has seen it and ended by itself
            end = time.monotonic() + 60
            while watcher_alive(self):
                assert time.monotonic() < end, "the watcher did not end after the stop mark"
                time.sleep(0.1)

    monkeypatch.setattr(RunRecord, "save", save_then_let_the_watcher_end)
    out = io.StringIO()
    result = stop_run(record.run_id, False, 5.0, Console(file=out, width=300))
    assert result["watcher_stopped"] == pid, (result, out.getvalue())
    assert f"stopped the watcher (pid {pid})" in out.getvalue()
    assert "watch_stopped" in [e["event"] for e in host_runs.events(record)]  # it ended on its own
    assert result["signalled"] and not HostExecutor().group_alive(record.ref)


def test_stop_signals_a_watcher_still_following_the_run_and_nothing_else(host_runs: HostRuns) -> None:
    """A watcher that has not seen the stop mark yet gets SIGTERM (its identity checked); without one watching
    when stop began, nothing is signalled. The stand-in has a watcher's command line but never reads the mark."""
    import io
    import subprocess
    import sys

    from rich.console import Console

    from verlctl.orchestrator.inspect import stop_watcher

    record = host_runs.start(["Total training steps: 5"])
    code = "import time; time.sleep(120)"
    procs = [subprocess.Popen([sys.executable, "-c", code, "verlctl", "watch", record.run_id]) for _ in range(2)]
    try:
        out = io.StringIO()
        record.watcher_pid = procs[0].pid
        assert stop_watcher(record, False, Console(file=out)) is None and out.getvalue() == ""
        assert procs[0].poll() is None  # not watching when stop began: left alone
        assert stop_watcher(record, True, Console(file=out)) == procs[0].pid
        assert procs[0].wait(timeout=30) == -15  # SIGTERM, nothing else
        assert out.getvalue() == f"stopped the watcher (pid {procs[0].pid})\n"
        assert procs[1].poll() is None  # another process with the same command line: not the recorded pid
        record.watcher_pid = None
        assert stop_watcher(record, True, Console(file=io.StringIO())) is None
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_an_engine_already_gone_when_the_watcher_looks_is_a_target_lost_event(host_runs: HostRuns,
                                                                              tmp_path: Path) -> None:
    """The run's Docker engine stopped before the watcher's next liveness scan (a loaded machine: the loaded
    series caught it): the scan fails, the engine does not answer the inspect either, and both reasons go into
    one ``target_lost`` event (the watcher crashed on the two ``error`` keys before)."""
    import docker

    from verlctl.orchestrator.watcher import Watcher
    from verlctl.runtime.executor import DockerExecutor
    from verlctl.spec.resolve import load_spec

    record = host_runs.start(["Total training steps: 5"])
    gone = tmp_path / "gone.sock"  # a unix socket path nothing listens on: the engine is gone
    client = docker.DockerClient(base_url=f"unix://{gone}", version="1.41", timeout=5)
    ex = DockerExecutor(client, "f" * 64, "verlctl-test-engine-gone")
    said: list[str] = []
    from verlctl.orchestrator.runs import run_for

    watcher = Watcher(record, ex, load_spec(host_runs.root / "spec.yaml", use_env=False), say=said.append,
                      backend=run_for(record))
    watcher.engine_wait_s = 1.0  # it does not come back
    started = time.monotonic()
    outcome = watcher.watch_attempt()
    assert time.monotonic() - started < 30
    assert outcome.kind == "lost" and "is engine unreachable" in outcome.detail, outcome
    lost = next(e for e in host_runs.events(record) if e["event"] == "target_lost")
    assert lost["state"] == "engine unreachable" and lost["attempt"] == 1, lost
    assert "cannot run python3" in lost["error"] and "verlctl-test-engine-gone" in lost["error"], lost
    assert "No such file or directory" in lost["engine_error"], lost
    assert any("lost the run's container verlctl-test-engine-gone: engine unreachable" in s for s in said), said


def test_a_ray_head_that_says_its_daemons_exited_is_reported_at_once(host_runs: HostRuns) -> None:
    """The head's `ray start --block` printed that its gcs_server exited (it kills the rest and exits) before
    the watcher ever scanned the daemons: a loaded machine, where the watcher starts late (the loaded series
    caught it). The driver would wait 60 s for the GCS; the watcher reports the head gone within seconds and
    stops what is left. The lines are real Ray 2.x output (tests/orchestrator/test_faults_docker.py's run)."""
    lines = ["Total training steps: 600", _progress(0, 600),
             "step:1 - actor/pg_loss:0.1 - training/global_step:1", _progress(1, 600),
             "2026-12-01 04:05:12,066\tERR scripts.py:1307 -- Some Ray subprocesses exited unexpectedly:",
             "2026-12-01 04:05:12,066\tERR scripts.py:87 -- gcs_server [exit code=-9]",
             "2026-12-01 04:05:12,067\tERR scripts.py:1315 -- Remaining processes will be killed."]
    # The driver's wait for the GCS (Ray's 60 s reconnect timeout), then its error, as in the docker run.
    tail = ('sleep 60; echo "[2026-12-01 04:06:12,489 E 346 429] rpc_client.h:204: Failed to connect to GCS '
            'within 60 seconds."; exit 1')
    record = host_runs.start(lines, tail=tail, pause=0.1)
    started = time.monotonic()
    res = host_runs.watch(record)
    took = time.monotonic() - started
    assert res.code == 1, res.out + res.err
    assert took < 40, (took, res.out)  # not the driver's 60 s
    assert ("verlctl watch: ray_gcs_unreachable: the Ray head of attempt 1 is gone: its `ray start` says 'Some Ray "
            "subprocesses exited unexpectedly' (log line 5)") in res.out, res.out  # no "at log line 0"
    events = host_runs.events(record)
    alert = next(e for e in events if e["event"] == "alert")
    assert alert["category"] == "ray_gcs_unreachable" and "log line 5" in alert["message"], alert
    assert not HostExecutor().group_alive(record.attempts[-1].ref)  # what was left is stopped
    assert [e["event"] for e in events][-1] == "gave_up", events


def test_ray_daemons_exiting_after_training_finished_is_no_failure(host_runs: HostRuns) -> None:
    """The same Ray lines after `start_verl.sh` said the training finished (its exit stops Ray): the run
    finished; nothing is reported gone."""
    lines = ["Total training steps: 1", _progress(0, 1), "step:1 - actor/pg_loss:0.1 - training/global_step:1",
             _progress(1, 1), "[verlctl 10:00:09] training finished",
             "2026-12-01 04:05:12,066\tERR scripts.py:1307 -- Some Ray subprocesses exited unexpectedly:"]
    record = host_runs.start(lines, tail="sleep 2", pause=0.1)
    res = host_runs.watch(record)
    assert res.code == 0, res.out + res.err
    assert "the Ray head of attempt" not in res.out, res.out
    assert [e["event"] for e in host_runs.events(record)][-1] == "finished"


def test_a_launch_with_yes_says_that_training_resumes(tmp_path: Path) -> None:
    # F6: --yes shows no checklist; the resume must still be said before anything starts. The launch itself
    # then stops at the target's readiness check (a PATH with no bash or python3): what is printed before counts.
    flags = write_run_files(tmp_path)
    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step_2" / "actor").mkdir(parents=True)  # below train.steps 4 (else resume_past_steps)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("2")
    workdir = tmp_path / "verl"  # DAPO on 0.7.0 runs recipe/dapo/main_dapo.py from the work dir (rule recipe)
    (workdir / "recipe" / "dapo").mkdir(parents=True)
    (workdir / "recipe" / "dapo" / "main_dapo.py").write_text("")
    from test_check_cli import npu_smi_double

    tools = npu_smi_double(tmp_path, "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt")
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), COLUMNS="300", PATH=str(tools))
    res = run_cli("launch", "--yes", *[a for k, v in flags.items() for a in ("--set", f"{k}={v}")],
                  "--set", "container.runtime=host", "--set", f"paths.checkpoints={ckpt}",
                  "--set", f"paths.logs={tmp_path / 'logs'}", "--set", f"container.workdir={workdir}",
                  *free_ports(), env=env)
    out = res.out + res.err
    assert res.code != 0 and "python3 is not available" in out, out
    assert f"training resumes from global_step_2 in {ckpt}" in out, out


# A fully_async run (verl 0.9.1 verl/experimental/fully_async_policy): its rollouter and trainer are Ray actors
# of their own on their own devices. fully_async cannot run on CPU, so the training is the TEST DOUBLE above,
# printing the lines Ray forwards from those actors (the `(FullyAsyncRollouter pid=N)` prefix, a RayTaskError
# naming `ray::FullyAsyncRollouter.fit()`).
FULLY_ASYNC = {"verl_version": "0.9.1", "mode": "fully_async", "strategy": "fsdp"}
FA_TRAIN = {"rollout_devices": 2, "rollout_tensor_parallel": 1, "train_batch_size": 16, "mini_batch_size": 4,
            "parameter_sync_step": 4}
ROLLOUTER_DIED = ("ray.exceptions.RayTaskError(ActorDiedError): ray::FullyAsyncRollouter.fit() (pid=4242, "
                  "ip=10.0.0.2, actor_id=0123, repr=<FullyAsyncRollouter object at 0x7f>)")


def test_a_fully_async_run_whose_rollouter_died_is_reported_as_such(host_runs: HostRuns) -> None:
    lines = ["Total training steps: 5", _progress(0, 5), "step:1 - training/global_step:1", _progress(1, 5),
             "(FullyAsyncRollouter pid=4242) [FullyAsyncRollouter] generating batch 7", ROLLOUTER_DIED]
    tail = 'echo "[verlctl 10:00:05] start_verl.sh exits with status 1"; exit 1'
    record = host_runs.start(lines, tail=tail, top=FULLY_ASYNC, train=FA_TRAIN)
    res = host_runs.watch(record)
    assert res.code == 1, res.out + res.err
    alert = next(e for e in host_runs.events(record) if e["event"] == "alert")
    assert alert["category"] == "ray_actor_died", alert
    assert (alert["process"], alert["role"]) == ("FullyAsyncRollouter", "rollouter"), alert
    assert alert["message"].endswith(": the rollouter (FullyAsyncRollouter) of this fully_async run"), alert
    assert "the rollouter (FullyAsyncRollouter) of this fully_async run" in res.out, res.out


def test_a_rollout_oom_of_a_fully_async_run_never_adds_trainer_offload(host_runs: HostRuns) -> None:
    """The rollouter's devices ran out: offload and recompute free the trainer's devices only (they are the
    actor's param / optimizer / activation memory), so the ladder gives up with rollout advice instead."""
    lines = ["Total training steps: 5", _progress(0, 5), "step:1 - training/global_step:1", _progress(1, 5),
             "(FullyAsyncRollouter pid=4242) Traceback (most recent call last):",
             f"(FullyAsyncRollouter pid=4242) {OOM_LINE}", ROLLOUTER_DIED]
    tail = 'echo "[verlctl 10:00:05] start_verl.sh exits with status 1"; exit 1'
    record = host_runs.start(lines, tail=tail, top=FULLY_ASYNC, train=FA_TRAIN)
    res = host_runs.watch(record)
    assert res.code == 1, res.out + res.err
    events = host_runs.events(record)
    assert "recovery" not in [e["event"] for e in events], [e["event"] for e in events]
    alert = next(e for e in events if e["event"] == "alert")
    assert alert["category"] == "device_oom" and alert["process"] == "FullyAsyncRollouter", alert
    notices = [e["message"] for e in events if e["event"] == "notice"]
    assert any(n.startswith("offload skipped by the OOM ladder: it frees the trainer's device memory") for n in notices)
    for n in notices:  # said too, not only recorded (seed 9846's survivor: the lines were not printed)
        assert f"verlctl watch: {n}\n" in res.out, (n, res.out)
    gave_up = next(e for e in events if e["event"] == "gave_up")
    assert gave_up["category"] == "device_oom"
    assert "out of memory on the rollout's own devices" in gave_up["reason"], gave_up
