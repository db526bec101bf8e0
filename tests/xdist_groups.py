"""A pytest plugin (tests/conftest.py loads it): `--dist loadgroup` honours `xdist_group` marks again.

pytest-xdist (3.8) tags a grouped test by rewriting ``item._nodeid`` to ``<id>@<group>``; pytest 9 keeps node
ids in ``item._id`` (a NodeId) and no longer reads ``_nodeid``, so every mark was silently ignored: the two
workers each built the 200k-file scan tree, composed the same verl cases and started their own module-scoped
containers. This hook, run after xdist's, writes the tag where pytest reads it. It does nothing when xdist
already tagged the id (an xdist or pytest that agree again) or without ``--dist loadgroup``.

It also hands the long work out first (the longest-processing-time-first rule): the real-verl runs, then the
Docker, slow and grouped tests, then the rest, each in collection order. Last in collection order, the Slurm
cluster's group (256 s) and the signal-path mutants (95 s) used to start when the other worker had little left,
and the suite waited on them alone."""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if getattr(config.option, "dist", "no") != "no":
        items.sort(key=long_first)  # stable: the same order on every worker, as xdist requires
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId  # pytest >= 9: the structured node id
    except ImportError:  # pragma: no cover - older pytest reads _nodeid, which xdist sets
        return
    for item in items:
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        if groups and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")


def long_first(item: pytest.Item) -> int:
    """0 for a real-verl run, 1 for a Docker, slow or grouped test (minutes, or one worker's share of a group),
    2 for the rest (seconds)."""
    if item.get_closest_marker("real_verl"):
        return 0
    return 1 if any(item.get_closest_marker(m) for m in ("docker", "slow", "xdist_group")) else 2
