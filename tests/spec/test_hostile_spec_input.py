"""Bad input of the third adversarial review (issue 22: A3, A4, A14): one line, non-zero exit, no traceback,
bounded time, nothing echoed at length."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from conftest import clean_env, run_cli
from fault_support import one_line_error, write_base


def alias_bomb(indent: str = "") -> str:
    """The review's 600-byte bomb: ten levels of nine aliases of the level below (9^10 values expanded)."""
    lines = [indent + "a0: &a0 [" + ",".join(['"lol"'] * 9) + "]"]
    lines += [indent + f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("where", ["top", "env", "unknown"])
def test_a_yaml_alias_bomb_is_one_line_within_seconds(tmp_path: Path, where: str) -> None:
    if where == "top":
        p = tmp_path / "bomb.yaml"
        p.write_text(alias_bomb())
    elif where == "env":
        p = write_base(tmp_path, "env:\n" + alias_bomb("  "))
    else:
        p = write_base(tmp_path, "bogus:\n" + alias_bomb("  "))
    assert p.stat().st_size < 1000
    started = time.monotonic()
    line = one_line_error(run_cli("plan", "-c", str(p), timeout=90))
    assert time.monotonic() - started < 60  # under load; alone it is well under a second of work
    assert "aliases" in line and str(p) in line, line


def test_a_recursive_alias_is_one_line(tmp_path: Path) -> None:
    p = write_base(tmp_path, "env: &e\n  A: *e\n")
    line = one_line_error(run_cli("plan", "-c", str(p), timeout=90))
    assert "nesting too deep" in line, line


def test_a_modest_anchor_is_still_accepted(tmp_path: Path) -> None:
    """Anchors are legal YAML and a spec may share a value: only a large expansion is refused."""
    p = write_base(tmp_path, "env: {A: &v 'shared', B: *v}\n")
    out = tmp_path / "out"
    res = run_cli("plan", "-c", str(p), "-o", str(out))
    assert res.code == 0, res.err
    env = yaml.safe_load((out / "spec.resolved.yaml").read_text())["env"]
    assert env["A"] == env["B"] == "shared"


def test_the_expansion_bound_is_linear_in_the_file() -> None:
    from verlctl.spec import sources

    shared = {"k": list(range(10))}
    tree = {"a": [shared] * 5, "b": shared}
    assert sources._shape(tree) == (4, 3 + (1 + 5 + 5 * 13) + 13, 4)  # shared: 1 + 1 + (1 + 10)
    loop: list = []
    loop.append(loop)
    assert sources._shape({"x": loop}) is None
    assert sources._too_deep({"x": loop}, 32)
    assert sources._too_deep({"a": {"b": {"c": 1}}}, 2)
    assert not sources._too_deep({"a": {"b": {"c": 1}}}, 3)
    assert sources._shape(7) == (0, 1, 0)


BIG = "9" * 5000


@pytest.mark.parametrize("how", ["file", "set", "env", "seed_env"])
def test_a_5000_digit_integer_is_one_short_line(tmp_path: Path, how: str) -> None:
    env = clean_env()
    args: list[str] = []
    if how == "file":
        p = write_base(tmp_path, f"train: {{steps: {BIG}}}\n")
    else:
        p = write_base(tmp_path)
        if how == "set":
            args = ["--set", f"train.steps={BIG}"]
        elif how == "env":
            env["VERLCTL_TRAIN__STEPS"] = BIG
        else:
            env["TRAIN_STEPS"] = BIG
    line = one_line_error(run_cli("plan", "-c", str(p), *args, env=env))
    assert len(line) < 400, line
    assert "train.steps" in line or "digits" in line, line


#: A14 (adversarial-turn3.md): values the field fuzz saw accepted with rc 0; each is now one line naming the
#: field and the fix.
A14_CASES = [
    ("container.image", "--help", "is not a Docker image reference"),
    ("container.image", "-oProxyCommand=x", "is not a Docker image reference"),
    ("container.image", "{a: 1}", "is not a Docker image reference"),
    ("container.image", " a b ", "is not a Docker image reference"),
    ("container.image", "é漢字🙂", "is not a Docker image reference"),
    ("container.name", "c" * 100_000, "too long: at most 128"),
    ("logging.experiment", "e" * 100_000, "too long (it becomes a directory name): at most 128"),
    ("logging.project", "p" * 100_000, "too long (it becomes a directory name): at most 128"),
    ("train.save_freq", "1" + "0" * 30, "less than or equal to 2147483647"),
    ("train.test_freq", "1" + "0" * 30, "less than or equal to 2147483647"),
    ("cluster.host_memory_gib", "1e30", "less than or equal to 1048576"),
    ("cluster.device_memory_gib", "1e30", "less than or equal to 65536"),
    ("train.steps", "true", "must be a whole number, not true"),
    ("train.save_freq", "false", "must be a whole number, not false"),
    ("recovery.max_restarts", "true", "must be a whole number, not true"),
]


@pytest.mark.parametrize(("field", "value", "says"), A14_CASES, ids=[f"{c[0]}-{c[1][:12]}" for c in A14_CASES])
def test_a14_validation_gaps_are_one_line_naming_the_field(tmp_path: Path, field: str, value: str, says: str) -> None:
    p = write_base(tmp_path)
    out = tmp_path / "out"
    line = one_line_error(run_cli("plan", "-c", str(p), "--set", f"{field}={value}", "-o", str(out)))
    assert line.startswith(f"error: {field}: "), line
    assert says in line, line
    assert len(line) < 600, len(line)  # never the 100 000 characters back
    assert not out.exists()  # nothing written


@pytest.mark.parametrize("text", ["train: {steps: 3}\ntrain: {steps: 4}\n", "train: {steps: 3, steps: 4}\n",
                                  "env:\n  A: '1'\n  A: '2'\n"])
def test_a14_a_duplicate_key_in_the_spec_file_is_one_line(tmp_path: Path, text: str) -> None:
    p = write_base(tmp_path, text)
    line = one_line_error(run_cli("plan", "-c", str(p)))
    assert "duplicate key" in line and "keep one of them" in line and str(p) in line, line


def test_a14_valid_images_names_and_counts_are_still_accepted(tmp_path: Path) -> None:
    p = write_base(tmp_path, "container: {image: 'localhost:5000/my_org/verl-img:v0.7.0-rc.1@sha256:"
                   + "a" * 64 + "', name: inf}\ntrain: {save_freq: -1, steps: 7}\n"
                   "logging: {project: " + "p" * 128 + "}\ncluster: {host_memory_gib: 2048}\n")
    out = tmp_path / "out"
    res = run_cli("plan", "-c", str(p), "-o", str(out))
    assert res.code == 0, res.err
    doc = yaml.safe_load((out / "spec.resolved.yaml").read_text())
    assert doc["container"]["image"].startswith("localhost:5000/my_org/verl-img:v0.7.0-rc.1@sha256:")
    assert doc["train"]["steps"] == 7 and doc["logging"]["project"] == "p" * 128


@pytest.mark.parametrize("argv", [["logs", "-n", "x"], ["status", "-x"], ["export-hf"], ["stop", "--grace", "x"],
                                  ["bogus-command"], ["launch", "--verify-timeout", "x"]])
def test_a14_a_flag_error_is_one_error_line_naming_the_flag(argv: list[str], tmp_path: Path) -> None:
    env = clean_env()
    env["VERLCTL_STATE_DIR"] = str(tmp_path / "state")
    res = run_cli(*argv, env=env)
    line = one_line_error(res)
    assert res.code == 2 and "Usage:" not in res.err, res.err
    assert "--help`)" in line, line
    named = {"logs": "'--lines' / '-n'", "status": "-x", "export-hf": "'--out' / '-o'", "stop": "'--grace'",
             "bogus-command": "'bogus-command'", "launch": "'--verify-timeout'"}[argv[0]]
    assert named in line, line
