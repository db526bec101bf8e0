"""The training driver's output reaches the run log as it is printed, not 8 KB later.

verl's step lines are printed by its Ray actors and forwarded by Ray to the driver's stdout, which
``run_training.sh`` pipes to ``tee``. Python block-buffers a piped stdout, so the log (and the watcher, the
status and the stall detection reading it) saw a step only once more output followed, and never saw the last
ones of a driver that was killed. Found with real verl 0.9.1: a run whose step 3 took long showed no step at
all in ``status`` for 15 minutes although steps 1 and 2 were done and saved (tests/realverl_runs/test_realverl.py).

The training module here is a TEST DOUBLE (verl's driver needs Ray and the verl package, which the host lacks;
the real-verl test runs the real one): a ``verl/trainer/main_ppo.py`` in the work dir that prints one step line
with a plain ``print`` and then waits. Everything else is real: the rendered ``run_training.sh`` run by bash,
the python3 it names, the pipe to ``tee`` and the log file.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import yaml

from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec

from launch_support import write_run_files

STEP_LINE = "step:1 - critic/score/mean:0.5 - actor/pg_loss:0.01 - timing_s/step:1.2"


def test_a_step_line_the_driver_prints_is_in_the_log_while_the_driver_still_runs(tmp_path: Path) -> None:
    paths = write_run_files(tmp_path)
    work = tmp_path / "work"
    spec = {
        "verl_version": "0.9.1", "algorithm": "grpo", "strategy": "fsdp2",
        "paths": {"model": paths["paths.model"], "train_files": paths["paths.train_files"],
                  "val_files": paths["paths.val_files"], "checkpoints": str(tmp_path / "ckpt"),
                  "logs": str(tmp_path / "logs")},
        "container": {"runtime": "host", "workdir": str(work)},
        "cluster": {"devices": [0, 1]},
        "train": {"steps": 5, "tensor_parallel": 1},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    rendered = make_plan(load_spec(tmp_path / "spec.yaml", environ={})).render()
    script = tmp_path / "run_training.sh"
    script.write_text(rendered.files["run_training.sh"], encoding="utf-8")
    assert "-m verl.trainer.main_ppo" in rendered.files["run_training.sh"]

    # TEST DOUBLE of verl's driver: one step line, then a long step (no flush, as verl's driver does not flush).
    entry = work / "verl" / "trainer"
    entry.mkdir(parents=True)
    for pkg in (work / "verl", entry):
        (pkg / "__init__.py").write_text("", encoding="utf-8")
    (entry / "main_ppo.py").write_text(f"import time\nprint({STEP_LINE!r})\ntime.sleep(600)\n", encoding="utf-8")

    log_line = next(ln for ln in rendered.files["run_training.sh"].splitlines() if ln.startswith("LOG_FILE="))
    log = Path(shlex.split(log_line.partition("=")[2])[0])
    assert log.parent == tmp_path / "logs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.Popen(["bash", "--", str(script)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        seen = False
        while time.monotonic() < deadline and proc.poll() is None:
            if log.is_file() and STEP_LINE in log.read_text(errors="replace"):
                seen = True
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        assert seen, f"the step line is not in {log} while the driver runs: {log.read_text() if log.exists() else ''}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
