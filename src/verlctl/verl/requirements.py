"""What each verl version requires of the Python and the Ray it runs on, as its wheel declares them.

From the wheels' ``METADATA`` (``.cache/verl/<version>/verl-<version>.dist-info/METADATA``; tests compare this
table with them): verl 0.7.0 ``Requires-Python: >=3.10`` and ``Requires-Dist: ray[default]>=2.41.0``; verl
0.9.1 ``Requires-Python: <3.13,>=3.10`` and ``Requires-Dist: ray[default]>=2.41.0``.

Ray itself refuses a node whose Ray or Python version differs from the head's, to the patch level
(``ray/_private/utils.py`` ``check_version_info`` compares ``ray.__version__`` and
``"{}.{}.{}".format(*sys.version_info[:3])``: "Version mismatch: The cluster was started with ...").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Requirement:
    python_min: tuple[int, ...]
    python_below: tuple[int, ...] | None  # exclusive upper bound, None: none
    ray_min: tuple[int, ...]

    @property
    def python_text(self) -> str:
        low = ">=" + ".".join(map(str, self.python_min))
        return low if self.python_below is None else f"{low},<{'.'.join(map(str, self.python_below))}"

    @property
    def ray_text(self) -> str:
        return ">=" + ".".join(map(str, self.ray_min))


REQUIREMENTS: dict[str, Requirement] = {
    "0.7.0": Requirement(python_min=(3, 10), python_below=None, ray_min=(2, 41, 0)),
    "0.9.1": Requirement(python_min=(3, 10), python_below=(3, 13), ray_min=(2, 41, 0)),
}


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """``'3.10.12'`` -> ``(3, 10, 12)``; ``'2.49.0rc1'`` -> ``(2, 49, 0)``; unparsable -> None."""
    if not text:
        return None
    out: list[int] = []
    for part in text.strip().split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
        if len(digits) < len(part):
            break
    return tuple(out) or None


def python_ok(req: Requirement, version: str) -> bool | None:
    v = version_tuple(version)
    if v is None:
        return None
    return v[: len(req.python_min)] >= req.python_min and (
        req.python_below is None or v[: len(req.python_below)] < req.python_below
    )


def ray_ok(req: Requirement, version: str) -> bool | None:
    v = version_tuple(version)
    return None if v is None else v >= req.ray_min
