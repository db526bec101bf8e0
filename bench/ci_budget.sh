#!/usr/bin/env bash
# The CI budget of issue #25: the test suite without the real-verl tests, timed on this machine quiet and then
# with two busy loops per core (tests/load/run_loaded.sh -b 2), and the ratio of the two.
#
#   bench/ci_budget.sh [-q] [-l] [-d DIR] [-- PYTEST_ARGS...]
#
# Goals: quiet <= 1200 s (20 min), loaded <= 2 x quiet. -q: the quiet run only; -l: the loaded run only (the
# quiet figure is then read from DIR/quiet.seconds of an earlier run). -d DIR: where the logs and figures go
# (default: a new directory under /tmp). PYTEST_ARGS replace the default `-m "not real_verl" tests`.
# The test images are built first (tests/image/build.sh; content-hashed, so a cached build is seconds) and that
# time is not counted. "Quiet" means nothing else runs: the 1-min load average is printed before each run, and
# a warning says when it is above 0.5 (the figure is then an upper bound). Exit status: 0 when every run
# passed and the goals are met, 1 when a goal is missed, the failing run's pytest status otherwise.
set -euo pipefail

cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

QUIET_GOAL_S=1200
LOADED_FACTOR=2
do_quiet=1
do_loaded=1
dir=""
while getopts 'qld:h' opt; do
    case "$opt" in
        q) do_loaded=0 ;;
        l) do_quiet=0 ;;
        d) dir=$OPTARG ;;
        h) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "usage: $0 [-q] [-l] [-d DIR] [-- PYTEST_ARGS...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [[ $do_quiet -eq 0 && $do_loaded -eq 0 ]]; then
    echo "error: -q and -l together run nothing; give one of them, or neither for both" >&2
    exit 2
fi
if [[ $# -gt 0 ]]; then
    tests=("$@")
else
    tests=(-m "not real_verl" tests)
fi
python=${PYTHON:-.venv/bin/python}
dir=${dir:-$(mktemp -d /tmp/verlctl-ci-budget.XXXXXX)}
mkdir -p -- "$dir"

load1() { cut -d ' ' -f 1 /proc/loadavg; }
say_load() {
    local l
    l=$(load1)
    echo "1-min load average before the $1 run: $l"
    if awk -v l="$l" 'BEGIN { exit !(l > 0.5) }'; then
        echo "warning: the machine is not quiet (load $l > 0.5): the $1 figure is an upper bound"
    fi
}

t=$SECONDS
tests/image/build.sh >"$dir/images.log" 2>&1 || { echo "error: tests/image/build.sh failed; see $dir/images.log" >&2; exit 1; }
echo "test images: $((SECONDS - t)) s (not counted)"

status=0
quiet=""
if [[ $do_quiet -eq 1 ]]; then
    say_load quiet
    t=$SECONDS
    rc=0
    "$python" -m pytest -p no:cacheprovider -n 2 --dist loadgroup -q --durations=40 "${tests[@]}" \
        >"$dir/quiet.log" 2>&1 || rc=$?
    quiet=$((SECONDS - t))
    echo "$quiet" >"$dir/quiet.seconds"
    echo "quiet: exit $rc in ${quiet} s: $(tail -n 1 "$dir/quiet.log")  (log: $dir/quiet.log)"
    if [[ $rc -ne 0 && $rc -ne 5 ]]; then status=$rc; fi
elif [[ -f "$dir/quiet.seconds" ]]; then
    quiet=$(cat -- "$dir/quiet.seconds")
    echo "quiet: ${quiet} s (from $dir/quiet.seconds)"
fi

loaded=""
if [[ $do_loaded -eq 1 ]]; then
    say_load loaded
    t=$SECONDS
    rc=0
    LOAD_LOG_DIR="$dir/loaded" tests/load/run_loaded.sh -n 1 -b 2 -j 2 -- "${tests[@]}" >"$dir/loaded.log" 2>&1 || rc=$?
    loaded=$((SECONDS - t))
    echo "$loaded" >"$dir/loaded.seconds"
    echo "loaded (2 busy loops per core): exit $rc in ${loaded} s: $(tail -n 1 "$dir/loaded/run-1.log" 2>/dev/null)"
    if [[ $rc -ne 0 && $rc -ne 5 && $status -eq 0 ]]; then status=$rc; fi
fi

echo
echo "== CI budget =="
missed=0
if [[ -n "$quiet" ]]; then
    verdict=met
    if [[ $quiet -gt $QUIET_GOAL_S ]]; then verdict=MISSED; missed=1; fi
    echo "quiet:  ${quiet} s (goal <= ${QUIET_GOAL_S} s): $verdict"
fi
if [[ -n "$loaded" ]]; then
    if [[ -n "$quiet" && $quiet -gt 0 ]]; then
        ratio=$(awk -v a="$loaded" -v b="$quiet" 'BEGIN { printf "%.2f", a / b }')
        verdict=met
        if awk -v r="$ratio" -v f="$LOADED_FACTOR" 'BEGIN { exit !(r > f) }'; then verdict=MISSED; missed=1; fi
        echo "loaded: ${loaded} s = ${ratio} x quiet (goal <= ${LOADED_FACTOR} x): $verdict"
    else
        echo "loaded: ${loaded} s (no quiet figure to compare with: run without -l first, or give its -d DIR)"
    fi
fi
echo "logs: $dir"
if [[ $status -ne 0 ]]; then exit "$status"; fi
exit "$missed"
