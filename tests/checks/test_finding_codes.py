"""Every finding code verlctl's checks can emit: a spec (and, for machine checks, real files, real probes
and real captures) that triggers it, and a near-identical one that does not (issue 16).

The set of codes is collected from the rule modules themselves, never kept by hand: a module's rule
objects with a ``codes`` attribute declare theirs; otherwise (and in addition) the code arguments of
every ``error(...)``/``warning(...)``/``info(...)``/``Finding(...)`` call are read with :mod:`ast`. A new
code without a row in :data:`ROWS` fails :func:`test_every_code_has_a_row`; a row whose code no module can
emit any more fails it too.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import json
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from verlctl.checks.checkpoints import CHECKPOINT_BYTES_PER_PARAM, LOG_BYTES_PER_STEP, check_checkpoints
from verlctl.checks.container import check_docker, check_recipe
from verlctl.checks.dataset_checks import check_datasets
from verlctl.checks.devices import check_devices
from verlctl.checks.facts import CheckFacts
from verlctl.checks.field_checks import memory_and_field_findings, ports_in_use
from verlctl.checks.findings import Finding, Severity
from verlctl.checks.model_checks import check_model_fit, check_model_path
from verlctl.checks.network import check_network
from verlctl.checks.nodes import node_findings
from verlctl.checks.storage import check_checkpoint_storage, collect_storage, mount_of
from verlctl.commands.check import spec_findings
from verlctl.detect.check_probes import (
    CheckpointProbe,
    DatasetCheck,
    DockerFacts,
    FileProbe,
    check_dataset_file,
    probe_checkpoint_dir,
)
from verlctl.detect.common import UnavailableCode, unavailable
from verlctl.detect.gpu import parse_nvidia_smi, probe_gpu
from verlctl.detect.machine import MachineState, SystemInfo
from verlctl.detect.models import inspect_model
from verlctl.detect.network import NetworkInfo, host_ips, parse_ip_addr, probe_network
from verlctl.detect.node_probe import NodeFacts
from verlctl.detect.npu import parse_npu_smi_info, probe_npu
from verlctl.detect.system import DiskSpace, shm_space
from verlctl.orchestrator.machine_facts import collect_recipe
from verlctl.spec.model import RunSpec
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS, FIXTURES, ROOT, fixture_text
from launch_support import write_model, write_parquet, write_run_files

ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO
SRC = ROOT / "src" / "verlctl"

# --------------------------------------------------------------------------------------------------
# Collecting the codes from the rule modules
# --------------------------------------------------------------------------------------------------

#: The rule modules: every module under checks/ (a rules module split out of spec_checks.py included).
RULE_DIRS = [SRC / "checks"]
#: Other modules whose findings `verlctl plan` / `verlctl check` report: feature resolution and the
#: required paths of `check`.
OTHER_MODULES = [SRC / "verl" / "compose.py", SRC / "commands" / "check.py"]
#: A finding re-emitted with the code of another finding (``Finding(code=f.code, ...)``): the function
#: that does it, and the module whose codes it relays (the parquet schema check's ``dataset.*`` codes).
RELAYS = {("dataset_checks.py", "_schema_findings"): SRC / "detect" / "datasets.py"}
CONSTRUCTORS = {"error", "warning", "info", "Finding", "finding"}


def rule_modules() -> list[Path]:
    return sorted(p for d in RULE_DIRS for p in d.rglob("*.py")) + OTHER_MODULES


def _module_name(path: Path) -> str:
    """The dotted name of a module file: its stem, then every enclosing package (a dir with __init__.py)."""
    parts = [path.stem]
    parent = path.parent
    while (parent / "__init__.py").exists():
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts)


def declared_codes(path: Path) -> set[str]:
    """Codes from the ``codes`` attribute of the module's rule objects (classes or instances, also inside a
    module-level list, tuple or dict of rules)."""
    module = importlib.import_module(_module_name(path))
    found: set[str] = set()

    def look(obj: Any) -> None:
        codes = getattr(obj, "codes", None)
        if isinstance(codes, (list, tuple, set, frozenset)) and codes and all(isinstance(c, str) for c in codes):
            found.update(codes)

    for obj in vars(module).values():
        if getattr(obj, "__module__", module.__name__) != module.__name__ and not isinstance(obj, (list, tuple, dict)):
            continue  # imported from elsewhere: collected where it is defined
        look(obj)
        if isinstance(obj, (list, tuple)):
            for item in obj:
                look(item)
        elif isinstance(obj, dict):
            for item in obj.values():
                look(item)
    return found


class _Scope:
    """Assignments visible from a call: the enclosing function's, then the module's."""

    def __init__(self, *bodies: ast.AST) -> None:
        self.bodies = bodies

    def assignments(self, name: str) -> Iterator[tuple[ast.expr, int | None]]:
        """(value, index) for ``name = value`` (index None) and ``a, name = value`` (index 1)."""
        for body in self.bodies:
            for node in ast.walk(body):
                targets: list[ast.expr] = []
                value: ast.expr | None = None
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    targets, value = [node.target], node.value
                elif isinstance(node, (ast.For, ast.comprehension)):
                    targets, value = [node.target], node.iter
                    if isinstance(value, (ast.Tuple, ast.List)):  # for code, text in ((..), (..)): each item
                        for item in value.elts:
                            yield from _bind(node.target, item, name)
                    continue
                for target in targets:
                    yield from _bind(target, value, name)


def _bind(target: ast.expr, value: ast.expr | None, name: str) -> Iterator[tuple[ast.expr, int | None]]:
    if value is None:
        return
    if isinstance(target, ast.Name) and target.id == name:
        yield value, None
    elif isinstance(target, ast.Tuple):
        for i, elt in enumerate(target.elts):
            if isinstance(elt, ast.Name) and elt.id == name:
                yield value, i


def _values(expr: ast.expr, scope: _Scope, depth: int = 0) -> set[str] | None:
    """Every string ``expr`` can evaluate to, or None when that cannot be read from the source."""
    if depth > 8:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    if isinstance(expr, ast.IfExp):
        a, b = _values(expr.body, scope, depth + 1), _values(expr.orelse, scope, depth + 1)
        return None if a is None or b is None else a | b
    if isinstance(expr, ast.JoinedStr):
        parts: list[set[str]] = []
        for v in expr.values:
            if isinstance(v, ast.FormattedValue) and v.format_spec is None and v.conversion == -1:
                got = _values(v.value, scope, depth + 1)
            else:
                got = _values(v, scope, depth + 1) if isinstance(v, ast.Constant) else None
            if got is None:
                return None
            parts.append(got)
        return {"".join(p) for p in itertools.product(*parts)}
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "replace"
        and len(expr.args) == 2
        and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in expr.args)
    ):
        base = _values(expr.func.value, scope, depth + 1)
        old, new = (a.value for a in expr.args)  # type: ignore[attr-defined]
        return None if base is None else {b.replace(old, new) for b in base}
    if isinstance(expr, ast.Name):
        out: set[str] = set()
        found = False
        for value, index in scope.assignments(expr.id):
            found = True
            items = [value] if index is None else _unpacked(value, index, scope)
            if items is None:
                return None
            for item in items:
                got = _values(item, scope, depth + 1)
                if got is None:
                    return None
                out |= got
        return out if found else None
    return None


def _unpacked(value: ast.expr, index: int, scope: _Scope) -> list[ast.expr] | None:
    """The ``index``-th element of each tuple ``value`` can be: a tuple, or ``table[key]`` of a dict of tuples."""
    if isinstance(value, ast.Tuple):
        return [value.elts[index]]
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
        tables = [v for v, i in scope.assignments(value.value.id) if i is None]
        items: list[ast.expr] = []
        for table in tables:
            if not isinstance(table, ast.Dict):
                return None
            for v in table.values:
                if not isinstance(v, ast.Tuple):
                    return None
                items.append(v.elts[index])
        return items or None
    return None


def _constructor_names(func: ast.AST) -> set[str]:
    """The finding constructors, and local aliases such as ``make = error if explicit else warning``."""
    names = set(CONSTRUCTORS)
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
            if all(isinstance(o, ast.Name) and o.id in CONSTRUCTORS for o in options):
                names.add(node.targets[0].id)
    return names


@dataclass
class Scan:
    codes: set[str]
    unresolved: list[str]  # "file:line: the code expression" that could not be read


def scan_codes(path: Path) -> Scan:
    tree = ast.parse(path.read_text(), str(path))
    codes: set[str] = set()
    unresolved: list[str] = []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    seen: set[int] = set()
    for func in [*functions, tree]:
        if getattr(func, "name", None) in CONSTRUCTORS:  # the constructors themselves (checks/findings.py)
            seen.update(id(n) for n in ast.walk(func))
            continue
        ctors = _constructor_names(func)
        scope = _Scope(func, tree)
        for call in ast.walk(func):
            if id(call) in seen or not isinstance(call, ast.Call):
                continue
            callee = call.func.id if isinstance(call.func, ast.Name) else None
            func_of = call.func.value if isinstance(call.func, ast.Attribute) else None
            if isinstance(func_of, ast.Name) and func_of.id == "findings":  # `findings.error(...)`
                callee = call.func.attr  # type: ignore[attr-defined]
            if callee not in ctors:
                continue
            seen.add(id(call))
            expr = next((k.value for k in call.keywords if k.arg == "code"), call.args[0] if call.args else None)
            if expr is None:
                unresolved.append(f"{path.name}:{call.lineno}: no code argument")
                continue
            relay = RELAYS.get((path.name, getattr(func, "name", "")))
            if relay is not None and isinstance(expr, ast.Attribute):
                codes |= scan_codes(relay).codes
                continue
            got = _values(expr, scope)
            if got is None:
                unresolved.append(f"{path.name}:{call.lineno}: {ast.unparse(expr)}")
            else:
                codes |= got
    return Scan(codes, unresolved)


def collect_codes(paths: Iterable[Path] | None = None) -> tuple[set[str], list[str]]:
    """Every code the rule modules can emit, and the code arguments that could not be read."""
    codes: set[str] = set()
    unresolved: list[str] = []
    for path in rule_modules() if paths is None else paths:
        declared = declared_codes(path)
        scan = scan_codes(path)
        codes |= declared | scan.codes
        if not declared:  # rules that declare their codes may build them any way they like
            unresolved += scan.unresolved
    return codes, unresolved


# --------------------------------------------------------------------------------------------------
# The rows
# --------------------------------------------------------------------------------------------------

Findings = Callable[[Path], list[Finding]]


@dataclass
class Row:
    code: str
    severity: Severity
    field: str | None
    trigger: Findings  # gives exactly one finding with the code
    clear: Findings  # the near-identical case: none with the code
    note: str = ""


def resolve(**flags: Any) -> Any:
    return load_spec(None, flags=flags, environ={})


def plan(**flags: Any) -> Findings:
    """The spec findings of `verlctl plan` / `verlctl check` for the default spec plus ``flags``."""
    return lambda _tmp: spec_findings(resolve(**{**BASE_PATHS, **flags}))[0]


def spec_row(code: str, severity: Severity, field: str, trigger: dict[str, Any], clear: dict[str, Any],
             note: str = "") -> Row:  # fmt: skip
    return Row(code, severity, field, plan(**trigger), plan(**clear), note)


OSO8 = {"mode": "one_step_off_policy", "cluster.devices": list(range(8))}
V091 = {"verl_version": "0.9.1"}
FSDP = {"strategy": "fsdp"}
TP1 = {"train.tensor_parallel": 1, "train.pipeline_parallel": 1}
FSDP2_TP1 = {"strategy": "fsdp2", **TP1}
SWAN = {"logging.swanlab.enabled": True, "logging.swanlab.host": "http://192.0.2.1:8000"}

AR = "actor_rollout_ref"
SPEC_ROWS = [
    spec_row("device_split", ERROR, "train.trainer_devices",
             {**OSO8, "train.trainer_devices": 5, "train.rollout_devices": 4},
             {**OSO8, "train.trainer_devices": 4, "train.rollout_devices": 4}),
    spec_row("node_split", ERROR, "train.rollout_nodes",
             {**OSO8, "cluster.nodes": ["192.0.2.1", "192.0.2.2"], "train.rollout_nodes": 2},
             {**OSO8, "cluster.nodes": ["192.0.2.1", "192.0.2.2"], "train.rollout_nodes": 1}),
    spec_row("node_split", ERROR, "train.rollout_nodes",
             {**OSO8, "cluster.nodes": ["192.0.2.1", "192.0.2.2"], "train.rollout_nodes": 2},
             {"cluster.devices": list(range(8)), "cluster.nodes": ["192.0.2.1", "192.0.2.2"],
              "train.rollout_nodes": 2}, "a one-step-off setting only"),
    spec_row("device_split", ERROR, "train.rollout_devices",
             {**OSO8, "cluster.nodes": ["192.0.2.1", "192.0.2.2"], "train.rollout_nodes": 1,
              "train.rollout_devices": 9},
             {**OSO8, "cluster.nodes": ["192.0.2.1", "192.0.2.2"], "train.rollout_nodes": 1,
              "train.rollout_devices": 8}, "split by nodes: each side may use a whole node"),
    spec_row("parallel_divisibility", ERROR, "train.tensor_parallel",
             {"train.tensor_parallel": 3, "train.pipeline_parallel": 1},
             {"train.tensor_parallel": 2, "train.pipeline_parallel": 1}),
    spec_row("parallel_divisibility", ERROR, "train.tensor_parallel",
             {"train.tensor_parallel": 4, "train.pipeline_parallel": 4},
             {"train.tensor_parallel": 4, "train.pipeline_parallel": 2},
             "TP*PP = 16 on one node of 8 devices"),
    spec_row("parallel_divisibility", ERROR, "train.tensor_parallel",
             {**OSO8, "train.trainer_devices": 4, "train.rollout_devices": 4, "train.tensor_parallel": 4,
              "train.pipeline_parallel": 2},
             {**OSO8, "train.trainer_devices": 4, "train.rollout_devices": 4, "train.tensor_parallel": 2,
              "train.pipeline_parallel": 2},
             "one-step-off: the trainer has 4 of the 8 devices"),
    spec_row("seed_rule_tp_pp_per_node", INFO, "train.tensor_parallel",
             {"train.tensor_parallel": 2, "train.pipeline_parallel": 1},
             {"train.tensor_parallel": 4, "train.pipeline_parallel": 2}),
    spec_row("rollout_divisibility", ERROR, "train.rollout_tensor_parallel",
             {"train.rollout_tensor_parallel": 3}, {"train.rollout_tensor_parallel": 2}),
    spec_row("rollout_divisibility", ERROR, "train.rollout_tensor_parallel",
             {**OSO8, **FSDP, "train.trainer_devices": 4, "train.rollout_devices": 4, "train.rollout_tensor_parallel": 8},
             {**OSO8, **FSDP, "train.trainer_devices": 4, "train.rollout_devices": 4, "train.rollout_tensor_parallel": 4},
             "one-step-off: the rollout has 4 devices"),
    spec_row("rollout_replica_nodes", ERROR, "train.rollout_tensor_parallel",
             {"train.rollout_tensor_parallel": 12}, {"train.rollout_tensor_parallel": 16}),
    spec_row("rollout_replica_nodes", ERROR, "train.rollout_tensor_parallel",
             {**OSO8, **FSDP, "train.trainer_devices": 4, "train.rollout_devices": 3, "train.rollout_tensor_parallel": 4},
             {**OSO8, **FSDP, "train.trainer_devices": 4, "train.rollout_devices": 4, "train.rollout_tensor_parallel": 4},
             "one-step-off: a TP 4 replica does not fit the 3 rollout devices of a node"),
    spec_row("seed_rule_gen_tp", INFO, "train.rollout_tensor_parallel",
             {"train.rollout_tensor_parallel": 2}, {"train.rollout_tensor_parallel": 4}),
    spec_row("seed_rule_gen_tp", INFO, "train.rollout_tensor_parallel",
             {"train.rollout_tensor_parallel": 2}, {**FSDP, "train.rollout_tensor_parallel": 2},
             "FSDP has no training TP to compare with"),
    spec_row("rollout_n", WARNING, "train.responses_per_prompt",
             {"train.responses_per_prompt": 1}, {"train.responses_per_prompt": 2},
             "verl runs a group of one (its advantage is its score)"),
    spec_row("mini_batch_size", ERROR, "train.mini_batch_size",
             {"train.mini_batch_size": 64}, {"train.mini_batch_size": 32}),
    spec_row("mini_batch_uneven", WARNING, "train.mini_batch_size",
             {**FSDP, "train.mini_batch_size": 24}, {**FSDP, "train.mini_batch_size": 16}),
    spec_row("mini_batch_iterator", ERROR, "train.mini_batch_size",
             {"train.mini_batch_size": 24}, {"train.mini_batch_size": 16}),
    spec_row("mini_batch_over_batch", WARNING, "train.mini_batch_size",
             {**FSDP, "train.mini_batch_size": 64}, {**FSDP, "train.mini_batch_size": 32}),
    spec_row("batch_dp_divisibility", ERROR, "train.train_batch_size",
             {**FSDP, "train.train_batch_size": 5, "train.responses_per_prompt": 4},
             {**FSDP, "train.train_batch_size": 6, "train.responses_per_prompt": 4}),
    spec_row("mini_batch_normalized", ERROR, "train.mini_batch_size",
             {**FSDP, "train.mini_batch_size": 1, "train.responses_per_prompt": 2},
             {**FSDP, "train.mini_batch_size": 4, "train.responses_per_prompt": 2}),
    spec_row("micro_batch_divisibility", ERROR, "train.micro_batch_size_per_device",
             {**FSDP, "features.disable": ["dynamic_batch"], "train.micro_batch_size_per_device": 3},
             {**FSDP, "features.disable": ["dynamic_batch"], "train.micro_batch_size_per_device": 4}),
    spec_row("micro_batch_divisibility", ERROR, "train.micro_batch_size_per_device",
             {**FSDP, **V091, "features.disable": ["dynamic_batch"], "train.micro_batch_size_per_device": 3},
             {**FSDP, **V091, "train.micro_batch_size_per_device": 3},
             "verl 0.9.1 checks the micro batch only without dynamic batch sizing"),
    spec_row("micro_batch_divisibility", ERROR, "train.micro_batch_size_per_device",
             {**FSDP, "train.micro_batch_size_per_device": 3},
             {**FSDP, **V091, "train.micro_batch_size_per_device": 3},
             "verl 0.7.0's FSDP worker asserts it even with dynamic batch sizing, 0.9.1 does not"),
    spec_row("mini_batch_dp", ERROR, "train.mini_batch_size",
             {**FSDP, **V091, "train.mini_batch_size": 3, "train.responses_per_prompt": 2},
             {**FSDP, **V091, "train.mini_batch_size": 4, "train.responses_per_prompt": 2}),
    spec_row("mini_batch_dp", ERROR, "train.mini_batch_size",
             {**FSDP, **V091, "train.mini_batch_size": 3, "train.responses_per_prompt": 2},
             {**FSDP, "train.mini_batch_size": 3, "train.responses_per_prompt": 2},
             "a verl 0.9.1 engine-worker assert"),
    spec_row("agent_loop_chunks", ERROR, "train.train_batch_size",
             {"train.train_batch_size": 5, "train.responses_per_prompt": 3},
             {"train.train_batch_size": 8, "train.responses_per_prompt": 3}),
    spec_row("agent_loop_chunks", ERROR, "train.train_batch_size",
             {"train.train_batch_size": 5, "train.responses_per_prompt": 3},
             {"train.train_batch_size": 5, "train.responses_per_prompt": 3,
              "extra_overrides": ["actor_rollout_ref.rollout.agent.num_workers=5"]},
             "as many agent-loop workers as the override says"),
    spec_row("agent_loop_chunks", ERROR, "train.gen_batch_size",
             {"train.train_batch_size": 8, "train.gen_batch_size": 5, "train.responses_per_prompt": 3},
             {"train.train_batch_size": 8, "train.gen_batch_size": 16, "train.responses_per_prompt": 3},
             "DAPO generates gen_batch_size prompts"),
    spec_row("agent_loop_chunks", ERROR, "train.train_batch_size",
             {"train.train_batch_size": 5, "train.responses_per_prompt": 3},
             {**V091, "train.train_batch_size": 5, "train.responses_per_prompt": 3}, "a verl 0.7.0 rule"),
    spec_row("batch_micro_divisibility", ERROR, "train.train_batch_size",
             {**TP1, "features.disable": ["dynamic_batch"], "train.train_batch_size": 12, "train.mini_batch_size": 8,
              "train.responses_per_prompt": 2, "train.micro_batch_size_per_device": 2},
             {**TP1, **FSDP, "features.disable": ["dynamic_batch"], "train.train_batch_size": 12,
              "train.mini_batch_size": 8, "train.responses_per_prompt": 2, "train.micro_batch_size_per_device": 2},
             "a Megatron-only rule (verl validate_config)"),
    spec_row("batch_micro_divisibility", ERROR, "train.train_batch_size",
             {**TP1, "features.disable": ["dynamic_batch"], "train.train_batch_size": 12, "train.mini_batch_size": 8,
              "train.responses_per_prompt": 2, "train.micro_batch_size_per_device": 2},
             {**TP1, "features.disable": ["dynamic_batch"], "train.train_batch_size": 16, "train.mini_batch_size": 8,
              "train.responses_per_prompt": 2, "train.micro_batch_size_per_device": 2}),
    spec_row("oso_dapo_sampling", INFO, "mode", {**OSO8, **FSDP}, {**OSO8, **FSDP, "algorithm": "grpo"}),
    spec_row("oso_dapo_sampling", INFO, "mode", {**OSO8, **FSDP}, {**FSDP}, "sync DAPO keeps dynamic sampling"),
    spec_row("oso_batch_rule", WARNING, "train.train_batch_size",
             {**OSO8, **FSDP, "train.train_batch_size": 3, "train.responses_per_prompt": 2},
             {**OSO8, **FSDP, "train.train_batch_size": 2, "train.responses_per_prompt": 2}),
    spec_row("oso_batch_rule", WARNING, "train.train_batch_size",
             {**OSO8, **FSDP, "train.train_batch_size": 3, "train.responses_per_prompt": 2},
             {**FSDP, "train.train_batch_size": 3, "train.responses_per_prompt": 2},
             "a one-step-off rule only"),
    spec_row("oso_noset", WARNING, "env.RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
             {**OSO8, **FSDP, "env": {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}},
             {**OSO8, **FSDP, "env": {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "0"}}),
    spec_row("oso_noset", WARNING, "env.RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
             {**OSO8, **FSDP, "env": {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}},
             {**FSDP, "env": {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}}, "a one-step-off rule only"),
    spec_row("master_not_a_node", WARNING, "cluster.master_addr",
             {"cluster.nodes": ["192.0.2.1", "192.0.2.2"], "cluster.master_addr": "192.0.2.9"},
             {"cluster.nodes": ["192.0.2.1", "192.0.2.2"], "cluster.master_addr": "192.0.2.2"}),
    spec_row("master_not_a_node", WARNING, "cluster.master_addr",
             {"cluster.nodes": ["192.0.2.1", "192.0.2.2"], "cluster.master_addr": "192.0.2.9"},
             {"cluster.master_addr": "192.0.2.9"}, "a single node has no node list to compare with"),
    spec_row("ports", ERROR, "cluster.dashboard_port",
             {"cluster.ray_port": 6379, "cluster.dashboard_port": 6379},
             {"cluster.ray_port": 6379, "cluster.dashboard_port": 6380}),
    spec_row("ray_port_conflict", ERROR, "cluster.ray_port", {"cluster.ray_port": 16766}, {"cluster.ray_port": 6766}),
    spec_row("ray_start_args_port", ERROR, "cluster.ray_start_args",
             {"cluster.ray_start_args": ["--min-worker-port=30000", "--max-worker-port=20000"]},
             {"cluster.ray_start_args": ["--min-worker-port=20000", "--max-worker-port=30000"]}),
    spec_row("no_checkpoints", WARNING, "train.save_freq", {"train.save_freq": -1}, {"train.save_freq": 2}),
    spec_row("checkpoints_after_last_step", WARNING, "train.save_freq",
             {"train.steps": 4, "train.save_freq": 5}, {"train.steps": 4, "train.save_freq": 4}),
    spec_row("swanlab_host", ERROR, "logging.swanlab.host",
             {"logging.swanlab.enabled": True, "logging.swanlab.api_key": "k"},
             {**SWAN, "logging.swanlab.api_key": "k"}),
    spec_row("swanlab_api_key", ERROR, "logging.swanlab.api_key", SWAN, {**SWAN, "logging.swanlab.api_key": "k"}),
    spec_row("swanlab_api_key", ERROR, "logging.swanlab.api_key", SWAN, {**SWAN, "logging.swanlab.mode": "local"},
             "local mode logs in with no key"),
    spec_row("logger_console", INFO, "logging.console", {"logging.console": False}, {"logging.console": True}),
    spec_row("logger_console", INFO, "logging.console", {"logging.console": False},
             {**SWAN, "logging.console": False, "logging.swanlab.mode": "local"}, "SwanLab is a logger"),
    spec_row("restart_category", ERROR, "recovery.restart_on",
             {"recovery.restart_on": ["hccl_timout"]}, {"recovery.restart_on": ["hccl_timeout"]}),
    spec_row("ray_cpus_short", ERROR, "cluster.ray_start_args", {**V091, "cluster.ray_start_args": ["--num-cpus=33"]},
             {**V091, "cluster.ray_start_args": ["--num-cpus=34"]}, "verl 0.9.1 GRPO on 8 devices holds 34"),
    spec_row("ray_init_on_started_ray", ERROR, "extra_overrides",
             {"extra_overrides": ["ray_kwargs.ray_init.num_cpus=16"]},
             {"extra_overrides": ["ray_kwargs.ray_init.num_cpus=null"]}),
    # feature resolution (verl/compose.py)
    spec_row("verl_version_auto", WARNING, "verl_version", {"verl_version": "auto"}, {"verl_version": "0.9.1"}),
    spec_row("unknown_feature", ERROR, "features.enable", {"features.enable": ["vppp"]}, {"features.enable": ["vpp"]}),
    spec_row("unknown_feature", ERROR, "features.disable", {"features.disable": ["ofload"]},
             {"features.disable": ["offload"]}),
    spec_row("feature_enable_disable", ERROR, "features",
             {"features.enable": ["offload"], "features.disable": ["offload"]}, {"features.enable": ["offload"]}),
    spec_row("feature_mask_disable", ERROR, "features",
             {"features.mask": "1100000", "features.disable": ["remove_padding"]},
             {"features.mask": "0100000", "features.disable": ["remove_padding"]}),
    spec_row("feature_not_applicable", INFO, "features",
             {"features.enable": ["gradient_checkpointing"]}, {**FSDP, "features.enable": ["gradient_checkpointing"]}),
    spec_row("feature_prerequisite", ERROR, "train.pipeline_parallel",
             {"features.enable": ["vpp"], "train.pipeline_parallel": 1, "train.tensor_parallel": 8},
             {"features.enable": ["vpp"], "train.pipeline_parallel": 2, "train.tensor_parallel": 4}),
    spec_row("feature_prerequisite", ERROR, "device",
             {"features.enable": ["swap_optimizer"], "device": "gpu"},
             {"features.enable": ["swap_optimizer"], "device": "npu"}),
    spec_row("feature_cannot_turn_off", WARNING, "features",
             {"features.disable": ["prefix_cache"]}, {**V091, "features.disable": ["prefix_cache"]},
             "verl 0.9.1 writes --no-enable-prefix-caching"),
    spec_row("feature_cannot_turn_off", WARNING, "features",
             {"features.disable": ["chunked_prefill"]}, {"features.enable": ["chunked_prefill"]}),
    spec_row("vpp_mbridge_unverified", WARNING, "features",
             {**V091, "features.enable": ["vpp"], "train.pipeline_parallel": 2, "train.tensor_parallel": 4},
             {"features.enable": ["vpp"], "train.pipeline_parallel": 2, "train.tensor_parallel": 4},
             "verl 0.7.0 turns mbridge off for VPP on Ascend"),
    spec_row("vpp_mbridge_unverified", WARNING, "features",
             {**V091, "features.enable": ["vpp"], "train.pipeline_parallel": 2, "train.tensor_parallel": 4},
             {**V091, "features.enable": ["vpp"], "train.pipeline_parallel": 2, "train.tensor_parallel": 4,
              "device": "gpu"}, "an Ascend-only concern"),
    spec_row("feature_conflict", WARNING, "features",
             {"features.enable": ["swap_optimizer", "offload"]}, {"features.enable": ["swap_optimizer"]}),
    spec_row("swanlab_key_unused", INFO, "logging.swanlab.api_key",
             {**SWAN, "logging.swanlab.mode": "local", "logging.swanlab.api_key": "k"},
             {**SWAN, "logging.swanlab.mode": "local"}),
    Row("required_path", ERROR, "paths.val_files",
        lambda t: spec_findings(resolve(**{k: v for k, v in BASE_PATHS.items() if k != "paths.val_files"}))[0], plan()),
]

def _with_table(tmp: Path, severity: str) -> list[Finding]:
    """The spec findings with VERLCTL_KNOWN_DEFECTS naming a table whose one entry has ``severity``."""
    table = tmp / "defects.yaml"
    table.write_text("defects:\n  - id: x\n    issue: i\n    effect: e\n    fix: f\n    " + severity
                     + "\n    when: {device: [gpu]}\n", encoding="utf-8")
    old = os.environ.get("VERLCTL_KNOWN_DEFECTS")
    os.environ["VERLCTL_KNOWN_DEFECTS"] = str(table)
    try:
        return plan()(tmp)
    finally:
        if old is None:
            os.environ.pop("VERLCTL_KNOWN_DEFECTS")
        else:
            os.environ["VERLCTL_KNOWN_DEFECTS"] = old


# verl 0.9.1's async trainers (checks/async_rules.py): each assert they make, triggered by the spec or by an
# extra override that verl would read last.
SEP = {**V091, **FSDP, "mode": "separate_async", "cluster.devices": list(range(8))}
FA = {**V091, **FSDP, "mode": "fully_async", "cluster.devices": list(range(8))}
SPEC_ROWS += [
    spec_row("legacy_trainer_mode", WARNING, "mode", {**FA, "train.tensor_parallel": 2},
             {**SEP, "train.tensor_parallel": 2}, "fully_async runs the legacy trainer; separate_async is V1"),
    spec_row("legacy_trainer_mode", WARNING, "mode", {**V091, **OSO8, "train.tensor_parallel": 2},
             {**OSO8, "train.tensor_parallel": 2}, "one-step-off: on 0.9.1 the legacy trainer, on 0.7.0 the recipe"),
    spec_row("mode_version", ERROR, "mode", {**FSDP, "mode": "separate_async"}, SEP),
    spec_row("mode_version", ERROR, "mode", {**FSDP, "mode": "fully_async", "verl_version": "0.7.0"}, FA),
    spec_row("mode_version", ERROR, "mode", {**FSDP, "mode": "colocate_async", "verl_version": "0.7.0"},
             {**FSDP, "mode": "colocate_async", "verl_version": "auto"}, "auto plans for the mode's version"),
    spec_row("async_batch_sync_step", ERROR, "train.parameter_sync_step",
             {**SEP, "train.parameter_sync_step": 3, "train.mini_batch_size": 8},
             {**SEP, "train.parameter_sync_step": 4, "train.mini_batch_size": 8}),
    spec_row("async_batch_sync_step", ERROR, "train.mini_batch_size",
             {**FA, "train.mini_batch_size": 5}, {**FA, "train.mini_batch_size": 16}),
    spec_row("async_batch_sync_step", ERROR, "train.parameter_sync_step",
             {**SEP, "train.parameter_sync_step": 3, "train.mini_batch_size": 8},
             {**V091, **FSDP, "mode": "colocate_async", "train.parameter_sync_step": 3, "train.mini_batch_size": 8},
             "colocate_async syncs every step"),
    spec_row("async_rollout_pool", ERROR, "extra_overrides",
             {**SEP, "extra_overrides": ["actor_rollout_ref.rollout.n_gpus_per_node=0"]},
             {**SEP, "extra_overrides": ["actor_rollout_ref.rollout.n_gpus_per_node=4"]}),
    spec_row("async_rollout_pool", ERROR, "extra_overrides",
             {**SEP, "extra_overrides": ["actor_rollout_ref.rollout.nnodes=0"]},
             {**SEP, "extra_overrides": ["actor_rollout_ref.rollout.nnodes=1"]}),
    spec_row("async_checkpoint_engine", ERROR, "extra_overrides",
             {**SEP, "extra_overrides": ["actor_rollout_ref.rollout.checkpoint_engine.backend=naive"]},
             {**SEP, "extra_overrides": ["actor_rollout_ref.rollout.checkpoint_engine.backend=nixl"]}),
    spec_row("async_switch_disaggregation", ERROR, "extra_overrides",
             {**SEP, "extra_overrides": ["trainer.v1.separate_async.hybrid_rollout.enable_switch=True",
                                         "actor_rollout_ref.rollout.disaggregation.enabled=True"]},
             {**SEP, "extra_overrides": ["trainer.v1.separate_async.hybrid_rollout.enable_switch=True"]}),
    spec_row("async_reward_pool", ERROR, "extra_overrides",
             {**SEP, "extra_overrides": ["reward.reward_model.enable=True"]},
             {**SEP, "extra_overrides": ["reward.reward_model.enable=True",
                                         "reward.reward_model.enable_resource_pool=True"]}),
    spec_row("async_reward_pool", ERROR, "extra_overrides",
             {**FA, "extra_overrides": ["reward.reward_model.enable=True"]},
             {**FA, "extra_overrides": ["reward.reward_model.enable=False"]}),
    spec_row("fully_async_hybrid_engine", ERROR, "extra_overrides",
             {**FA, "extra_overrides": ["actor_rollout_ref.hybrid_engine=True"]},
             {**FA, "extra_overrides": ["actor_rollout_ref.hybrid_engine=False"]}),
    spec_row("fully_async_batch", ERROR, "extra_overrides",
             {**FA, "extra_overrides": ["data.train_batch_size=32"]}, {**FA, "extra_overrides": ["data.train_batch_size=0"]}),
    spec_row("fully_async_batch", ERROR, "extra_overrides",
             {**FA, "extra_overrides": ["data.gen_batch_size=4"]}, {**FA, "extra_overrides": ["data.gen_batch_size=1"]}),
    spec_row("fully_async_staleness", ERROR, "extra_overrides",
             {**FA, "extra_overrides": ["async_training.staleness_threshold=-0.5"]},
             {**FA, "extra_overrides": ["async_training.staleness_threshold=0.5"]}),
    spec_row("fully_async_staleness", ERROR, "extra_overrides",
             {**FA, "extra_overrides": ["async_training.trigger_parameter_sync_step=0"]},
             {**FA, "extra_overrides": ["async_training.trigger_parameter_sync_step=2"]}),
    spec_row("known_defect", ERROR, "cluster.devices", {**FSDP, "cluster.devices": [1, 0, 2, 3, 4, 5, 6, 7]},
             {**FSDP, "cluster.devices": list(range(8))}),
    spec_row("known_defect", ERROR, "cluster.devices", {**FSDP, "cluster.devices": [1, 0, 2, 3, 4, 5, 6, 7]},
             {**FSDP, "device": "gpu", "cluster.devices": [1, 0, 2, 3, 4, 5, 6, 7]}, "an NPU (CANN) rule"),
    Row("known_defect_table", ERROR, "VERLCTL_KNOWN_DEFECTS", lambda tmp: _with_table(tmp, "severity: fatal"),
        lambda tmp: _with_table(tmp, "severity: warning")),
    spec_row("managed_override", ERROR, "extra_overrides", {"extra_overrides": ["trainer.nnodes=4"]},
             {"extra_overrides": ["trainer.nnodes=1"]}, "the value verlctl emits anyway"),
    spec_row("managed_override", ERROR, "extra_overrides", {**SEP, "extra_overrides": ["actor_rollout_ref.rollout.n_gpus_per_node=2"]},
             {**FSDP, **V091, "extra_overrides": ["actor_rollout_ref.rollout.n_gpus_per_node=2"]},
             "not a key verlctl manages in sync mode"),
    spec_row("managed_override", ERROR, "extra_overrides", {"extra_overrides": ["trainer.total_training_steps=100"]},
             {"train.steps": None, "extra_overrides": ["trainer.total_training_steps=100"]},
             "train.steps unset: verlctl emits no total_training_steps"),
    spec_row("verl_defaults_key", ERROR, "verl_defaults", {"verl_defaults": ["trainer.nnodes"]},
             {"verl_defaults": ["data.truncation"]}, "a preset verl/presets.py lets an import leave to verl"),
    spec_row("verl_defaults_key", ERROR, "verl_defaults",
             {"features.disable": ["dynamic_batch"], "verl_defaults": [f"{AR}.actor.ppo_micro_batch_size_per_gpu"]},
             {"features.enable": ["dynamic_batch"], "verl_defaults": [f"{AR}.actor.ppo_micro_batch_size_per_gpu"]},
             "the micro-batch size is left to verl only with dynamic batching"),
    spec_row("fully_async_log_probs", ERROR, "extra_overrides",
             {**FA, "extra_overrides": ["actor_rollout_ref.rollout.calculate_log_probs=False"]},
             {**FA, "extra_overrides": ["actor_rollout_ref.rollout.calculate_log_probs=True"]}),
]


# ---- machine checks: real files, real probes, real captures -------------------------------------


def files(tmp: Path) -> dict[str, Any]:
    """Real model dir and parquet files (launch_support.write_run_files), once per test."""
    if not (tmp / "models").exists():
        write_run_files(tmp)
    return {
        "paths.model": str(tmp / "models" / "Qwen3-tiny"),
        "paths.train_files": str(tmp / "data" / "train.parquet"),
        "paths.val_files": str(tmp / "data" / "val.parquet"),
        "container.runtime": "host",
    }


def spec_at(tmp: Path, **flags: Any) -> RunSpec:
    return resolve(**{**files(tmp), **flags}).spec


def model_findings(make: Callable[[Path], str]) -> Findings:
    """check_model_path on the real directory ``make`` builds (its path as paths.model)."""

    def run(tmp: Path) -> list[Finding]:
        path = make(tmp)
        return check_model_path(spec_at(tmp, **{"paths.model": path}), inspect_model(path))

    return run


def good_model(tmp: Path) -> str:
    return files(tmp)["paths.model"]


def loop(tmp: Path) -> str:
    """A symbolic link to itself: stat/scandir fail with ELOOP (also for root, unlike mode bits)."""
    link = tmp / "loop"
    if not link.is_symlink():
        link.symlink_to(link)
    return str(link)


def weight_is_a_directory(tmp: Path) -> str:
    path = Path(good_model(tmp))
    (path / "model-00002-of-00002.safetensors").mkdir()
    return str(path)


def model_without_config(tmp: Path) -> str:
    path = Path(good_model(tmp))
    (path / "config.json").unlink()
    return str(path)


def dataset_findings(make: Callable[[Path], str]) -> Findings:
    def run(tmp: Path) -> list[Finding]:
        return check_datasets([check_dataset_file("paths.train_files", make(tmp), 10.0)], None, "host")

    return run


def good_parquet(tmp: Path) -> str:
    return files(tmp)["paths.train_files"]


def parquet(columns: dict[str, list[Any]]) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp / "custom.parquet"
        pq.write_table(pa.table(columns), path)
        return str(path)

    return make


_ROW = {
    "data_source": ["math_dapo"],
    "prompt": [[{"role": "user", "content": "1+1?"}]],
    "ability": ["MATH"],
    "reward_model": [{"style": "rule", "ground_truth": "2"}],
    "extra_info": [{"index": 0}],
}


def without(name: str, **replace: list[Any]) -> Callable[[Path], str]:
    cols = {k: v for k, v in _ROW.items() if k != name}
    cols.update(replace)
    return parquet(cols)


def text_file(tmp: Path) -> str:
    (tmp / "notes.parquet").write_text("prompt,answer\n")
    return str(tmp / "notes.parquet")


def corrupt_parquet(tmp: Path) -> str:
    (tmp / "corrupt.parquet").write_bytes(b"PAR1" + b"\0" * 64)  # the magic, then no footer
    return str(tmp / "corrupt.parquet")


def empty_parquet(tmp: Path) -> str:
    write_parquet(tmp / "empty.parquet", rows=0)
    return str(tmp / "empty.parquet")


def schema_result(code: UnavailableCode) -> Findings:
    """A file that was read, and a schema check that could not run (``code``): as collect_facts records it."""

    def run(tmp: Path) -> list[Finding]:
        path = good_parquet(tmp)
        check = DatasetCheck(field="paths.train_files", path=path, file=FileProbe(path=path, size_bytes=1),
                             verl_schema=unavailable("datasets", code, f"{path}: {code.value}"))  # fmt: skip
        return check_datasets([check], None, "host")

    return run


def checkpoint_findings(path: Callable[[Path], str], params: Callable[[int], int | None] | None = None,
                        probe: Callable[[Path, str], Any] | None = None, no_config: bool = False) -> Findings:  # fmt: skip
    """check_checkpoints on the real probe of ``path``; ``params(free bytes)`` sizes a real model for it;
    ``no_config``: paths.model has no config.json either (the size cannot be estimated)."""

    def run(tmp: Path) -> list[Finding]:
        where = path(tmp)
        result = probe(tmp, where) if probe else probe_checkpoint_dir(where)
        model: Any = None
        if params is not None and isinstance(result, CheckpointProbe) and result.free_bytes is not None:
            count = params(result.free_bytes)
            model = inspect_model(big_model(tmp, count)) if count else None
        extra = {"paths.model": str(tmp / "no-model-here")} if no_config else {}
        return check_checkpoints(spec_at(tmp, **{"paths.checkpoints": where, **extra}), result, model)

    return run


def big_model(tmp: Path, params: int) -> str:
    """A model dir whose safetensors header declares ``params`` parameters (the data is not written)."""
    d = tmp / "models" / f"big-{params}"
    write_model(d)
    header = json.dumps({"w": {"dtype": "BF16", "shape": [params], "data_offsets": [0, 2 * params]}}).encode()
    (d / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    assert inspect_model(str(d)).param_count == params
    return str(d)


def ckpt_dir(tmp: Path) -> str:
    return str(tmp / "ckpt" / "exp")


def in_proc(tmp: Path) -> str:
    return "/proc/verlctl-no-such-dir/ckpt"  # /proc cannot take a new file, not even from root


def a_file(tmp: Path) -> str:
    (tmp / "plain").write_text("x")
    return str(tmp / "plain")


ONE = CHECKPOINT_BYTES_PER_PARAM


def log_findings(steps: Callable[[int], int] | None) -> Findings:
    """paths.logs on the test's own disk (a real statvfs); ``steps(free)`` sizes train.steps; None: the probe failed."""
    from verlctl.checks.checkpoints import check_log_space
    from verlctl.detect.system import disk_space

    def run(tmp: Path) -> list[Finding]:
        disk = (disk_space(str(tmp / "logs")) if steps is not None
                else unavailable("disk", UnavailableCode.TIMEOUT, "statvfs did not return within 5 s"))
        n = steps(disk.free_bytes) if steps is not None and isinstance(disk, DiskSpace) else 1
        return check_log_space(resolve(**{"paths.logs": str(tmp / "logs"), "train.steps": n}).spec, disk)
    return run


def devices(state: Callable[[], MachineState], devs: list[int], device: str = "npu", allow: bool = False) -> Findings:
    return lambda tmp: check_devices(resolve(**{"cluster.devices": devs, "device": device,
                                                "cluster.allow_busy_devices": allow}).spec, state())


def npu_capture(name: str) -> Callable[[], MachineState]:
    return lambda: MachineState(npu=parse_npu_smi_info(fixture_text(FIXTURES / "npu-smi" / name)))


def gpu_capture(name: str) -> Callable[[], MachineState]:
    return lambda: MachineState(gpu=parse_nvidia_smi(fixture_text(FIXTURES / "nvidia-smi" / name)))


BUSY_910B = npu_capture("info-910B1-8card-23.0.rc2.b090-training-busy-elided.txt")  # NPUs 0 and 7, both busy
IDLE_910B = npu_capture("info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt")
NO_PROCESS_LIST_910 = npu_capture("info-910-proB-8card-24.1.0.txt")  # the devices table only
WARN_910A = npu_capture("info-910A-1card-WARNING-health-23.0.rc3-modelarts.txt")  # NPU 1, health Warning
IDLE_H200 = gpu_capture("default-580-1gpu-h200-idle-verlctl-device-check.txt")
BUSY_H200 = gpu_capture("default-580-1gpu-h200-busy-1proc-verlctl-device-check.txt")


def model_fit(config: dict[str, Any], vpp_on: bool = False, recompute_on: bool = False, **flags: Any) -> Findings:
    def run(tmp: Path) -> list[Finding]:
        d = tmp / "models" / "shaped"
        write_model(d)
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(config)
        (d / "config.json").write_text(json.dumps(cfg))
        spec = spec_at(tmp, **{"paths.model": str(d), **flags})
        return check_model_fit(spec, inspect_model(str(d)), vpp_on, recompute_on)

    return run


def recipe(entry: str | None, **flags: Any) -> Findings:
    """check_recipe on a real probe of a host work dir (``runtime: host``), holding ``entry`` or nothing."""

    def run(tmp: Path) -> list[Finding]:
        if entry:
            (tmp / entry).parent.mkdir(parents=True)
            (tmp / entry).write_text("")
        resolved = resolve(**{"container.runtime": "host", "container.workdir": str(tmp), **flags})
        return check_recipe(resolved.spec, collect_recipe(resolved, None, 10.0))

    return run


def captured_network() -> NetworkInfo:
    text = fixture_text(FIXTURES / "network" / "ip-addr-multi-nic-bond-partial-sglang-issue3514.txt")
    interfaces, warnings = parse_ip_addr(text)
    return NetworkInfo(interfaces=interfaces, host_ips=host_ips(interfaces), warnings=warnings)


def network(flags: dict[str, Any], master_ips: list[str] | None = None, net: str = "captured") -> Findings:
    """check_network on the captured ``ip addr`` (no IPv4 addresses), or on this machine's ("live")."""

    def run(tmp: Path) -> list[Finding]:
        info: Any = {"captured": captured_network, "live": live_network, "down": lambda: NETWORK_DOWN}[net]()
        given = {k: (v() if callable(v) else v) for k, v in flags.items()}
        ips = [ip() if callable(ip) else ip for ip in master_ips] if master_ips is not None else None
        return check_network(resolve(**given).spec, info, ips)

    return run


def live_network() -> NetworkInfo:
    found = probe_network()
    assert isinstance(found, NetworkInfo)
    if _carrier(found) is None:
        pytest.skip("no up interface with an IPv4 address here")
    return found


def _carrier(net: NetworkInfo) -> Any:
    return next((i for i in net.interfaces if not i.is_loopback and i.is_up and i.ipv4_addresses), None)


def IFACE() -> str:  # noqa: N802 - a value, looked up when a row runs
    return str(_carrier(live_network()).name)


def ADDR() -> str:  # noqa: N802
    return str(_carrier(live_network()).ipv4_addresses[0])


NETWORK_DOWN = unavailable("network", UnavailableCode.NOT_FOUND, "ip: not found")


def docker(explicit: bool = False, **facts: Any) -> Findings:
    """check_docker on what the engine answered (DockerFacts, as collect_docker records it)."""
    base = {"image": "example/verl:1", "container": "verlctl-codes"}
    pull = facts.pop("pull", False)

    def run(tmp: Path) -> list[Finding]:
        spec = resolve(**{"container.image": "example/verl:1", "container.name": "verlctl-codes",
                          "container.pull": pull}).spec  # fmt: skip
        return check_docker(spec, DockerFacts(**{**base, **facts}), explicit)

    return run


MACHINE_ROWS = [
    # paths.model
    Row("model_missing", ERROR, "paths.model", model_findings(lambda t: str(t / "models" / "absent")),
        model_findings(good_model)),
    Row("model_not_dir", ERROR, "paths.model", model_findings(good_parquet), model_findings(good_model)),
    Row("model_unreadable", ERROR, "paths.model", model_findings(loop), model_findings(good_model)),
    Row("model_incomplete", ERROR, "paths.model", model_findings(model_without_config), model_findings(good_model)),
    Row("model_warnings", WARNING, "paths.model", model_findings(weight_is_a_directory), model_findings(good_model)),
    Row("model_unchecked", WARNING, "paths.model",
        lambda t: check_model_path(spec_at(t), unavailable("models", UnavailableCode.TIMEOUT, "timed out")),
        lambda t: check_model_path(spec_at(t), inspect_model(good_model(t)))),
    # paths.train_files / paths.val_files
    Row("dataset_missing", ERROR, "paths.train_files", dataset_findings(lambda t: str(t / "absent.parquet")),
        dataset_findings(good_parquet)),
    Row("dataset_not_file", ERROR, "paths.train_files", dataset_findings(lambda t: str(t)), dataset_findings(good_parquet)),
    Row("dataset_not_parquet", ERROR, "paths.train_files", dataset_findings(text_file), dataset_findings(good_parquet)),
    Row("dataset_unreadable", ERROR, "paths.train_files", dataset_findings(loop), dataset_findings(good_parquet)),
    Row("dataset_schema_unchecked", WARNING, "paths.train_files", schema_result(UnavailableCode.TIMEOUT),
        dataset_findings(good_parquet)),
    Row("dataset_schema_skipped", WARNING, "paths.train_files", schema_result(UnavailableCode.MISSING_DEPENDENCY),
        dataset_findings(good_parquet)),
    Row("dataset.unreadable", ERROR, "paths.train_files", dataset_findings(corrupt_parquet),
        dataset_findings(good_parquet)),
    Row("dataset.prompt_missing", ERROR, "paths.train_files", dataset_findings(without("prompt")),
        dataset_findings(parquet(_ROW))),
    Row("dataset.prompt_not_chat", ERROR, "paths.train_files", dataset_findings(without("prompt", prompt=["1+1?"])),
        dataset_findings(parquet(_ROW))),
    Row("dataset.data_source_missing", ERROR, "paths.train_files", dataset_findings(without("data_source")),
        dataset_findings(parquet(_ROW))),
    Row("dataset.data_source_type", WARNING, "paths.train_files",
        dataset_findings(without("data_source", data_source=[7])), dataset_findings(parquet(_ROW))),
    Row("dataset.reward_model_missing", ERROR, "paths.train_files", dataset_findings(without("reward_model")),
        dataset_findings(parquet(_ROW))),
    Row("dataset.reward_model_not_struct", ERROR, "paths.train_files",
        dataset_findings(without("reward_model", reward_model=["2"])), dataset_findings(parquet(_ROW))),
    Row("dataset.ground_truth_missing", ERROR, "paths.train_files",
        dataset_findings(without("reward_model", reward_model=[{"style": "rule"}])), dataset_findings(parquet(_ROW))),
    Row("dataset.ability_missing", INFO, "paths.train_files", dataset_findings(without("ability")),
        dataset_findings(parquet(_ROW))),
    Row("dataset.extra_info_missing", INFO, "paths.train_files", dataset_findings(without("extra_info")),
        dataset_findings(parquet(_ROW))),
    Row("dataset.empty", ERROR, "paths.train_files", dataset_findings(empty_parquet), dataset_findings(good_parquet)),
    # paths.checkpoints
    Row("checkpoint_not_dir", ERROR, "paths.checkpoints", checkpoint_findings(a_file), checkpoint_findings(ckpt_dir)),
    Row("checkpoint_not_writable", ERROR, "paths.checkpoints", checkpoint_findings(in_proc),
        checkpoint_findings(ckpt_dir)),
    Row("checkpoint_unchecked", WARNING, "paths.checkpoints",
        checkpoint_findings(ckpt_dir, probe=lambda t, p: unavailable("checkpoints", UnavailableCode.TIMEOUT, "slow")),
        checkpoint_findings(ckpt_dir)),
    Row("checkpoint_space_unknown", WARNING, "paths.checkpoints",
        checkpoint_findings(ckpt_dir, probe=lambda t, p: CheckpointProbe(path=p, checked_path=str(t), exists=False,
                                                                          writable=True)),
        checkpoint_findings(ckpt_dir, params=lambda free: 1000)),
    Row("checkpoint_size_unknown", WARNING, "paths.checkpoints", checkpoint_findings(ckpt_dir, no_config=True),
        checkpoint_findings(ckpt_dir, params=lambda free: 1000), "no model: the size of a checkpoint is unknown"),
    Row("checkpoint_space", ERROR, "paths.checkpoints",
        checkpoint_findings(ckpt_dir, params=lambda free: free // ONE + 1),
        checkpoint_findings(ckpt_dir, params=lambda free: free // ONE)),
    Row("checkpoint_space_low", WARNING, "paths.checkpoints",
        checkpoint_findings(ckpt_dir, params=lambda free: free // (2 * ONE)),
        checkpoint_findings(ckpt_dir, params=lambda free: free // (3 * ONE))),
    Row("log_space", ERROR, "paths.logs", log_findings(lambda free: free // LOG_BYTES_PER_STEP + 1),
        log_findings(lambda free: 1), "a real statvfs of the test's disk; steps sized to overflow it"),
    Row("log_space_unknown", WARNING, "paths.logs", log_findings(None), log_findings(lambda free: 1)),
    # cluster.devices
    Row("npu_smi_missing", ERROR, "device",  # on the host, launch needs the host's tool
        lambda t: check_devices(resolve(**{"container.runtime": "host"}).spec,
                                MachineState(npu=probe_npu(binary=str(t / "no-npu-smi")))),
        devices(IDLE_910B, [0])),
    Row("npu_smi_missing", WARNING, "device",  # in a container, launch checks the container's tool
        lambda t: check_devices(resolve().spec, MachineState(npu=probe_npu(binary=str(t / "no-npu-smi")))),
        devices(IDLE_910B, [0])),
    Row("npu_smi_failed", ERROR, "device",
        lambda t: check_devices(resolve().spec, MachineState(npu=probe_npu(binary="false"))),
        devices(IDLE_910B, [0])),
    Row("nvidia_smi_missing", WARNING, "device",
        lambda t: check_devices(resolve(device="gpu").spec, MachineState(gpu=probe_gpu(binary=str(t / "no-smi")))),
        devices(IDLE_H200, [0], "gpu")),
    Row("nvidia_smi_failed", ERROR, "device",
        lambda t: check_devices(resolve(device="gpu").spec, MachineState(gpu=probe_gpu(binary="false"))),
        devices(IDLE_H200, [0], "gpu")),
    Row("device_missing", ERROR, "cluster.devices", devices(BUSY_910B, [1]), devices(IDLE_910B, [1])),
    Row("device_missing", ERROR, "cluster.devices", devices(IDLE_H200, [1], "gpu"), devices(IDLE_H200, [0], "gpu")),
    Row("device_busy", ERROR, "cluster.devices", devices(BUSY_910B, [7]), devices(IDLE_910B, [7])),
    Row("device_busy", ERROR, "cluster.devices", devices(BUSY_H200, [0], "gpu"), devices(IDLE_H200, [0], "gpu")),
    Row("device_busy_unchecked", WARNING, "cluster.devices", devices(NO_PROCESS_LIST_910, [0]), devices(IDLE_910B, [0]),
        "a capture whose process table is cut off"),
    Row("device_busy", WARNING, "cluster.devices", devices(BUSY_910B, [7], allow=True), devices(IDLE_910B, [7], allow=True),
        "cluster.allow_busy_devices: the user shares the device deliberately"),
    Row("device_unhealthy", ERROR, "cluster.devices", devices(WARN_910A, [1]), devices(IDLE_910B, [1])),
    # the model's shape against TP / PP / VPP (write_model: 8 heads, 4 KV heads, 8 layers)
    Row("model_tp_heads", ERROR, "train.tensor_parallel",
        model_fit({}, **{"train.tensor_parallel": 8, "train.pipeline_parallel": 1}),
        model_fit({}, **{"train.tensor_parallel": 4, "train.pipeline_parallel": 1})),
    Row("model_rollout_tp_heads", ERROR, "train.rollout_tensor_parallel",
        model_fit({"num_attention_heads": 12, "num_key_value_heads": 12}, **{"train.rollout_tensor_parallel": 8}),
        model_fit({"num_attention_heads": 12, "num_key_value_heads": 12}, **{"train.rollout_tensor_parallel": 4})),
    Row("model_layers_pp", ERROR, "train.pipeline_parallel",
        model_fit({"num_hidden_layers": 28}, **{"train.pipeline_parallel": 3, "train.tensor_parallel": 1}),
        model_fit({"num_hidden_layers": 28}, **{"train.pipeline_parallel": 4, "train.tensor_parallel": 1})),
    Row("model_layers_vpp", ERROR, "features.vpp_size",
        model_fit({"num_hidden_layers": 28}, True, **{"train.pipeline_parallel": 2, "features.vpp_size": 4}),
        model_fit({"num_hidden_layers": 28}, True, **{"train.pipeline_parallel": 2, "features.vpp_size": 7})),
    Row("model_recompute_layers", ERROR, "features.recompute_num_layers",
        model_fit({"num_hidden_layers": 28}, recompute_on=True, **{"train.pipeline_parallel": 2,
                  "train.tensor_parallel": 1, "features.recompute_method": "uniform",
                  "features.recompute_num_layers": 4}),
        model_fit({"num_hidden_layers": 28}, recompute_on=True, **{"train.pipeline_parallel": 2,
                  "train.tensor_parallel": 1, "features.recompute_method": "uniform",
                  "features.recompute_num_layers": 7})),
    Row("model_recompute_layers", ERROR, "features.recompute_num_layers",
        model_fit({"num_hidden_layers": 28}, recompute_on=True, **{"train.pipeline_parallel": 2,
                  "train.tensor_parallel": 1, "features.recompute_method": "uniform",
                  "features.recompute_num_layers": 4}),
        model_fit({"num_hidden_layers": 28}, recompute_on=True, **{"train.pipeline_parallel": 2,
                  "train.tensor_parallel": 1, "features.recompute_method": "block",
                  "features.recompute_num_layers": 4}), "block recompute takes any number of layers"),
    Row("model_recompute_layers", ERROR, "features.recompute_num_layers",
        model_fit({"num_hidden_layers": 28}, True, True, **{"train.pipeline_parallel": 2, "features.vpp_size": 7,
                  "train.tensor_parallel": 1, "features.recompute_method": "uniform",
                  "features.recompute_num_layers": 7}),
        model_fit({"num_hidden_layers": 28}, True, True, **{"train.pipeline_parallel": 2, "features.vpp_size": 7,
                  "train.tensor_parallel": 1, "features.recompute_method": "uniform",
                  "features.recompute_num_layers": 2}), "with vpp, per virtual stage (2 layers)"),
    # container.workdir: the verl 0.7.0 recipe entry file (the DAPO entry is recipe/dapo/main_dapo.py)
    Row("recipe_missing", ERROR, "container.workdir", recipe(None), recipe("recipe/dapo/main_dapo.py")),
    Row("recipe_missing", ERROR, "container.workdir", recipe(None), recipe(None, verl_version="0.9.1"),
        "verl 0.9.1 ships its entry points in the package"),
    # cluster.socket_ifname / cluster.master_addr (a real `ip addr` capture)
    Row("socket_ifname_unknown", ERROR, "cluster.socket_ifname", network({"cluster.socket_ifname": "verlctl-nope0"}),
        network({"cluster.socket_ifname": "ens8f0np0"})),
    Row("socket_ifname_down", ERROR, "cluster.socket_ifname", network({"cluster.socket_ifname": "ens16f0"}),
        network({"cluster.socket_ifname": "enp151s0f0np0"}), "up, by its altname"),
    Row("master_addr_unresolved", ERROR, "cluster.master_addr", network({"cluster.master_addr": "head.invalid"}, []),
        network({"cluster.master_addr": "head.invalid"}, ["127.0.0.1"])),
    Row("master_addr_not_local", ERROR, "cluster.master_addr",
        network({"cluster.master_addr": "192.0.2.254"}, net="live"), network({"cluster.master_addr": ADDR}, net="live")),
    Row("master_addr_not_on_ifname", ERROR, "cluster.master_addr",
        network({"cluster.socket_ifname": IFACE, "cluster.master_addr": "127.0.0.1"}, net="live"),
        network({"cluster.socket_ifname": IFACE, "cluster.master_addr": ADDR}, net="live")),
    Row("not_head", INFO, "cluster.master_addr",
        network({"cluster.nodes": ["192.0.2.10", "192.0.2.11"], "cluster.master_addr": "192.0.2.10"}, ["192.0.2.10"],
                net="live"),
        network({"cluster.nodes": ["192.0.2.10", "192.0.2.11"], "cluster.master_addr": "127.0.0.1"}, ["127.0.0.1"],
                net="live"), "a node that has the master address is the head"),
    Row("network_unchecked", WARNING, "cluster.socket_ifname", network({"cluster.socket_ifname": "ens8f0np0"}, net="down"),
        network({"cluster.socket_ifname": "ens8f0np0"})),
    # container.runtime / container.image / container.name (what the engine answered)
    Row("docker_engine", ERROR, "container.runtime", docker(error="the engine at /var/run/docker.sock is not running"),
        docker(image_present=True)),
    Row("container_absent", INFO, "container.name", docker(image_present=True),
        docker(exists=True, state="running", container_image="example/verl:1")),
    Row("image_missing", ERROR, "container.image", docker(image_present=False), docker(image_present=True)),
    Row("image_pull", INFO, "container.image", docker(image_present=False, pull=True), docker(image_present=True, pull=True)),
    Row("container_state", INFO, "container.name", docker(exists=True, state="exited", container_image="example/verl:1"),
        docker(image_present=True)),
    Row("container_image", WARNING, "container.image",
        docker(exists=True, state="running", container_image="other/verl:2", image_note="container runs other/verl:2"),
        docker(exists=True, state="running", container_image="example/verl:1")),
    Row("container_image", ERROR, "container.image",
        docker(True, exists=True, state="running", container_image="other/verl:2", image_note="runs other/verl:2"),
        docker(True, exists=True, state="running", container_image="example/verl:1"),
        "an image the user chose is an error, a default one a warning"),
    Row("container_mount_missing", ERROR, "paths.model",
        docker(exists=True, state="running", container_image="example/verl:1",
               missing_mounts=[("paths.model", "/mnt/models")]),
        docker(exists=True, state="running", container_image="example/verl:1")),
]

# ---- multi-node checkpoint storage, memory fit and field failures (checks/storage.py, memory.py, field_checks.py)


def storage(nodes: list[str], where: Callable[[Path], str], mountinfo: str | None = None) -> Findings:
    """check_checkpoint_storage on the facts collect_storage gathers here (this machine's addresses, the real
    file system of ``where``), or, with ``mountinfo``, on a captured /proc/self/mountinfo for the mount."""

    def run(tmp: Path) -> list[Finding]:
        spec = resolve(**{"cluster.nodes": nodes, "paths.checkpoints": where(tmp)}).spec
        facts = collect_storage(spec)
        if mountinfo is not None and facts is not None:
            found = mount_of(facts.path, mountinfo)
            assert found is not None
            facts = facts.model_copy(update=dict(zip(("mountpoint", "fstype", "source"), found, strict=True)))
        return check_checkpoint_storage(spec, facts)

    return run


TWO_NODES = ["192.0.2.1", "192.0.2.2"]  # TEST-NET-1: never this machine
NODES_HERE = ["127.0.0.1", "127.0.0.2"]  # loopback: both "nodes" are this machine
#: /proc/self/mountinfo lines of a machine with an NFS export and a local disk mounted below it (NFS cannot be
#: served here; the format is proc(5)'s: type and source after " - ", octal escapes for spaces).
MOUNTINFO = """\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
45 22 0:40 / /mnt/nfs rw,relatime shared:30 - nfs4 fileserver:/export/ckpt rw,vers=4.2
46 45 0:41 / /mnt/nfs/local\\040scratch rw,relatime shared:31 - xfs /dev/sdb1 rw
"""

# Qwen/Qwen3-8B's config.json sizes (also in verl-project/verl@7de1304f tests/utils/test_flops_counter.py).
QWEN3_8B = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "tie_word_embeddings": False,
            "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "head_dim": 128,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 151936}
#: npu-smi info of 8 x Ascend 910B4 (32768 MB of HBM each): the device memory the fit is checked against.
NPU_910B4 = "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt"
OFFLOAD = {"features.enable": ["offload"]}  # Qwen3-8B then fits 8 x 910B4 at the default lengths


def qwen3_8b(tmp: Path) -> str:
    d = tmp / "models" / "Qwen3-8B"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(QWEN3_8B))
    return str(d)


def field_facts(tmp: Path, machine: MachineState | None = None, train: str | None = None,
                docker_facts: DockerFacts | None = None) -> CheckFacts:  # fmt: skip
    """What collect_facts records: the machine, and the real probe of the train file."""
    datasets = [check_dataset_file("paths.train_files", train, 20.0)] if train else []
    return CheckFacts(machine=machine or MachineState(), datasets=datasets, docker=docker_facts)


def memory(flags: dict[str, Any], model: Callable[[Path], str] = qwen3_8b, npu: str | None = NPU_910B4) -> Findings:
    """memory_and_field_findings (what `verlctl check` runs) for a real model dir and an npu-smi capture."""

    def run(tmp: Path) -> list[Finding]:
        state = MachineState(npu=parse_npu_smi_info(fixture_text(FIXTURES / "npu-smi" / npu))) if npu else None
        resolved = resolve(**{**BASE_PATHS, "paths.model": model(tmp), **flags})
        return memory_and_field_findings(resolved, field_facts(tmp, state))[1]

    return run


def no_config(tmp: Path) -> str:
    d = tmp / "models" / "weights-only"
    d.mkdir(parents=True, exist_ok=True)
    return str(d)


def shm(ram_per_shm: float) -> Findings:
    """check_shm through memory_and_field_findings on this host's real /dev/shm, with host RAM (given in the
    spec) ``ram_per_shm`` times its size: Ray wants 30 % of RAM."""

    def run(tmp: Path) -> list[Finding]:
        real = shm_space()
        assert isinstance(real, DiskSpace), real  # Docker and Debian both mount a tmpfs there
        flags = {"container.runtime": "host", "cluster.host_memory_gib": real.total_bytes * ram_per_shm / 2**30}
        facts = field_facts(tmp, MachineState(system=SystemInfo(shm=real)))
        return memory_and_field_findings(resolve(**{**BASE_PATHS, **flags}), facts)[1]

    return run


def dataset_rows(rows: int) -> Findings:
    """A real train file of ``rows`` rows, probed by check_dataset_file, against a batch of 32 prompts."""

    def run(tmp: Path) -> list[Finding]:
        path = tmp / "train.parquet"
        write_parquet(path, rows=rows)
        flags = {"paths.train_files": str(path), "train.train_batch_size": 32, "container.runtime": "host"}
        return memory_and_field_findings(resolve(**{**BASE_PATHS, **flags}), field_facts(tmp, train=str(path)))[1]

    return run


def hccl_ports(held: bool, width: int = 1) -> Findings:
    """A port range whose first port a real listening socket holds (``held``) or that was just released."""

    def run(tmp: Path) -> list[Finding]:
        holder, first = _free_ports(width)
        try:
            if not held:
                holder.close()
            env = {"HCCL_HOST_SOCKET_PORT_RANGE": f"{first}-{first + width - 1}", "HCCL_NPU_SOCKET_PORT_RANGE": "auto"}
            resolved = resolve(**{**BASE_PATHS, "device": "npu", "env": env})
            return memory_and_field_findings(resolved, field_facts(tmp))[1]
        finally:
            holder.close()

    return run


def _free_ports(width: int) -> tuple[socket.socket, int]:
    """A listening socket on a port P chosen by the kernel, with P+1 .. P+width-1 free right now."""
    for _ in range(50):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("0.0.0.0", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        rest = range(port + 1, port + width)
        if port + width - 1 <= 65535 and not ports_in_use(rest):
            return sock, port
        sock.close()
    raise AssertionError(f"no {width} free ports in a row")


CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def tokenizer_model(tmp: Path) -> str:
    """A model dir with a real (tiny, word-level) tokenizer.json written by the tokenizers library and a ChatML
    chat template: a prompt of n words is n + 5 tokens."""
    try:
        from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    except ImportError:
        from docker_support import in_ci

        msg = "needs the tokenizers package (.ci/venv.sh installs it: pip install --no-deps 'tokenizers>=0.15')"
        if in_ci():
            pytest.fail(f"CI is set: {msg}")
        pytest.skip(msg)

    d = tmp / "models" / "tokenized"
    vocab = {"[UNK]": 0, "<|im_start|>": 1, "<|im_end|>": 2, "user": 3, "assistant": 4, "what": 5}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken("<|im_start|>", special=True), AddedToken("<|im_end|>", special=True)])
    d.mkdir(parents=True, exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    return str(d)


def without_tokenizer(tmp: Path) -> str:
    d = Path(tokenizer_model(tmp))
    (d / "tokenizer.json").unlink()
    return str(d)


def prompts(limit: int, model: Callable[[Path], str] = tokenizer_model, **flags: Any) -> Findings:
    """Three real prompts of 10, 20 and 100 words (15, 25, 105 tokens) counted against ``limit``."""

    def run(tmp: Path) -> list[Finding]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp / "prompts.parquet"
        pq.write_table(pa.table({"prompt": [[{"role": "user", "content": " ".join(["what"] * n)}]
                                            for n in (10, 20, 100)]}), path)  # fmt: skip
        spec = {**BASE_PATHS, "paths.model": model(tmp), "paths.train_files": str(path), "train.train_batch_size": 1,
                "train.max_prompt_length": limit, "container.runtime": "host", **flags}
        return memory_and_field_findings(resolve(**spec), field_facts(tmp, train=str(path)))[1]

    return run


BUCKET = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"

FIELD_ROWS = [
    # paths.checkpoints on a multi-node run: storage every node sees
    Row("checkpoints_not_shared", ERROR, "paths.checkpoints", storage(TWO_NODES, ckpt_dir), storage(NODES_HERE, ckpt_dir),
        "nodes that are all this machine share its disk"),
    Row("checkpoints_not_shared", ERROR, "paths.checkpoints", storage(NODES_HERE, lambda t: "/verl/checkpoints/exp"),
        storage(NODES_HERE, ckpt_dir), "under the container work dir: inside each node's own container"),
    Row("checkpoints_shared", INFO, "paths.checkpoints", storage(TWO_NODES, lambda t: "/mnt/nfs/team/exp", MOUNTINFO),
        storage(TWO_NODES, lambda t: "/mnt/nfs/local scratch/exp", MOUNTINFO), "a local disk mounted below the NFS one"),
    # the memory fit against a real npu-smi capture (8 x 910B4, 32 GiB) and a real config.json (Qwen3-8B)
    Row("memory_device_fit", ERROR, "features", memory({**OFFLOAD, "train.max_response_length": 32768}),
        memory(OFFLOAD), "the update phase: 32k responses"),
    Row("memory_device_fit", ERROR, "train.rollout_memory_utilization",
        memory({**OFFLOAD, "train.rollout_memory_utilization": 0.95}),
        memory({**OFFLOAD, "train.rollout_memory_utilization": 0.9}), "the rollout phase: vLLM's budget + runtime"),
    Row("memory_kv_cache", ERROR, "train.rollout_memory_utilization",
        memory({**OFFLOAD, "train.rollout_memory_utilization": 0.15}),
        memory({**OFFLOAD, "train.rollout_memory_utilization": 0.16}), "about 2.8k and 12k tokens for a 10k sequence"),
    Row("memory_kv_cache_queue", INFO, "train.rollout_memory_utilization", memory(OFFLOAD),
        memory({**OFFLOAD, "train.responses_per_prompt": 2})),
    Row("memory_host_fit", WARNING, "cluster.host_memory_gib", memory({**OFFLOAD, "cluster.host_memory_gib": 200}),
        memory({**OFFLOAD, "cluster.host_memory_gib": 210}), "196 GiB needed: 95 % of 200 GiB is short, of 210 not"),
    Row("memory_estimate_partial", INFO, "cluster.device_memory_gib", memory(OFFLOAD, npu=None), memory(OFFLOAD),
        "no npu-smi answer: device memory unknown"),
    Row("memory_estimate_skipped", INFO, "paths.model", memory(OFFLOAD, model=no_config), memory(OFFLOAD)),
    # field failures (reference/field-failures-and-scale-out.md §1)
    Row("weight_bucket_too_small", ERROR, "extra_overrides", memory({"verl_version": "0.9.1", "strategy": "fsdp"}),
        memory({"verl_version": "0.9.1", "strategy": "fsdp", "extra_overrides": [f"{BUCKET}=4096"]}),
        "the FSDP embedding in fp32: 2.3 GiB; the capture's driver 25.0.rc1.1 has no IPC"),
    Row("weight_bucket_ipc_unknown", WARNING, "extra_overrides",
        memory({"verl_version": "0.9.1", "strategy": "fsdp"}, npu=None),
        memory({"verl_version": "0.9.1", "strategy": "fsdp", "extra_overrides": [f"{BUCKET}=4096"]}, npu=None),
        "no npu-smi and no image read: IPC unknown"),
    Row("shm_too_small", WARNING, None, shm(1.01 / 0.3), shm(0.99 / 0.3), "Ray wants 1 % more, 1 % less"),
    Row("dataset_smaller_than_batch", ERROR, "train.train_batch_size", dataset_rows(8), dataset_rows(32)),
    Row("hccl_ports_in_use", ERROR, "env", hccl_ports(held=True), hccl_ports(held=False)),
    Row("hccl_ports_in_use", WARNING, "env", hccl_ports(held=True, width=2), hccl_ports(held=False, width=2),
        "one of the two ports busy"),
    Row("prompt_too_long", ERROR, "train.max_prompt_length", prompts(64, algorithm="grpo"),
        prompts(105, algorithm="grpo"), "105 tokens fit a limit of 105"),
    Row("prompt_too_long", WARNING, "train.max_prompt_length", prompts(64, algorithm="dapo"),
        prompts(105, algorithm="dapo"), "DAPO truncates from the left"),
    Row("prompt_length_unchecked", INFO, "train.max_prompt_length", prompts(105, model=without_tokenizer),
        prompts(105)),
]

# --------------------------------------------------------------------------------------------------
# The multi-node pre-flight (issue 14): the rules on the facts gathered on every node (the probe itself runs
# in real containers in tests/checks/test_node_preflight_docker.py)
# --------------------------------------------------------------------------------------------------

HEAD, WORKER_NODE = "192.0.2.1", "192.0.2.2"
MARKER = "/mnt/nfs/ckpt/.verlctl-preflight-r1"


def node_facts(address: str, head: bool = False, **kw: Any) -> NodeFacts:
    """A node that agrees with the others: same image, Python 3.10.12, Ray 2.49.0, 64 GiB /dev/shm of 128 GiB RAM,
    the head reached through eth0, the marker seen."""
    base: dict[str, Any] = dict(
        image_id="sha256:" + "a" * 64, python="3.10.12", ray="2.49.0", shm_bytes=64 * 2**30, ram_bytes=128 * 2**30,
        route_src=address, route_iface="eth0", interfaces={"lo": "127.0.0.1", "eth0": address}, marker_seen=True,
    )
    return NodeFacts(address=address, head=head, **{**base, **kw})


def nodes(worker: dict[str, Any] | None = None, head: dict[str, Any] | None = None, both: dict[str, Any] | None = None,
          ports: dict[str, list[int]] | None = None, verl: str = "0.7.0", **flags: Any) -> Findings:  # fmt: skip
    """node_findings for a head and a worker with these facts (``both``: on each)."""

    def run(_tmp: Path) -> list[Finding]:
        spec = resolve(**{"cluster.nodes": [HEAD, WORKER_NODE], "cluster.master_addr": HEAD,
                          "cluster.socket_ifname": "eth0", "device": "npu", **flags}).spec
        facts = [node_facts(HEAD, True, **{**(both or {}), **(head or {})}),
                 node_facts(WORKER_NODE, **{**(both or {}), **(worker or {})})]
        return node_findings(spec, facts, verl, MARKER, ports or {})

    return run


HCCL = {"HCCL_HOST_SOCKET_PORT_RANGE": list(range(60000, 60016))}
NODE_ROWS = [
    Row("nodes_image_differs", ERROR, "container.image", nodes({"image_id": "sha256:" + "b" * 64}), nodes({})),
    Row("nodes_python_differs", ERROR, "container.image", nodes({"python": "3.10.13"}), nodes({"python": "3.10.12"}),
        "Ray refuses a patch-level difference"),
    Row("nodes_ray_differs", ERROR, "container.image", nodes({"ray": "2.49.1"}), nodes({"ray": "2.49.0"})),
    Row("image_ray_missing", ERROR, "container.image", nodes(both={"ray": None}), nodes(both={"ray": "2.41.0"})),
    Row("image_ray_too_old", ERROR, "container.image", nodes(both={"ray": "2.40.0"}), nodes(both={"ray": "2.41.0"}),
        "verl's ray[default]>=2.41.0"),
    Row("image_python_unsupported", ERROR, "container.image", nodes(both={"python": "3.9.18"}),
        nodes(both={"python": "3.10.0"}), "verl 0.7.0: Requires-Python >=3.10"),
    Row("image_python_unsupported", ERROR, "container.image", nodes(both={"python": "3.13.0"}, verl="0.9.1"),
        nodes(both={"python": "3.12.9"}, verl="0.9.1"), "verl 0.9.1: Requires-Python <3.13,>=3.10"),
    Row("checkpoint_not_shared", ERROR, "paths.checkpoints", nodes({"marker_seen": False}), nodes({"marker_seen": True}),
        "the head's marker is not on the worker: resume cannot work"),
    Row("checkpoint_marker_unwritten", ERROR, "paths.checkpoints",
        nodes(head={"marker_seen": False, "marker_error": f"{MARKER}: Read-only file system"}), nodes()),
    Row("node_no_route_to_head", ERROR, "cluster.master_addr",
        nodes({"route_src": None, "route_iface": None, "route_error": "Network is unreachable"}), nodes()),
    Row("node_route_not_on_ifname", ERROR, "cluster.socket_ifname",
        nodes({"route_iface": "eth1", "interfaces": {"eth0": "198.51.100.2", "eth1": WORKER_NODE}}),
        nodes({"route_iface": "eth0", "interfaces": {"eth0": WORKER_NODE, "eth1": "198.51.100.2"}})),
    Row("node_unchecked", WARNING, "cluster.nodes", nodes({"error": "the probe failed (exit 127)"}), nodes()),
    Row("checkpoint_not_shared", ERROR, "paths.checkpoints", nodes({"marker_seen": False}),
        nodes({"marker_seen": False}, head={"error": "the probe failed (exit 1)", "marker_seen": None}),
        "the head wrote no marker: nothing to read back"),
    Row("hccl_ports_in_use", ERROR, "env", nodes({"busy_ports": dict(HCCL)}, ports=HCCL),
        nodes({"busy_ports": {k: [] for k in HCCL}}, ports=HCCL), "every port of the range bound on the worker"),
    Row("shm_too_small", WARNING, None, nodes({"shm_bytes": 30 * 2**30}), nodes({"shm_bytes": 39 * 2**30}),
        "30 % of the worker's 128 GiB RAM is 38.4 GiB"),
]

# --------------------------------------------------------------------------------------------------
# The fabric gate's verdict on what the probe measured (the probe itself runs in real containers, over real
# links, in tests/orchestrator/test_fabric_gate.py)
# --------------------------------------------------------------------------------------------------


def fabric(link_gbps: float = 20.0, busbw_gbps: float = 20.0, **run: Any) -> Findings:
    """The gate's findings for 2 NPU nodes x 1 device whose link and all-reduce moved these GB/s."""

    def go(_tmp: Path) -> list[Finding]:
        from verlctl.checks.fabric import fabric_findings, init_failures
        from verlctl.detect.fabric_probe import FabricRun
        from verlctl.orchestrator.fabric import diagnose

        spec = resolve(**{**BASE_PATHS, "cluster.nodes": [HEAD, WORKER_NODE], "cluster.devices": "0"}).spec
        measured = FabricRun(
            world=2, backend="hccl", allreduce=[{"bytes": 64 << 20, "busbw_gbps": busbw_gbps}],
            links=[{"src": 0, "dst": 1, "gbps": link_gbps}, {"src": 1, "dst": 0, "gbps": 25.0}],
            ranks=[{"rank": 0, "node": 0}, {"rank": 1, "node": 1}])
        measured = measured.model_copy(update=run)
        return (fabric_findings(spec, measured, [HEAD, WORKER_NODE])
                + init_failures(measured, [HEAD, WORKER_NODE], diagnose))

    return go


FABRIC_ROWS = [
    Row("fabric_measured", INFO, "cluster.fabric", fabric(), fabric(allreduce=[], links=[]),
        "nothing measured, nothing to say"),
    Row("fabric_link_slow", ERROR, "cluster.fabric.min_link_gbps", fabric(link_gbps=12.4), fabric(link_gbps=12.5),
        "the NPU floor is half of one 200GE port: 12.5 GB/s"),
    Row("fabric_busbw_low", ERROR, "cluster.fabric.min_busbw_gbps", fabric(busbw_gbps=12.4),
        fabric(busbw_gbps=12.5)),
    Row("fabric_timeout", ERROR, "cluster.fabric", fabric(timed_out=[1]), fabric(timed_out=[])),
    Row("fabric_not_checked", WARNING, "cluster.fabric", fabric(no_torch=[1]), fabric(no_torch=[])),
    Row("fabric_init_failed", ERROR, "cluster.fabric",
        fabric(errors=[{"rank": 1, "node": 1, "type": "RuntimeError",
                        "message": "RuntimeError: hcclCommInitRootInfoConfig failed, error code is 5"}]),
        fabric(errors=[])),
]


def checkpoint_lock(held: bool) -> Findings:
    """checks/ownership.py on a real checkpoint directory whose lock file a live flock holds (or not)."""

    def run(tmp: Path) -> list[Finding]:
        import fcntl

        from verlctl.checks.ownership import CHECKPOINT_LOCK, checkpoint_in_use

        (tmp / "ckpt").mkdir()
        lock = tmp / "ckpt" / CHECKPOINT_LOCK
        lock.write_text("")
        with open(lock) as fh:  # as start_verl.sh holds it (`flock -n 9` on a read descriptor)
            if held:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return checkpoint_in_use(resolve(**{"paths.checkpoints": str(tmp / "ckpt")}).spec, ["r1"])

    return run


# --------------------------------------------------------------------------------------------------
# The verdict's rules added by issue 21 (checks/verdict_rules.py), run through the registry on real probes
# --------------------------------------------------------------------------------------------------


def verdict_rule(name: str, facts: Callable[[Path, Any], CheckFacts], model: dict[str, Any] | None = None,
                 **flags: Any) -> Findings:
    """The named fact rule of the verdict registry on the facts ``facts(tmp, resolved)`` collects (a real
    model dir with ``model`` merged into its config.json)."""
    from verlctl.checks.verdict import VerdictCtx, fact_rules
    from verlctl.verl.compose import build_command

    def run(tmp: Path) -> list[Finding]:
        d = tmp / "models" / "shaped"
        write_model(d)
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(model or {})
        (d / "config.json").write_text(json.dumps(cfg))
        resolved = resolve(**{**files(tmp), "paths.model": str(d), **flags})
        the_rule = next(r for r in fact_rules() if r.name == name)
        return the_rule.run(VerdictCtx(resolved, build_command(resolved), facts(tmp, resolved)))

    return run


OWNERSHIP_ROWS = [
    Row("checkpoint_in_use", ERROR, "paths.checkpoints", checkpoint_lock(True), checkpoint_lock(False),
        "the lock file is there, nobody holds it: the run that made it has ended"),
]


def with_model(tmp: Path, resolved: Any) -> CheckFacts:
    return CheckFacts(machine=MachineState(), model=inspect_model(resolved.spec.paths.model))


def nodes_probe(tmp: Path, resolved: Any) -> CheckFacts:
    from verlctl.orchestrator.machine_facts import device_nodes_missing

    return CheckFacts(machine=MachineState(), device_nodes_missing=device_nodes_missing(resolved.spec))


def live_run(state: str) -> Callable[[Path, Any], CheckFacts]:
    """A live run of this user's on devices 0 and 1, as ``orchestrator.machine_facts.live_runs`` reports it for the
    devices the spec shares with it."""
    from verlctl.checks.facts import LiveRun

    def facts(tmp: Path, resolved: Any) -> CheckFacts:
        shared = sorted({0, 1} & set(resolved.spec.cluster.devices))
        runs = [LiveRun(run_id="20260101-000000-other-abcd", devices=shared, state=state, why="not checked")]
        return CheckFacts(machine=MachineState(), live_runs=runs if shared else [])
    return facts


def machine_of(capture: Callable[[], MachineState]) -> Callable[[Path, Any], CheckFacts]:
    return lambda tmp, resolved: CheckFacts(machine=capture())


def resume_probe(tmp: Path, resolved: Any) -> CheckFacts:
    """A real checkpoint dir holding global_step_60 (what verl's resume_mode=auto finds), read by the collector."""
    from verlctl.orchestrator.machine_facts import resume_step

    ckpt = Path(resolved.spec.paths.checkpoints)
    (ckpt / "global_step_60").mkdir(parents=True, exist_ok=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("60\n")
    return CheckFacts(machine=MachineState(), resume_step=resume_step(resolved.spec))


def ray_ports(held: bool) -> Findings:
    """cluster.ray_port held by a real listening socket (``held``), or just released; probed by the collector."""
    from verlctl.orchestrator.machine_facts import ray_ports_busy

    def run(tmp: Path) -> list[Finding]:
        holder, port = _free_ports(1)
        try:
            if not held:
                holder.close()
            flags = {"cluster.ray_port": port, "cluster.dashboard_port": port + 1 if port < 65535 else port - 1}
            return verdict_rule("ray_ports", lambda t, r: CheckFacts(machine=MachineState(),
                                                                     ray_ports_busy=ray_ports_busy(r.spec)),
                                **flags)(tmp)
        finally:
            holder.close()

    return run


def foreign_container(owner: str | None) -> Findings:
    return verdict_rule("docker", lambda t, r: CheckFacts(machine=MachineState(), docker=DockerFacts(
        image=r.spec.container.image, container=r.spec.container.name, engine_version="27.5.1", image_present=True,
        exists=True, state="exited", container_image=r.spec.container.image, foreign=owner)))


CTX = {"max_position_embeddings": 4096}
H100 = gpu_capture("default-565-8gpu-h100-complete-noproc-thamada-nvidia-smi.txt")

def target_lookup(flash: bool = True, extra: list[str] | None = None, env: str = "venv",
                  bound: float = 60.0) -> Findings:
    """The target_preflight rule on a real look-up in a host Python environment (``container.runtime: host``):
    this venv (Hydra, no flash-attn), or a bare venv without Hydra; verl's config tree from the 0.7.0 wheel."""
    import subprocess
    import sys

    import verlcompose

    def run(tmp: Path) -> list[Finding]:
        from verlctl.orchestrator.machine_facts import collect_lookup

        (tmp / "work").mkdir()
        python_env = sys.prefix
        if env == "bare":
            python_env = str(tmp / "bare")
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", python_env], check=True)
        flags = {"verl_version": "0.7.0", "algorithm": "grpo", "device": "gpu", **FSDP, **TP1,
                 "container.runtime": "host", "container.python_env": python_env, "container.workdir": str(tmp / "work"),
                 "extra_overrides": extra or []}
        if not flash:  # verl 0.7.0 FSDP off an NPU unpads with flash_attn too (attention_utils.py:27-30)
            flags["features.disable"] = ["flash_attn", "remove_padding"]
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(verlcompose.verl_root("0.7.0"))
        try:
            return verdict_rule("target_preflight", lambda t, r: CheckFacts(
                machine=MachineState(), target_lookup=collect_lookup(r, None, bound)[0]), **flags)(tmp)
        finally:
            os.environ.pop("PYTHONPATH") if old is None else os.environ.__setitem__("PYTHONPATH", old)

    return run


VERDICT_ROWS = [
    Row("max_model_len_over_context", ERROR, "train.max_response_length",
        verdict_rule("max_model_len", with_model, CTX, verl_version="0.9.1", **{
            "features.disable": ["chunked_prefill"], "train.max_prompt_length": 1024,
            "train.max_response_length": 4096}),
        verdict_rule("max_model_len", with_model, CTX, verl_version="0.9.1", **{
            "features.disable": ["chunked_prefill"], "train.max_prompt_length": 1024,
            "train.max_response_length": 3072}), "G8: 1024 + 3072 = 4096 fits"),
    Row("generation_capped", WARNING, "train.max_response_length",
        verdict_rule("max_model_len", with_model, CTX, verl_version="0.9.1", **{
            "train.max_prompt_length": 1024, "train.max_response_length": 4096}),
        verdict_rule("max_model_len", with_model, CTX, verl_version="0.9.1", **{
            "train.max_prompt_length": 1024, "train.max_response_length": 3072}),
        "G8: chunked prefill on, max_model_len unset: verl uses max_position_embeddings"),
    Row("device_nodes_missing", ERROR, "cluster.devices",
        verdict_rule("device_nodes", nodes_probe, **{"cluster.devices": [4095], "device": "npu",
                                                      "container.runtime": "docker"}),
        verdict_rule("device_nodes", nodes_probe, **{"cluster.devices": [4095], "device": "npu",
                                                      "container.runtime": "docker", "container.privileged": True}),
        "N1: /dev/davinci4095 exists nowhere; privileged containers see every device"),
    Row("device_busy", ERROR, "cluster.devices",
        verdict_rule("run_devices", live_run("running"), **{"cluster.devices": [1, 2]}),
        verdict_rule("run_devices", live_run("running"), **{"cluster.devices": [2, 3]}),
        "O5: a live run of this user's on device 1 (the collector's own test: tests/checks/test_busy_devices.py)"),
    Row("device_run_unknown", WARNING, "cluster.devices",
        verdict_rule("run_devices", live_run("unknown"), **{"cluster.devices": [1, 2]}),
        verdict_rule("run_devices", live_run("unknown"), **{"cluster.devices": [2, 3]}),
        "a run whose state could not be decided"),
    Row("device_not_here", ERROR, "device",
        verdict_rule("device_kind", machine_of(H100), device="npu"),
        verdict_rule("device_kind", machine_of(H100), device="gpu"), "U19: an 8 x H100 host (real nvidia-smi capture)"),
    Row("image_for_npu", WARNING, "container.image", plan(device="gpu"),
        plan(device="gpu", **{"container.image": "verlai/verl:app-verl0.6-vllm0.10"}), "U19"),
    Row("cpu_device_runtime", ERROR, "container.runtime", plan(device="cpu", **V091, **FSDP2_TP1),
        plan(device="cpu", **V091, **FSDP2_TP1, **{"container.runtime": "host"}), "the demo device layer"),
    Row("cpu_device_version", ERROR, "verl_version", plan(device="cpu", **FSDP2_TP1, **{"container.runtime": "host"}),
        plan(device="cpu", **V091, **FSDP2_TP1, **{"container.runtime": "host"}), "the demo device layer"),
    Row("cpu_device_fsdp1", ERROR, "strategy", plan(device="cpu", **V091, **FSDP, **TP1, **{"container.runtime": "host"}),
        plan(device="cpu", **V091, **FSDP2_TP1, **{"container.runtime": "host"}),
        "torch FSDP1 with sync_module_states=True refuses a module on the CPU"),
    Row("target_package_missing", ERROR, "features", target_lookup(), target_lookup(flash=False),
        "RV4-3: flash_attn on, this venv has no flash-attn"),
    Row("target_preflight_failed", ERROR, "extra_overrides",
        target_lookup(flash=False, extra=["actor_rollout_ref.actor.nope=1"]), target_lookup(flash=False),
        "a key the target's verl does not define"),
    Row("target_preflight_skipped", WARNING, "container.image", target_lookup(flash=False, env="bare"),
        target_lookup(flash=False), "a python3 without Hydra: nothing composed"),
    Row("target_preflight_unfinished", INFO, "container.image", target_lookup(flash=False, bound=0.05),
        target_lookup(flash=False), "the bound ended it"),
    Row("python_env_not_host", ERROR, "container.python_env", plan(**{"container.python_env": "/opt/env"}),
        plan(**{"container.python_env": "/opt/env", "container.runtime": "host"}), "a host-runtime setting"),
    Row("ray_ports_in_use", ERROR, "cluster.ray_port", ray_ports(held=True), ray_ports(held=False), "U20"),
    Row("resume_past_steps", ERROR, "train.steps",
        lambda t: verdict_rule("resume_point", resume_probe, **{"train.steps": 60, "paths.checkpoints": str(t / "ck")})(t),
        lambda t: verdict_rule("resume_point", resume_probe, **{"train.steps": 61, "paths.checkpoints": str(t / "ck")})(t),
        "N10: global_step_60 of a longer run"),
    Row("container_not_yours", ERROR, "container.name", foreign_container("was created by bob@other-host"),
        foreign_container(None), "U4: a colleague's container under the default name"),
]



def swanlab_case(case: str) -> Findings:
    """The swanlab_reach rule on the SwanLab host as check collects it (``orchestrator.machine_facts.swanlab_reach``),
    tried against real loopback servers (tests/reach_support.py): a LAN host is stood in by 127.0.0.2, which
    the no_proxy ``localhost,127.0.0.1`` does not cover, and the corporate proxy by one answering 502."""
    import contextlib

    from reach_support import closed_port, http_server, proxy_server, raw_server
    from verlctl.orchestrator.machine_facts import swanlab_reach

    def run(tmp: Path) -> list[Finding]:
        with contextlib.ExitStack() as stack:
            flags: dict[str, Any] = {"logging.swanlab.enabled": True, "logging.swanlab.mode": "cloud"}
            if case == "reachable":
                host = f"http://127.0.0.1:{stack.enter_context(http_server())[0]}"
            elif case == "refused":
                host = f"http://127.0.0.1:{closed_port()}"
            elif case == "dns":
                host = "http://swanlab.invalid:8000"  # RFC 6761: never resolves
            elif case in ("timeout", "not_http"):
                reply = None if case == "timeout" else b"SSH-2.0-OpenSSH_9.6\r\n\r\n"
                host = f"http://127.0.0.1:{stack.enter_context(raw_server(reply))}"
            else:  # "no_proxy": the host answers directly; "proxy": it does not either
                lan = stack.enter_context(http_server("127.0.0.2"))[0] if case == "no_proxy" else closed_port()
                host = f"http://127.0.0.2:{lan}"
                flags["container.proxy.http"] = f"http://127.0.0.1:{stack.enter_context(proxy_server(False))[0]}"
                flags["container.proxy.no_proxy"] = "localhost,127.0.0.1"
            flags["logging.swanlab.host"] = host
            return verdict_rule("swanlab_reach", lambda t, r: CheckFacts(
                machine=MachineState(), swanlab_reach=swanlab_reach(r.spec)), **flags)(tmp)

    return run


SWANLAB_HOST = "logging.swanlab.host"
SWANLAB_ROWS = [
    Row("swanlab_reachable", INFO, SWANLAB_HOST, swanlab_case("reachable"), swanlab_case("refused")),
    Row("swanlab_refused", ERROR, SWANLAB_HOST, swanlab_case("refused"), swanlab_case("reachable")),
    Row("swanlab_dns", ERROR, SWANLAB_HOST, swanlab_case("dns"), swanlab_case("reachable")),
    Row("swanlab_timeout", ERROR, SWANLAB_HOST, swanlab_case("timeout"), swanlab_case("reachable"),
        "a server that accepts and never answers: the 5 s budget ends the try"),
    Row("swanlab_unreachable", ERROR, SWANLAB_HOST, swanlab_case("not_http"), swanlab_case("reachable"),
        "it answers, but not HTTP"),
    Row("swanlab_no_proxy", ERROR, "container.proxy.no_proxy", swanlab_case("no_proxy"), swanlab_case("reachable"),
        "U5: the proxy cannot reach the LAN host, which answers directly"),
    Row("swanlab_proxy", ERROR, "container.proxy.http", swanlab_case("proxy"), swanlab_case("no_proxy"),
        "neither through the proxy nor directly"),
]

ROWS = SPEC_ROWS + MACHINE_ROWS + FIELD_ROWS + NODE_ROWS + FABRIC_ROWS + OWNERSHIP_ROWS + VERDICT_ROWS + SWANLAB_ROWS


def _ids(rows: Iterable[Row]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for r in rows:
        seen[r.code] = seen.get(r.code, 0) + 1
        out.append(r.code if seen[r.code] == 1 else f"{r.code}-{seen[r.code]}")
    return out


# --------------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------------


def test_every_code_has_a_row() -> None:
    codes, unresolved = collect_codes()
    assert not unresolved, (
        "finding codes the collector cannot read from the source (use a literal, or declare them in a rule's "
        f"`codes` attribute): {unresolved}"
    )
    rows = {r.code for r in ROWS}
    assert sorted(codes - rows) == [], "finding codes without a trigger / no-trigger row in ROWS"
    assert sorted(rows - codes) == [], "rows for codes no rule module emits any more"


@pytest.mark.parametrize("row", ROWS, ids=_ids(ROWS))
def test_code_triggered_and_not(row: Row, tmp_path: Path) -> None:
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    hits = [f for f in row.trigger(tmp_path / "on") if f.code == row.code]
    assert len(hits) == 1, f"{row.code}: expected exactly one, got {[f.line() for f in hits]}"
    assert (hits[0].severity, hits[0].field) == (row.severity, row.field), hits[0].line()
    assert hits[0].message
    near = [f.line() for f in row.clear(tmp_path / "off") if f.code == row.code]
    assert near == [], f"{row.code} in the near-identical case{f' ({row.note})' if row.note else ''}"


# --------------------------------------------------------------------------------------------------
# The collector itself (so that a split of spec_checks.py into rules keeps being counted)
# --------------------------------------------------------------------------------------------------

RULES_SOURCE = '''
from verlctl.checks.findings import error, info, warning

TOOLS = ("a-b",)

def plain(x):
    return [error("lit_code", "m"), warning(code="kw_code", message="m")]

def formatted(dev):
    tool = "npu-smi" if dev == "npu" else "nvidia-smi"
    return error(f"{tool.replace('-', '_')}_gone", "m")

def tabled(problem):
    table = {"x": ("tab_one", "m1"), "y": ("tab_two", "m2")}
    code, message = table[problem]
    make = error if problem else warning
    return make(code, message)

def opaque(f):
    return info(f.name, "m")

def qualified():
    from verlctl.checks import findings
    return [findings.warning("mod_code", "m"), log.info("not a finding")]
'''


def test_the_collector_reads_literals_keywords_fstrings_tables_and_aliases(tmp_path: Path) -> None:
    path = tmp_path / "rules_example.py"
    path.write_text(RULES_SOURCE)
    scan = scan_codes(path)
    assert scan.codes == {"lit_code", "kw_code", "npu_smi_gone", "nvidia_smi_gone", "tab_one", "tab_two", "mod_code"}
    assert [u.split(": ", 1)[1] for u in scan.unresolved] == ["f.name"]


def test_the_collector_prefers_declared_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rules module whose rule objects declare ``codes``: those count, and its code arguments may be any
    expression (here a parameter the AST scan cannot read)."""
    pkg = tmp_path / "rulespkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "rules.py").write_text(
        "from verlctl.checks.findings import error\n"
        "class DeviceSplit:\n    codes = ('device_split', 'device_overlap')\n"
        "    def __call__(self, spec, code):\n        return [error(code, 'm')]\n"
        "RULES = [DeviceSplit()]\n"
    )
    (pkg / "plain.py").write_text("from verlctl.checks.findings import error\ndef f(c):\n    return error(c, 'm')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert scan_codes(pkg / "rules.py").unresolved  # the AST alone cannot read it
    assert collect_codes([pkg / "rules.py"]) == ({"device_split", "device_overlap"}, [])
    codes, unresolved = collect_codes([pkg / "plain.py"])  # no declaration: the unreadable code is reported
    assert codes == set() and [u.split(": ", 1)[1] for u in unresolved] == ["c"]
