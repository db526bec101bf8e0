"""Input is decoded once, at the edge, with one set of bounds: a ``--set`` value goes through the spec file's
reader (``spec/sources.py:load_bounded_yaml``: YAML aliases bounded, recursive aliases and deep nesting
refused), a value that is not UTF-8 (a byte a legacy-encoded path carries) is refused with the field named,
from ``--set`` and from the environment, before anything is written or started, and an error message never
builds the repr of a huge value (review N1, N10)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env


#: A flow-style alias bomb of ``levels`` levels of nine aliases (the review's N1: 9 levels ≈ 400 bytes).
def bomb(levels: int) -> str:
    parts = ["&a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        parts.append(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "[" + ", ".join(parts) + "]"


def _cli(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    # bytes argv: a value that is not UTF-8 reaches verlctl as the OS hands it over
    return subprocess.run([sys.executable.encode(), b"-m", b"verlctl", *[a if isinstance(a, bytes) else a.encode()
                                                                        for a in args]],
                          capture_output=True, env=env or clean_env(), cwd=cwd, timeout=timeout)


def _one_line(res: subprocess.CompletedProcess[bytes]) -> str:
    err = res.stderr.decode("utf-8", errors="replace")
    assert res.returncode != 0, err
    assert "Traceback" not in err, err[-2000:]
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("hint:")]
    assert len(lines) == 1, err[:2000]
    return lines[0]


@pytest.mark.parametrize("field", ["verl_version", "train.lr", "env.X", "extra_overrides"])
def test_a_set_alias_bomb_is_refused_at_once_like_a_spec_files(tmp_path: Path, field: str) -> None:
    t0 = time.monotonic()
    res = _cli(["plan", "--set", f"{field}={bomb(9)}"], cwd=tmp_path)
    took = time.monotonic() - t0
    line = _one_line(res)
    assert "aliases" in line and field in line, line
    assert took < 15, took  # the old reader took 42 s and 763 MB to refuse it
    assert len(line) < 400, line


def test_a_recursive_alias_in_a_set_value_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    for field in ("logging.swanlab.host", "train.lr", "env.X"):
        line = _one_line(_cli(["plan", "--set", f"{field}=&a [*a]"], cwd=tmp_path))
        assert field in line and ("contains itself" in line or "too deep" in line), line
    # a key is refused on the command line before its value is read at all (export it instead)
    line = _one_line(_cli(["plan", "--set", "logging.swanlab.api_key=&a [*a]"], cwd=tmp_path))
    assert "export SWANLAB_API_KEY" in line and "&a" not in line, line


def test_deep_nesting_in_a_set_value_is_refused_as_in_a_file(tmp_path: Path) -> None:
    line = _one_line(_cli(["plan", "--set", "extra_overrides=" + "[" * 200 + "]" * 200], cwd=tmp_path))
    assert "too deep" in line and "extra_overrides" in line, line


@pytest.mark.parametrize("field", ["env.X", "paths.model", "extra_overrides", "container.workdir"])
def test_a_set_value_that_is_not_utf8_is_refused_with_its_field(tmp_path: Path, field: str) -> None:
    value = b"/x/\xff\xfe" if field != "extra_overrides" else b"[+x=\xff]"
    out = tmp_path / "out"
    res = _cli(["plan", "-o", str(out), "--set", field.encode() + b"=" + value], cwd=tmp_path)
    line = _one_line(res)
    assert field in line and "UTF-8" in line, line
    assert not out.exists()


@pytest.mark.parametrize("var", ["MODEL_PATH", "VERLCTL_ENV__X", "CKPTS_DIR"])
def test_an_environment_value_that_is_not_utf8_is_refused_with_its_variable(tmp_path: Path, var: str) -> None:
    env = {k.encode(): v.encode("utf-8", "surrogateescape") for k, v in clean_env().items()}
    env[var.encode()] = b"/x/\xff\xfe"
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "verlctl", "plan", "-o", str(out)], capture_output=True,
                         env=env, cwd=tmp_path, timeout=60)  # type: ignore[arg-type]
    line = _one_line(res)
    assert var in line and "UTF-8" in line, line
    assert not out.exists()


def test_a_launch_with_a_value_that_is_not_utf8_starts_nothing(tmp_path: Path) -> None:
    # The review's N10: the value crashed the writer after the container was made. Refused before any change.
    from host_launch_support import host_launch

    env, settings = host_launch(tmp_path, "print('never run')\n")
    args: list[str | bytes] = ["launch", "--yes", "--set", b"env.LEGACY=/data/\xc4\xe3\xba\xc3"]
    for k, v in settings.items():
        args += ["--set", f"{k}={v}"]
    res = _cli(args, env=env, timeout=120)  # type: ignore[arg-type]
    line = _one_line(res)
    assert "env.LEGACY" in line and "UTF-8" in line, line
    runs = Path(env["VERLCTL_STATE_DIR"]) / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_an_error_never_builds_the_repr_of_a_huge_value() -> None:
    from verlctl.spec.resolve import MAX_SHOWN, shown

    formatted = []

    class Item:  # counts how many of the value's items a message formats
        def __repr__(self) -> str:
            formatted.append(1)
            return "item"

    big = [Item() for _ in range(100_000)]
    text = shown(big)
    assert len(text) < 2 * MAX_SHOWN and "100000 items" in text, text
    assert len(formatted) <= 10, len(formatted)  # the old message formatted all 100 000 (twice)
    assert shown("é" * 5000).endswith("(5000 characters)")
    assert "digits" in shown(10 ** 5000)  # never str() of it (more digits than Python converts)
