"""What `bundle` and `report` remove: detect-secrets' detectors (private keys, Authorization / Bearer
credentials, URL user-info, cloud keys, JWTs, keyword assignments, high-entropy strings) plus the run's own
secrets, through one redaction that every writer of a bundle or a report uses; the manifest and the page say
which kinds were removed and how many, never the values. Ordinary verl logs pass unchanged."""

from __future__ import annotations

import json
import re
import tarfile
import time
from pathlib import Path

import pytest

from verlctl.monitor.redact import KINDS, Redactor

from conftest import FIXTURES, clean_env, run_cli

OWN_KEY = "swk-OWN-7f3a9c21"
#: Each planted secret, the kind that removes it, and the value that must not survive.
PLANTED = [
    ("curl -H 'Authorization: Bearer q8Zr0Tb4Lm2Xv6Kp9Ws1' https://api.example/v1", "authorization",
     "q8Zr0Tb4Lm2Xv6Kp9Ws1"),
    ('"Authorization": "Basic YWxpY2U6UzNjcjN0UDRzcw=="', "authorization", "YWxpY2U6UzNjcjN0UDRzcw=="),
    ("pip: Looking in indexes: https://alice:Pr0xyPassW0rd@proxy.corp.example:3128/simple", "basic-auth",
     "Pr0xyPassW0rd"),
    ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "keyword",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "aws-key", "AKIAIOSFODNN7EXAMPLE"),
    ("db password: hunter2hunter", "keyword", "hunter2hunter"),
    ("export HF_TOKEN=hf_abcDEF123ghiJKL456", "keyword", "hf_abcDEF123ghiJKL456"),
    ("session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
     "jwt", "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("callback registered with 7Hq2ZxW9mK4pR8sT1vY6bN3cL5dF0gJa", "high-entropy", "7Hq2ZxW9mK4pR8sT1vY6bN3cL5dF0gJa"),
    (f"logged in with {OWN_KEY}", "known-secret", OWN_KEY),
]
PEM = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
       "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
       "QyNTUxOQAAACDx1yZ2Ql9rVbq3fVbW2Yk0cN4m7mZ0AAAAJjQn5pN0J+aTQAAAAtzc2gtZW\n"
       "-----END OPENSSH PRIVATE KEY-----")
PEM_BODY = "QyNTUxOQAAACDx1yZ2Ql9rVbq3fVbW2Yk0cN4m7mZ0AAAAJjQn5pN0J"


def hostile_text() -> str:
    return "\n".join(["(TaskRunner pid=77) step:1 - actor/pg_loss:0.1", *(p[0] for p in PLANTED), PEM,
                      "(TaskRunner pid=77) step:2 - actor/pg_loss:0.2"]) + "\n"


@pytest.mark.parametrize(("line", "kind", "value"), PLANTED, ids=[p[1] + "-" + str(i) for i, p in enumerate(PLANTED)])
def test_each_kind_of_secret_is_removed_and_counted(line: str, kind: str, value: str) -> None:
    r = Redactor.from_env({"SWANLAB_API_KEY": OWN_KEY})
    out = r(line)
    assert value not in out, out
    assert f"<redacted:{kind}>" in out and r.kinds().get(kind, 0) >= 1, (out, r.kinds())
    assert set(r.kinds()) <= set(KINDS)


def test_a_private_key_block_goes_whole_and_the_lines_around_it_stay() -> None:
    r = Redactor()
    out = r(f"before\n{PEM}\nafter\n")
    assert out == "before\n<redacted:private-key>\nafter\n"
    assert r.kinds() == {"private-key": 1}
    cut = Redactor()  # a tail that begins inside a key, or ends before its END line
    assert PEM_BODY not in cut("x\n" + PEM.rsplit("\n", 1)[0]) and cut.kinds() == {"private-key": 1}


def test_a_short_value_is_removed_where_it_is_assigned_only() -> None:
    r = Redactor()
    out = r("token=t0k then t0kens and password: abc, ok\nlater abc t0k\n")
    assert out == "token=<redacted:keyword> then t0kens and password: <redacted:keyword>, ok\nlater abc t0k\n"


def test_ordinary_verl_logs_pass_unchanged() -> None:
    """False positives on every real log excerpt under tests/fixtures (verl, Ray, vLLM, HCCL, memory):
    checkpoint hashes, run ids, snapshot hashes, step metrics, addresses stay as they are."""
    files = [f for d in ("verl-logs", "errors", "errors-field", "diagnosis-corpus", "ray", "ray-status", "memory",
                         "network") for f in sorted((FIXTURES / d).iterdir()) if f.is_file()]
    extra = ("checkpoint global_step_40 sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n"
             "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/"
             "7ae557604adf67be50417f59c2c2f167def9a775/config.json\n"
             "run 20261206-155253-ppo_qwen2_5_0_5b-3f9a1c attempt 2 trace_id=4bf92f3577b34da6a3ce929d0e0e4736\n"
             "max_new_tokens=512 pad_token_id=151643 use_secret_sauce=false\n")
    assert len(files) > 40
    changed = []
    r = Redactor()
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        out = r(text)
        changed += [f"{f.name}: {a}" for a, b in zip(text.split("\n"), out.split("\n"), strict=True) if a != b]
    out = r(extra)
    changed += [a for a, b in zip(extra.split("\n"), out.split("\n"), strict=True) if a != b]
    assert changed == [], changed
    assert r.kinds() == {}


def _run_with_hostile_log(home: Path) -> str:
    from verlctl.runtime.records import RunRecord

    log = home / "train.log"
    log.write_text(hostile_text(), encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(home))
        rec = RunRecord(run_id="20261206-120000-redact-ab12", created_at=time.time() - 60, runtime="host",
                        workdir=str(home), scripts_dir=str(home), run_log=str(log), train_log=str(log),
                        checkpoints=str(home / "ckpt"), experiment="redact", verl_version="0.7.0")
        rec.save()
        (rec.dir / rec.spec_file).write_text("container:\n  proxy:\n    http: http://alice:Pr0xyPassW0rd@p:3128\n",
                                             encoding="utf-8")
        rec.event("launch_failed", error=PLANTED[0][0])
        return rec.run_id


def _bundle_text(out: Path) -> tuple[str, dict[str, object]]:
    with tarfile.open(out) as tar:
        texts = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers()}  # type: ignore[union-attr]
    return "\n".join(texts.values()), json.loads(texts["manifest.json"])


def _report_text(out: Path) -> tuple[str, dict[str, object]]:
    page = out.read_text(encoding="utf-8")
    m = re.search(r"secrets removed</t[dh]>\s*<td>([^<]*)<", page)
    assert m, "the page says which secrets were removed"
    return page, {"secrets_removed": m.group(1)}


ALL_KINDS = ("authorization", "basic-auth", "aws-key", "jwt", "private-key", "keyword", "high-entropy",
             "known-secret")
#: Every command that writes a bundle or a report of a run (the test below checks the CLI has no other), with
#: the kinds of secret what it writes holds here (a report shows the spec and the events, not the log).
WRITERS = {
    "bundle": (["bundle", "RUN", "-o", "OUT.tar.gz"], _bundle_text, ALL_KINDS),
    "report": (["report", "RUN", "-o", "OUT.html"], _report_text, ("basic-auth", "authorization")),
}


def test_the_writers_are_every_command_of_the_report_module() -> None:
    from verlctl import cli
    from verlctl.commands import report as report_cmd

    names = {c.name for c in cli.app.registered_commands
             if c.callback is not None and c.callback.__module__ == report_cmd.__name__}
    assert names == set(WRITERS)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_of_a_bundle_or_report_redacts_and_says_what(writer: str, tmp_path: Path) -> None:
    run_id = _run_with_hostile_log(tmp_path)
    argv, read, kinds = WRITERS[writer]
    out = tmp_path / argv[-1]
    argv = [run_id if a == "RUN" else str(out) if a == argv[-1] else a for a in argv]
    r = run_cli(*argv, env=clean_env(XDG_STATE_HOME=str(tmp_path), SWANLAB_API_KEY=OWN_KEY))
    assert r.code == 0, r.err
    text, said = read(out)
    for _line, _kind, value in PLANTED:
        assert value not in text, (writer, value)
        assert value not in r.out + r.err
    assert PEM_BODY not in text and "Pr0xyPassW0rd" not in text
    removed = said["secrets_removed"]
    for kind in kinds:
        assert kind in (removed if isinstance(removed, (dict, str)) else {}), (writer, removed)
    if isinstance(removed, dict):  # the manifest: kinds, what each is and how many; no value
        assert all(set(v) == {"what", "removed"} and v["removed"] >= 1 for v in removed.values())


def test_the_scanner_is_imported_only_by_a_bundle_or_a_report() -> None:
    """detect-secrets costs start-up time: `verlctl --help` and the commands that only read do not load it."""
    import subprocess
    import sys

    for argv in (["--help"], ["list"]):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "verlctl", *argv], env=clean_env(),
                              capture_output=True, text=True, timeout=120)
        imported = set(re.findall(r"\|\s+([\w.]+)\s*$", proc.stderr, re.M))
        assert "verlctl.cli" in imported, proc.stderr[-500:]
        assert not {m for m in imported if m.split(".")[0] == "detect_secrets"}, argv


def test_keywords_are_found_on_every_line_and_at_the_edges_of_the_text() -> None:
    r = Redactor()
    out = r("password: first1\nan ordinary line\nsecret=second2\ndb_password=fourth4\nthe end: api_key: third3")
    for value in ("first1", "second2", "third3", "fourth4"):
        assert value not in out, out
    assert "an ordinary line" in out and r.kinds() == {"keyword": 4}


def test_the_entropy_rule_begins_at_24_characters() -> None:
    token = "aB3dE5gH7jK9mN1pQ2rS4tU6"  # 24 distinct characters: entropy log2(24) = 4.58 bits
    assert len(set(token)) == 24
    r = Redactor()
    assert r(f"id {token} ok") == "id <redacted:high-entropy> ok"
    assert r(f"id {token[:23]} ok") == f"id {token[:23]} ok"  # 23 characters: kept
    assert r(f"id {token.lower()} ok") == f"id {token.lower()} ok"  # no upper case: kept


def test_what_is_redacted_already_is_not_taken_again() -> None:
    r = Redactor.from_env({"SWANLAB_API_KEY": OWN_KEY})
    assert r(f"password: {OWN_KEY}") == "password: <redacted:known-secret>"
    assert r(f"password: x1{OWN_KEY}") == "password: x1<redacted:known-secret>"
    assert r.kinds() == {"known-secret": 2}


def test_a_known_secret_shorter_than_4_characters_is_not_replaced_everywhere() -> None:
    r = Redactor.from_env({"SWANLAB_API_KEY": "abc", "HF_TOKEN": "abcd"})
    assert r("abc and abcde") == "abc and <redacted:known-secret>e"


def test_a_value_of_8_characters_or_more_is_removed_wherever_it_stands_again() -> None:
    r = Redactor()
    assert r("password: abcd1234\nlater abcd1234\n") == "password: <redacted:keyword>\nlater <redacted:keyword>\n"
    short = Redactor()
    assert short("password: abc1234\nlater abc1234\n") == "password: <redacted:keyword>\nlater abc1234\n"


def test_a_tree_keeps_its_keys_and_what_is_not_text() -> None:
    r = Redactor.from_env({"SWANLAB_API_KEY": OWN_KEY})
    tree = {"n": 1, "ok": True, "none": None, "pair": (3, OWN_KEY), "list": [OWN_KEY, 2.5]}
    assert r.tree(tree) == {"n": 1, "ok": True, "none": None, "pair": (3, "<redacted:known-secret>"),
                            "list": ["<redacted:known-secret>", 2.5]}


def test_a_private_key_header_outside_a_block_takes_its_line() -> None:
    r = Redactor()
    assert r("found BEGIN RSA PRIVATE KEY in x\nok\n") == "<redacted:private-key>\nok\n"
    assert r.kinds() == {"private-key": 1}


def test_a_keyword_after_the_same_stem_in_an_ordinary_word_is_found() -> None:
    """The cheap first pass looks at every line holding a stem, not only the first ("monkey", "passenger")."""
    r = Redactor()
    assert r("a monkey and a passenger\npassword: hunter22x\n") == "a monkey and a passenger\npassword: <redacted:keyword>\n"
