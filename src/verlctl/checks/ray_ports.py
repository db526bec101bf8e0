"""``cluster.ray_port`` / ``cluster.dashboard_port`` and the ports ``cluster.ray_start_args`` sets, against Ray's own
port layout: what ``ray start --head`` refuses before it starts anything.

Ray reserves, per node, one port per component and the whole worker-port range, and refuses a port that two of
them would share: ``RayParams.update_pre_selected_port`` (Ray 2.60 ``ray/_private/parameter.py:294-350``, called
from ``ray/_private/node.py:412``) raises ``Ray component worker_ports is trying to use a port number 16766 that is
used by other components``. The defaults ``ray start`` gives (Ray 2.60 ``ray/scripts/scripts.py``):

* ``--port`` is the GCS server's port (``scripts.py:981``: ``ray_params.gcs_server_port = port``);
* ``--min-worker-port`` 10002 and ``--max-worker-port`` 19999 (``scripts.py:516-530``): every port between
  them is reserved for workers; ``--worker-port-list`` replaces the range;
* ``--ray-client-server-port`` 10001 whenever Ray's client dependencies (grpcio) are installed
  (``scripts.py:920-921``) — verl requires ``ray[default]``, which pulls grpcio in;
* ``--dashboard-agent-listen-port`` 52365 (``ray/_private/ray_constants.py:326``);
* the node manager, object manager, dashboard agent gRPC, runtime-env agent and metrics export ports are
  random unless given (they reserve nothing then).

Ray's own argument checks (``parameter.py:383-398``: ``max_worker_port must be higher than min_worker_port``,
ports between 1024 and 65535) are mirrored too. Ray's documentation lists the same defaults
(docs.ray.io, "Configuring Ray", Ports configurations).
"""

from __future__ import annotations

from collections.abc import Iterable

from verlctl.checks.findings import Finding, Severity, error
from verlctl.checks.rules import RuleCtx, rule
from verlctl.detect.ray_ports import (
    CLIENT_SERVER_PORT,
    DASHBOARD_AGENT_LISTEN_PORT,
    MAX_WORKER_PORT,
    MIN_WORKER_PORT,
)
from verlctl.spec.model import RunSpec

#: ``ray start`` options that set one component's port, and Ray's name for that component.
SINGLE_PORT_OPTIONS = {
    "--object-manager-port": "object_manager",
    "--node-manager-port": "node_manager",
    "--ray-client-server-port": "client_server",
    "--dashboard-port": "dashboard",
    "--dashboard-agent-grpc-port": "dashboard_agent_grpc",
    "--dashboard-agent-listen-port": "dashboard_agent_http",
    "--runtime-env-agent-port": "runtime_env_agent",
    "--metrics-export-port": "metrics_export",
}
RANGE_OPTIONS = ("--min-worker-port", "--max-worker-port", "--worker-port-list")

#: The order in which Ray reserves the components (parameter.py: the first owner keeps a port).
RAY_ORDER = ("gcs_server", "object_manager", "node_manager", "client_server", "dashboard", "dashboard_agent_grpc",
             "dashboard_agent_http", "runtime_env_agent", "metrics_export", "worker_ports")


class PortArgError(ValueError):
    """A port option of cluster.ray_start_args that ``ray start`` refuses."""


def start_args_given(args: Iterable[str]) -> dict[str, str]:
    """The last value of every ``--name=value`` (click keeps the last; the spec admits only that form)."""
    out: dict[str, str] = {}
    for a in args:
        name, eq, value = a.partition("=")
        if eq:
            out[name] = value.strip()
    return out


def _port(name: str, value: str, low: int = 0) -> int:
    try:
        port = int(value)
    except ValueError:
        raise PortArgError(f"{name}={value}: not a port number") from None
    if not (port == 0 or low <= port <= 65535):
        raise PortArgError(f"{name}={value}: Ray takes 0 (a random port) or a port between {max(low, 1)} and 65535")
    return port


def ray_components(spec: RunSpec) -> dict[str, tuple[list[int], str]]:
    """Ray's component -> (the ports it reserves on the head, the spec field that decides them), as
    ``start_verl.sh``'s ``ray start --head --port=RAY_PORT --dashboard-port=DASHBOARD_PORT ...ray_start_args``
    gives them. A :class:`PortArgError` for a port option Ray refuses."""
    c = spec.cluster
    args = "cluster.ray_start_args"
    given = start_args_given(c.ray_start_args)
    comps: dict[str, tuple[list[int], str]] = {"gcs_server": ([c.ray_port], "cluster.ray_port")}
    defaults = {"client_server": CLIENT_SERVER_PORT, "dashboard_agent_http": DASHBOARD_AGENT_LISTEN_PORT,
                "dashboard": c.dashboard_port}
    for option, comp in SINGLE_PORT_OPTIONS.items():
        if option in given:
            port = _port(option, given[option])
            comps[comp] = ([port] if port else [], args)
        elif comp in defaults:
            comps[comp] = ([defaults[comp]], "cluster.dashboard_port" if comp == "dashboard" else args)
    if "--worker-port-list" in given:
        ports = [_port("--worker-port-list", p, 1024) for p in given["--worker-port-list"].split(",")]
        comps["worker_ports"] = (ports, args)
    else:
        low = _port("--min-worker-port", given["--min-worker-port"], 1024) if "--min-worker-port" in given \
            else MIN_WORKER_PORT
        high = _port("--max-worker-port", given["--max-worker-port"], 1024) if "--max-worker-port" in given \
            else MAX_WORKER_PORT
        if high != 0 and high <= low:
            raise PortArgError(f"--max-worker-port={high} is not above --min-worker-port={low}: Ray refuses it "
                               "('max_worker_port must be higher than min_worker_port')")
        comps["worker_ports"] = (list(range(low, high + 1)) if (low or high) else [], args)
    return comps


def _describe(comp: str, ports: list[int]) -> str:
    if comp == "worker_ports" and len(ports) > 1 and ports == list(range(ports[0], ports[-1] + 1)):
        return f"Ray's worker-port range {ports[0]}-{ports[-1]}"
    names = {"gcs_server": "the GCS port (--port)", "client_server": "the Ray client server's port",
             "dashboard_agent_http": "the dashboard agent's HTTP port", "worker_ports": "Ray's worker ports",
             "dashboard": "the dashboard's port"}
    return names.get(comp, f"Ray's {comp.replace('_', ' ')} port")


def port_conflicts(spec: RunSpec) -> list[tuple[int, str, str, str]]:
    """(port, the component that takes it second, the one that had it, the spec field to change), in Ray's order."""
    comps = ray_components(spec)
    owner: dict[int, str] = {}
    out: list[tuple[int, str, str, str]] = []
    for comp in RAY_ORDER:
        ports, _field = comps.get(comp, ([], ""))
        for port in ports:
            if port in owner:  # Ray refuses a port reserved twice, even by one component
                first = owner[port]
                fields = {comps[first][1], comps[comp][1]}
                if fields == {"cluster.ray_port", "cluster.dashboard_port"}:
                    continue  # the spec rule ``cluster`` says so (code ``ports``)
                own = [f for f in (comps[first][1], comps[comp][1]) if f != "cluster.ray_start_args"]
                out.append((port, comp, first, own[0] if own else "cluster.ray_start_args"))
            owner.setdefault(port, comp)
    return out


@rule("ray_port_layout", ("ray_port_conflict", "ray_start_args_port"), Severity.ERROR)
def _ray_port_layout(ctx: RuleCtx) -> Iterable[Finding]:
    """cluster.ray_port / dashboard_port and the ports of cluster.ray_start_args: no port is taken by two of Ray's
    components, Ray's worker-port range (10002-19999 unless changed) and client server (10001) included (U24)."""
    spec = ctx.spec
    try:
        conflicts = port_conflicts(spec)
    except PortArgError as exc:
        yield error("ray_start_args_port", f"cluster.ray_start_args: {exc}", "cluster.ray_start_args",
                    "give ray start's port options as --name=PORT with a port between 1024 and 65535")
        return
    comps = ray_components(spec)
    seen: set[tuple[int, str]] = set()
    for port, second, first, field in conflicts:
        if (port, field) in seen:
            continue
        seen.add((port, field))
        which = field if field != "cluster.ray_start_args" else "a port of cluster.ray_start_args"
        mine = second if comps[second][1] == field else first
        other = first if mine == second else second
        workers = comps["worker_ports"][0]
        span = f"{workers[0]}-{workers[-1]}" if workers else "none"
        client = comps.get("client_server", ([], ""))[0]
        avoid = f"Ray's worker ports ({span})" + (f", its client server port {client[0]}" if client else "")
        yield error(
            "ray_port_conflict",
            f"{which} {port} is {'inside' if other == 'worker_ports' else 'also'} "
            f"{_describe(other, comps[other][0])}: `ray start --head` refuses it before "
            f"anything starts ('Ray component {second} is trying to use a port number {port} that is used by other "
            "components', Ray's ray/_private/parameter.py)",
            field,
            f"choose a {field} outside {avoid} and the dashboard agent's {DASHBOARD_AGENT_LISTEN_PORT} (e.g. 6766 "
            "and 8260, verlctl's defaults), or move the worker ports with cluster.ray_start_args: "
            "[--min-worker-port=N, --max-worker-port=M]"
            if field != "cluster.ray_start_args" else
            "give each of Ray's components its own port in cluster.ray_start_args",
        )
