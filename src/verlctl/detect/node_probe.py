"""What the multi-node pre-flight learns on each node, in the node's container, before anything starts.

:data:`NODE_PROBE` is a small Python program run with the container's ``python3`` (the interpreter
``run_training.sh`` uses) through the node's executor; it prints one JSON line: the Python and Ray versions,
``/dev/shm``'s size and the RAM, the ports of the given ranges already bound, the source address and NIC of
the route to the head, and the checkpoint marker (written on the head, read back on the others). Only the
marker is ever written, in the checkpoint directory, under a name of its own. The image each container runs
is added from the node's Docker engine.
"""

from __future__ import annotations

import json

from pydantic import BaseModel


class NodeFacts(BaseModel):
    """One node's answers (``error``: why there are none)."""

    address: str
    head: bool = False
    image_id: str | None = None  # the image the node's container runs (Docker's content-addressed id)
    python: str | None = None
    ray: str | None = None
    shm_bytes: int | None = None
    ram_bytes: int | None = None
    busy_ports: dict[str, list[int]] = {}  # range name -> ports of it already bound on the node
    route_src: str | None = None  # this node's address on the route to the head
    route_iface: str | None = None  # the NIC that has route_src
    route_error: str | None = None  # no route to the head
    interfaces: dict[str, str] = {}  # NIC -> its IPv4 address
    marker_seen: bool | None = None  # None: not checked (no checkpoint directory)
    marker_error: str | None = None
    error: str | None = None


NODE_PROBE = r'''
import errno, json, os, socket, sys

args = json.loads(sys.argv[1])
out = {"python": "%d.%d.%d" % sys.version_info[:3], "ray": None, "busy_ports": {}, "interfaces": {}}
try:
    import importlib.metadata as md
    out["ray"] = md.version("ray")
except Exception:
    pass
try:
    st = os.statvfs("/dev/shm")
    out["shm_bytes"] = st.f_blocks * st.f_frsize
except OSError:
    pass
try:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                out["ram_bytes"] = int(line.split()[1]) * 1024
except (OSError, ValueError):
    pass
for name, (lo, hi) in sorted(args.get("ports", {}).items()):
    busy = []
    for port in range(lo, hi + 1):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("0.0.0.0", port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                busy.append(port)
        finally:
            s.close()
    out["busy_ports"][name] = busy
try:
    import fcntl, struct
    for _, nic in socket.if_nameindex():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", nic[:15].encode()))  # SIOCGIFADDR
            out["interfaces"][nic] = socket.inet_ntoa(raw[20:24])
        except OSError:
            pass
        finally:
            s.close()
except (ImportError, OSError):
    pass
head = args.get("head")
if head:
    s = None
    try:
        family, _, _, _, addr = socket.getaddrinfo(head, 9, 0, socket.SOCK_DGRAM)[0]
        s = socket.socket(family, socket.SOCK_DGRAM)
        s.connect(addr)  # no packet is sent: the kernel picks the route and its source address
        out["route_src"] = s.getsockname()[0]
        out["route_iface"] = next((n for n, a in out["interfaces"].items() if a == out["route_src"]), None)
    except OSError as e:  # socket.gaierror included: the head's name does not resolve there
        out["route_error"] = e.strerror or str(e)
    finally:
        if s is not None:
            s.close()
marker = args.get("marker")
if marker:
    path, token = marker["path"], marker["token"]
    try:
        if marker.get("write"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with os.fdopen(fd, "w") as fh:
                fh.write(token)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd) as fh:
            out["marker_seen"] = fh.read(256) == token
    except FileNotFoundError:
        out["marker_seen"] = False
    except OSError as e:
        out["marker_seen"] = False
        out["marker_error"] = "%s: %s" % (path, e.strerror or e)
print("VERLCTL_NODE " + json.dumps(out))
'''


def parse_node_probe(address: str, head: bool, code: int, text: str) -> NodeFacts:
    for line in reversed(text.splitlines()):
        if line.startswith("VERLCTL_NODE "):
            try:
                return NodeFacts.model_validate({**json.loads(line[len("VERLCTL_NODE "):]), "address": address,
                                                 "head": head})
            except ValueError as exc:
                return NodeFacts(address=address, head=head, error=f"unreadable probe output: {exc}")
    tail = " ".join(text.split())[-200:]
    return NodeFacts(address=address, head=head, error=f"the probe failed (exit {code}): {tail or 'no output'}")
