"""Every single-comparison mutant of the signal path against decoys, ONLY inside a private PID namespace.

    unshare --pid --fork --mount-proc --kill-child -- .venv/bin/python tests/signal_mutants.py OUT.json [KINDS]

KINDS: comma-separated mutant kinds of bench/mutate.py (default ``cmp,cmp-boundary``: every comparison).
Mutated: the whole of runtime/procscan.py, and the stop path: orchestrator/inspect.py (watcher_alive, stop_watcher,
stop_run), backends/docker.py (stop_groups) and runtime/executor.py (Executor.verdict / group_alive / signal_group /
kill_ray_daemons / stop_group, HostExecutor._act). For each mutant a forked child installs the mutated module
and runs ``stop`` on forged records (each naming a decoy by its real pid and start time) and on the real run's
record; the parent (the namespace's init) then checks that every decoy is alive. Decoys: this user's process
without a marker, one with an empty environment, one of another run, one of uid ``nobody``, and one in a nested
PID namespace that carries the run's own marker. The namespace ends with this process: nothing outside it can
be reached by a mutant, and nothing is left behind.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import mutate  # noqa: E402  (bench/mutate.py: sites, apply, the namespace guard)

MARKER = "20260101-000000-mut-0000/1/cafef00d"
SLEEP = "100000"
#: stop's wait after SIGKILL (10 s for a user): a killed `sleep` is gone in milliseconds, and a mutant that cannot
#: see it gone (about 1 in 12) waits this out
KILL_WAIT = 2.0
MODULES = {
    "src/verlctl/runtime/procscan.py": ("verlctl.runtime.procscan", None),
    "src/verlctl/orchestrator/inspect.py": ("verlctl.orchestrator.inspect", {None: {"watcher_alive", "stop_watcher", "stop_run"}}),
    "src/verlctl/backends/docker.py": ("verlctl.backends.docker", {None: {"stop_groups"}}),
    "src/verlctl/runtime/executor.py": ("verlctl.runtime.executor",
                                        {"Executor": {"verdict", "group_alive", "signal_group", "kill_ray_daemons",
                                                      "stop_group"},
                                         "HostExecutor": {"_act"}}),
}


def stat_of(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def start_of(pid: int) -> int:
    st = stat_of(pid)
    assert st is not None, pid
    return int(st[19])


def alive(pid: int, start: int) -> bool:
    st = stat_of(pid)
    return st is not None and st[0] not in ("Z", "X") and int(st[19]) == start


def wait_for(cond, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())


def children_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = stat_of(int(name))
            if st is not None and int(st[1]) == pid:
                out.append(int(name))
    return out


def reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


class Decoys:
    def __init__(self) -> None:
        self.procs: dict[str, tuple[int, int]] = {}

    def start(self, name: str) -> None:
        kw: dict = {"start_new_session": True, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if name == "same-user":
            p = subprocess.Popen(["sleep", SLEEP], env=env, **kw)
        elif name == "empty-env":
            p = subprocess.Popen(["/bin/sleep", SLEEP], env={}, **kw)
        elif name == "other-run":
            p = subprocess.Popen(["sleep", SLEEP], env={**env, "VERLCTL_ATTEMPT": "other-run/1/beef"}, **kw)
        elif name == "nobody":
            p = subprocess.Popen(["sleep", SLEEP], env=env, user=65534, **kw)
        elif name in ("nested-ns", "nested-ns-unshare"):
            if "nested-ns" in self.procs:
                return
            p = subprocess.Popen(["unshare", "--pid", "--fork", "--", "env", f"VERLCTL_ATTEMPT={MARKER}", "sleep",
                                  SLEEP], env=env, **kw)
            assert wait_for(lambda: any((stat_of(c) or [""])[0] == "S" and "sleep" in _cmd(c)
                                        for c in children_of(p.pid)))
            inner = next(c for c in children_of(p.pid) if "sleep" in _cmd(c))
            self.procs["nested-ns-unshare"] = (p.pid, start_of(p.pid))
            self.procs["nested-ns"] = (inner, start_of(inner))
            return
        else:
            raise ValueError(name)
        assert wait_for(lambda: "sleep" in _cmd(p.pid))
        self.procs[name] = (p.pid, start_of(p.pid))

    def dead(self) -> list[str]:
        return [n for n, (pid, st) in self.procs.items() if not alive(pid, st)]

    def respawn(self, names: list[str]) -> None:
        for n in names:
            pid, _st = self.procs.pop(n)
            if n.startswith("nested-ns"):
                for other in ("nested-ns", "nested-ns-unshare"):
                    if other in self.procs:
                        with contextlib.suppress(OSError):
                            os.kill(self.procs.pop(other)[0], signal.SIGKILL)
                n = "nested-ns"
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            reap()
            self.start(n)


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def start_run() -> tuple[int, int, list[tuple[int, int]]]:
    """The run's own processes: a leader with the marker, a child in its group, a Ray-worker-like child in its
    own session (a stray with the marker)."""
    p = subprocess.Popen(["bash", "-c", f"sleep {SLEEP} & setsid sleep {SLEEP} & wait"], start_new_session=True,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "VERLCTL_ATTEMPT": MARKER},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_for(lambda: len([c for c in children_of(p.pid) if _cmd(c).startswith("sleep")]) == 2)
    kids = [(c, start_of(c)) for c in children_of(p.pid)]
    return p.pid, start_of(p.pid), kids


def write_records(state: Path, decoys: Decoys, leader: int, lstart: int) -> list[str]:
    runs = state / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    ids = []

    def rec(run_id: str, pgid: int | None, marker: str | None, start: int | None, watcher: int | None = None,
            created: float = 0.0) -> None:
        d = runs / run_id
        d.mkdir(exist_ok=True)
        doc = {"run_id": run_id, "created_at": 1_000_000 + created, "runtime": "host", "workdir": str(state),
               "scripts_dir": str(state / "scripts"), "run_log": str(state / "run.log"), "train_log": "",
               "checkpoints": "", "experiment": "exp", "verl_version": "0.7.0", "pgid": pgid,
               "watcher_pid": watcher,
               "attempts": [] if pgid is None else [{"number": 1, "pgid": pgid, "started_at": 1.0, "marker": marker,
                                                     "leader_start": start}]}
        (d / "run.json").write_text(json.dumps(doc))
        ids.append(run_id)

    for i, (name, (pid, st)) in enumerate(sorted(decoys.procs.items())):
        rec(f"forged-{name}", pid, MARKER, st, created=i)
        rec(f"forged-{name}-own-marker", pid, f"forged-{name}/1/x", st, created=i + 0.5)
    same = decoys.procs["same-user"][0]
    rec("forged-watcher", None, None, None, watcher=same, created=50)
    rec("the-run", leader, MARKER, lstart, watcher=decoys.procs["other-run"][0], created=100)
    return ids


def load_mutant(rel: str, source: str) -> None:
    """Install ``source`` as the module ``rel`` names (and re-bind the modules that imported names from it)."""
    name = MODULES[rel][0]
    mod = types.ModuleType(name)
    mod.__file__ = str(ROOT / rel)
    pkg, _, attr = name.rpartition(".")
    mod.__package__ = pkg
    sys.modules[name] = mod
    exec(compile(source, str(ROOT / rel), "exec"), mod.__dict__)
    setattr(sys.modules[pkg], attr, mod)
    # the modules that imported names from it by name are loaded again, in import order (the local backend
    # imports the executor's classes; inspect imports the backend's stop_groups and the executor's classes)
    again = {"verlctl.runtime.executor": ("src/verlctl/backends/docker.py", "src/verlctl/orchestrator/inspect.py"),
             "verlctl.backends.docker": ("src/verlctl/orchestrator/inspect.py",)}.get(name, ())
    for dep in again:
        dep_name = MODULES[dep][0]
        dmod = types.ModuleType(dep_name)
        dmod.__file__ = str(ROOT / dep)
        dmod.__package__ = dep_name.rpartition(".")[0]
        sys.modules[dep_name] = dmod
        exec(compile((ROOT / dep).read_text(), str(ROOT / dep), "exec"), dmod.__dict__)


def run_stops(state: Path, ids: list[str]) -> None:
    os.environ["VERLCTL_STATE_DIR"] = str(state)
    from rich.console import Console

    from verlctl.orchestrator import inspect as _  # noqa: F401

    quiet = Console(file=open(os.devnull, "w"))  # noqa: SIM115
    stop_run = sys.modules["verlctl.orchestrator.inspect"].stop_run

    def one(run_id: str) -> None:
        with contextlib.suppress(BaseException):
            stop_run(run_id, remove_container=False, grace=1.0, console=quiet, kill_wait=KILL_WAIT)

    import threading

    # all at once: a mutant that cannot stop waits out the whole SIGKILL phase once, not per record
    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)


def select(rel: str, kinds: set[str]) -> list[tuple]:
    tree = ast.parse((ROOT / rel).read_text())
    skip = mutate.is_docstring_or_annotation(tree)
    ranges: list[tuple[int, int]] = []
    scope = MODULES[rel][1]
    if scope is not None:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in scope.get(None, set()):
                ranges.append((node.lineno, node.end_lineno or node.lineno))
            if isinstance(node, ast.ClassDef) and node.name in scope:
                for fn in node.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name in scope[node.name]:
                        ranges.append((fn.lineno, fn.end_lineno or fn.lineno))
    out = []
    for s in mutate.sites(tree):
        idx, kind, line, _desc, _op = s
        if idx in skip or kind not in kinds or line is None:
            continue
        if ranges and not any(a <= line <= b for a, b in ranges):
            continue
        out.append(s)
    return [(rel, tree, s) for s in out]


CANARY_DELIVER = """def deliver(targets, marker, sig, session=None):
    out = {"signalled": [], "refused": ""}
    for pid, _start in targets:
        if pid > 1 and pid != os.getpid():
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
            out["signalled"].append(pid)
    return out


"""


def canary_source() -> str:
    """procscan.py without its last check (a deliver() that signals what it is given) and with the strays
    comparison of the review's sample flipped (marker != marker): the harness must see decoys signalled."""
    src = (ROOT / "src/verlctl/runtime/procscan.py").read_text()
    a, b = src.index("def deliver("), src.index("def os_close(")
    src = src[:a] + CANARY_DELIVER + src[b:]
    flipped = src.replace('p["marker"] == marker and p["pgid"] != pgid', 'p["marker"] != marker and p["pgid"] != pgid')
    assert flipped != src
    return flipped


def main() -> int:
    if not mutate.private_pid_namespace() or os.getpid() != 1:
        print("signal_mutants.py: run me as the init of a private PID namespace: "
              "unshare --pid --fork --mount-proc --kill-child -- python tests/signal_mutants.py OUT.json",
              file=sys.stderr)
        return 2
    out_path = Path(sys.argv[1])
    kinds = set((sys.argv[2] if len(sys.argv) > 2 else "cmp,cmp-boundary").split(","))
    only = os.environ.get("SIGNAL_MUTANTS_ONLY")  # a module path, to run one module's mutants
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    import verlctl.backends.docker  # noqa: F401  (loaded once; each child replaces what it mutates)
    import verlctl.orchestrator.inspect  # noqa: F401
    import verlctl.runtime.executor  # noqa: F401
    import verlctl.runtime.procscan  # noqa: F401

    decoys = Decoys()
    for n in ("same-user", "empty-env", "other-run", "nested-ns") + (("nobody",) if os.geteuid() == 0 else ()):
        decoys.start(n)
    chosen = [m for rel in MODULES if not only or rel == only for m in select(rel, kinds)]
    if os.environ.get("SIGNAL_MUTANTS_LIMIT"):  # a quick look: the first N only
        chosen = chosen[: int(os.environ["SIGNAL_MUTANTS_LIMIT"])]
    results = []
    work = Path(tempfile.mkdtemp(prefix="verlctl-signal-mutants-"))
    t_all = time.monotonic()
    canary = ("src/verlctl/runtime/procscan.py", None, (0, "canary", 0, "canary: no last check, strays flipped", None))
    for n, item in enumerate([None, canary, *chosen]):
        leader, lstart, kids = start_run()
        state = work / f"s{n}"
        state.mkdir(mode=0o700)
        ids = write_records(state, decoys, leader, lstart)
        if item is None:
            rel, desc, line, source = "-", "baseline (no mutant)", 0, None
        else:
            rel, tree, (idx, _kind, line, desc, op) = item
            source = canary_source() if tree is None else ast.unparse(mutate.apply(tree, idx, op)) + "\n"
        t0 = time.monotonic()
        child = os.fork()
        if child == 0:
            try:
                signal.alarm(90)
                if source is not None:
                    load_mutant(rel, source)
                run_stops(state, ids)
            finally:
                os._exit(0)
        deadline = time.monotonic() + 120
        status = "done"
        while True:
            pid, _ = os.waitpid(child, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.kill(child, signal.SIGKILL)  # our own forked child
                os.waitpid(child, 0)
                status = "timeout"
                break
            time.sleep(0.05)
        dead = decoys.dead()
        run_stopped = not alive(leader, lstart) and not any(alive(p, s) for p, s in kids)
        results.append({"kind": "baseline" if item is None else item[2][1], "module": rel, "line": line, "mutant": desc, "status": status, "secs": round(time.monotonic() - t0, 1),
                        "decoys_signalled": dead, "run_stopped": run_stopped})
        print(f"[{n}/{len(chosen)}] {rel}:{line} {desc}: decoys signalled {dead or 'none'}, "
              f"run stopped {run_stopped} ({results[-1]['secs']}s)", flush=True)
        for p, s in [(leader, lstart), *kids]:
            if alive(p, s):
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)  # the run's own processes, started above
        reap()
        if dead:
            decoys.respawn(dead)
    shutil.rmtree(work, ignore_errors=True)
    out_path.write_text(json.dumps({"mutants": len(chosen), "kinds": sorted(kinds), "results": results,
                                    "secs": round(time.monotonic() - t_all, 1)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
