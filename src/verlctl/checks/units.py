"""Small text helpers the machine checks share: id lists, sizes, parameter counts."""

from __future__ import annotations

from collections.abc import Callable

from verlctl.spec.model import RunSpec


def id_list(values: list[int]) -> str:
    return ", ".join(str(v) for v in values) if values else "none"


def size_text(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def valid_sizes(limit: int, ok: Callable[[int], bool]) -> list[int]:
    return [t for t in range(1, max(1, limit) + 1) if ok(t)]


def params_text(n: int) -> str:
    """``7615616512`` -> ``'7.62B'``; ``494032768`` -> ``'494.0M'``; small counts as they are."""
    if n >= 10**9:
        return f"{n / 1e9:.2f}B"
    if n >= 10**6:
        return f"{n / 1e6:.1f}M"
    return str(n)


def total_devices(spec: RunSpec) -> int:
    return max(1, len(spec.cluster.nodes)) * len(spec.cluster.devices)
