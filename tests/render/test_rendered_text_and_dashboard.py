"""The rendered files as text (each ends in exactly one newline) and the Ray dashboard's listening address
(loopback on one node, reachable from the workers on several)."""

from __future__ import annotations

import pytest

from conftest import BASE_PATHS


def test_every_rendered_file_is_a_text_file_that_ends_in_one_newline() -> None:
    """`cat start_verl.sh run_training.sh`, `>>` appends and diff tools read whole lines: each rendered file ends
    in exactly one newline (the templates' own last line), none in a blank line."""
    from scripts_harness import render_from

    rendered = render_from(dict(BASE_PATHS))
    for name, text in rendered.files.items():
        assert text.endswith("\n") and not text.endswith("\n\n"), (name, text[-80:])


@pytest.mark.parametrize(("nodes", "host"), [({}, "127.0.0.1"),
                                             ({"cluster.nodes": ["10.0.0.1", "10.0.0.2"],
                                               "cluster.socket_ifname": "eth0"}, "0.0.0.0")])
def test_the_ray_dashboard_listens_on_loopback_unless_other_nodes_need_it(nodes: dict[str, object],
                                                                           host: str) -> None:
    """One node: the dashboard (it can submit jobs: code execution) is bound to 127.0.0.1, never to the
    network; several nodes: the head's dashboard is reachable from the workers."""
    from verlctl.render.render import START_SCRIPT

    from scripts_harness import render_from

    script = render_from({**BASE_PATHS, **nodes}).files[START_SCRIPT]
    assert f"--dashboard-host={host} " in script
    assert script.count("--dashboard-host=") == 1
