"""The package imports one way: inputs -> spec -> verl knowledge -> checks -> render -> runtime -> monitor ->
wizard -> ops (launch orchestration) -> commands. Every import counts, the lazy ones inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "verlctl"

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
    "verlctl.verl": 2,
    "verlctl.checks": 3,
    "verlctl.render": 4,
    "verlctl.plan": 4,
    "verlctl.importer": 4,  # a launch script -> a spec, checked against verlctl's own command
    "verlctl.report": 4,
    "verlctl.runtime": 5,
    "verlctl.monitor": 6,
    "verlctl.wizard": 7,
    "verlctl.ops": 8,
    "verlctl.commands": 9,
    "verlctl.cli": 9,
    "verlctl.guides": 9,
    "verlctl.__main__": 9,
}

#: runtime keeps executors, containers, records and following: it knows nothing of verl or of questions.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "verlctl.runtime": ("verlctl.verl", "verlctl.checks", "verlctl.render", "verlctl.plan", "verlctl.wizard"),
    "verlctl.monitor": ("verlctl.wizard",),
}

#: Known upward imports still to be removed (each with its reason). An entry that no longer occurs fails the
#: test too, so this list can only shrink.
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
    assert best, f"{module} has no rank in tests/test_layers.py: give its package one"
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
    assert not gone, f"remove these from DEBT in tests/test_layers.py, they no longer occur: {gone}"


@pytest.mark.parametrize(("a", "b"), [("verlctl.monitor.catalogue", "verlctl.monitor.events")])
def test_no_import_cycle_between(a: str, b: str) -> None:
    """Type-only imports (under TYPE_CHECKING) do not count: they never run."""
    def runtime_imports(mod: str) -> set[str]:
        path = SRC.parent.joinpath(*mod.split(".")).with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip.update(id(n) for n in ast.walk(node))
        return {n.module for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module and id(n) not in skip}
    assert not (b in runtime_imports(a) and a in runtime_imports(b))


def test_the_checker_sees_a_planted_upward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan itself works: an upward import planted in a copy of the tree is reported."""
    import shutil

    copy = tmp_path / "verlctl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "spec" / "model.py", "a", encoding="utf-8") as fh:
        fh.write("\n\ndef _planted():\n    from verlctl.ops.launch import Launcher  # noqa\n")
    monkeypatch.setattr(__import__(__name__), "SRC", copy)
    assert ("verlctl.spec.model", "verlctl.ops.launch") in _violations()
