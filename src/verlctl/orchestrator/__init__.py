"""Operations: the launch flow and what keeps a run alive, above runtime, monitor and the wizard.

``launch`` (the Launcher: container, SwanLab, copy, preflight, start, verify), ``flow`` (spec sources, the
interactive rounds, confirmation, the watcher), ``inspect`` (status / logs / stop / list of recorded runs),
``watcher`` (follow, diagnose, recover), ``preflight`` (the in-container Hydra compose) and ``swanlab``.
``verlctl.runtime`` below it keeps executors, containers, records and following, and knows nothing of verl or
questions; ``tests/project/test_layers.py`` holds the direction.
"""
