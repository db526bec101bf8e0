"""Try an HTTP(S) service from this host the way the run's container will reach it: through its proxy unless
its ``no_proxy`` covers the host (the rules Python's ``requests`` applies: ``*``, an exact name or address,
a domain suffix, a CIDR range), within a bounded time.

The request is ``GET /`` with a ``Host`` header and nothing else: no key, no cookie, no query (a secret can
never be in the request line). Used for the SwanLab host before launch (``checks/swanlab_reach.py``).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel

#: The whole try, proxy and direct together, never takes longer than this.
DEFAULT_BUDGET_S = 5.0

Outcome = Literal["reachable", "dns", "refused", "timeout", "proxy", "no_proxy", "not_http", "error"]


class ReachResult(BaseModel):
    """What trying ``url`` from this host found (one line per attempt in ``detail``)."""

    url: str
    host: str
    port: int
    proxy: str | None = None  # the proxy the container would use for this host (None: direct)
    outcome: Outcome
    status: int | None = None  # the HTTP status the service answered
    detail: str  # one line: what happened on the way the container takes
    direct: str | None = None  # when the proxy failed: what a direct try found ("HTTP 200", "refused", ...)
    elapsed_s: float = 0.0


def no_proxy_covers(no_proxy: str | None, host: str) -> bool:
    """Whether ``host`` (a name or an address) bypasses the proxy with this no_proxy list."""
    for item in (p.strip() for p in (no_proxy or "").split(",")):
        if not item:
            continue
        item = item.split(":", 1)[0] if item.count(":") == 1 else item  # "host:port" entries
        if item == "*" or item.lower() == host.lower():
            return True
        if "/" in item:
            try:
                if ipaddress.ip_address(host) in ipaddress.ip_network(item, strict=False):
                    return True
            except ValueError:
                pass
            continue
        suffix = item.lower() if item.startswith(".") else "." + item.lower()
        if host.lower().endswith(suffix):
            return True
    return False


def proxy_for(url: str, http: str | None, https: str | None, no_proxy: str | None) -> str | None:
    """The proxy a client in the container uses for ``url``: ``https_proxy`` for https, ``http_proxy`` for
    http, none when no_proxy covers the host."""
    parts = urlsplit(url)
    proxy = https if parts.scheme == "https" else http
    if not proxy or no_proxy_covers(no_proxy, parts.hostname or ""):
        return None
    return proxy


class _Deadline:
    def __init__(self, budget_s: float) -> None:
        self.end = time.monotonic() + budget_s

    def left(self) -> float:
        return max(0.05, self.end - time.monotonic())


def _resolve(host: str, port: int, deadline: _Deadline) -> tuple[list[tuple[int, tuple[str, int]]] | None, str]:
    """The host's addresses (getaddrinfo in a thread: it has no timeout of its own), or why not."""
    try:
        ipaddress.ip_address(host)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return [(family, (host, port))], ""
    except ValueError:
        pass
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["ok"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            box["err"] = exc

    t = threading.Thread(target=run, name="verlctl-reach-dns", daemon=True)
    t.start()
    t.join(deadline.left())
    if "ok" in box:
        infos = box["ok"]
        assert isinstance(infos, list)
        return [(fam, (addr[0], addr[1])) for fam, _t, _p, _c, addr in infos], ""
    if "err" in box:
        exc = box["err"]
        return None, f"the name {host} does not resolve ({getattr(exc, 'strerror', None) or exc})"
    return None, f"the name {host} did not resolve in time"


def _connect(host: str, port: int, deadline: _Deadline) -> tuple[socket.socket | None, Outcome | None, str]:
    addrs, why = _resolve(host, port, deadline)
    if addrs is None:
        return None, "dns", why
    last: tuple[Outcome, str] = ("error", f"no address for {host}")
    for family, addr in addrs:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(deadline.left())
        try:
            s.connect(addr)
            s.settimeout(deadline.left())
            return s, None, ""
        except ConnectionRefusedError:
            last = ("refused", f"{host}:{port} refused the connection (nothing listens there)")
        except TimeoutError:
            last = ("timeout", f"{host}:{port} did not answer within the time allowed")
        except OSError as exc:
            last = ("error", f"cannot connect to {host}:{port}: {exc.strerror or exc}")
        s.close()
    return None, last[0], last[1]


def _read_status(sock: socket.socket) -> int | None:
    """The status code of an HTTP response's first line, or None when the answer is not HTTP. Reads the
    whole head (up to the blank line), so that after a proxy's CONNECT answer the tunnel starts clean."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 8192:
        chunk = sock.recv(1024)
        if not chunk:
            break
        data += chunk
    line = data.split(b"\r\n", 1)[0].decode("latin-1", errors="replace").split()
    if len(line) >= 2 and line[0].startswith("HTTP/") and line[1].isdigit():
        return int(line[1])
    return None


def _request(sock: socket.socket, target: str, host_header: str) -> int | None:
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: verlctl-reach\r\n"
                 "Accept: */*\r\nConnection: close\r\n\r\n".encode("latin-1"))
    return _read_status(sock)


def _tls(sock: socket.socket, host: str) -> socket.socket:
    return ssl.create_default_context().wrap_socket(sock, server_hostname=host)


def _direct(scheme: str, host: str, port: int, deadline: _Deadline) -> tuple[Outcome, int | None, str]:
    sock, outcome, why = _connect(host, port, deadline)
    if sock is None:
        assert outcome is not None
        return outcome, None, why
    try:
        if scheme == "https":
            sock = _tls(sock, host)
        status = _request(sock, "/", f"{host}:{port}")
    except TimeoutError:
        return "timeout", None, f"{host}:{port} accepted the connection but sent no answer in time"
    except ssl.SSLError as exc:
        return "error", None, f"TLS with {host}:{port} failed: {exc.reason or exc}"
    except OSError as exc:
        return "error", None, f"{host}:{port} closed the connection: {exc.strerror or exc}"
    finally:
        sock.close()
    if status is None:
        return "not_http", None, f"{host}:{port} answered, but not with HTTP"
    return "reachable", status, f"HTTP {status} from {host}:{port}"


def _via_proxy(proxy: str, scheme: str, host: str, port: int, deadline: _Deadline) -> tuple[bool, int | None, str]:
    """(the service answered through the proxy, its status, one line)."""
    p = urlsplit(proxy)
    phost, pport = p.hostname or "", p.port or (443 if p.scheme == "https" else 80)
    sock, _outcome, why = _connect(phost, pport, deadline)
    shown = f"{p.scheme}://{phost}:{pport}"  # never the proxy's credentials
    if sock is None:
        return False, None, f"the proxy {shown} cannot be reached: {why}"
    try:
        if scheme == "https":
            sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode("latin-1"))
            status = _read_status(sock)
            if status != 200:
                return False, None, f"the proxy {shown} refused to connect to {host}:{port} (" + (
                    f"HTTP {status})" if status else "no HTTP answer)")
            sock = _tls(sock, host)
            status = _request(sock, "/", f"{host}:{port}")
        else:
            status = _request(sock, f"http://{host}:{port}/", f"{host}:{port}")
    except TimeoutError:
        return False, None, f"the proxy {shown} sent no answer for {host}:{port} in time"
    except (ssl.SSLError, OSError) as exc:
        return False, None, f"through the proxy {shown}: {getattr(exc, 'strerror', None) or exc}"
    finally:
        sock.close()
    if status is None:
        return False, None, f"the proxy {shown} answered, but not with HTTP"
    if status in (502, 503, 504, 407, 403):  # the proxy's own refusals: it did not reach (or may not reach) it
        return False, status, f"the proxy {shown} answered HTTP {status} for {host}:{port}"
    return True, status, f"HTTP {status} from {host}:{port} through the proxy {shown}"


def try_url(url: str, *, http_proxy: str | None = None, https_proxy: str | None = None,
            no_proxy: str | None = None, budget_s: float = DEFAULT_BUDGET_S) -> ReachResult:
    """Try ``url`` as the container will: through its proxy unless no_proxy covers the host; when the proxy
    fails, also directly (to tell "the proxy is in the way" from "no_proxy does not cover the host")."""
    t0 = time.monotonic()
    deadline = _Deadline(budget_s)
    parts = urlsplit(url)
    scheme, host = parts.scheme or "http", parts.hostname or ""
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        port = 443 if scheme == "https" else 80
    proxy = proxy_for(url, http_proxy, https_proxy, no_proxy)

    def done(outcome: Outcome, status: int | None, detail: str, direct: str | None = None) -> ReachResult:
        shown = None
        if proxy:
            pp = urlsplit(proxy)
            shown = f"{pp.scheme}://{pp.hostname}:{pp.port}" if pp.port else f"{pp.scheme}://{pp.hostname}"
        return ReachResult(url=url, host=host, port=port, proxy=shown, outcome=outcome, status=status,
                           detail=detail, direct=direct, elapsed_s=round(time.monotonic() - t0, 3))

    if proxy is None:
        outcome, status, detail = _direct(scheme, host, port, deadline)
        return done(outcome, status, detail)
    ok, status, detail = _via_proxy(proxy, scheme, host, port, deadline)
    if ok:
        return done("reachable", status, detail)
    d_outcome, _d_status, d_detail = _direct(scheme, host, port, deadline)
    if d_outcome == "reachable":
        return done("no_proxy", status, detail, d_detail)
    return done("proxy", status, detail, d_detail)
