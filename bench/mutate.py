#!/usr/bin/env python3
"""Small AST mutation tester: how many small bugs in one module do the given tests notice?

usage: mutate.py ROOT TARGET(rel) OUTJSON MAXMUT TIMEOUT -- pytest args...
  e.g. mutate.py ../scratch-clone src/verlctl/checks/rules.py out.json 50 90 -- tests/checks/test_spec_check_numbers.py
MUTATE_LINES=A-B (environment) keeps only the sites on lines A..B (one changed function).
MUTATE_SEED=N (environment) draws another sample than the default seed 12345.
MUTATE_FROM=K (environment) goes on with a sample cut short: the same sample, from its K-th mutant (1-based).
It rewrites TARGET in place (restored at the end): run it in a scratch clone with its own .venv, never in
the working tree you commit from. Score = killed / (killed + survived); read the survivors, not just the score.
Mutants: compare-op flip, and<->or, int +/-1, True<->False, if/while/ifexp negation,
return X -> return None, delete a call statement (append/extend/... of findings etc.).
Each mutant: whole module re-emitted with ast.unparse (line numbers recorded from the original).
A benchmark of the tests, not a CI step (docs/development/mutation.md); the tool of the mutation review.
"""
from __future__ import annotations

import ast
import copy
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

FLIP = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
    ast.LtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}


def sites(tree: ast.AST):
    """Yield (path-to-node, kind, line, description, apply(node)->None)."""
    out = []
    nodes = list(ast.walk(tree))
    # index nodes so a deepcopy can find the same node by position in walk order
    for idx, node in enumerate(nodes):
        line = getattr(node, "lineno", None)
        if isinstance(node, ast.Compare):
            for k, op in enumerate(node.ops):
                t = type(op)
                if t in FLIP:
                    out.append((idx, "cmp", line, f"{t.__name__} -> {FLIP[t].__name__} (op {k})",
                                ("cmp", k, FLIP[t])))
                if t in BOUNDARY:
                    out.append((idx, "cmp-boundary", line, f"{t.__name__} -> {BOUNDARY[t].__name__} (op {k})",
                                ("cmp", k, BOUNDARY[t])))
        elif isinstance(node, ast.BoolOp):
            new = ast.Or if isinstance(node.op, ast.And) else ast.And
            out.append((idx, "boolop", line, f"{type(node.op).__name__} -> {new.__name__}", ("boolop", new)))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            for d in (1, -1):
                out.append((idx, "int", line, f"{node.value} -> {node.value + d}", ("int", node.value + d)))
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            out.append((idx, "bool", line, f"{node.value} -> {not node.value}", ("bool", not node.value)))
        elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
            out.append((idx, "negate", line, f"{type(node).__name__} cond -> not (...)", ("negate",)))
        elif isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None
        ):
            out.append((idx, "return-none", line, "return X -> return None", ("retnone",)))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            f = node.value.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "?")
            out.append((idx, "del-call", line, f"delete statement {name}(...)", ("delstmt",)))
    return out


def apply(tree: ast.AST, idx: int, op) -> ast.AST:
    t2 = copy.deepcopy(tree)
    node = list(ast.walk(t2))[idx]
    kind = op[0]
    if kind == "cmp":
        node.ops[op[1]] = op[2]()
    elif kind == "boolop":
        node.op = op[1]()
    elif kind in ("int", "bool"):
        node.value = op[1]
    elif kind == "negate":
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
    elif kind == "retnone":
        node.value = ast.Constant(value=None)
    elif kind == "delstmt":
        # replace the Expr statement with `pass` in its parent body
        for parent in ast.walk(t2):
            for _fname, val in ast.iter_fields(parent):
                if isinstance(val, list) and any(v is node for v in val):
                    i = next(j for j, v in enumerate(val) if v is node)
                    val[i] = ast.Pass()
    ast.fix_missing_locations(t2)
    return t2


def is_docstring_or_annotation(tree: ast.AST) -> set[int]:
    """Indices of nodes inside type annotations (not worth mutating)."""
    skip: set[int] = set()
    ann_nodes = set()
    for n in ast.walk(tree):
        for a in ("annotation", "returns"):
            sub = getattr(n, a, None)
            if sub is not None:
                for s in ast.walk(sub):
                    ann_nodes.add(id(s))
    for i, n in enumerate(ast.walk(tree)):
        if id(n) in ann_nodes:
            skip.add(i)
    return skip


#: Modules that send signals (or decide what gets one): a mutant of these can signal any process on the
#: machine (a sampled `marker != marker` in procscan.py once made `stop` kill every process, as root). They
#: are mutated only inside a private PID namespace (tests/signal_mutants.py runs them against decoys).
SIGNAL_PATH_MODULES = ("src/verlctl/runtime/procscan.py", "src/verlctl/orchestrator/inspect.py",
                       "src/verlctl/backends/docker.py", "src/verlctl/runtime/executor.py")
INIT_PID_NS = "pid:[4026531836]"  # the kernel's initial PID namespace (PROC_PID_INIT_INO)


def private_pid_namespace() -> bool:
    """True inside a PID namespace of its own whose /proc is that namespace's (``unshare --pid --fork
    --mount-proc``, or a throw-away container): a stray signal there reaches nothing outside it."""
    try:
        mine = os.readlink("/proc/self/ns/pid")
        init = os.readlink("/proc/1/ns/pid")
    except OSError:
        return False
    return mine != INIT_PID_NS and init == mine


def main() -> None:
    root = Path(sys.argv[1])
    target = root / sys.argv[2]
    if os.path.normpath(sys.argv[2]) in SIGNAL_PATH_MODULES and not private_pid_namespace():
        sys.exit(f"mutate.py: {sys.argv[2]} is in the signal path: mutate it only inside a private PID namespace "
                 "(`unshare --pid --fork --mount-proc --kill-child ...`, or a throw-away container), "
                 "see tests/signal_mutants.py")
    outjson = Path(sys.argv[3])
    maxmut = int(sys.argv[4])
    timeout = float(sys.argv[5])
    sep = sys.argv.index("--")
    pytest_args = sys.argv[sep + 1 :]
    original = target.read_text()
    tree = ast.parse(original)
    skip = is_docstring_or_annotation(tree)
    all_sites = [s for s in sites(tree) if s[0] not in skip]
    if os.environ.get("MUTATE_LINES"):  # e.g. MUTATE_LINES=410-440: only the sites of a changed function
        lo, _, hi = os.environ["MUTATE_LINES"].partition("-")
        all_sites = [s for s in all_sites if s[2] is not None and int(lo) <= s[2] <= int(hi or lo)]
    first = int(os.environ.get("MUTATE_FROM", "1"))
    rng = random.Random(int(os.environ.get("MUTATE_SEED", "12345")))  # a fresh seed: tests not tuned to it
    # stratify: keep every non-int site type balanced by sampling uniformly over the list
    chosen = all_sites if len(all_sites) <= maxmut else rng.sample(all_sites, maxmut)
    chosen.sort(key=lambda s: (s[2] or 0, s[1]))
    pyc_dir = target.parent / "__pycache__"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    cmd = [str(root / ".venv/bin/python"), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *pytest_args]

    def clear_pyc():
        for p in pyc_dir.glob(target.stem + ".*.pyc"):
            p.unlink()

    results = []
    # baseline with the unparsed-but-unmutated module
    try:
        target.write_text(ast.unparse(tree) + "\n")
        clear_pyc()
        t0 = time.time()
        p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout * 3)
        base = time.time() - t0
        print(f"baseline rc={p.returncode} {base:.1f}s  sites={len(all_sites)} chosen={len(chosen)}", flush=True)
        if p.returncode != 0:
            print(p.stdout[-3000:], p.stderr[-2000:])
            sys.exit(1)
        for n, (idx, kind, line, desc, op) in enumerate(chosen):
            if n + 1 < first:  # MUTATE_FROM: a sample cut short goes on from its mutant number `first`
                continue
            mutated = ast.unparse(apply(tree, idx, op)) + "\n"
            target.write_text(mutated)
            clear_pyc()
            t0 = time.time()
            proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            try:
                outp, _ = proc.communicate(timeout=timeout)
                status = "killed" if proc.returncode != 0 else "survived"
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)  # our own child's process group, by its pid
                outp, _ = proc.communicate()
                status = "timeout"
            dt = time.time() - t0
            failed = [ln for ln in (outp or "").splitlines() if ln.startswith(("FAILED", "ERROR"))][:2]
            src_line = original.splitlines()[line - 1].strip() if line else ""
            results.append(dict(n=n, line=line, kind=kind, desc=desc, status=status, secs=round(dt, 1),
                                 src=src_line, failed=failed))
            print(f"[{n + 1}/{len(chosen)}] L{line} {kind:12} {desc:40} {status:8} {dt:5.1f}s  | {src_line[:70]}",
                  flush=True)
            outjson.write_text(json.dumps(dict(target=sys.argv[2], sites=len(all_sites), baseline_s=base,
                                               results=results), indent=1))
    finally:
        target.write_text(original)
        clear_pyc()


if __name__ == "__main__":
    main()
