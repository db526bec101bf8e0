"""The backends: each knows its target (``backends/base.py``'s interface) and nothing of verl: ``docker`` (one host's
Docker engine, Docker on SSH nodes, the host runtime), ``slurm`` (the job's files, sbatch, squeue, scancel) and
``kuberay`` (the KubeRay RayJob and Volcano Job manifests). The orchestrator (``verlctl.orchestrator``: launch,
runs, watcher) walks the stages and calls down into them (``orchestrator.runs.run_named`` / ``run_for`` pick a
run's verbs by these names); no backend imports the orchestrator. Backends load on first use (CLI start-up stays
fast).
"""

from __future__ import annotations

#: ``launch --backend`` names: local covers one host's Docker, Docker on SSH nodes, and the host runtime.
NAMES = ("local", "slurm", "kuberay", "volcano")
