"""``docker_support.ps_in``: a container's process list, whole or not at all. Docker's exec can return a short
command's output without its first lines (docker/docker-py#2042, seen in a CI run under load); that cannot be
provoked on demand, so the exec here is a TEST DOUBLE that loses the start of its first answers. The real reads run
in every Docker test that lists a container's processes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from docker_support import ps_in

WHOLE = b"@@ps-begin@@\nCOMMAND\n/sbin/docker-init -- sleep infinity\ngcs_server --log_dir=/tmp\nsh -c echo @@ps-begin@@; ps -eo args; echo @@ps-end@@\nps -eo args\n@@ps-end@@\n"


@dataclass
class _Exec:
    output: bytes


class LosingExec:
    """A container whose exec drops the first ``cut`` bytes of its first ``lossy`` answers."""

    name = "double"

    def __init__(self, lossy: int, cut: int) -> None:
        self.lossy, self.cut, self.calls = lossy, cut, []

    def exec_run(self, argv: list[str]) -> _Exec:
        self.calls.append(argv)
        if len(self.calls) <= self.lossy:
            return _Exec(WHOLE[self.cut:])
        return _Exec(WHOLE)


@pytest.mark.parametrize("cut", [1, 13, 40])  # the marker cut, the marker's newline gone, a process line gone
def test_a_list_without_its_start_is_read_again(cut: int) -> None:
    c = LosingExec(lossy=2, cut=cut)
    body = ps_in(c, "args")
    assert body.splitlines()[:3] == ["COMMAND", "/sbin/docker-init -- sleep infinity", "gcs_server --log_dir=/tmp"]
    assert body.endswith("ps -eo args\n") and len(c.calls) == 3
    assert c.calls[0] == ["sh", "-c", "echo @@ps-begin@@; ps -eo args; echo @@ps-end@@"]


def test_a_list_that_never_comes_back_whole_fails_the_test() -> None:
    c = LosingExec(lossy=99, cut=5)
    with pytest.raises(AssertionError, match="did not come back whole in 5 tries"):
        ps_in(c)
    assert len(c.calls) == 5


def test_a_list_without_its_end_is_read_again() -> None:
    c = LosingExec(lossy=0, cut=0)
    c.exec_run = lambda argv, _c=c: (_c.calls.append(argv), _Exec(WHOLE[:-12] if len(_c.calls) == 1 else WHOLE))[1]  # type: ignore[method-assign]
    assert ps_in(c).endswith("ps -eo args\n") and len(c.calls) == 2
