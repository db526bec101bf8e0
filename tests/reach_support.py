"""Real servers on the loopback for the SwanLab reachability tests (no mock of the network): an HTTP server
that records every request it gets, a forwarding HTTP proxy, a proxy that answers 502 (a corporate proxy that
cannot reach a LAN host), a server that accepts and never answers, one that answers in another protocol,
and a port nothing listens on. Each runs in a daemon thread of the test process and is closed by the test.

Imported by name (pytest puts tests/ on sys.path)."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


class Recorded:
    """Every request a server got: its request line and headers, as bytes decoded."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.lock = threading.Lock()

    def add(self, text: str) -> None:
        with self.lock:
            self.requests.append(text)

    def text(self) -> str:
        with self.lock:
            return "\n".join(self.requests)


def _serve(server: ThreadingHTTPServer) -> Iterator[int]:
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        t.join(10)


@contextlib.contextmanager
def http_server(host: str = "127.0.0.1", status: int = 200) -> Iterator[tuple[int, Recorded]]:
    """An HTTP server answering ``status`` to every GET, recording each request line and its headers."""
    rec = Recorded()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            rec.add(f"{self.requestline}\n{self.headers}")
            body = b"swanlab stand-in\n"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    for port in _serve(server):
        yield port, rec


@contextlib.contextmanager
def proxy_server(forward: bool) -> Iterator[tuple[int, Recorded]]:
    """An HTTP proxy on 127.0.0.1: ``forward`` relays a GET of an absolute URL to its server (a working
    proxy); otherwise it answers 502 Bad Gateway to everything, CONNECT included (a proxy that cannot reach
    the host)."""
    rec = Recorded()

    class Handler(BaseHTTPRequestHandler):
        def _bad_gateway(self) -> None:
            self.send_response(502)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_CONNECT(self) -> None:  # noqa: N802
            rec.add(f"{self.requestline}\n{self.headers}")
            self._bad_gateway()

        def do_GET(self) -> None:  # noqa: N802
            rec.add(f"{self.requestline}\n{self.headers}")
            if not forward:
                self._bad_gateway()
                return
            u = urlsplit(self.path)
            try:
                conn = http.client.HTTPConnection(u.hostname or "", u.port or 80, timeout=5)
                conn.request("GET", u.path or "/", headers={"Host": self.headers.get("Host", "")})
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
            except OSError:
                self._bad_gateway()
                return
            self.send_response(resp.status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    for port in _serve(server):
        yield port, rec


@contextlib.contextmanager
def raw_server(reply: bytes | None) -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts, then sends ``reply`` and closes, or (None) never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.1)
    stop = threading.Event()
    held: list[socket.socket] = []

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            if reply is None:
                held.append(conn)  # keep it open, say nothing
            else:
                with contextlib.suppress(OSError):
                    conn.sendall(reply)
                conn.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        t.join(10)
        for c in held:
            c.close()
        sock.close()


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound by the kernel's choice, then released)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port
