"""`verlctl export-hf RUN [--step N] -o DIR`: verl's own `verl.model_merger` run inside the run's container.

The container is the real test image on the real Docker engine; the merger is a TEST DOUBLE (a stand-in,
tests/doubles/model_merger, mounted at /verl/verl/model_merger) that parses its arguments with verl's real
`parse_args` read from the verl wheel installed in the image, checks what the real mergers check and writes
a config and a weights file. The exact argv verlctl passes is also parsed here by the real `parse_args` of
verl 0.7.0 and 0.9.1 (.cache/verl), so a flag verl does not have fails the test.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, CliResult, clean_env, run_cli

DOUBLE = ROOT / "tests" / "doubles" / "model_merger"
VERL_TREES = {v: ROOT / ".cache" / "verl" / v / "verl" for v in ("0.7.0", "0.9.1")}


def verl_parse_args(version: str, argv: list[str]) -> argparse.Namespace:
    """verl's real ``verl.model_merger`` argument parser (the function's own source, run as is)."""
    path = VERL_TREES[version] / "model_merger" / "base_model_merger.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parse_args")
    scope: dict[str, Any] = {"argparse": argparse}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), scope)  # noqa: S102 - verl's own parser
    saved = sys.argv
    sys.argv = ["verl.model_merger", *argv]
    try:
        return scope["parse_args"]()  # type: ignore[no-any-return]
    finally:
        sys.argv = saved


@pytest.mark.parametrize("version", sorted(VERL_TREES))
def test_the_merger_argv_is_what_verls_own_parser_accepts(version: str) -> None:
    from verlctl.orchestrator.export_hf import Source, merger_argv

    fsdp = merger_argv(Source(4, Path("/c/global_step_4/actor"), "fsdp"), "/c/global_step_4/actor", "/c/out")
    args = verl_parse_args(version, fsdp)
    assert (args.operation, args.backend, args.local_dir, args.target_dir) == (
        "merge", "fsdp", "/c/global_step_4/actor", "/c/out")
    assert not args.tie_word_embedding and args.hf_upload_path is None
    mega = merger_argv(Source(2, Path("/c/a"), "megatron", tie_word_embedding=True), "/c/a", "/c/o")
    args = verl_parse_args(version, mega)
    assert (args.backend, args.tie_word_embedding, args.local_dir, args.target_dir) == ("megatron", True, "/c/a", "/c/o")
    # The parser is verl's and it is strict: a misspelt flag fails (so the checks above can fail).
    with pytest.raises(SystemExit):
        verl_parse_args(version, [*fsdp, "--tie_word_embedding"])


def test_backend_follows_the_strategy() -> None:
    from verlctl.orchestrator.export_hf import backend_for

    assert [backend_for(s) for s in ("megatron", "fsdp", "fsdp2")] == ["megatron", "fsdp", "fsdp"]


# ------------------------------------------------------------------------------------------ docker


RUN_FSDP = "20261201-000000-export-fsdp-aaaa"
RUN_MEGA = "20261201-000001-export-mega-bbbb"


def _shards(actor: Path, world: int, fsdp_config: bool) -> None:
    (actor / "huggingface").mkdir(parents=True)
    (actor / "huggingface" / "config.json").write_text(json.dumps({"model_type": "qwen3", "tie_word_embeddings": True}))
    for rank in range(world):
        (actor / f"model_world_size_{world}_rank_{rank}.pt").write_bytes(b"shard")
    if fsdp_config:
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": world}))


def _record(state: Path, run_id: str, container: Any, ckpt: Path, strategy: str) -> None:
    d = state / "runs" / run_id
    d.mkdir(parents=True)
    doc = {"run_id": run_id, "created_at": time.time(), "runtime": "docker", "container_id": container.id,
           "container_name": container.name, "workdir": "/verl", "scripts_dir": f"/verl/.verlctl/runs/{run_id}",
           "run_log": f"/tmp/verlctl-{run_id}.log", "train_log": "", "checkpoints": str(ckpt),
           "experiment": "exp", "verl_version": "0.7.0"}
    (d / "run.json").write_text(json.dumps(doc))
    (d / "spec.resolved.yaml").write_text(f"verl_version: 0.7.0  # file\nstrategy: {strategy}  # file\n")


@pytest.fixture
def world(tmp_path: Path, container_factory: Any) -> dict[str, Any]:
    ckpts = tmp_path / "ckpts"
    fsdp, mega = ckpts / "fsdp", ckpts / "mega"
    _shards(fsdp / "global_step_2" / "actor", 2, fsdp_config=False)  # an older checkpoint
    _shards(fsdp / "global_step_4" / "actor", 2, fsdp_config=True)
    (fsdp / "latest_checkpointed_iteration.txt").write_text("4")
    (mega / "global_step_3" / "actor" / "huggingface").mkdir(parents=True)
    (mega / "global_step_3" / "actor" / "huggingface" / "config.json").write_text('{"tie_word_embeddings": true}')
    container = container_factory(
        command=["sleep", "infinity"], name="export-hf", working_dir="/verl",
        volumes={str(ckpts): {"bind": str(ckpts), "mode": "rw"},
                 str(DOUBLE): {"bind": "/verl/verl/model_merger", "mode": "ro"}},
    )
    state = tmp_path / "state"
    _record(state, RUN_FSDP, container, fsdp, "fsdp2")
    _record(state, RUN_MEGA, container, mega, "megatron")
    return {"state": state, "fsdp": fsdp, "mega": mega, "container": container, "tmp": tmp_path}


def cli(w: dict[str, Any], *args: str) -> CliResult:
    return run_cli(*args, env=clean_env(VERLCTL_STATE_DIR=str(w["state"]), COLUMNS="200"), timeout=300)


def standin_argv(res: CliResult) -> list[str]:
    line = next(ln for ln in (res.out + res.err).splitlines() if "STANDIN_ARGV " in ln)
    return json.loads(line.split("STANDIN_ARGV ", 1)[1])  # type: ignore[no-any-return]


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() else b"") for p in sorted(d.rglob("*"))}


def test_export_hf_fsdp_newest_checkpoint_with_its_exact_argv(world: dict[str, Any]) -> None:
    before = tree(world["fsdp"])
    out = world["tmp"] / "hf-model"
    res = cli(world, "export-hf", RUN_FSDP[:20], "-o", str(out))
    assert res.code == 0, res.out + res.err
    argv = standin_argv(res)
    actor = world["fsdp"] / "global_step_4" / "actor"  # latest_checkpointed_iteration.txt names step 4
    assert argv[:5] == ["merge", "--backend", "fsdp", "--local_dir", str(actor)]
    assert argv[5] == "--target_dir" and argv[6].startswith(str(world["fsdp"] / ".verlctl-export-")) and len(argv) == 7
    for version in VERL_TREES:
        assert verl_parse_args(version, argv).backend == "fsdp"
    assert "loading shard 2/2" in res.out and f"wrote the Hugging Face model to {out}" in " ".join(res.out.split())
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert all(p.stat().st_uid == os.getuid() for p in [out, *out.iterdir()])
    assert tree(world["fsdp"]) == before  # the checkpoint is untouched, no staging left behind


def test_export_hf_older_fsdp_checkpoint_gets_the_fsdp_config_workaround(world: dict[str, Any]) -> None:
    before = tree(world["fsdp"])
    out = world["tmp"] / "old"
    res = cli(world, "export-hf", RUN_FSDP, "--step", "2", "-o", str(out), "--json")
    assert res.code == 0, res.out + res.err
    doc = json.loads(res.out)
    assert doc["step"] == 2 and doc["backend"] == "fsdp" and doc["fsdp_config_staged"] is True
    assert doc["files"] == ["config.json", "model.safetensors"] and doc["out"] == str(out)
    argv = standin_argv(res)
    assert argv[4].startswith(str(world["fsdp"] / ".verlctl-export-")) and argv[4].endswith("/actor")
    assert "verl-project/verl#2252" in res.err and "loading shard 2/2" in res.err
    assert not (world["fsdp"] / "global_step_2" / "actor" / "fsdp_config.json").exists()
    assert tree(world["fsdp"]) == before


def test_export_hf_megatron_passes_tie_word_embedding(world: dict[str, Any]) -> None:
    out = world["tmp"] / "mega-out"
    res = cli(world, "export-hf", RUN_MEGA, "-o", str(out))
    assert res.code == 0, res.out + res.err
    argv = standin_argv(res)
    assert argv[:5] == ["merge", "--backend", "megatron", "--local_dir", str(world["mega"] / "global_step_3" / "actor")]
    assert argv[-1] == "--tie-word-embedding"
    for version in VERL_TREES:
        assert verl_parse_args(version, argv).tie_word_embedding is True
    assert (out / "config.json").is_file()


def test_export_hf_refuses_what_does_not_exist_and_writes_nothing(world: dict[str, Any]) -> None:
    out = world["tmp"] / "never"
    cases = [
        (("export-hf", RUN_FSDP, "--step", "3", "-o", str(out)), "no checkpoint of step 3"),
        (("export-hf", "no-such-run", "-o", str(out)), "no run 'no-such-run'"),
        (("export-hf", RUN_FSDP, "--step", "0", "-o", str(out)), "--step must be a training step"),
    ]
    for args, message in cases:
        res = cli(world, *args)
        assert res.code == 2 and message in res.err and "Traceback" not in res.err, res.err
        assert len(res.err.strip().splitlines()) <= 2
    taken = world["tmp"] / "taken"
    taken.mkdir()
    (taken / "x").write_text("keep")
    link = world["tmp"] / "link"
    link.symlink_to(taken)
    for target, message in ((taken, "exists and is not an empty directory"), (link, "is a symbolic link")):
        res = cli(world, "export-hf", RUN_FSDP, "-o", str(target))
        assert res.code == 2 and message in res.err, res.err
    assert (taken / "x").read_text() == "keep" and sorted(p.name for p in taken.iterdir()) == ["x"]
    assert not out.exists()
    empty = world["tmp"] / "empty-ckpt"
    empty.mkdir()
    _record(world["state"], "20261201-000002-export-none-cccc", world["container"], empty, "fsdp")
    res = cli(world, "export-hf", "20261201-000002-export-none-cccc", "-o", str(out))
    assert res.code == 2 and "has no checkpoint in" in res.err, res.err


def test_export_hf_is_bounded_in_time_and_stops_the_merger(world: dict[str, Any]) -> None:
    from verlctl.errors import ExitCode

    actor = world["fsdp"] / "global_step_4" / "actor"
    (actor / "STANDIN_SLEEP").write_text("600")
    before = tree(world["fsdp"])
    out = world["tmp"] / "slow"
    started = time.monotonic()
    res = cli(world, "export-hf", RUN_FSDP, "-o", str(out), "--timeout", "5")
    assert res.code == ExitCode.TIMEOUT, res.out + res.err
    assert time.monotonic() - started < 120
    assert "did not finish within 5s: it was stopped and nothing was written" in res.err
    assert "hint: give it more time with --timeout" in res.err
    assert not out.exists() and tree(world["fsdp"]) == before
    ps = subprocess.run(["docker", "exec", world["container"].id, "ps", "-eo", "args="], capture_output=True,
                        text=True, timeout=60)
    assert "verl.model_merger" not in ps.stdout, ps.stdout


def test_export_hf_reports_a_failing_merger_and_writes_nothing(world: dict[str, Any]) -> None:
    from verlctl.errors import ExitCode

    (world["fsdp"] / "global_step_4" / "actor" / "model_world_size_2_rank_1.pt").unlink()  # a lost shard
    before = tree(world["fsdp"])
    out = world["tmp"] / "broken"
    res = cli(world, "export-hf", RUN_FSDP, "-o", str(out))
    assert res.code == ExitCode.FAILURE, res.out + res.err
    err = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "verl.model_merger failed (exit 1)" in err[0] and "rank_1.pt" in err[0], res.err
    assert "Traceback" in res.out  # the merger's own output is shown, verlctl's error is one line
    assert not out.exists() and tree(world["fsdp"]) == before


def test_export_hf_needs_the_runs_container_running(world: dict[str, Any]) -> None:
    world["container"].stop(timeout=5)
    out = world["tmp"] / "stopped"
    res = cli(world, "export-hf", RUN_FSDP, "-o", str(out))
    assert res.code == 2 and "the conversion runs inside it" in res.err and "docker start" in res.err, res.err
    assert not out.exists() and not list(world["fsdp"].glob(".verlctl-export-*"))
