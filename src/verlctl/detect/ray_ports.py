"""The ports ``ray start`` reserves on a node by default (Ray 2.60 ``ray/scripts/scripts.py``): what the Ray port
rule (``checks/ray_ports.py``) compares the spec's ports with, and what ``verlctl demo`` avoids when it picks
free ports.

* ``--min-worker-port`` 10002 and ``--max-worker-port`` 19999 (``scripts.py:516-530``): every port between them
  is reserved for Ray's workers;
* ``--ray-client-server-port`` 10001 when Ray's client dependencies (grpcio) are installed (``scripts.py:920-921``;
  verl requires ``ray[default]``, which installs grpcio);
* ``--dashboard-agent-listen-port`` 52365 (``ray/_private/ray_constants.py:326``).
"""

from __future__ import annotations

MIN_WORKER_PORT = 10002
MAX_WORKER_PORT = 19999
CLIENT_SERVER_PORT = 10001
DASHBOARD_AGENT_LISTEN_PORT = 52365


def reserved_by_default(port: int) -> bool:
    """Whether ``ray start`` with its defaults reserves ``port`` for one of its own components."""
    return MIN_WORKER_PORT <= port <= MAX_WORKER_PORT or port in (CLIENT_SERVER_PORT, DASHBOARD_AGENT_LISTEN_PORT)
