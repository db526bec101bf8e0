"""The SwanLab host, tried before launch (issue 24): with SwanLab logging to a server (cloud mode), the run's
logger reaches ``logging.swanlab.host`` from the container, through the spec's proxy unless its no_proxy covers
the host. ``check`` and ``launch`` try it the same way from this host (the container shares the host's
network), within 5 s, and say which of these it is, with the fix: reachable, the name does not resolve,
the connection is refused, no answer in time, the proxy is in the way, or no_proxy does not cover the host.

The try (``detect/reach.py``) sends ``GET /`` and nothing else: the API key is never sent nor shown.
"""

from __future__ import annotations

from collections.abc import Iterable

from verlctl.checks.findings import Finding, error, info
from verlctl.checks.verdict import Need, VerdictCtx, fact_rule
from verlctl.spec.model import RunSpec

HOST = "logging.swanlab.host"


def swanlab_target(spec: RunSpec) -> str | None:
    """The URL the run's SwanLab logger reaches (None: SwanLab off, or a mode that reaches no server)."""
    sw = spec.logging.swanlab
    if not sw.enabled or sw.mode != "cloud" or not sw.host:
        return None
    return sw.host


@fact_rule("swanlab_reach", ("swanlab_reachable", "swanlab_dns", "swanlab_refused", "swanlab_timeout",
                             "swanlab_proxy", "swanlab_no_proxy", "swanlab_unreachable"), needs=(Need.SERVICES,))
def _swanlab_reach(ctx: VerdictCtx) -> Iterable[Finding]:
    """The SwanLab host answers from this host, the way the container reaches it (proxy and no_proxy)."""
    url = swanlab_target(ctx.spec)
    r = ctx.facts.swanlab_reach
    if url is None or r is None or r.url != url:
        return
    proxy = ctx.spec.container.proxy
    host = r.host
    off = "or log without the server: logging.swanlab.mode=offline"
    if r.outcome == "reachable":
        way = f"through the proxy {r.proxy}" if r.proxy else "directly"
        yield info("swanlab_reachable", f"the SwanLab host {url} answers from this host {way} (HTTP {r.status}, "
                                        f"{r.elapsed_s:.2f} s)", HOST)
    elif r.outcome == "dns":
        yield error("swanlab_dns", f"SwanLab host {url}: {r.detail}", HOST,
                    f"check the name in {HOST}, or give the server's IP address (http://IP:PORT); {off}")
    elif r.outcome == "refused":
        yield error("swanlab_refused", f"SwanLab host {url}: {r.detail}", HOST,
                    f"check that the SwanLab server runs there and the port in {HOST}; {off}")
    elif r.outcome == "timeout":
        yield error("swanlab_timeout", f"SwanLab host {url}: {r.detail}", HOST,
                    f"the server may be down or a firewall drops the connection: check the address in {HOST}; {off}")
    elif r.outcome == "no_proxy":
        now = proxy.no_proxy or ""
        yield error("swanlab_no_proxy",
                    f"no_proxy ({now or 'not set'}) does not cover the SwanLab host {host}: the container sends "
                    f"{url} through the proxy, and {r.detail}; directly it answers ({r.direct})",
                    "container.proxy.no_proxy",
                    f"add {host} to no_proxy: --set container.proxy.no_proxy={','.join(p for p in (now, host) if p)}")
    elif r.outcome == "proxy":
        yield error("swanlab_proxy",
                    f"the proxy is in the way of the SwanLab host {url}: {r.detail}; directly: {r.direct}",
                    "container.proxy.https" if url.startswith("https:") else "container.proxy.http",
                    f"fix the proxy setting, or if the server is on your network add {host} to "
                    f"container.proxy.no_proxy; {off}")
    else:
        yield error("swanlab_unreachable", f"SwanLab host {url}: {r.detail}", HOST,
                    f"check that {HOST} is the SwanLab server's address (http(s)://host:port); {off}")
