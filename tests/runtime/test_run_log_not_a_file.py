"""A run log that is not a regular file (a FIFO named *.log, as in a damaged or planted record): every command
that reads a run's log reads nothing from it and says so; none blocks on it or ends in a traceback."""

from __future__ import annotations

import json
import os
import tarfile
import time
from pathlib import Path

import pytest

from conftest import clean_env, run_cli


def _run_with_fifo_log(home: Path) -> str:
    from verlctl.runtime.records import RunRecord

    log = home / "train.log"
    os.mkfifo(log)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(home))
        rec = RunRecord(run_id="20261206-120000-fifo-ab12", created_at=time.time() - 60, runtime="host",
                        workdir=str(home), scripts_dir=str(home), run_log=str(log), train_log=str(log),
                        checkpoints=str(home / "ckpt"), experiment="fifo", verl_version="0.7.0")
        rec.save()
        (rec.dir / rec.spec_file).write_text("train:\n  steps: 3\n", encoding="utf-8")
        return rec.run_id


#: Every command that reads a run's log, with what it is given.
READERS = {
    "status": ["status", "RUN"],
    "status --json": ["status", "RUN", "--json"],
    "logs": ["logs", "RUN"],
    "bundle": ["bundle", "RUN", "-o", "OUT"],
    "report": ["report", "RUN", "-o", "OUT"],
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_fifo_as_the_run_log_is_read_by_no_command(reader: str, tmp_path: Path) -> None:
    run_id = _run_with_fifo_log(tmp_path)
    out = tmp_path / ("b.tar.gz" if reader == "bundle" else "r.html")
    argv = [run_id if a == "RUN" else str(out) if a == "OUT" else a for a in READERS[reader]]
    r = run_cli(*argv, env=clean_env(XDG_STATE_HOME=str(tmp_path), COLUMNS="200"), timeout=60)
    assert "Traceback" not in r.err and "Errno" not in r.err, r.err
    assert r.code == 0, r.err
    if reader == "status --json":
        assert json.loads(r.out)["run_id"] == run_id
    if reader == "bundle":
        with tarfile.open(out) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith("manifest.json"))
            manifest = json.loads(tar.extractfile(member).read())  # type: ignore[union-attr]
        assert "not a regular file" in manifest["unavailable"]["log-tail.txt"]
