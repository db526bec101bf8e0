"""The lines start_verl.sh writes to the run log when training ends: a leaf module, so that whatever reads a
run's log for its end (the watcher, the canary, the Slurm follower) needs none of the others; and the line
start_verl.sh prints when training starts, with the test for training progress (launch and Slurm verify)."""

import re

FINISHED_MARKER = "training finished"
EXIT_MARKER = "start_verl.sh exits with status"

TRAINING_MARKER = "[verlctl] training starts"

_PROGRESS = re.compile(r"Training Progress|^step:\d+ ", re.M)


def has_progress(text: str) -> bool:
    return bool(_PROGRESS.search(text))
