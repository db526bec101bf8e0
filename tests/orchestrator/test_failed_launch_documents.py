"""A failed launch, and a run whose container is gone, are still documented: `bundle` reads the host log and
the events without the container (U33); `report` shows a launch that failed before training from its event
when the log has no error (U34)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from test_run_state import cli, started, write_run

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
SWANLAB = ("SwanLab login with the key in SWANLAB_API_KEY failed (http://127.0.0.1:8799): 401 Unauthorized")


def _members(path: Path) -> dict[str, str]:
    with tarfile.open(path) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                for m in tar.getmembers() if m.isfile()}


def test_bundle_of_a_run_whose_container_is_gone_has_the_host_log_and_its_diagnosis(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = "20261201-100000-gone-a1a1"
    log = tmp_path / "logs" / f"verlctl-{run_id}.log"  # paths.logs: a host directory mounted at the same path
    log.parent.mkdir(parents=True)
    log.write_text("step:1 - critic/score/mean:0.1\n" + OOM + "[verlctl 10:00:00] start_verl.sh exits with status 1\n")
    write_run(state, run_id, log, runtime="docker", container_name=f"verlctl-test-gone-{run_id}",
              events=[started(1)])
    out = tmp_path / "b.tar.gz"
    res = cli(state, "bundle", run_id, "-o", str(out), "--json")
    assert res.code == 0, res.out + res.err
    doc = json.loads(res.out)
    assert "log-tail.txt" not in doc["unavailable"] and "diagnosis.json" not in doc["unavailable"], doc
    files = _members(out)
    assert "CUDA out of memory" in files["log-tail.txt"]
    diag = json.loads(files["diagnosis.json"])
    assert diag["findings"][0]["category"] == "device_oom" and diag["log"] == "host", diag
    assert "versions-target.txt" in doc["unavailable"], doc  # what needs the container is said so


def _never_started(state: Path) -> str:
    run_id = "20261201-100500-swanlab-b2b2"
    write_run(state, run_id, attempts=0, events=[
        {"event": "launch"},
        {"event": "launch_failed", "error": SWANLAB, "hint": "check swanlab.host and the key (`swanlab login`)"}])
    return run_id


def test_the_report_of_a_failed_launch_shows_the_launch_failure(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = _never_started(state)
    page = tmp_path / "r.html"
    res = cli(state, "report", run_id, "-o", str(page))
    assert res.code == 0, res.out + res.err
    html = page.read_text()
    diagnosis = html[html.index("<h2>Diagnosis</h2>"):html.index("<h2>Attempts and restarts</h2>")]
    assert "No error found in the log." not in diagnosis, diagnosis
    assert "the launch failed before training: SwanLab login" in diagnosis, diagnosis
    assert "check swanlab.host and the key" in diagnosis, diagnosis


def test_the_bundle_of_a_failed_launch_diagnoses_it_from_the_events(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = _never_started(state)
    out = tmp_path / "b.tar.gz"
    res = cli(state, "bundle", run_id, "-o", str(out), "--json")
    assert res.code == 0, res.out + res.err
    files = _members(out)
    diag = json.loads(files["diagnosis.json"])
    assert diag["from"] == "events" and diag["findings"][0]["category"] == "launch_failed", diag
    assert "SwanLab login" in diag["findings"][0]["message"], diag


def test_a_launch_failure_followed_by_an_attempt_is_not_the_diagnosis() -> None:
    from verlctl.orchestrator.runstate import launch_failure

    failed = {"event": "launch_failed", "error": "x"}
    assert launch_failure([failed])["category"] == "launch_failed"  # type: ignore[index]
    assert launch_failure([failed, started(1)]) is None




def test_the_report_timeline_is_sentences_not_raw_event_fields(tmp_path: Path) -> None:
    # U28: rows were `stack: {"verl": "0.7.0", "vllm": null, …}`, `notify_cmd: false`, `teardown_s: 0.54`
    state = tmp_path / "state"
    run_id = "20261201-101000-timeline-c3c3"
    log = tmp_path / "logs" / f"verlctl-{run_id}.log"
    log.parent.mkdir(parents=True)
    log.write_text("step:1 - critic/score/mean:0.1\n" + OOM)
    write_run(state, run_id, log, attempts=2, events=[
        {"event": "launch", "actions": ["create container"]},
        {"event": "known_defects", "stack": {"verl": "0.7.0", "vllm": None}, "findings": []},
        {"event": "watcher_spawned", "pid": 4242, "notify_cmd": False},
        started(1),
        {"event": "checkpoint_saved", "step": 1},
        {"event": "alert", "category": "device_oom", "message": "CUDA out of memory", "attempt": 1, "step": 1,
         "hint": "nothing to do yet"},
        {"event": "recovery", "category": "device_oom", "reason": "out of memory: restarting with offload added",
         "add_feature": "offload", "resumed_from": "/ckpt/global_step_1", "teardown_s": 0.54,
         "prepared_early": True, "features_added": ["offload"]},
        started(2),
        {"event": "finished", "attempt": 2}])
    page = tmp_path / "r.html"
    res = cli(state, "report", run_id, "-o", str(page))
    assert res.code == 0, res.out + res.err
    html = page.read_text()
    timeline = html[html.index('id="timeline"'):html.index("<h2>Run spec")]
    for raw in ("stack:", "notify_cmd", "teardown_s", "prepared_early", "{&quot;", "{\"", "features_added"):
        assert raw not in timeline, (raw, timeline)
    for sentence in ("attempt 1: device_oom after step 1: CUDA out of memory",
                     "the watcher restarted the run: out of memory: restarting with offload added, resuming from "
                     "global_step_1", "checkpoint of step 1 saved", "attempt 2 finished: training is complete",
                     "a watcher was started (pid 4242)"):
        assert sentence in timeline, (sentence, timeline)
