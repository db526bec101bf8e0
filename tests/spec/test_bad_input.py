"""Bad input through the real CLI: one clear line, a non-zero exit, no traceback, nothing changed, bounded
time and memory (issue 12; the D-numbers are those of the adversarial review).

Every CLI case runs ``python -m verlctl`` in a subprocess. Memory is the child's peak RSS from ``wait4``.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from verlctl.detect.common import Unavailable, UnavailableCode, run_tool
from verlctl.monitor import diagnose as diagnose_module
from verlctl.monitor.diagnose import DiagnoseScanner, LastStep, diagnose_bytes
from verlctl.render.render import Rendered

from conftest import ROOT, clean_env, run_cli
from fault_support import one_line_error, write_base

#: Runs argv[2:] in a forked child and reports its exit code and peak RSS (KiB) on fd argv[1]. Not Popen's own child: subprocess starts
#: children with vfork, and Linux carries the parent's high-water RSS (here the pytest worker's, hundreds of
#: MiB late in a run) into the ru_maxrss of a child started that way. A fork of this small interpreter
#: starts from its few MiB instead.
_MEASURE = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvpe(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
os.write(int(sys.argv[1]), f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}".encode())
"""


def run_measured(argv: list[str], env: dict[str, str], timeout: float, stdin: int | None = None,
                 cwd: Path | None = None) -> tuple[int, str, str, float, int]:
    """Run argv; return (exit code, stdout, stderr, seconds, peak RSS in MiB) of that child alone."""
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"verlctl-bad-input-{os.getpid()}-{time.monotonic_ns()}"
    report_r, report_w = os.pipe()
    with open(f"{out_path}.out", "wb+") as out, open(f"{out_path}.err", "wb+") as err:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-S", "-c", _MEASURE, str(report_w), *argv], stdout=out, stderr=err,
                                stdin=stdin if stdin is not None else subprocess.DEVNULL, env=env, cwd=cwd,
                                pass_fds=(report_w,), start_new_session=True)
        os.close(report_w)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"{argv} ran past {timeout} s") from None
        finally:
            with os.fdopen(report_r, "rb") as fh:
                report = fh.read().decode()
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        texts = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    for suffix in (".out", ".err"):
        Path(f"{out_path}{suffix}").unlink()
    code, maxrss_kib = (int(x) for x in report.split())
    return code, texts[0], texts[1], seconds, maxrss_kib // 1024


VERLCTL = [sys.executable, "-m", "verlctl"]


# ---------------------------------------------------------------- D8a / D23: tool output capped, group killed


def test_endless_tool_output_is_capped_and_the_tool_stopped(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    res = run_tool("npu", ["sh", "-c", f"echo $$ > {pidfile}; exec yes 'NPU line'"], timeout=120,
                   max_bytes=1 << 20)
    assert isinstance(res, Unavailable)
    assert res.code == UnavailableCode.FAILED
    assert "printed more than 1 MiB" in res.reason and "stopped it" in res.reason
    assert time.monotonic() - t0 < 60
    pid = int(pidfile.read_text())
    assert wait_gone(pid), f"the tool (pid {pid}) is still running"


def wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_hung_tool_and_its_children_are_killed_at_the_timeout(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    # The child has its stdout elsewhere, so waiting for the pipe cannot be what ends the call.
    script = f"sleep 300 >/dev/null 2>&1 & echo $! > {pidfile}; wait"
    t0 = time.monotonic()
    res = run_tool("npu", ["bash", "-c", script], timeout=1.0)
    assert isinstance(res, Unavailable) and res.code == UnavailableCode.TIMEOUT
    assert "did not finish within 1 s" in res.reason
    assert time.monotonic() - t0 < 30
    assert wait_gone(int(pidfile.read_text())), "the hung tool's child outlived the timeout"


def test_detect_npu_with_an_endless_npu_smi_is_bounded(tmp_path: Path) -> None:
    stub = tmp_path / "bin"
    stub.mkdir()
    tool = stub / "npu-smi"  # a test double for a broken npu-smi that prints forever
    tool.write_text("#!/bin/sh\nexec yes 'garbage from a broken npu-smi'\n")
    tool.chmod(0o755)
    env = clean_env(PATH=f"{stub}:{os.environ['PATH']}")
    _code, out, err, seconds, rss_mb = run_measured([*VERLCTL, "detect", "npu"], env, timeout=120)
    assert "Traceback" not in out + err
    assert "printed more than 8 MiB" in " ".join(out.split()), out
    assert rss_mb < 400, f"peak RSS {rss_mb} MiB"
    assert seconds < 60


# ---------------------------------------------------------------- D8b / D11 / D17: spec loading


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "directory", "huge"])
def test_spec_file_must_be_a_regular_file_of_bounded_size(tmp_path: Path, kind: str) -> None:
    if kind == "dev_zero":
        path = Path("/dev/zero")
    elif kind == "fifo":
        path = tmp_path / "spec.fifo"
        os.mkfifo(path)  # no writer: opening it must not block
    elif kind == "directory":
        path = tmp_path
    else:
        path = tmp_path / "huge.yaml"
        with open(path, "wb") as fh:
            fh.truncate(64 << 20)  # sparse: 64 MiB of NULs
    code, out, err, _seconds, rss_mb = run_measured([*VERLCTL, "plan", "-c", str(path)], clean_env(), timeout=60)
    assert code == 2 and "Traceback" not in out + err
    line = err.strip()
    assert "\n" not in line and str(path) in line
    assert {"dev_zero": "not a regular file", "fifo": "not a regular file", "directory": "is a directory",
            "huge": "too large"}[kind] in line
    assert rss_mb < 300, f"peak RSS {rss_mb} MiB"


@pytest.mark.parametrize("text", [
    "a: " + "[" * 10000 + "]" * 10000 + "\n",
    "env: " + "{a: " * 600 + "1" + "}" * 600 + "\n",
])
def test_deep_yaml_nesting_is_one_line(tmp_path: Path, text: str) -> None:
    p = tmp_path / "deep.yaml"
    p.write_text(text)
    line = one_line_error(run_cli("plan", "-c", str(p)))
    assert "nesting too deep" in line


def test_deep_dotted_path_from_set_is_one_line(tmp_path: Path) -> None:
    base = write_base(tmp_path)
    line = one_line_error(run_cli("plan", "-c", str(base), "--set", "env." + ".".join(["a"] * 2000) + "=1"))
    assert "nesting too deep" in line and len(line) < 400


def test_merge_of_a_huge_env_map_is_linear(tmp_path: Path) -> None:
    """D19: 1k keys then 32k keys in one child process; 32x the keys must take far less than 32^2 x the time."""
    script = textwrap.dedent("""
        import sys, time
        from verlctl.spec.resolve import load_spec
        base = {"paths.model": "/m", "paths.train_files": "/t", "paths.val_files": "/v"}
        def timed(n):
            flags = {**base, **{f"env.K{i}": "v" for i in range(n)}}
            t = time.perf_counter()
            r = load_spec(None, flags=flags, use_env=False)
            assert len(r.spec.env) == n
            return time.perf_counter() - t
        timed(1000)  # warm-up (imports, pydantic)
        small = min(timed(1000) for _ in range(3))
        big = timed(32000)
        print(small, big)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=clean_env())
    assert proc.returncode == 0, proc.stderr
    small, big = (float(x) for x in proc.stdout.split())
    # Linear is ~32x; the quadratic merge was ~1000x. Generous for a loaded machine.
    assert big < 32 * small * 8 + 2.0, (small, big)


def test_env_keys_keep_their_case_and_their_source(tmp_path: Path) -> None:
    base = write_base(tmp_path, env={"FROM_FILE": "x"})
    out = tmp_path / "out"
    res = run_cli("plan", "-c", str(base), "-o", str(out), "--set", "env.FROM_FLAG=2", "--set", "env.BOOL=true",
                  env=clean_env(VERLCTL_ENV__TASK_QUEUE_ENABLE="2"))
    assert res.code == 0, res.err
    script = (out / "start_verl.sh").read_text()
    assert re.search(r"^export TASK_QUEUE_ENABLE=2$", script, re.M), script
    assert "task_queue_enable" not in script
    assert re.search(r"^export FROM_FLAG=2$", script, re.M) and re.search(r"^export BOOL=true$", script, re.M)
    resolved = (out / "spec.resolved.yaml").read_text()
    assert "TASK_QUEUE_ENABLE: '2'  # env (VERLCTL_ENV__TASK_QUEUE_ENABLE)" in resolved
    assert f"FROM_FILE: x  # file ({base})" in resolved
    assert "FROM_FLAG: '2'  # flag (--set env.FROM_FLAG)" in resolved
    # the resolved spec is itself a valid spec with the same env
    again = yaml.safe_load(resolved)["env"]
    assert again == {"FROM_FILE": "x", "TASK_QUEUE_ENABLE": "2", "FROM_FLAG": "2", "BOOL": "true"}


# ---------------------------------------------------------------- D8c: diagnose


def test_the_peak_rss_measure_is_the_childs_own() -> None:
    """run_measured sees a child's growth and not its caller's: this pytest worker holds 256 MiB more."""
    ballast = bytearray(256 << 20)
    ballast[::4096] = b"\1" * len(range(0, len(ballast), 4096))  # touch every page
    code, *_, small = run_measured([sys.executable, "-c", "pass"], clean_env(), timeout=60)
    grow = "b = bytearray(160 << 20); b[::4096] = bytes([1]) * len(range(0, len(b), 4096))"
    _, *_, big = run_measured([sys.executable, "-c", grow], clean_env(), timeout=60)
    del ballast
    assert code == 0 and small < 60, small
    assert big >= small + 150, (small, big)


def test_diagnose_refuses_a_device() -> None:
    code, out, err, _seconds, _ = run_measured([*VERLCTL, "diagnose", "/dev/zero"], clean_env(), timeout=60)
    assert code == 2 and "Traceback" not in out + err
    assert err.strip() == "error: cannot read /dev/zero: it is a device, not a log file; pass a file, or - for stdin"


def test_diagnose_input_without_newlines_is_bounded(tmp_path: Path) -> None:
    log = tmp_path / "nonewline.log"
    with open(log, "wb") as fh:
        fh.truncate(256 << 20)  # 256 MiB of NULs, no newline (sparse: nothing on disk)
    code, out, err, _seconds, rss_mb = run_measured([*VERLCTL, "diagnose", str(log)], clean_env(), timeout=120)
    assert code == 0 and "Traceback" not in out + err
    assert "no known failure in 1 lines" in out
    assert "1 line(s) longer than 1 MiB" in err
    assert rss_mb < 200, f"peak RSS {rss_mb} MiB"


def test_diagnose_stdin_without_newlines_is_bounded() -> None:
    feeder = subprocess.Popen(["head", "-c", str(256 << 20), "/dev/zero"], stdout=subprocess.PIPE)
    try:
        code, out, err, _seconds, rss_mb = run_measured([*VERLCTL, "diagnose", "-"], clean_env(), timeout=120,
                                                       stdin=feeder.stdout.fileno())  # type: ignore[union-attr]
    finally:
        feeder.stdout.close()  # type: ignore[union-attr]
        feeder.wait()
    assert code == 0 and "Traceback" not in out + err
    assert rss_mb < 200, f"peak RSS {rss_mb} MiB"


def test_a_cut_line_does_not_hide_the_lines_after_it() -> None:
    scanner = DiagnoseScanner(LastStep())
    for _ in range(40):
        scanner.feed(b"x" * (256 << 10))  # 10 MiB without a newline, in reads
    scanner.feed(b"\nRuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n")
    diag = scanner.close()
    assert diag.cut_lines == 1
    assert diag.lines == 2
    assert [f.category for f in diag.findings][:1] == ["device_oom"]
    assert len(scanner._carry) == 0
    # the same text in one piece gives the same answer
    whole = diagnose_bytes(b"x" * (10 << 20) + b"\nRuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n")
    assert [f.category for f in whole.findings][:1] == ["device_oom"]


def test_the_carried_line_never_exceeds_the_cap() -> None:
    scanner = DiagnoseScanner(LastStep())
    for _ in range(100):
        scanner.feed(b"\0" * 65536)
        assert len(scanner._carry) <= getattr(diagnose_module, "MAX_CARRIED_LINE", 1 << 20)


# ---------------------------------------------------------------- D9 / D12 / D17: plan -o


def test_plan_o_never_follows_a_planted_symlink(tmp_path: Path) -> None:
    base = write_base(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    out = tmp_path / "shared-plan"
    out.mkdir()
    for name in ("start_verl.sh", "run_training.sh", "spec.resolved.yaml"):
        (out / name).symlink_to(victim)
    refused = run_cli("plan", "-c", str(base), "-o", str(out))  # issue 22 A9: files of the set only with --force
    assert refused.code == 2 and "--force" in refused.err, refused.err
    assert victim.read_text() == "precious\n" and all((out / n).is_symlink() for n in ("start_verl.sh",))
    res = run_cli("plan", "-c", str(base), "-o", str(out), "--force")
    assert res.code == 0, res.err
    assert victim.read_text() == "precious\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    for name in ("start_verl.sh", "run_training.sh", "spec.resolved.yaml"):
        assert not (out / name).is_symlink() and (out / name).is_file()
    assert os.access(out / "start_verl.sh", os.X_OK)
    assert sorted(p.name for p in out.iterdir()) == ["run_training.sh", "spec.resolved.yaml", "start_verl.sh"]


def test_env_file_writer_never_follows_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "verlctl.env"
    target.symlink_to(victim)
    rendered = Rendered(files={}, env_file="SWANLAB_API_KEY='k'\n", log_file="", command=None)  # type: ignore[arg-type]
    rendered.write_env_file(target)
    assert victim.read_text() == "precious\n"
    assert not target.is_symlink() and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.read_text() == "SWANLAB_API_KEY='k'\n"


def test_host_put_files_never_follows_a_planted_symlink(tmp_path: Path) -> None:
    from verlctl.runtime.executor import FileSpec, HostExecutor

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "verlctl.env").symlink_to(victim)
    HostExecutor().put_files(str(run_dir), {"verlctl.env": FileSpec(b"KEY='v'\n", 0o600),
                                            "start_verl.sh": FileSpec(b"#!/bin/bash\n", 0o755)})
    assert victim.read_text() == "precious\n"
    env_file = run_dir / "verlctl.env"
    assert not env_file.is_symlink() and env_file.read_bytes() == b"KEY='v'\n"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((run_dir / "start_verl.sh").stat().st_mode) == 0o755
    assert sorted(p.name for p in run_dir.iterdir()) == ["start_verl.sh", "verlctl.env"]


def _write_loop(out: str, letter: str, rounds: int, barrier) -> None:  # type: ignore[no-untyped-def]
    content = letter * (4 << 20)  # big files: the writes of two processes overlap
    rendered = Rendered(files={n: content for n in ("start_verl.sh", "run_training.sh", "spec.resolved.yaml")},
                        env_file="", log_file="", command=None)  # type: ignore[arg-type]
    for _ in range(rounds):
        barrier.wait(60)
        rendered.write(out, force=True)
        barrier.wait(60)


def test_two_plans_into_one_directory_never_leave_a_mixed_set(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    rounds = 15
    barrier = ctx.Barrier(3)
    out = tmp_path / "conc"
    procs = [ctx.Process(target=_write_loop, args=(str(out), letter, rounds, barrier)) for letter in "AB"]
    for p in procs:
        p.start()
    mixed = []
    try:
        for i in range(rounds):
            barrier.wait(60)  # both start writing
            barrier.wait(120)  # both done
            firsts = {name: (out / name).read_bytes()[:1] for name in ("start_verl.sh", "run_training.sh",
                                                                         "spec.resolved.yaml")}
            if len(set(firsts.values())) != 1:
                mixed.append((i, firsts))
    finally:
        for p in procs:
            p.join(60)
    assert not mixed, mixed
    assert sorted(p.name for p in out.iterdir()) == ["run_training.sh", "spec.resolved.yaml", "start_verl.sh"]


def test_plan_o_onto_a_file_or_into_proc_is_one_line(tmp_path: Path) -> None:
    base = write_base(tmp_path)
    before = base.read_bytes()
    line = one_line_error(run_cli("plan", "-c", str(base), "-o", str(base)))
    assert "exists and is not a directory" in line
    assert base.read_bytes() == before
    line = one_line_error(run_cli("plan", "-c", str(base), "-o", "/proc/verlctl-out"))
    assert "/proc/verlctl-out: cannot create the directory" in line


# ---------------------------------------------------------------- D10 / D14: markup


@pytest.mark.parametrize("logs", ["/tmp/verlctl-bad-[/]x", "/tmp/verlctl-bad-[v1]/logs", "/tmp/[bold]wd"])
def test_brackets_in_paths_are_printed_literally(tmp_path: Path, logs: str) -> None:
    base = write_base(tmp_path)
    res = run_cli("launch", "--dry-run", "-c", str(base), "--set", "container.runtime=host",
                  "--set", f"paths.logs={logs}", env=clean_env(COLUMNS="400"))
    assert "Traceback" not in res.out + res.err and "MarkupError" not in res.err
    assert logs in res.out, res.out


def test_findings_show_no_literal_markup(tmp_path: Path) -> None:
    base = write_base(tmp_path)
    res = run_cli("plan", "-c", str(base), "--set", "train.tensor_parallel=3")
    assert res.code == 2
    assert "[dim]" not in res.out and "[/dim]" not in res.out
    assert re.search(r"^error \S+ train\.tensor_parallel: ", res.out, re.M), res.out


# ---------------------------------------------------------------- D18 / D21: validation


@pytest.mark.parametrize(("args", "expect"), [
    (("--set", "paths.model=/m\ntouch y"), "paths.model: must not contain a newline"),
    (("--set", "container.workdir=/verl\rx"), "container.workdir: must not contain a carriage return"),
    (("--set", "env.A=x\ny"), "env: must not contain a newline (in 'A')"),
    (("--set", "paths.model=relative/model"), "paths.model: must be an absolute path"),
    (("--set", "paths.train_files=[data/t.parquet]"), "paths.train_files: must be an absolute path"),
    (("--set", "train.lr=1e400"), "train.lr: Input should be a finite number"),
    (("--set", "train.lr=.nan"), "train.lr: Input should be a finite number"),
    (("--set", "train.steps=1000000000000000000000000000000"), "train.steps: Input should be less than or equal"),
    (("--swanlab", "--set", "logging.swanlab.enabled=false"),
     "--swanlab conflicts with --set logging.swanlab.enabled=false: give only one of them"),
    (("--set", "algorithm=grpo", "--algorithm", "dapo"), "--algorithm dapo conflicts with --set algorithm"),
])
def test_validation_gaps_are_one_line(tmp_path: Path, args: tuple[str, ...], expect: str) -> None:
    base = write_base(tmp_path)
    out = tmp_path / "out"
    line = one_line_error(run_cli("plan", "-c", str(base), "-o", str(out), *args))
    assert expect in line, line
    assert not out.exists()


@pytest.mark.parametrize(("extra", "expect"), [
    ({"extra_overrides": ["a=b\0c"]}, "extra_overrides: must not contain a NUL byte"),
    ({"env": {"A": "x\0y"}}, "env: must not contain a NUL byte"),
    ({"container": {"workdir": "/verl\nx"}}, "container.workdir: must not contain a newline"),
    ({"paths": {"model": "/m\0", "train_files": "/t", "val_files": "/v"}}, "paths.model: must not contain a NUL"),
])
def test_control_characters_in_the_file_are_one_line(tmp_path: Path, extra: dict, expect: str) -> None:
    base = write_base(tmp_path, **extra)
    line = one_line_error(run_cli("plan", "-c", str(base)))
    assert expect in line, line


@pytest.mark.parametrize(("args", "expect"), [
    (("detect", "models", "--budget", "nan"), "--budget must be a positive number"),
    (("launch", "--dry-run", "--verify-timeout", "-5"), "--verify-timeout must be a number of seconds"),
    (("logs", "-n", "-3"), "--lines must be 0 (all)"),
    (("stop", "--grace", "nan"), "--grace must be a number of seconds"),
])
def test_numeric_flags_are_range_checked(tmp_path: Path, args: tuple[str, ...], expect: str) -> None:
    env = clean_env(XDG_STATE_HOME=str(tmp_path / "state"))
    line = one_line_error(run_cli(*args, env=env))
    assert expect in line, line


# ---------------------------------------------------------------- D23: detect --from-file garbage


@pytest.mark.parametrize(("args", "tool"), [
    (("npu",), "npu-smi info"),
    (("gpu",), "nvidia-smi"),
    (("network",), "ip addr"),
    (("npu", "--board"), "npu-smi info -t board -i N"),
    (("npu", "--json"), "npu-smi info"),
])
def test_detect_from_a_garbage_file_is_an_error(tmp_path: Path, args: tuple[str, ...], tool: str) -> None:
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 8 + b"F: x\n\xff\xfe random : words\n")
    line = one_line_error(run_cli("detect", *args, "--from-file", str(garbage)))
    assert f"nothing in it could be read as `{tool}` output" in line


def test_detect_from_a_huge_file_is_refused_unread(tmp_path: Path) -> None:
    huge = tmp_path / "huge.txt"
    with open(huge, "wb") as fh:
        fh.truncate(1 << 30)  # sparse 1 GiB
    code, out, err, _seconds, rss_mb = run_measured([*VERLCTL, "detect", "npu", "--from-file", str(huge)],
                                                    clean_env(), timeout=120)
    assert code == 2 and "Traceback" not in out + err
    assert err.strip() == f"error: --from-file: {huge} is larger than 16 MiB: not a saved tool output"
    assert rss_mb < 300, f"peak RSS {rss_mb} MiB"


# ---------------------------------------------------------------- no traceback from the review's causes


def test_no_traceback_from_the_reviews_causes_in_this_scope(tmp_path: Path) -> None:
    """D10 (markup), D11 (deep YAML), D17 (-o onto a file / into /proc), D8 (devices), D23 (garbage)."""
    base = write_base(tmp_path)
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 10000 + "]" * 10000 + "\n")
    deep_env = tmp_path / "deepenv.yaml"
    deep_env.write_text("env: " + "{a: " * 500 + "1" + "}" * 500 + "\n")
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(os.urandom(4096))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = [
        ("plan", "-c", str(deep)),
        ("plan", "-c", str(deep_env)),
        ("plan", "-c", str(base), "-o", str(base)),
        ("plan", "-c", str(base), "-o", "/proc/verlctl-out"),
        ("plan", "-c", "/dev/zero"),
        ("plan", "-c", str(fifo)),
        ("diagnose", "/dev/zero"),
        ("detect", "npu", "--from-file", str(garbage)),
        ("detect", "gpu", "--from-file", str(garbage)),
        ("detect", "npu", "--board", "--from-file", str(garbage)),
        ("launch", "--dry-run", "-c", str(base), "--set", "container.runtime=host", "--set", "paths.logs=/x/[/]x",
         "--set", "train.tensor_parallel=3"),
    ]
    for case in cases:
        res = run_cli(*case, timeout=120)
        assert "Traceback" not in res.out + res.err, (case, res.err)
        one_line_error(res)


# ---------------------------------------------------------------- set-up on a stock Debian


def test_ci_venv_step_repairs_a_venv_without_pip(tmp_path: Path) -> None:
    """A `.venv` left by `python3 -m venv` without ensurepip has a python but no pip: .ci/run recreates it."""
    made = subprocess.run(["python3", "-m", "venv", "--without-pip", ".venv"], cwd=tmp_path, capture_output=True)
    assert made.returncode == 0, made.stderr
    assert subprocess.run([".venv/bin/python", "-m", "pip", "--version"], cwd=tmp_path,
                          capture_output=True).returncode != 0
    res = subprocess.run(["bash", "-c", f"set -euo pipefail; source {ROOT / '.ci' / 'venv.sh'}; ensure_venv_with_pip"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert ".venv has no working pip" in res.stdout
    pip = subprocess.run([".venv/bin/python", "-m", "pip", "--version"], cwd=tmp_path, capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    # a second run keeps the now healthy venv
    again = subprocess.run(["bash", "-c", f"source {ROOT / '.ci' / 'venv.sh'}; ensure_venv_with_pip"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "no working pip" not in again.stdout


def test_ci_run_uses_the_venv_step_and_the_docs_say_what_to_install() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    assert "source .ci/venv.sh" in run and 'step "venv (.[dev])" setup_venv' in run
    readme = (ROOT / "README.md").read_text().splitlines()
    # the user's first command installs verlctl (no dev extra) and runs the demo; the second is the developers'
    assert readme[2] == "```bash" and readme[3].startswith("python3 -m venv .venv && .venv/bin/pip install . && ")
    assert readme[4].startswith("bash .ci/run") and "CONTRIBUTING.md" in readme[4]
    # the fix for a python3 without venv, right below the command it breaks
    assert any("apt-get install python3-venv" in line for line in readme[:12])
    # CONTRIBUTING.md: the developers' set-up with the dev extra, and what `bash .ci/run` installs and how long it takes
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    setup = contributing.split("\n## ", 2)[1]
    assert "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'" in setup and "bash .ci/run" in setup
    assert "apt packages" in setup and "minutes" in setup
