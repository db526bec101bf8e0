"""The package imports one way: inputs -> spec -> verl knowledge -> checks -> render -> runtime -> monitor ->
wizard -> backends (each knows its target) -> orchestrator (walks the stages, calls down into the backends) ->
commands. Every import counts, the lazy ones inside functions too.
No two modules import each other, directly or around a circle (``test_no_import_cycle``, see ``_module_edges``
for which imports count), and no module imports another's ``_private`` name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

SRC = ROOT / "src" / "verlctl"

#: Rank of each part of the package; a module may import only from its own rank or lower ones.
#: Shared vocabulary (errors, finding records) is rank 0 so that every layer may report problems.
RANKS: dict[str, int] = {
    "verlctl": 0,  # __init__: the version and the supported verl versions
    "verlctl.errors": 0,
    "verlctl.failures": 0,
    "verlctl.checks.findings": 0,
    "verlctl.files": 0,  # atomic, no-follow writes
    "verlctl.model_config": 0,  # reading a model's config.json (shared by detection and the memory estimate)
    "verlctl.detect": 1,
    "verlctl.spec": 1,
    "verlctl.inputs": 1,  # readers of outside formats (launch scripts)
    "verlctl.demo": 1,  # the demo's host checks, environment and spec (its device layer runs in that environment)
    "verlctl.verl": 2,
    "verlctl.checks": 3,
    "verlctl.render": 4,
    "verlctl.plan": 4,
    "verlctl.importer": 4,  # a launch script -> a spec, checked against verlctl's own command
    "verlctl.report": 4,
    "verlctl.runtime": 5,
    "verlctl.monitor": 6,
    "verlctl.wizard": 7,
    "verlctl.backends": 8,  # one interface (base), one module per backend: each knows its target, not verl
    "verlctl.orchestrator": 9,  # walks the stages and calls down into the backends; never the other way
    "verlctl.commands": 10,
    "verlctl.cli": 10,
    "verlctl.guides": 10,
    "verlctl.__main__": 10,
}

#: runtime keeps executors, containers, records and following: it knows nothing of verl or of questions.
#: A backend knows its target (containers, executors, SSH nodes, the host, sbatch, manifests) and nothing of
#: verl: what the target needs from verl (the proxy environment, the rendered scripts, the sbatch text) is
#: composed in the orchestrator and handed down as plain data (checks.findings, rank 0, stays allowed).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "verlctl.runtime": ("verlctl.verl", "verlctl.checks", "verlctl.render", "verlctl.plan", "verlctl.wizard"),
    "verlctl.monitor": ("verlctl.wizard",),
    "verlctl.backends": ("verlctl.verl", "verlctl.checks", "verlctl.plan", "verlctl.wizard", "verlctl.monitor"),
}

#: Known upward or forbidden imports still to be removed (each with its reason). An entry that no longer occurs
#: fails the test too, so this list can only shrink.
DEBT: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _rank_key(module: str) -> str:
    best = ""
    for key in RANKS:
        if key == "verlctl" and module != "verlctl":
            continue  # the package root ranks only itself: a new module or package needs its own entry
        if (module == key or module.startswith(key + ".")) and len(key) > len(best):
            best = key
    assert best, f"{module} has no rank in tests/project/test_layers.py: give its package one"
    return best


def _imports() -> list[tuple[str, str, int]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        mod = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "verlctl":
                    targets = [f"verlctl.{a.name}" if (SRC / a.name).exists() or (SRC / f"{a.name}.py").exists()
                               else "verlctl" for a in node.names]
                elif node.module.startswith("verlctl."):
                    pkg = SRC.joinpath(*node.module.split(".")[1:])
                    targets = [f"{node.module}.{a.name}" if (pkg / f"{a.name}.py").exists() else node.module
                               for a in node.names]
                else:
                    continue
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("verlctl")]
            else:
                continue
            out.extend((mod, t, node.lineno) for t in targets)
    return out


def _violations() -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for mod, target, line in _imports():
        src, dst = _rank_key(mod), _rank_key(target)
        upward = RANKS[dst] > RANKS[src]
        banned = any(target == b or target.startswith(b + ".") for b in FORBIDDEN.get(src, ()))
        if (upward or banned) and not (target == "verlctl.checks.findings" or target.startswith("verlctl.errors")):
            found.setdefault((mod, target), line)
    return found


def test_every_module_has_a_layer() -> None:
    for path in SRC.rglob("*.py"):
        _rank_key(_module_name(path))


def test_imports_point_down_only() -> None:
    found = _violations()
    new = {k: v for k, v in found.items() if k not in DEBT}
    assert not new, "upward or forbidden imports:\n" + "\n".join(
        f"  {m} (line {line}) imports {t}" for (m, t), line in sorted(new.items())
    )


def test_debt_list_only_shrinks() -> None:
    gone = [k for k in DEBT if k not in _violations()]
    assert not gone, f"remove these from DEBT in tests/project/test_layers.py, they no longer occur: {gone}"


#: Import cycles still to be broken, each with its reason. Like DEBT, the list can only shrink: an entry that no
#: longer occurs as a cycle fails the test.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}


def _module_edges(root: Path) -> dict[str, dict[str, int]]:
    """Every module's imports of other verlctl modules (target -> first line), for the cycle check.

    All imports count: module-level ones, the lazy ones inside functions, and the type-only ones under
    ``TYPE_CHECKING``. A lazy import only defers *when* a module is loaded (to keep the CLI's start-up fast); it
    still runs, and the two modules then need each other, so they cannot be read, tested or layered apart, and
    which one finishes loading first depends on the call order. A type-only import is a design dependency that
    mypy follows (``ErrorFound`` holding a catalogue ``Finding`` was the catalogue/events circle). Importing a
    submodule also loads its package's ``__init__``; that implicit edge does not count (a package that
    re-exports its children would otherwise always be a cycle), but ``from verlctl.pkg import name`` of a
    non-module name is an edge to ``verlctl.pkg``."""
    modules = {_module_name_in(root, p): p for p in root.rglob("*.py")}
    edges: dict[str, dict[str, int]] = {m: {} for m in modules}
    for mod, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.append(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                if target in modules and target != mod:
                    edges[mod].setdefault(target, node.lineno)
    return edges


def _module_name_in(root: Path, path: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _cycles(edges: dict[str, dict[str, int]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def _describe(cycle: frozenset[str], edges: dict[str, dict[str, int]]) -> str:
    return "\n".join(f"  {m} (line {edges[m][t]}) imports {t}"
                     for m in sorted(cycle) for t in sorted(edges[m]) if t in cycle)


def test_no_import_cycle() -> None:
    edges = _module_edges(SRC)
    new = [c for c in _cycles(edges) if c not in ALLOWED_CYCLES]
    assert not new, "import cycles (move the shared piece into a leaf module):\n" + "\n\n".join(
        _describe(c, edges) for c in new)


def test_allowed_cycles_only_shrink() -> None:
    gone = [sorted(c) for c in ALLOWED_CYCLES if c not in _cycles(_module_edges(SRC))]
    assert not gone, f"remove these from ALLOWED_CYCLES in tests/project/test_layers.py, they are no longer cycles: {gone}"


def _private_imports(root: Path) -> list[str]:
    """``from verlctl.a import _name`` in another module: a private name used across modules."""
    modules = {_module_name_in(root, p): p for p in root.rglob("*.py")}
    out = []
    for mod, path in sorted(modules.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in modules:
                out.extend(f"  {mod} (line {node.lineno}) imports {a.name} from {node.module}"
                           for a in node.names
                           if a.name.startswith("_") and not a.name.startswith("__")
                           and f"{node.module}.{a.name}" not in modules and node.module != mod)
    return out


def test_no_private_name_is_imported_from_another_module() -> None:
    found = _private_imports(SRC)
    assert not found, "private names imported across modules (make them public, or move them):\n" + "\n".join(found)


def test_the_checkers_see_a_planted_cycle_and_a_planted_private_import(tmp_path: Path) -> None:
    """The scans themselves work: a lazy import that closes a circle and a private import, planted in a copy of
    the tree, are both reported; a type-only import counts too."""
    import shutil

    copy = tmp_path / "verlctl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert not [c for c in _cycles(_module_edges(copy)) if c not in ALLOWED_CYCLES]
    assert not _private_imports(copy)
    with open(copy / "monitor" / "finding.py", "a", encoding="utf-8") as fh:
        fh.write("\n\ndef _planted():\n    from verlctl.monitor.events import _CONTINUATION_RE  # noqa\n")
    assert frozenset({"verlctl.monitor.finding", "verlctl.monitor.events"}) in _cycles(_module_edges(copy))
    (found,) = _private_imports(copy)
    assert found.startswith("  verlctl.monitor.finding (line ")
    assert found.endswith(" imports _CONTINUATION_RE from verlctl.monitor.events")
    (copy / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from verlctl import b\n")
    (copy / "b.py").write_text("import verlctl.a\n")
    assert frozenset({"verlctl.a", "verlctl.b"}) in _cycles(_module_edges(copy))


def test_the_checker_sees_a_planted_upward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan itself works: an upward import planted in a copy of the tree is reported."""
    import shutil

    copy = tmp_path / "verlctl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "spec" / "model.py", "a", encoding="utf-8") as fh:
        fh.write("\n\ndef _planted():\n    from verlctl.orchestrator.launch import Launcher  # noqa\n")
    monkeypatch.setattr(__import__(__name__), "SRC", copy)
    assert ("verlctl.spec.model", "verlctl.orchestrator.launch") in _violations()


#: The modules of one backend's target: the backends themselves and the engines and schedulers they drive
#: (runtime.containers, runtime.nodes, runtime.slurm), and the orchestrator's modules that drive one backend
#: (orchestrator.launch, orchestrator.slurm_run).
BACKEND_MODULES = ("verlctl.orchestrator.launch", "verlctl.orchestrator.slurm_run", "verlctl.runtime.slurm",
                   "verlctl.runtime.containers", "verlctl.runtime.nodes", "verlctl.backends.docker",
                   "verlctl.backends.slurm", "verlctl.backends.kuberay")
#: What acts on a run through the run's verbs (``orchestrator.runs``: ``run_for`` / ``run_named``) only: the
#: watcher, and the commands that launch, watch, show and stop a run (``launch``, ``status``, ``logs``, ``stop``,
#: ``watch``). The watcher also never reaches into orchestrator.inspect (the local run's status and stop).
INTERFACE_USERS: dict[str, tuple[str, ...]] = {
    "verlctl.orchestrator.watcher": (*BACKEND_MODULES, "verlctl.orchestrator.inspect"),
    "verlctl.commands.run": BACKEND_MODULES,
    "verlctl.commands.watch": BACKEND_MODULES,
}


def _interface_violations(root: Path) -> list[str]:
    edges = _module_edges(root)
    return [f"  {user} (line {edges[user][t]}) imports {t}" for user, banned in INTERFACE_USERS.items()
            for t in sorted(edges.get(user, {})) if t in banned]


def test_the_watcher_and_the_run_commands_talk_to_the_launch_interface_only() -> None:
    found = _interface_violations(SRC)
    assert not found, "imports of a backend's module (go through verlctl.orchestrator.runs):\n" + "\n".join(found)


def test_the_interface_check_sees_a_planted_backend_import(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "verlctl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "orchestrator" / "watcher.py", "a", encoding="utf-8") as fh:
        fh.write("\n\ndef _planted():\n    from verlctl.orchestrator.slurm_run import slurm_status  # noqa\n")
    (found,) = _interface_violations(copy)
    assert found.startswith("  verlctl.orchestrator.watcher (line ") and found.endswith(" imports verlctl.orchestrator.slurm_run")


def _backend_arrows(root: Path) -> list[str]:
    """Imports from a module of ``verlctl.backends`` of a module of ``verlctl.orchestrator``."""
    edges = _module_edges(root)
    return [f"  {m} (line {line}) imports {t}" for m, targets in sorted(edges.items())
            if m == "verlctl.backends" or m.startswith("verlctl.backends.")
            for t, line in sorted(targets.items())
            if t == "verlctl.orchestrator" or t.startswith("verlctl.orchestrator.")]


def test_no_backend_imports_the_orchestrator() -> None:
    """The orchestrator walks the stages and calls down into the backends; a backend that called back up (as
    the local and Slurm backends once drove ops.launch / ops.inspect / ops.slurm_run) would put the stage logic
    and verl back below the target code. The rank test forbids it too; this names the arrow."""
    found = _backend_arrows(SRC)
    assert not found, "backends importing the orchestrator (pass the data down instead):\n" + "\n".join(found)


def test_the_backend_arrow_check_sees_a_planted_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    copy = tmp_path / "verlctl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "backends" / "docker.py", "a", encoding="utf-8") as fh:
        fh.write("\n\ndef _planted():\n    from verlctl.orchestrator.launch import Launcher  # noqa\n")
    (found,) = _backend_arrows(copy)
    assert found.startswith("  verlctl.backends.docker (line ") and found.endswith(" imports verlctl.orchestrator.launch")
    monkeypatch.setattr(__import__(__name__), "SRC", copy)
    assert ("verlctl.backends.docker", "verlctl.orchestrator.launch") in _violations()


def test_a_backend_may_not_import_verl_knowledge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The FORBIDDEN entry of the backends holds: verl's environment composed in a backend is reported (the
    proxy environment is composed in the orchestrator and handed down)."""
    import shutil

    copy = tmp_path / "verlctl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "backends" / "docker.py", "a", encoding="utf-8") as fh:
        fh.write("\n\ndef _planted():\n    from verlctl.verl.environment import proxy_env  # noqa\n")
    monkeypatch.setattr(__import__(__name__), "SRC", copy)
    assert ("verlctl.backends.docker", "verlctl.verl.environment") in _violations()
