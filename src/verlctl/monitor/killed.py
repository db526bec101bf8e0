"""Why a training died of SIGKILL (exit 137): the kernel OOM killer only when the kernel or the cgroup says so.

A ``kill -9`` by a user, a ``docker exec``, a scheduler or a tool looks exactly like the kernel OOM killer from
the exit status alone. The evidence read here (a snapshot when the attempt's watch starts, and again when it
died; the difference is what happened in between):

* the ``oom_kill`` counter of the memory cgroup of the training (cgroup v2 ``memory.events``, cgroup v1
  ``memory.oom_control``): in a container its own cgroup, on the host the cgroup of the attempt's leader;
* the kernel log (``dmesg``), when it can be read there (a container without CAP_SYSLOG cannot): its lines
  ``Out of memory: Killed process`` / ``oom-kill:`` / ``Memory cgroup out of memory``;
* the engine's ``OOMKilled`` of the container (``docker inspect``), read by the caller.

With an OOM kill in that evidence the finding is ``host_oom``; without, it is ``killed`` ("killed by signal 9
(SIGKILL)"), and OOM is named as one possibility only, with what could and could not be read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verlctl.monitor.finding import Finding

if TYPE_CHECKING:
    from verlctl.runtime.executor import Executor

KILLED = "killed"  # the watcher's category for a SIGKILL without OOM evidence (like "stalled": no log signature)

#: The kernel's OOM-kill lines (global OOM killer, memcg OOM, the summary line of newer kernels).
KERNEL_OOM_ERE = r"Out of memory: Killed process|oom-kill:|Memory cgroup out of memory"

#: One exec: the oom_kill counter of the training's memory cgroup, and the number of OOM lines in the kernel
#: log; '-' for what cannot be read. $1: the pid whose cgroup is meant ('': the target's own cgroup root); $3:
#: the counter file read before (the same file again: the leader that named it may be gone now).
_PROBE = r"""
pid=$1
files=$3
if [ -z "$files" ] && [ -n "$pid" ] && [ -r "/proc/$pid/cgroup" ]; then
  v2=$(sed -n 's/^0:://p' "/proc/$pid/cgroup" | head -n 1)
  v1=$(sed -n 's/^[0-9]*:[^:]*memory[^:]*://p' "/proc/$pid/cgroup" | head -n 1)
  [ -n "$v1" ] && files="/sys/fs/cgroup/memory$v1/memory.oom_control"
  [ -n "$v2" ] && files="$files /sys/fs/cgroup$v2/memory.events"
fi
[ -n "$3" ] || files="$files /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control"
c=-
used=
for f in $files; do
  if [ -r "$f" ]; then
    n=$(awk '$1 == "oom_kill" { print $2 }' "$f")
    if [ -n "$n" ]; then c=$n; used=$f; break; fi
  fi
done
echo "cgroup $c $used"
if k=$(dmesg 2>/dev/null) && [ -n "$k" ]; then
  echo "kernel $(printf '%s\n' "$k" | grep -cE "$2")"
else
  echo "kernel -"
fi
"""


@dataclass(frozen=True)
class OomCounters:
    """OOM kills counted so far: in the training's memory cgroup, and in the kernel log (None: unreadable)."""

    cgroup: int | None = None
    kernel: int | None = None
    cgroup_file: str = ""  # the counter file read (read again for the comparison)


def parse_counters(text: str) -> OomCounters:
    """The probe's two lines (``cgroup N`` / ``kernel N``, ``-`` for unreadable) as counters."""
    values: dict[str, int | None] = {"cgroup": None, "kernel": None}
    used = ""
    for line in text.splitlines():
        key, _, rest = line.strip().partition(" ")
        value, _, where = rest.partition(" ")
        if key in values and value.isdigit():
            values[key] = int(value)
            used = where if key == "cgroup" else used
    return OomCounters(cgroup=values["cgroup"], kernel=values["kernel"], cgroup_file=used)


def read_counters(ex: Executor, pid: int | None = None, same_as: OomCounters | None = None) -> OomCounters:
    """The counters in the target now (``pid``: whose memory cgroup; the target's own otherwise; ``same_as``:
    the cgroup file of that earlier reading). Never raises: what cannot be read is None."""
    again = same_as.cgroup_file if same_as is not None else ""
    try:
        res = ex.run(["sh", "-c", _PROBE, "verlctl-oom-probe", "" if pid is None else str(pid), KERNEL_OOM_ERE,
                      again], timeout=30)
    except Exception:  # noqa: BLE001 - evidence is best effort: an unreachable target reads as unknown
        return OomCounters()
    return parse_counters(res.out) if res.ok else OomCounters()


#: A reading after a death that cannot read what the reading at the watch's start could is taken again, this many
#: readings in all, this far apart: a probe right after an OOM kill can fail (the cgroup still at its limit, the
#: engine busy), and an unread counter would make an OOM kill a mere "killed".
REREAD_TRIES = 4
REREAD_WAIT_S = 1.0


def read_after(read: Callable[[], OomCounters], before: OomCounters, tries: int = REREAD_TRIES,
               wait_s: float = REREAD_WAIT_S) -> OomCounters:
    """The counters after a death (``read()``), read again while something readable in ``before`` is not."""
    after = read()
    for _ in range(tries - 1):
        if not ((before.cgroup is not None and after.cgroup is None)
                or (before.kernel is not None and after.kernel is None)):
            break
        time.sleep(wait_s)
        after = read()
    return after


def oom_evidence(before: OomCounters, after: OomCounters, engine_oom_killed: bool = False) -> tuple[list[str], list[str]]:
    """(what says an OOM kill happened since ``before``, what was read and says none / could not be read)."""
    said: list[str] = []
    checked: list[str] = []
    if engine_oom_killed:
        said.append("the container engine reports the container OOM-killed (docker inspect: OOMKilled)")
    for name, what in (("cgroup", "the memory cgroup's oom_kill counter"), ("kernel", "the kernel log")):
        b, a = getattr(before, name), getattr(after, name)
        if a is None:
            checked.append(f"{what} could not be read")
        elif b is not None and a > b:
            said.append(f"{what} went from {b} to {a}" if name == "cgroup"
                        else f"{what} has {a - b} new OOM-kill line(s)")
        elif b is None and name == "cgroup" and a > 0:
            said.append(f"{what} is {a}")  # no baseline: the cgroup's own count still says an OOM kill
        elif b is None and name == "kernel":
            checked.append(f"{what} could not be compared (it was unreadable when the watch started)")
        else:
            checked.append(f"{what} shows no new OOM kill")
    return said, checked


def killed_finding(root: Finding | None, before: OomCounters, after: OomCounters, engine_oom_killed: bool,
                   host_oom_hint: str) -> Finding:
    """The finding for a training that died of SIGKILL (exit 137) without a device OOM in its log:
    ``host_oom`` when the evidence says the OOM killer did it, else ``killed`` with OOM as a possibility."""
    said, checked = oom_evidence(before, after, engine_oom_killed)
    also = f" (the log also shows {root.category} at line {root.line})" if root is not None else ""
    line = root.line if root is not None else 0
    excerpt = "start_verl.sh exits with status 137"
    if said:
        return Finding(
            category="host_oom", line=line, excerpt=excerpt,
            message="the training was killed by signal 9 (SIGKILL, exit 137) and the log has no device "
            f"out-of-memory error: the kernel OOM killer (host RAM) did it: {'; '.join(said)}{also}",
            hint=host_oom_hint,
        )
    return Finding(
        category=KILLED, line=line, excerpt=excerpt,
        message="the training was killed by signal 9 (SIGKILL, exit 137): by a user, a tool (`kill -9`, "
        "`docker exec ... kill`), a scheduler, or the kernel OOM killer; OOM is one possibility only: "
        f"{'; '.join(checked) or 'nothing says it was one'}{also}",
        hint="find who sent it: `dmesg` / `journalctl -k` for 'Out of memory: Killed process' (host RAM), the "
        "container's memory limit and `docker inspect` (OOMKilled), and any job scheduler or user on the node",
    )
