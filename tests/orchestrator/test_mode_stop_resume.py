"""`stop` and resume know each trainer mode's processes and checkpoints (issue 23: "The watcher, OOM ladder,
`stop` and resume know these modes' processes (the rollouter, the message queue)").

stop: real processes on this host stand in for the mode's Ray actors (test doubles of Ray's workers: `exec -a`
gives them Ray's process title ``ray::Class.method``, the run's marker is in their environment as Ray's workers
inherit it); `verlctl stop` names the ones of the run's mode it found among the verified processes, and that
each is gone afterwards; a process with the same title that the run did not start is neither named nor signalled.
resume: what verl 0.9.1 restores from ``global_step_N`` per mode (verl/modes.py RESUME), and the run's
``trainer.resume_mode`` (an extra override wins over verlctl's ``auto``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from verlctl.orchestrator.resume import resume_action, resume_point, resume_settings
from verlctl.spec.resolve import load_spec
from verlctl.verl.modes import MODES, PROCESSES, RESUME, process_names

from fault_support import alive, leader_start, started_procs, state_cli, wait_for
from fault_support import write_record as write_any_record

RUN = "20260101-000000-modes-abcd"
BASE = {"verl_version": "0.9.1", "paths.model": "/m/Qwen3-8B", "paths.train_files": "/d/t.parquet",
        "paths.val_files": "/d/v.parquet", "cluster.devices": [0, 1, 2, 3]}


def _resolved(mode: str, **flags: Any) -> Any:
    return load_spec(None, flags={**BASE, "mode": mode, **flags}, environ={})


@pytest.fixture
def procs():  # type: ignore[no-untyped-def]
    yield from started_procs()


# ------------------------------------------------------------------------------------------------ stop


def _start_run(tmp_path: Path, procs: Any, mode: str) -> tuple[int, dict[str, int]]:
    """A run of ``mode``: a leader whose children are titled as the mode's Ray actors (one of them in a session
    of its own, as Ray's workers are); the pid of each, by class name, once all are up."""
    from verlctl.plan import make_plan

    marker = f"{RUN}.1.{os.urandom(8).hex()}"  # unique: tests in parallel never share one
    names = process_names(mode)
    lines = []
    for i, name in enumerate(names):
        title = f"ray::{name}.run" if i % 2 else f"ray::{name}"
        cmd = f"exec -a {title} sleep 600"
        # every other actor in a process group and session of its own (Ray's workers are not the leader's group)
        lines.append((f"setsid bash -c '{cmd}' &" if i % 2 else f"bash -c '{cmd}' &") + f" echo $! > {tmp_path}/{name}.pid")
    script = "\n".join([*lines, "wait"])
    leader = procs(["bash", "-c", script], env={"VERLCTL_ATTEMPT": marker})
    d = write_any_record(tmp_path, RUN, leader.pid, marker=marker, leader_start=leader_start(leader.pid))
    (d / "spec.resolved.yaml").write_text(make_plan(_resolved(mode)).render().files["spec.resolved.yaml"],
                                         encoding="utf-8")
    pids: dict[str, int] = {}

    def up() -> bool:
        for name in names:
            f = tmp_path / f"{name}.pid"
            if name not in pids and f.exists() and f.read_text().strip():
                pids[name] = int(f.read_text())
        # setsid forks when its caller leads a group: the title is the one of the process that runs
        return len(pids) == len(names) and all(
            Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"ray::") for p in _running(pids).values())

    assert wait_for(up, timeout=30), pids
    return leader.pid, _running(pids)


def _titled(tmp_path: Path, *pidfiles: str) -> bool:
    """Each pid file written and its process titled ``ray::...`` already (this run's own processes only: the
    other tests' stand-ins carry the same titles)."""
    for name in pidfiles:
        f = tmp_path / name
        try:
            if not f.read_text().strip() or not Path(f"/proc/{int(f.read_text())}/cmdline").read_bytes().startswith(
                    b"ray::"):
                return False
        except (OSError, ValueError):
            return False
    return True


def _running(pids: dict[str, int]) -> dict[str, int]:
    """The pid that carries each title (setsid may have forked once: its child has the title)."""
    out = {}
    for name, pid in pids.items():
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::"):
                out[name] = pid
                continue
        except OSError:
            pass
        for child in Path("/proc").iterdir():
            if child.name.isdigit():
                try:
                    stat = (child / "stat").read_text()
                    if int(stat[stat.rfind(")") + 2:].split()[1]) == pid:
                        out[name] = int(child.name)
                except (OSError, ValueError):
                    continue
    return out


@pytest.mark.parametrize("mode", ["fully_async", "separate_async", "one_step_off_policy", "colocate_async"])
def test_stop_names_the_modes_processes_it_found_and_that_each_is_gone(tmp_path: Path, procs: Any, mode: str) -> None:
    leader, pids = _start_run(tmp_path, procs, mode)
    # the same title, not started by the run (no marker): never named, never signalled
    decoy = procs(["bash", "-c", f"exec -a ray::{process_names(mode)[0]} sleep 600"])
    assert wait_for(lambda: Path(f"/proc/{decoy.pid}/cmdline").read_bytes().startswith(b"ray::"))
    res = state_cli(tmp_path, "stop", RUN, "--json", "--grace", "10")
    assert res.code == 0, res.out + res.err
    doc = json.loads(res.out)
    assert doc["mode"] == mode
    by_name = {p["name"]: p for p in doc["mode_processes"]}
    assert set(by_name) == set(process_names(mode)), by_name
    for name, pid in pids.items():
        p = by_name[name]
        assert (p["found"], p["pid"], p["stopped"], p["role"]) == (True, pid, True, PROCESSES[name].role), p
        assert not alive(pid)
        assert f"the {PROCESSES[name].role} ({name}, pid {pid} in host) stopped" in res.err, res.err
    assert f"{mode}'s processes among the run's verified ones: " in res.err
    assert not alive(leader)
    assert alive(decoy.pid)
    assert str(decoy.pid) not in json.dumps(doc["mode_processes"])


def test_stop_of_a_fully_async_run_says_which_processes_were_not_running(tmp_path: Path, procs: Any) -> None:
    """Only the rollouter and the queue run (the trainer died): stop names those two, stopped, and the others as
    not found; in text, the rollouter by its role."""
    from verlctl.plan import make_plan

    marker = f"{RUN}.1.{os.urandom(8).hex()}"  # unique: tests in parallel never share one
    script = (f"bash -c 'exec -a ray::FullyAsyncRollouter.fit sleep 600' & echo $! > {tmp_path}/r.pid; "
              f"bash -c 'exec -a ray::MessageQueue sleep 600' & echo $! > {tmp_path}/q.pid; wait")
    leader = procs(["bash", "-c", script], env={"VERLCTL_ATTEMPT": marker})
    d = write_any_record(tmp_path, RUN, leader.pid, marker=marker, leader_start=leader_start(leader.pid))
    (d / "spec.resolved.yaml").write_text(make_plan(_resolved("fully_async")).render().files["spec.resolved.yaml"],
                                         encoding="utf-8")
    assert wait_for(lambda: _titled(tmp_path, "r.pid", "q.pid"), timeout=30)
    res = state_cli(tmp_path, "stop", RUN, "--json", "--grace", "10")
    assert res.code == 0, res.out + res.err
    doc = json.loads(res.out)
    found = {p["name"]: p for p in doc["mode_processes"] if p["found"]}
    assert set(found) == {"FullyAsyncRollouter", "MessageQueue"}, doc["mode_processes"]
    assert all(p["stopped"] is True and p["where"] == "host" for p in found.values())
    rollouter, queue = found["FullyAsyncRollouter"]["pid"], found["MessageQueue"]["pid"]
    assert [p for p in doc["mode_processes"] if not p["found"]] == [
        {"name": n, "role": PROCESSES[n].role, "side": PROCESSES[n].side, "found": False, "pid": None, "where": None,
         "stopped": None} for n in ("FullyAsyncTaskRunner", "FullyAsyncTrainer", "vLLMHttpServer", "SGLangHttpServer")]
    text = " ".join(res.err.split())
    pieces = [f"the rollouter (FullyAsyncRollouter, pid {rollouter} in host)",
              f"the message queue between rollouter and trainer (MessageQueue, pid {queue} in host)"]
    head = "fully_async's processes among the run's verified ones: "
    tail = "; not running: FullyAsyncTaskRunner, FullyAsyncTrainer, vLLMHttpServer, SGLangHttpServer stopped process group"
    assert (head + ", ".join(pieces) + tail in text) or (head + ", ".join(reversed(pieces)) + tail in text), text
    assert f"the rollouter (FullyAsyncRollouter, pid {rollouter} in host) stopped" in text, text
    assert "STILL RUNNING" not in text


def test_stop_of_a_run_that_has_ended_says_none_of_its_processes_runs(tmp_path: Path, procs: Any) -> None:
    from verlctl.plan import make_plan

    gone = procs(["true"])
    gone.wait()
    d = write_any_record(tmp_path, RUN, gone.pid, marker=f"{RUN}.1.{os.urandom(8).hex()}", leader_start=1)
    (d / "spec.resolved.yaml").write_text(make_plan(_resolved("separate_async")).render().files["spec.resolved.yaml"],
                                         encoding="utf-8")
    res = state_cli(tmp_path, "stop", RUN, "--json", "--grace", "5")
    assert res.code == 0, res.out + res.err
    doc = json.loads(res.out)
    assert doc["signalled"] == [] and [p["found"] for p in doc["mode_processes"]] == [False] * 4
    assert ("separate_async's processes among the run's verified ones: none running (TaskRunnerV1, "
            "DetachActorWorker, vLLMHttpServer, SGLangHttpServer)") in res.err, res.err


def test_without_a_recorded_spec_stop_names_any_modes_process_it_found(tmp_path: Path, procs: Any) -> None:
    """A record whose spec cannot be read: the mode is unknown; a process of any mode among the verified ones is
    still named (and nothing is listed as not running)."""
    marker = f"{RUN}.1.{os.urandom(8).hex()}"  # unique: tests in parallel never share one
    leader = procs(["bash", "-c", f"bash -c 'exec -a ray::FullyAsyncRollouter sleep 600' & echo $! > {tmp_path}/r.pid;"
                    " wait"], env={"VERLCTL_ATTEMPT": marker})
    write_any_record(tmp_path, RUN, leader.pid, marker=marker, leader_start=leader_start(leader.pid))
    assert wait_for(lambda: _titled(tmp_path, "r.pid"), timeout=30)
    pid = int((tmp_path / "r.pid").read_text())
    res = state_cli(tmp_path, "stop", RUN, "--json", "--grace", "10")
    assert res.code == 0, res.out + res.err
    doc = json.loads(res.out)
    assert doc["mode"] is None
    assert [(p["name"], p["pid"], p["stopped"]) for p in doc["mode_processes"]] == [("FullyAsyncRollouter", pid, True)]
    assert (f"the run's processes among the run's verified ones: the rollouter (FullyAsyncRollouter, pid {pid} in "
            "host) stopped process group") in " ".join(res.err.split()), res.err


def test_a_sync_run_has_no_mode_processes_to_report(tmp_path: Path, procs: Any) -> None:
    marker = f"{RUN}.1.{os.urandom(8).hex()}"  # unique: tests in parallel never share one
    leader = procs(["bash", "-c", "bash -c 'exec -a ray::WorkerDict sleep 600' & wait"],
                   env={"VERLCTL_ATTEMPT": marker})
    from verlctl.plan import make_plan

    d = write_any_record(tmp_path, RUN, leader.pid, marker=marker, leader_start=leader_start(leader.pid))
    (d / "spec.resolved.yaml").write_text(make_plan(_resolved("sync")).render().files["spec.resolved.yaml"],
                                         encoding="utf-8")
    res = state_cli(tmp_path, "stop", RUN, "--json", "--grace", "10")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["mode"] == "sync" and doc["mode_processes"] == []
    assert f"stopped process group {leader.pid}" in res.err


def test_the_ray_actor_title_is_read_from_the_command_line() -> None:
    from verlctl.runtime.procscan import ray_actor, verify

    assert ray_actor("ray::FullyAsyncRollouter.fit") == "FullyAsyncRollouter"
    assert ray_actor("ray::MessageQueue") == "MessageQueue"
    assert ray_actor("ray::MessageQueue.get_sample()") == "MessageQueue"
    for other in ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent", "raylet --x", "python3 ray::X", "",
                  "ray::", "ray::9x"):
        assert ray_actor(other) is None, other
    p = {"pid": 50, "pgid": 50, "state": "S", "start": 7, "marker": "m", "cmd": "bash x", "uid": 0}
    actor = {**p, "pid": 51, "start": 9, "cmd": "ray::FullyAsyncTrainer.fit"}
    foreign = {**p, "pid": 52, "pgid": 52, "marker": None, "cmd": "ray::FullyAsyncRollouter"}
    assert verify([p, actor, foreign], 50, "m", 7)["actors"] == [[51, "FullyAsyncTrainer", 9]]


# ------------------------------------------------------------------------------------------------ resume


def _checkpoint(root: Path, step: int, entries: tuple[str, ...]) -> Path:
    d = root / f"global_step_{step}"
    d.mkdir(parents=True)
    for e in entries:
        if e.endswith(".pt"):
            (d / e).write_bytes(b"state")
        else:
            (d / e).mkdir()
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return d


@pytest.mark.parametrize(
    ("mode", "entries", "says"),
    [
        ("sync", ("actor", "data.pt"), ["N=3 counts trainer steps", "the step after N",
                                        "the actor's weights and optimizer (actor)", "the dataloader's position"]),
        ("one_step_off_policy", ("actor", "data.pt"), ["N=3 counts trainer steps",
                                                       "the rollout's first batch is generated again"]),
        ("colocate_async", ("actor", "data.pt", "transfer_queue"),
         ["N=3 counts global steps of the V1 trainer", "pending prompts re-issued (transfer_queue)"]),
        ("separate_async", ("actor", "data.pt", "transfer_queue"),
         ["N=3 counts global steps of the V1 trainer", "the standalone rollout gets the loaded weights"]),
        ("fully_async", ("actor", "data.pt"),
         ["N=3 counts weight syncs (the trainer's parameter version), not trainer steps",
          "the trainer's step N x trigger_parameter_sync_step + 1",
          "the rollouter's dataloader position (written by the FullyAsyncRollouter) (data.pt)",
          "the samples in flight (in the message queue and the rollouter's queues) are not saved"]),
    ],
)
def test_resume_says_what_each_mode_restores_from_the_checkpoint(tmp_path: Path, mode: str,
                                                                 entries: tuple[str, ...], says: list[str]) -> None:
    ck = tmp_path / "ck"
    point = _checkpoint(ck, 3, entries)
    spec = _resolved(mode, **{"paths.checkpoints": str(ck)}).spec
    assert resume_point(str(ck), spec) == str(point)
    text = resume_action(str(ck), spec)
    assert text.startswith(f"training resumes from global_step_3 in {ck} (trainer.resume_mode=auto finds it; "
                           f"{mode}: "), text
    for s in says:
        assert s in text, (s, text)
    assert "not there" not in text
    assert text.endswith("move it away first to start fresh")


def test_every_mode_has_its_resume_knowledge() -> None:
    assert set(RESUME) == set(MODES)
    for info in RESUME.values():
        assert info.restores[0][0] == "actor" and info.cite and ".py:" in info.cite


def test_a_checkpoint_missing_what_verl_loads_is_said(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _checkpoint(ck, 2, ("data.pt",))
    spec = _resolved("separate_async", **{"paths.checkpoints": str(ck)}).spec
    text = resume_action(str(ck), spec)
    assert "not there: actor, transfer_queue (verl cannot load the weights: move the folder away)" in text, text
    ck2 = tmp_path / "ck2"
    _checkpoint(ck2, 2, ("actor",))
    text = resume_action(str(ck2), _resolved("fully_async", **{"paths.checkpoints": str(ck2)}).spec)
    assert "not there: data.pt (verl warns and starts that part from scratch)" in text, text


def test_the_tracker_without_its_folder_is_a_fresh_start(tmp_path: Path) -> None:
    """verl's find_latest_ckpt_path returns None when global_step_N is missing: so does verlctl."""
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "latest_checkpointed_iteration.txt").write_text("4")
    spec = _resolved("fully_async", **{"paths.checkpoints": str(ck)}).spec
    assert resume_point(str(ck), spec) is None
    assert resume_action(str(ck), spec) == f"training starts fresh (no checkpoint in {ck})"


def test_resume_mode_disable_in_extra_overrides_starts_fresh(tmp_path: Path) -> None:
    """verl's own separate_async CI script sets trainer.resume_mode=disable; imported, it is an extra override,
    which comes last and wins over verlctl's auto: verl ignores the checkpoint, and so must verlctl (the watcher's
    relaunch, the launch checklist, the resume_past_steps check)."""
    ck = tmp_path / "ck"
    _checkpoint(ck, 3, ("actor", "data.pt", "transfer_queue"))
    spec = _resolved("separate_async", **{"paths.checkpoints": str(ck),
                                          "extra_overrides": ["trainer.resume_mode=disable"]}).spec
    assert resume_settings(spec) == ("disable", None)
    assert resume_point(str(ck), spec) is None
    assert resume_action(str(ck), spec).startswith("training starts fresh: trainer.resume_mode=disable")
    # the last one counts, as in Hydra
    spec = _resolved("separate_async", **{"paths.checkpoints": str(ck), "extra_overrides": [
        "trainer.resume_mode=disable", "trainer.resume_mode=auto"]}).spec
    assert resume_point(str(ck), spec) == f"{ck}/global_step_3"
    from verlctl.orchestrator.machine_facts import resume_step

    assert resume_step(_resolved("sync", **{"paths.checkpoints": str(ck), "train.steps": 2,
                                            "extra_overrides": ["trainer.resume_mode=disable"]}).spec) is None
    assert resume_step(_resolved("sync", **{"paths.checkpoints": str(ck), "train.steps": 2}).spec) == 3


def test_resume_path_resumes_from_the_folder_it_names(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _checkpoint(ck, 3, ("actor", "data.pt"))
    other = _checkpoint(tmp_path / "older", 1, ("actor", "data.pt"))
    spec = _resolved("fully_async", **{"paths.checkpoints": str(ck), "extra_overrides": [
        "trainer.resume_mode=resume_path", f"trainer.resume_from_path={other}"]}).spec
    assert resume_point(str(ck), spec) == str(other)
    assert "(trainer.resume_from_path; fully_async: N=1 counts weight syncs" in resume_action(str(ck), spec)
    spec = _resolved("fully_async", **{"paths.checkpoints": str(ck), "extra_overrides": [
        "trainer.resume_mode=resume_path", "trainer.resume_from_path=relative/global_step_1"]}).spec
    assert resume_point(str(ck), spec) is None
    assert "needs trainer.resume_from_path=<absolute path>/global_step_N" in resume_action(str(ck), spec)


def test_the_watchers_next_attempt_resumes_where_verl_will(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher reads the checkpoint in the run's target (here the host) for the spec's resume mode: the
    tracker's folder with auto, none with trainer.resume_mode=disable, none when the folder is missing."""
    from verlctl.orchestrator.runs import run_for
    from verlctl.orchestrator.watcher import Watcher
    from verlctl.runtime.executor import HostExecutor
    from verlctl.runtime.records import load_run

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path))
    ck = tmp_path / "ck"
    _checkpoint(ck, 2, ("actor", "data.pt"))
    d = write_any_record(tmp_path, RUN, 4242)
    run_json = {**json.loads((d / "run.json").read_text()), "checkpoints": str(ck)}
    (d / "run.json").write_text(json.dumps(run_json))
    record = load_run(RUN)

    def watcher(**flags: Any) -> Watcher:
        resolved = _resolved("fully_async", **{"paths.checkpoints": str(ck), **flags})
        return Watcher(record, HostExecutor(), resolved, say=lambda _t: None, backend=run_for(record))

    assert watcher()._latest_checkpoint() == f"{ck}/global_step_2"
    assert watcher(extra_overrides=["trainer.resume_mode=disable"])._latest_checkpoint() is None
    (ck / "latest_checkpointed_iteration.txt").write_text("7")  # a tracker whose folder is gone
    assert watcher()._latest_checkpoint() is None


def test_resume_path_without_a_path_is_said(tmp_path: Path) -> None:
    spec = _resolved("sync", **{"paths.checkpoints": str(tmp_path), "extra_overrides": [
        "trainer.resume_mode=resume_path"]}).spec
    assert resume_settings(spec) == ("resume_path", None)
    assert resume_point(str(tmp_path), spec) is None
    assert "(extra_overrides; got none)" in resume_action(str(tmp_path), spec)
