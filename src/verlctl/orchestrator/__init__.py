"""The orchestrator: one place walks a run's stages and calls down into the backends.

``launch`` (the Launcher: the verdict, the request, the stages of a local launch: readiness, preflight, SwanLab,
copy, start, verify), ``stages`` (the one stage loop), ``runs`` (the verbs of a run, one object per backend:
prepare, submit, abort, watch, relaunch, status, logs, stop), ``slurm_run`` (the Slurm job: render, verify, the
Slurm watcher), ``flow`` (spec sources, the interactive rounds, confirmation, the watcher), ``inspect`` (status /
logs / stop / list of recorded runs), ``watcher`` (follow, diagnose, recover), ``preflight`` (the in-target
Hydra compose) and ``swanlab``. Below it, ``verlctl.backends`` know their target (containers, executors, SSH
nodes, the host, sbatch, manifests) and nothing of verl, and never import this package; ``verlctl.runtime``
keeps executors, containers, records and following. ``tests/project/test_layers.py`` holds the direction.
"""
