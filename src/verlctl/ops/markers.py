"""The lines start_verl.sh writes to the run log when training ends: a leaf module, so that whatever reads a
run's log for its end (the watcher, the canary, the Slurm follower) needs none of the others."""

FINISHED_MARKER = "training finished"
EXIT_MARKER = "start_verl.sh exits with status"
