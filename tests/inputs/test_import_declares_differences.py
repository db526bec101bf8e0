"""Every difference between a script's effective config and the imported plan's is declared in the import's output.

For each of verl's official scripts that imports (tests/fixtures/official-scripts, parity.yaml), the script's own
override list and verlctl's command are composed with verl's Hydra tree of the script's version and compared on
EVERY leaf of the resolved config (~550-950 leaves), not only on the keys the script sets. A leaf that differs must
be named by the import's output (a note, a key verlctl adds, an extra override, a value not imported), or follow
such a leaf (verl interpolates it: ``rollout.trace.experiment_name: ${trainer.experiment_name}``). Leaves of an
override verl itself cannot compose are the script's failure, recorded with their reason in parity.yaml.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import pytest

from verlctl.importer import import_script

import verlcompose
from conftest import ROOT

_spec = importlib.util.spec_from_file_location("bench_import_parity", ROOT / "bench" / "bench_import_parity.py")
assert _spec is not None and _spec.loader is not None
parity = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_import_parity", parity)
_spec.loader.exec_module(parity)
parity = sys.modules["bench_import_parity"]

SCOPE = parity.load_expectations()["in_scope"]
IMPORTED = sorted(rel for rel, exp in SCOPE.items() if not (exp or {}).get("cannot_import"))


def _leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(_leaves(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: tree}


@pytest.mark.parametrize("rel", IMPORTED)
def test_every_differing_leaf_of_the_effective_config_is_declared(rel: str) -> None:
    tree = parity.TREE[rel.split("/", 1)[0]]
    if not verlcompose.available(tree):
        if os.environ.get("CI"):
            pytest.fail(f"verl {tree} config tree missing")
        pytest.skip(f"verl {tree} not installed")
    recorded = SCOPE[rel] or {}
    r = import_script(parity.FIXTURES / rel, tree, {**parity.ENVIRON, **(recorded.get("vars") or {})},
                      recorded.get("device"))
    cmd = r.parsed.command
    cfg_dir, default = parity.ENTRY_CONFIG[cmd.module]
    name = (cmd.config_name or default).removesuffix(".yaml")
    original = [o for o in cmd.overrides if "\ue000" not in o and not o.startswith("hydra.")]
    theirs, failing = parity._compose_dropping(tree, cfg_dir, name, original)
    our_name, ours = parity._split_argv(r.command_argv)
    mine = verlcompose.compose(tree, r.config_dir, our_name, ours)
    a, b = _leaves(theirs), _leaves(mine)
    absent = object()
    differing = [k for k in sorted(set(a) | set(b))
                 if k not in failing and not parity._same(a.get(k, absent), b.get(k, absent))]
    output = " ".join([*r.notes, *r.added, *r.extras, *(o.key for o in r.unresolved)])
    named = {k for k in differing if k in output}
    derived = {k for k in differing if k not in named
               and any(a.get(k) == a.get(n) and b.get(k) == b.get(n) for n in named)}
    assert set(differing) == named | derived, sorted(set(differing) - named - derived)
