"""Ray's own port layout: a cluster.ray_port / dashboard_port inside Ray's worker-port range (10002-19999 unless
cluster.ray_start_args moves it), on its client server port (10001) or its dashboard agent's (52365), and clashes
among the ports cluster.ray_start_args sets, are refused by `plan` before anything starts (U24) — and Ray decides:
with Ray installed (VERLCTL_TEST_RAY_PATH: a directory holding the ``ray`` package and its dependencies), every
case runs through Ray's own ``ray start`` option parser and ``RayParams.update_pre_selected_port``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from verlctl.checks.ray_ports import port_conflicts, ray_components
from verlctl.commands.check import spec_findings
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS, run_cli

CODES = ("ray_port_conflict", "ray_start_args_port")


def resolve(**flags: Any) -> Any:
    return load_spec(None, flags={**BASE_PATHS, **flags}, environ={})


def refusals(**flags: Any) -> list[Any]:
    return [f for f in spec_findings(resolve(**flags))[0] if f.code in CODES]


#: (flags, refused): the cases both verlctl and Ray decide.
CASES: list[tuple[dict[str, Any], bool]] = [
    ({}, False),
    ({"cluster.ray_port": 16766}, True),  # the field's case: a free port inside the worker range
    ({"cluster.ray_port": 10002}, True),
    ({"cluster.ray_port": 19999}, True),
    ({"cluster.ray_port": 20000}, False),
    ({"cluster.ray_port": 10000}, False),
    ({"cluster.ray_port": 10001}, True),  # the Ray client server
    ({"cluster.dashboard_port": 12345}, True),
    ({"cluster.dashboard_port": 52365}, True),  # the dashboard agent's HTTP port
    ({"cluster.ray_port": 52365}, True),
    ({"cluster.ray_port": 16766, "cluster.ray_start_args": ["--min-worker-port=20000", "--max-worker-port=29999"]},
     False),
    ({"cluster.ray_start_args": ["--min-worker-port=6000", "--max-worker-port=7000"]}, True),  # 6766 inside
    ({"cluster.ray_start_args": ["--worker-port-list=6766,6767"]}, True),
    ({"cluster.ray_port": 16766, "cluster.ray_start_args": ["--worker-port-list=30000,30001"]}, False),
    ({"cluster.ray_start_args": ["--dashboard-port=10500"]}, True),  # the last --dashboard-port wins
    ({"cluster.ray_start_args": ["--dashboard-port=9000"]}, False),
    ({"cluster.ray_start_args": ["--ray-client-server-port=20001"], "cluster.ray_port": 10001}, False),
    ({"cluster.ray_start_args": ["--ray-client-server-port=6766"]}, True),
    ({"cluster.ray_start_args": ["--node-manager-port=15000"]}, True),
    ({"cluster.ray_start_args": ["--node-manager-port=25000", "--object-manager-port=25000"]}, True),
    ({"cluster.ray_start_args": ["--metrics-export-port=8260"]}, True),
    ({"cluster.ray_start_args": ["--dashboard-agent-listen-port=6766"]}, True),
    ({"cluster.ray_start_args": ["--min-worker-port=30000", "--max-worker-port=20000"]}, True),
    ({"cluster.ray_start_args": ["--min-worker-port=0", "--max-worker-port=0"]}, False),  # random worker ports
    ({"cluster.ray_start_args": ["--num-cpus=64"]}, False),
]


@pytest.mark.parametrize(("flags", "refused"), CASES, ids=[json.dumps(c[0]) for c in CASES])
def test_plan_refuses_exactly_the_ports_ray_refuses(flags: dict[str, Any], refused: bool) -> None:
    found = refusals(**flags)
    assert bool(found) is refused, found
    assert len(found) <= 1  # one finding per clash, never one per port of a range


def test_a_ray_port_inside_the_worker_range_names_the_range_and_the_fix() -> None:
    (f,) = refusals(**{"cluster.ray_port": 16766})
    assert f.code == "ray_port_conflict" and f.field == "cluster.ray_port"
    assert "cluster.ray_port 16766" in f.message and "worker-port range 10002-19999" in f.message
    assert "--min-worker-port" in (f.hint or "") and "6766" in (f.hint or "")
    # the range moved by ray_start_args is the one named
    (g,) = refusals(**{"cluster.ray_start_args": ["--min-worker-port=6000", "--max-worker-port=7000"]})
    assert "6000-7000" in g.message and g.field == "cluster.ray_port"


def test_the_dashboard_port_is_blamed_on_its_own_field() -> None:
    (f,) = refusals(**{"cluster.dashboard_port": 52365})
    assert f.field == "cluster.dashboard_port" and "dashboard agent" in f.message


def test_a_bad_port_argument_is_one_line_naming_it() -> None:
    (f,) = refusals(**{"cluster.ray_start_args": ["--min-worker-port=many"]})
    assert f.code == "ray_start_args_port" and "--min-worker-port=many" in f.message


def test_ray_port_equal_to_dashboard_port_is_left_to_the_ports_rule() -> None:
    found = spec_findings(resolve(**{"cluster.ray_port": 6379, "cluster.dashboard_port": 6379}))[0]
    assert [f.code for f in found if f.code in (*CODES, "ports")] == ["ports"]


def test_the_worker_range_is_ray_starts_default() -> None:
    comps = ray_components(resolve().spec)
    assert comps["worker_ports"][0][0] == 10002 and comps["worker_ports"][0][-1] == 19999
    assert comps["client_server"][0] == [10001] and comps["dashboard_agent_http"][0] == [52365]
    assert port_conflicts(resolve().spec) == []


def test_plan_cli_exits_2_with_the_finding(tmp_path: Any) -> None:
    res = run_cli("plan", "--set", "cluster.ray_port=16766", *[a for k, v in BASE_PATHS.items()
                                                                  for a in ("--set", f"{k}={v}")], "--json")
    assert res.code == 2, res.err
    codes = [f["code"] for f in res.json()["findings"]]
    assert "ray_port_conflict" in codes


# ------------------------------------------------------------------------------------------------ Ray decides

#: Ray's own decision for the head's `ray start` of start_verl.sh (start_verl.sh.j2: ray start --head --block
#: --node-ip-address --port --dashboard-host --dashboard-port ... --temp-dir --disable-usage-stats RAY_START_ARGS):
#: its click parser (defaults included), then RayParams as ray/scripts/scripts.py builds it and the port check
#: ray/_private/node.py runs before starting any process. Prints one line per case: null or Ray's error.
ORACLE = r"""
import json, sys
import click
from ray.scripts.scripts import start
from ray._private.parameter import RayParams
from ray._private.utils import get_ray_client_dependency_error
out = []
for argv in json.loads(sys.argv[1]):
    try:
        p = start.make_context("start", list(argv)).params
        client = p["ray_client_server_port"]
        if client is None and get_ray_client_dependency_error() is None:
            client = 10001  # scripts.py: has_ray_client and ray_client_server_port is None
        rp = RayParams(min_worker_port=p["min_worker_port"], max_worker_port=p["max_worker_port"],
                       worker_port_list=p["worker_port_list"], ray_client_server_port=client,
                       object_manager_port=p["object_manager_port"], node_manager_port=p["node_manager_port"],
                       dashboard_port=p["dashboard_port"], dashboard_agent_listen_port=p["dashboard_agent_listen_port"],
                       metrics_agent_port=p["dashboard_agent_grpc_port"],
                       runtime_env_agent_port=p["runtime_env_agent_port"], metrics_export_port=p["metrics_export_port"])
        rp.gcs_server_port = p["port"]  # scripts.py: ray_params.gcs_server_port = port
        rp.update_pre_selected_port()
        out.append(None)
    except (ValueError, click.ClickException) as exc:
        out.append(str(exc).splitlines()[0])
print(json.dumps(out))
"""


def head_argv(spec: Any) -> list[str]:
    c = spec.cluster
    return ["--head", "--block", "--node-ip-address=127.0.0.1", f"--port={c.ray_port}", "--dashboard-host=127.0.0.1",
            f"--dashboard-port={c.dashboard_port}", "--temp-dir=/tmp/verlctl-ray-oracle", "--disable-usage-stats",
            *c.ray_start_args]


@pytest.mark.docker
def test_ray_itself_refuses_exactly_the_refused_cases(docker_engine: Any, realverl_image: str) -> None:
    """Ray's own `ray start` parser and port check (Ray 2.60, in the real-verl image) on every case."""
    specs = [resolve(**flags).spec for flags, _ in CASES]
    out = docker_engine.containers.run(realverl_image, ["python3", "-c", ORACLE,
                                                        json.dumps([head_argv(s) for s in specs])], remove=True)
    ray_says = json.loads(out.decode().strip().splitlines()[-1])
    disagree = [(flags, ours, theirs) for (flags, ours), theirs in zip(CASES, ray_says)
                if ours != (theirs is not None)]
    print(f"Ray refuses {sum(t is not None for t in ray_says)} of {len(CASES)}; disagreements: {len(disagree)}")
    assert not disagree


def test_the_demo_picks_distinct_ports_that_ray_does_not_reserve(tmp_path: Any) -> None:
    """`verlctl demo` picks its Ray ports at random: never one Ray reserves, never one twice (the kernel can hand
    out a port twice), so its spec always passes Ray's own port check."""
    import yaml

    from verlctl.checks.ray_ports import start_args_given
    from verlctl.demo.spec import demo_spec, free_port

    for _ in range(20):
        doc = yaml.safe_load(demo_spec(tmp_path, tmp_path / "env", "grpo", 2))
        c = doc["cluster"]
        given = start_args_given(c["ray_start_args"])
        ports = [c["ray_port"], c["dashboard_port"], *(int(v) for k, v in given.items() if k.endswith("-port"))]
        assert len(set(ports)) == len(ports) == 6, ports
        assert not [p for p in ports if 10001 <= p <= 19999 or p == 52365], ports
        spec = load_spec(None, flags={f"cluster.{k}": v for k, v in c.items()} | BASE_PATHS, environ={}).spec
        assert port_conflicts(spec) == []
    assert free_port({1}) not in (1, 10001, 52365)
