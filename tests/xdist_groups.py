"""A pytest plugin (tests/conftest.py loads it): `--dist loadgroup` honours `xdist_group` marks again.

pytest-xdist (3.8) tags a grouped test by rewriting ``item._nodeid`` to ``<id>@<group>``; pytest 9 keeps node
ids in ``item._id`` (a NodeId) and no longer reads ``_nodeid``, so every mark was silently ignored: the two
workers each built the 200k-file scan tree, composed the same verl cases and started their own module-scoped
containers. This hook, run after xdist's, writes the tag where pytest reads it. It does nothing when xdist
already tagged the id (an xdist or pytest that agree again) or without ``--dist loadgroup``."""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
