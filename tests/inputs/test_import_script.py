"""``verlctl import``: the launch-script reader (never runs anything), the mapping, and the CLI.

The reader is checked against bash itself: each official fixture is run by the real bash with test doubles
for ``python3``/``ray``/``torchrun``/... (they record the training command's argv and run nothing), and the
reader's argv must be the same word for word.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from verlctl.errors import VerlctlError
from verlctl.importer import import_script
from verlctl.inputs.shell_script import (
    MAX_SCRIPT_BYTES,
    UNRESOLVED,
    ScriptError,
    parse_file,
    parse_script,
)

from conftest import ROOT, run_cli, run_cli_many

OFFICIAL = ROOT / "tests" / "fixtures" / "official-scripts"
ENTRY = "python3 -m verl.trainer.main_ppo"


def parse(text: str, **environ: str):
    return parse_script(textwrap.dedent(text), "t.sh", environ or None)


def overrides(text: str, **environ: str) -> list[str]:
    return parse(text, **environ).command.overrides


# --------------------------------------------------------------------------------------------------
# The reader


def test_continuations_comments_and_quotes() -> None:
    ovs = overrides(
        f"""\
        #!/bin/bash
        # a comment with 'an unbalanced quote
        name='single $X "kept"'   # trailing comment
        dq="double ${{name}} \\$literal \\"q\\""
        {ENTRY} \\
            a.b="$name" \\
            c.d="$dq" \\
            e.f=$'tab\\there' \\
            g.h=it\\'s \\
            i.j='#not a comment' k.l=x#y
        """
    )
    assert ovs == [
        'a.b=single $X "kept"',
        'c.d=double single $X "kept" $literal "q"',
        "e.f=tab\there",
        "g.h=it's",
        "i.j=#not a comment",
        "k.l=x#y",
    ]


def test_expansions_defaults_and_arithmetic() -> None:
    p = parse(
        f"""\
        EMPTY=
        A=${{UNSET_A:-fallback}}
        B=${{EMPTY:-colon}} C=${{EMPTY-dash}} D=${{UNSET_D-dash}}
        E=${{UNSET_E:=assigned}}
        F=${{A:+alt}} G=${{UNSET_G:+alt}}
        MODEL_ID=Qwen/Qwen3-8B
        low=${{MODEL_ID,,}} up=${{MODEL_ID^^}} n=${{#MODEL_ID}}
        max_prompt_length=$((1024 * 2))
        max_response_length=$((1024 * 20))
        tok=$(((max_prompt_length + max_response_length) / 3))
        neg=$(( -7 / 2 )) mod=$(( 7 % 3 )) pw=$(( 2 ** 10 )) hex=$(( 0x10 + 010 ))
        nested="${{RAY_DATA_HOME:-"${{HOME}}/verl"}}/models"
        base=$(basename -- "/a/b/run_x.sh" .sh) dir="$(dirname /a/b/c)"
        {ENTRY} a=$A b=$B c=$C d=$D e=$E f=$F g=x$G h=$low i=$up j=$n k=$tok l=$neg m=$mod o=$pw p=$hex \\
            q=$nested r=$base s=$dir t=${{1:-vllm}} u=$E
        """,
        HOME="/home/me",
    )
    assert p.command.overrides == [
        "a=fallback", "b=colon", "c=", "d=dash", "e=assigned", "f=alt", "g=x", "h=qwen/qwen3-8b",
        "i=QWEN/QWEN3-8B", "j=13", "k=7509", "l=-3", "m=1", "o=1024", "p=24", "q=/home/me/verl/models",
        "r=run_x", "s=/a/b", "t=vllm", "u=assigned",
    ]
    assert p.variables["UNSET_E"] == "assigned"


def test_unset_variables_expand_empty_and_are_reported() -> None:
    p = parse(f"{ENTRY} data.train_files=$HOME/data/train.parquet x=${{ALSO_UNSET}}\n")
    assert p.command.overrides == ["data.train_files=/data/train.parquet", "x="]
    assert p.unset == ["HOME", "ALSO_UNSET"]


def test_exports_arrays_prefix_env_and_wrappers() -> None:
    p = parse(
        """\
        export A=1 B="two words"
        export C
        C=3
        declare -x D=4
        local_only=5
        unset B
        DATA=(
            # a comment inside the array
            data.x="${A}"   # trailing
            'data.y=with space'
        )
        DATA+=(data.z=z)
        EMPTY=()
        HYDRA_FULL_ERROR=1 ray job submit --runtime-env=env.yaml -- python3 -u -m recipe.dapo.main_dapo \\
            --config-path=config --config-name 'dapo_megatron_trainer' \\
            "${DATA[@]}" "${EMPTY[@]}" "$@" $@ 2>&1 | tee -a log.txt
        echo done
        """
    )
    c = p.command
    assert (c.module, c.config_path, c.config_name) == ("recipe.dapo.main_dapo", "config", "dapo_megatron_trainer")
    assert c.overrides == ["data.x=1", "data.y=with space", "data.z=z"]
    assert c.env == {"HYDRA_FULL_ERROR": "1"}
    assert p.exports == {"A": "1", "C": "3", "D": "4"}
    assert c.argv[:3] == ["python3", "-u", "-m"]


def test_unquoted_expansion_splits_like_bash() -> None:
    ovs = overrides(
        f"""\
        EXTRA="x.a=1 x.b=2"
        {ENTRY} $EXTRA "$EXTRA" y=$EXTRA
        """
    )
    # bash passes "x.b=2" as a separate word after y=x.a=1: an override of its own
    assert ovs == ["x.a=1", "x.b=2", "x.a=1 x.b=2", "y=x.a=1", "x.b=2"]
    c = parse(f'V="p q"\n{ENTRY} k=$V\n').command
    assert (c.overrides, c.other_args) == (["k=p"], ["q"])


def test_blocks_are_skipped_exit_ends_and_heredocs_are_data() -> None:
    p = parse(
        f"""\
        MODE=a
        if [[ "$X" == "1" ]]; then
            OTHER=b
            {ENTRY} wrong=1
        fi
        case "$DEV" in
            npu) OTHER=c ;;
        esac
        f() {{ MODE=d; }}
        cat > cfg.txt <<EOF
        {ENTRY} from_heredoc=1
        EOF
        [ -z "$Y" ] && OTHER=e
        {ENTRY} mode=$MODE
        exit 0
        python3 -m other.module after=exit
        """
    )
    assert p.command.overrides == ["mode=a"]
    assert p.command.line == 14
    assert any("'if' block not evaluated" in n for n in p.notes)
    assert any("'case' block" in n for n in p.notes)
    assert any("conditional assignment" in n for n in p.notes)
    # Each of those blocks may set MODE: a command that reads it is refused (tests/inputs/test_import_blocks.py)
    with pytest.raises(ScriptError, match="uses MODE, which the conditional assignment at line 1 may set"):
        parse(f"[ -z \"$Y\" ] && MODE=e\n{ENTRY} mode=$MODE\n")
    with pytest.raises(ScriptError, match="no `python3 -m <entry>`"):
        parse(f"exit 1\n{ENTRY} a=1\n")


def test_no_command_is_ever_run(tmp_path: Path) -> None:
    """$(...) and backquotes are never executed: their values are reported, not computed."""
    pwn = tmp_path / "pwned"
    script = tmp_path / "run.sh"
    script.write_text(
        textwrap.dedent(
            f"""\
            NAME=$(touch {pwn})
            OTHER=`touch {pwn}`
            {ENTRY} trainer.experiment_name=$NAME x.y="$(touch {pwn})" z.w=$OTHER \\
                data.train_files=/d/t.parquet data.val_files=/d/v.parquet actor_rollout_ref.model.path=/m
            """
        )
    )
    p = parse_file(script)
    assert not pwn.exists()
    assert all(UNRESOLVED in o for o in p.command.overrides[:3])
    assert any("command substitution: not run" in n for n in p.notes)
    result = import_script(script, "0.7.0", device="npu")
    assert not pwn.exists()
    assert [o.key for o in result.unresolved] == ["trainer.experiment_name", "x.y", "z.w"]
    assert not any(UNRESOLVED in e for e in result.extras)


def test_hostile_values_round_trip_literally(tmp_path: Path) -> None:
    hostile = "a'b\"c $(touch /tmp/x) `id` ${HOME} ;|&<> \\n"
    quoted = "'" + hostile.replace("'", "'\"'\"'") + "'"
    script = tmp_path / "run.sh"
    script.write_text(
        f"V={quoted}\n{ENTRY} +custom.value=\"$V\" data.train_files=/d/t.parquet data.val_files=/d/v.parquet "
        "actor_rollout_ref.model.path=/m algorithm.adv_estimator=grpo\n"
    )
    assert parse_file(script).command.overrides[0] == "+custom.value=" + hostile
    out = tmp_path / "run.yaml"
    r = run_cli("import", str(script), "-o", str(out), "--device", "gpu")
    assert r.code == 0, r.err
    doc = yaml.safe_load(out.read_text())
    assert "+custom.value=" + hostile in doc["extra_overrides"]


def test_limits_keep_hostile_scripts_bounded() -> None:
    deep = "X=" + "${A:-" * 40 + "x" + "}" * 40 + f"\n{ENTRY} a=$X\n"
    with pytest.raises(ScriptError, match="nested too deeply"):
        parse(deep)
    assert overrides(f"{ENTRY} a=$((2**64)) b=$((9223372036854775807 + 1))\n") == ["a=0", "b=-9223372036854775808"]
    p = parse(f"{ENTRY} a=$((1/0)) b=$((08))\n")
    assert all(UNRESOLVED in o for o in p.command.overrides)
    with pytest.raises(ScriptError, match="more than"):
        parse("A=" + "x" * 70000 + f"\n{ENTRY} a=$A\n")
    with pytest.raises(ScriptError, match="more than"):
        parse("X=ab\n" + 'X="$X$X"\n' * 40 + f"{ENTRY} a=$X\n")
    with pytest.raises(ScriptError, match="too many expansions"):
        parse("A=A\n" + "B=$((A))\n" * 5000 + f"{ENTRY} a=1\n")


@pytest.mark.parametrize(
    "text, message",
    [
        (f"{ENTRY} a='unclosed\n", "unbalanced single quote"),
        (f'{ENTRY} a="unclosed\n', "unbalanced double quote"),
        (f"{ENTRY} a=$(echo\n", "unbalanced $( ... )"),
        (f"{ENTRY} a=${{X\n", "unbalanced ${ ... }"),
        (f"A=(x y\n{ENTRY}\n", "array assignment without a closing"),
        (f"if true; then\n{ENTRY}\n", "block is never closed"),
        ("#!/usr/bin/env python3\nimport os\n", "a python3 script"),
        ("import os\ndef main():\n    pass\n", "looks like Python source"),
        ("echo hello\nls -l\n", "no `python3 -m <entry>`"),
    ],
)
def test_reader_errors_are_one_line(text: str, message: str) -> None:
    with pytest.raises(ScriptError) as exc:
        parse(text)
    assert message in str(exc.value) and "\n" not in str(exc.value)


# --------------------------------------------------------------------------------------------------
# The reader agrees with bash on every official script


SHIM = """#!/bin/bash
# test double: records the training command (python3 -m ...) and runs nothing
for a in "$@"; do
    if [ "$a" = "-m" ]; then printf '%s\\0' "$@" > "$ARGV_OUT"; exit 0; fi
done
exit 0
"""
#: Where the reader knowingly differs from bash (it skips blocks and does not run commands).
READER_DIFFERS: dict[str, str] = {}
#: What the user gives both bash and the import for the variables the scripts read from their environment where
#: an `if` tests them (the import refuses to guess them: tests/inputs/test_import_blocks.py).
GIVEN = {"USE_DUMMY_MODEL": "False", "DEVICE": "npu"}


def _bash_argv(script: Path, tmp_path: Path) -> list[str]:
    shim = tmp_path / "bin"
    shim.mkdir()
    for name in ("python3", "python", "ray", "torchrun", "pip", "date", "tee", "mkdir", "rm", "npu-smi", "nvidia-smi"):
        # tee drains its input: a writer in the pipeline must never die of SIGPIPE before it records
        (shim / name).write_text(SHIM if name != "tee" else "#!/bin/bash\ncat >/dev/null\nexit 0\n")
        (shim / name).chmod(0o755)
    out = tmp_path / "argv"
    env = {
        "PATH": f"{shim}:/usr/bin:/bin",
        "HOME": "/home/verl",
        "ARGV_OUT": str(out),
        **GIVEN,
        # builtins the scripts call that cannot work here (CANN env files, raising limits): no-ops
        "BASH_FUNC_source%%": "() { :; }",
        "BASH_FUNC_ulimit%%": "() { :; }",
    }
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert out.exists(), proc.stderr[-2000:]
    argv = out.read_bytes().decode().split("\0")[:-1]
    return argv[argv.index("-m") :]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("rel", sorted(str(p.relative_to(OFFICIAL)) for p in OFFICIAL.rglob("*.sh")))
def test_reader_matches_bash_on_official_scripts(rel: str, tmp_path: Path) -> None:
    script = OFFICIAL / rel
    expected = _bash_argv(script, tmp_path)
    mine = parse_file(script, {"HOME": "/home/verl", "PWD": str(tmp_path / "work"), **GIVEN}).command.argv
    mine = mine[mine.index("-m") :]
    if rel in READER_DIFFERS:
        assert mine != expected
        return
    assert len(mine) == len(expected)
    for a, b in zip(expected, mine):
        if UNRESOLVED in b:  # $(date ...): bash ran the (test double) command; the reader reports it instead
            continue
        assert a == b


# --------------------------------------------------------------------------------------------------
# The CLI


def _script(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "run.sh"
    p.write_text(textwrap.dedent(body))
    return p


def test_cli_bad_scripts_get_one_line_and_no_file(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    png = tmp_path / "image.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    py = tmp_path / "train.py"
    py.write_text("#!/usr/bin/env python3\nimport sys\nprint(sys.argv)\n")
    py2 = tmp_path / "mod.py"
    py2.write_text("import os\n\n\ndef main():\n    return os.getcwd()\n")
    garbage = tmp_path / "garbage.sh"
    with garbage.open("wb") as fh:
        fh.write(os.urandom(5 * 1024 * 1024))
    text_garbage = tmp_path / "text_garbage.sh"
    text_garbage.write_text(("a'b\"c $( ${ " * 1000)[: MAX_SCRIPT_BYTES - 1])
    fifo = tmp_path / "fifo.sh"
    os.mkfifo(fifo)

    def script(name: str, body: str) -> str:
        p = tmp_path / name
        p.write_text(textwrap.dedent(body))
        return str(p)

    gae = script("gae.sh", f"{ENTRY} algorithm.adv_estimator=gae actor_rollout_ref.model.path=/m\n")
    cases: list[tuple[list[str], str]] = [
        ([str(png)], "binary data"),
        ([str(py)], "python3 script"),
        ([str(py2)], "Python source"),
        ([script("noentry.sh", "set -x\necho hi\nray start --head\n")], "no `python3 -m <entry>`"),
        ([script("quote.sh", f"{ENTRY} data.train_files='oops\n")], "unbalanced single quote"),
        ([str(garbage)], "too large"),
        ([str(text_garbage)], "unbalanced"),
        ([str(fifo)], "not a regular file"),
        ([str(tmp_path)], "is a directory"),
        ([str(tmp_path / "missing.sh")], "no such file"),
        ([gae], "not GRPO/DAPO"),
        ([script("sft.sh", "python3 -m verl.trainer.fsdp_sft_trainer data.train_files=x\n")], "not one verlctl runs"),
        ([gae, "--var", "1BAD=x"], "--var expects NAME=VALUE"),
        ([script("own.sh", f"{ENTRY} --config-name my_trainer a.b=1\n")], "not one of verl's configs"),
        ([script("own_dir.sh", f"{ENTRY} --config-path /etc/mine --config-name ppo_trainer a.b=1\n")],
         "a config directory of your own"),
    ]
    outs = [tmp_path / "out" / f"run{k}.yaml" for k in range(len(cases))]
    # every case in one interpreter (one start-up, not fifteen); the first also in a process of its own,
    # which must say the same
    results = run_cli_many([["import", *args, "-o", str(out)] for (args, _), out in zip(cases, outs)])
    alone = run_cli("import", *cases[0][0], "-o", str(outs[0]), timeout=60)
    assert (alone.code, alone.out, alone.err) == (results[0].code, results[0].out, results[0].err)
    for (args, expect), out, r in zip(cases, outs, results):
        assert r.code != 0, args
        assert "Traceback" not in r.err and "Traceback" not in r.out, (args, r.err)
        lines = [ln for ln in r.err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, r.err)
        assert expect in lines[0], lines[0]
        assert not out.exists() and not out.is_symlink()
    assert not list((tmp_path / "out").iterdir())  # no file and no temporary file left by any case


def test_cli_imports_an_official_script_and_plan_accepts_it(tmp_path: Path) -> None:
    script = OFFICIAL / "0.7.0/recipe/dapo/run_dapo_qwen3_8b_base_npu.sh"
    out = tmp_path / "run.yaml"
    r = run_cli("import", str(script), "-o", str(out), "--var", "HOME=/data")
    assert r.code == 0, r.err
    assert "kept as extra overrides: " in r.out and "wrote " in r.out
    assert "expanded empty: PWD (give values with --var NAME=VALUE)" in r.out
    doc = yaml.safe_load(out.read_text())
    assert (doc["verl_version"], doc["algorithm"], doc["mode"], doc["strategy"]) == ("0.7.0", "dapo", "sync", "fsdp")
    assert doc["paths"]["model"] == "/data/verl/models/Qwen3-8B-Base"
    assert doc["train"]["max_response_length"] == 20480 and doc["train"]["gen_batch_size"] == 48
    assert "algorithm.filter_groups.enable=False" in doc["extra_overrides"]  # verlctl's DAPO default is True
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    plan = run_cli("plan", "-c", str(out), "-o", str(tmp_path / "plan"))
    assert plan.code == 0, plan.err
    rendered = (tmp_path / "plan" / "run_training.sh").read_text()
    assert "trainer.total_epochs=1" in rendered and "recipe.dapo.main_dapo" in rendered


def test_cli_write_is_atomic_and_never_follows_a_symlink(tmp_path: Path) -> None:
    script = OFFICIAL / "0.7.0/tests/special_npu/run_qwen2_5_05b_grpo.sh"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "run.yaml"
    link.symlink_to(victim)
    r = run_cli("import", str(script), "-o", str(link))
    assert r.code != 0 and "exists" in r.err and "Traceback" not in r.err
    assert victim.read_text() == "precious\n" and link.is_symlink()
    r = run_cli("import", str(script), "-o", str(link), "--force")
    assert r.code == 0, r.err
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and yaml.safe_load(link.read_text())["algorithm"] == "grpo"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".run.yaml.")]
    assert leftovers == []


def test_import_failure_is_a_verlctl_error() -> None:
    assert issubclass(ScriptError, VerlctlError)


def test_secrets_and_proxy_credentials_are_not_imported(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        f"""\
        export SWANLAB_API_KEY=sk-very-secret-123
        export https_proxy=http://user:pa55word@proxy:3128
        export http_proxy=http://proxy:3128
        export ASCEND_RT_VISIBLE_DEVICES=4,5,6,7
        export TASK_QUEUE_ENABLE=2
        {ENTRY} trainer.logger='["console","swanlab"]' trainer.n_gpus_per_node=4 actor_rollout_ref.model.path=/m \\
            data.train_files=/d/t.parquet data.val_files=/d/v.parquet
        """,
    )
    out = tmp_path / "run.yaml"
    r = run_cli("import", str(script), "-o", str(out), "--json")
    assert r.code == 0, r.err
    text = out.read_text()
    for secret in ("sk-very-secret-123", "pa55word"):
        assert secret not in text and secret not in r.out and secret not in r.err
    doc = yaml.safe_load(text)
    assert doc["cluster"]["devices"] == [4, 5, 6, 7] and doc["device"] == "npu"
    assert doc["container"]["proxy"] == {"http": "http://proxy:3128"}
    assert doc["env"] == {"TASK_QUEUE_ENABLE": "2"}
    assert doc["logging"]["swanlab"]["enabled"] is True
    notes = r.json()["notes"]
    assert any("SWANLAB_API_KEY not imported" in n for n in notes)
    assert any("https_proxy not imported" in n for n in notes)


def test_python_heredoc_in_a_launch_script_is_not_mistaken_for_python(tmp_path: Path) -> None:
    p = parse(
        f"""\
        python3 - <<'EOF'
        import os
        def f():
            pass
        EOF
        {ENTRY} a=1
        """
    )
    assert p.command.overrides == ["a=1"]
