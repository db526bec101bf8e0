"""A file name near the system's limit (NAME_MAX, 255 bytes) given with -o: written when it fits (the
temporary file beside it takes only the name's first characters), one line naming -o when it does not; never a
traceback. Every command that writes one -o FILE."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_planted_state_and_output_paths import a_script, cli, file_commands, no_traceback  # noqa: F401 (a fixture)

WRITERS = ["report", "bundle", "export slurm", "export rayjob", "import", "init"]


@pytest.mark.parametrize("name", WRITERS)
def test_a_250_character_name_is_written_and_a_300_character_one_is_one_line(tmp_path: Path, name: str,
                                                                             a_script: Path) -> None:  # noqa: F811
    state = tmp_path / "state"
    argv = file_commands(tmp_path, state)[name]
    if name == "import":
        argv = ["import", str(a_script)]
    fits = tmp_path / ("M" * 245 + ".yaml")
    res = cli(state, *argv, "-o", str(fits), cwd=tmp_path)
    no_traceback(res)
    assert res.code == 0, (res.out, res.err)
    assert fits.is_file() and fits.stat().st_size > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left
    too_long = tmp_path / ("L" * 300 + ".yaml")
    res = cli(state, *argv, "-o", str(too_long), cwd=tmp_path)
    no_traceback(res)
    assert res.code != 0
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "too long" in lines[0].lower(), res.err
