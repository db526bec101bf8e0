"""Secrets given where they do not belong: a key on the command line is refused before it is read (every user
can read a command line in /proc), saying to export the variable instead; a SwanLab host URL with a password
is refused without repeating it, from every source (--set, the environment, the spec file)."""

from __future__ import annotations

from pathlib import Path

from conftest import clean_env, run_cli_many
from fault_support import one_line_error, write_base

KEY = "swk-ON-ARGV-4d1e9b"
PASSWORD = "Hunter2-PASS-77"


def test_a_key_on_the_command_line_is_refused_and_export_is_named(tmp_path: Path) -> None:
    base = write_base(tmp_path)
    out = tmp_path / "out"
    argvs = [["plan", "-c", str(base), "--set", f"logging.swanlab.api_key={KEY}", "-o", str(out)],
             ["plan", "-c", str(base), "--set", f"logging.swanlab.api_key= {KEY}"],
             ["check", "-c", str(base), "--set", f"logging.swanlab.api_key={KEY}"]]
    for res in run_cli_many(argvs):
        line = one_line_error(res)
        assert line.startswith("error: logging.swanlab.api_key: a key given with --set "), line
        assert "export SWANLAB_API_KEY" in line and KEY not in res.out + res.err, line
    assert not out.exists()
    # the environment is the way: the same plan runs
    ok = run_cli_many([["plan", "-c", str(base), "--set", "logging.swanlab.enabled=true", "--set",
                        "logging.swanlab.host=http://192.0.2.1:8000", "--json"]],
                      env=clean_env(SWANLAB_API_KEY=KEY))[0]
    assert ok.code == 0, ok.err
    assert KEY not in ok.out + ok.err


def test_a_swanlab_host_url_with_a_password_is_refused_without_repeating_it(tmp_path: Path) -> None:
    url = f"http://bob:{PASSWORD}@192.0.2.1:8000"
    base = write_base(tmp_path)
    (tmp_path / "f").mkdir()
    in_file = write_base(tmp_path / "f", logging={"swanlab": {"enabled": True, "host": url}})
    results = run_cli_many([["plan", "-c", str(base), "--set", "logging.swanlab.enabled=true", "--set",
                             f"logging.swanlab.host={url}"],
                            ["plan", "-c", str(in_file)]])
    results += run_cli_many([["plan", "-c", str(base), "--set", "logging.swanlab.enabled=true"]],
                            env=clean_env(SWANLAB_HOST=url))
    for res in results:
        line = one_line_error(res)
        assert "logging.swanlab.host" in line and "user name or password" in line, line
        assert PASSWORD not in res.out + res.err and "bob" not in line, line
