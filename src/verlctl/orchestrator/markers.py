"""The lines start_verl.sh writes to the run log when training ends: a leaf module, so that whatever reads a
run's log for its end (the watcher, the canary, the Slurm follower) needs none of the others; and the line
start_verl.sh prints when training starts, with the test for training progress (launch and Slurm verify), and
the diagnoses of a start that Ray's own start-up wait ended (launch and Slurm retry those once)."""

import re

FINISHED_MARKER = "training finished"
EXIT_MARKER = "start_verl.sh exits with status"

TRAINING_MARKER = "[verlctl] training starts"

_PROGRESS = re.compile(r"Training Progress|^step:\d+ ", re.M)


def has_progress(text: str) -> bool:
    return bool(_PROGRESS.search(text))


def after_marker(text: str) -> str:
    """What the trainer printed after start_verl.sh's training marker line ("" before the marker): what a
    launch's verify and a Slurm job's verify read."""
    return text.split(TRAINING_MARKER, 1)[1].split("\n", 1)[-1] if TRAINING_MARKER in text else ""


def first_line(after: str) -> str | None:
    """The trainer's first non-blank line in ``after`` (None before it printed)."""
    return next((ln for ln in after.splitlines() if ln.strip()), None)


def progress_shown(text: str) -> str | None:
    """The trainer's first line when its output in a run's log (``text``, marker included) shows training
    progress, else None: what proves a start to a launch's and a Slurm job's verify, including for a trainer
    that has already ended (a short run can print its steps and finish between two looks)."""
    after = after_marker(text)
    first = first_line(after)
    return first if first is not None and has_progress(after) else None


#: Diagnoses (monitor catalogue) of a start that failed because Ray did not come up in time: the launch starts
#: once more before it gives up (on a loaded host Ray's own start-up wait runs out; issue 24, newcomer N2), a
#: single-node launch by starting the attempt again, a Slurm launch by submitting the job again.
RAY_START_FAILURES = ("ray_start_timeout", "ray_devices_missing")
