#!/usr/bin/env bash
# Run test files N times in a row on a loaded machine; stop at the first failure and print a summary.
#
#   tests/load/run_loaded.sh [-n N] [-b BUSY_PER_CORE] [-j WORKERS] [TEST_PATH...]
#   tests/load/run_loaded.sh -c [-n N] [-b BUSY_PER_CORE]     the whole .ci/run, as CI runs it, under the load
#
# Defaults: N=10, two busy processes per core (nproc) for the whole run, two pytest workers as in CI
# (`-n 2 --dist loadgroup`; -j 0 runs in one process), and every test marked `docker` (all that use the
# Docker engine: containers, the two-node sshd launch, the fault matrix, the Slurm cluster). Given paths
# run whole, without the marker filter. Each run is `pytest -x`; its output goes to $LOAD_LOG_DIR/run-<i>.log
# (default: a new directory under /tmp). Exit status: 0 when every run passed, the failing run's pytest
# status otherwise (with -c: .ci/run's). The busy processes are this script's children and are stopped (by
# their pids) when it exits. Not part of the CI test run: it takes N times the tests' time.
set -euo pipefail

cd "$(dirname -- "${BASH_SOURCE[0]}")/../.."

runs=10
per_core=2
workers=2
whole_ci=0
while getopts 'n:b:j:ch' opt; do
    case "$opt" in
        n) runs=$OPTARG ;;
        b) per_core=$OPTARG ;;
        j) workers=$OPTARG ;;
        c) whole_ci=1 ;;
        h) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "usage: $0 [-n N] [-b BUSY_PER_CORE] [-j WORKERS] [TEST_PATH...] | -c [-n N] [-b BUSY_PER_CORE]" >&2
           exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "error: -n must be a positive integer (got '$runs')" >&2; exit 2; }
[[ "$per_core" =~ ^[0-9]+$ ]] || { echo "error: -b must be a non-negative integer (got '$per_core')" >&2; exit 2; }
[[ "$workers" =~ ^[0-9]+$ ]] || { echo "error: -j must be a non-negative integer (got '$workers')" >&2; exit 2; }

if [[ $whole_ci -eq 1 && $# -gt 0 ]]; then
    echo "error: -c runs the whole .ci/run: give no test paths with it" >&2
    exit 2
elif [[ $# -gt 0 ]]; then
    tests=("$@")
else
    tests=(-m docker tests)
fi
if [[ $workers -eq 0 ]]; then
    dist=(-n 0)
else
    dist=(-n "$workers" --dist loadgroup)
fi
python=${PYTHON:-.venv/bin/python}
log_dir=${LOAD_LOG_DIR:-$(mktemp -d /tmp/verlctl-load.XXXXXX)}
mkdir -p -- "$log_dir"

busy_pids=()
stop_busy() {
    local pid
    for pid in "${busy_pids[@]}"; do
        kill -- "$pid" 2>/dev/null || true
    done
    for pid in "${busy_pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    busy_pids=()
}
trap stop_busy EXIT
trap 'exit 130' INT TERM

cores=$(nproc)
n_busy=$((cores * per_core))
for ((i = 0; i < n_busy; i++)); do
    # A busy loop in its own bash: all CPU, no memory, no I/O.
    bash -c 'while :; do :; done' &
    busy_pids+=("$!")
done
echo "load: $n_busy busy processes ($per_core per core, $cores cores): ${busy_pids[*]}"
if [[ $whole_ci -eq 1 ]]; then
    run_cmd=(bash .ci/run)
    what=".ci/run"
else
    run_cmd=("$python" -m pytest -p no:cacheprovider -x "${dist[@]}" -q "${tests[@]}")
    what="pytest -x ${dist[*]} ${tests[*]}"
fi
echo "runs: $runs x $what; logs in $log_dir"

durations=()
status=0
failed_run=""
for ((i = 1; i <= runs; i++)); do
    started=$SECONDS
    rc=0
    "${run_cmd[@]}" </dev/null >"$log_dir/run-$i.log" 2>&1 || rc=$?
    durations+=("$((SECONDS - started))")
    summary=$(tail -n 1 "$log_dir/run-$i.log")
    printf 'run %d/%d: exit %d in %ds: %s\n' "$i" "$runs" "$rc" "$((SECONDS - started))" "$summary"
    if [[ $rc -ne 0 ]]; then
        status=$rc
        failed_run=$i
        break
    fi
done
stop_busy

echo
echo "== summary =="
echo "ran: $what"
echo "load: $n_busy busy processes on $cores cores"
echo "runs passed: $((${#durations[@]} - (status != 0 ? 1 : 0)))/$runs; durations (s): ${durations[*]}"
if [[ $status -ne 0 ]]; then
    echo "FAILED at run $failed_run (exit $status); its log: $log_dir/run-$failed_run.log"
    grep -E '^(FAILED|ERROR)|Error|error:' "$log_dir/run-$failed_run.log" | head -n 20 || true
else
    echo "all $runs runs passed"
fi
exit "$status"
