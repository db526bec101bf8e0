"""Network interfaces: addresses, up/down, the default-route interface, ``hostname -I``.

The live probe uses psutil (interfaces, addresses, up/down) and ``/proc/net/route`` (the default
route); :func:`parse_ip_addr` reads saved ``ip addr`` output. verl's launch code needs the
interface for ``GLOO_SOCKET_IFNAME``/``HCCL_SOCKET_IFNAME`` and the address for the Ray head.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import struct

from pydantic import BaseModel

from verlctl.detect.common import ProbeModel, Unavailable, UnavailableCode, unavailable, unquote_line


class NetInterface(BaseModel):
    name: str
    is_up: bool | None = None  # administratively up and with a carrier (psutil isup / ip 'LOWER_UP')
    is_loopback: bool = False
    ipv4: list[str] = []  # addresses with prefix length, e.g. '10.0.0.5/24'
    ipv6: list[str] = []
    mac: str | None = None
    mtu: int | None = None
    speed_mbps: int | None = None
    state: str | None = None  # ip addr 'state UP|DOWN|UNKNOWN'
    flags: list[str] = []
    master: str | None = None  # a bond/bridge this interface is enslaved to
    altnames: list[str] = []

    @property
    def ipv4_addresses(self) -> list[str]:
        return [a.split("/")[0] for a in self.ipv4]


class DefaultRoute(BaseModel):
    interface: str
    gateway: str | None = None
    metric: int = 0


class NetworkInfo(ProbeModel):
    hostname: str | None = None
    interfaces: list[NetInterface] = []
    default_interface: str | None = None
    default_gateway: str | None = None
    host_ips: list[str] = []  # what `hostname -I` prints: addresses of up, non-loopback interfaces
    warnings: list[str] = []

    def interface(self, name: str) -> NetInterface | None:
        return next((i for i in self.interfaces if i.name == name), None)

    @property
    def primary_ipv4(self) -> str | None:
        """The first IPv4 address of the default-route interface (else the first of ``host_ips``)."""
        if self.default_interface:
            iface = self.interface(self.default_interface)
            if iface and iface.ipv4:
                return iface.ipv4_addresses[0]
        v4 = [a for a in self.host_ips if ":" not in a]
        return v4[0] if v4 else None


# --------------------------------------------------------------------------------------------------
# /proc/net/route
# --------------------------------------------------------------------------------------------------

_RTF_UP = 0x1


def _hex_ipv4(value: str) -> str:
    return socket.inet_ntoa(struct.pack("<I", int(value, 16)))


def parse_proc_net_route(text: str) -> list[DefaultRoute]:
    """Default routes (destination and mask 0.0.0.0) that are up, lowest metric first."""
    routes: list[DefaultRoute] = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 8:
            continue
        try:
            dest, gateway, flags, metric, mask = f[1], f[2], int(f[3], 16), int(f[6]), f[7]
        except ValueError:
            continue
        if dest != "00000000" or mask != "00000000" or not flags & _RTF_UP:
            continue
        gw = _hex_ipv4(gateway) if gateway != "00000000" else None
        routes.append(DefaultRoute(interface=f[0], gateway=gw, metric=metric))
    return sorted(routes, key=lambda r: r.metric)


# --------------------------------------------------------------------------------------------------
# `ip addr`
# --------------------------------------------------------------------------------------------------

_IP_LINK = re.compile(r"^(\d+):\s+([^:\s@]+)(?:@(\S+))?:\s+<([^>]*)(>?)\s*(.*)$")


def parse_ip_addr(text: str) -> tuple[list[NetInterface], list[str]]:
    """Parse ``ip addr`` / ``ip a`` output: (interfaces, warnings about what was cut or unreadable)."""
    interfaces: list[NetInterface] = []
    warnings: list[str] = []
    current: NetInterface | None = None
    for raw in text.splitlines():
        line = unquote_line(raw).rstrip()
        if not line.strip():
            continue
        m = _IP_LINK.match(line.strip()) if not line[:1].isspace() else None
        if m:
            flags = [f for f in m.group(4).split(",") if f]
            rest = m.group(6)
            current = NetInterface(name=m.group(2), flags=flags, is_loopback="LOOPBACK" in flags)
            interfaces.append(current)
            if not m.group(5):
                warnings.append(f"{current.name}: the line is cut inside its flags; its state is unknown")
                if not m.group(4).endswith(","):
                    current.flags = flags[:-1]  # the last flag may be cut
                continue
            mtu = re.search(r"\bmtu (\d+)", rest)
            current.mtu = int(mtu.group(1)) if mtu else None
            state = re.search(r"\bstate (\S+)", rest)
            current.state = state.group(1) if state else None
            master = re.search(r"\bmaster (\S+)", rest)
            current.master = master.group(1) if master else None
            current.is_up = current.state == "UP" or ("UP" in flags and "LOWER_UP" in flags)
            if "NO-CARRIER" in flags:
                current.is_up = False
            continue
        if current is None:
            continue  # the prompt line, prose
        words = line.split()
        if not words:
            continue
        if words[0].startswith("link/") and len(words) > 1:
            current.mac = words[1] if words[0] != "link/none" else None
        elif words[0] == "altname" and len(words) > 1:
            current.altnames.append(words[1])
        elif words[0] == "inet" and len(words) > 1:
            current.ipv4.append(words[1] if "/" in words[1] else f"{words[1]}/32")
        elif words[0] == "inet6" and len(words) > 1:
            current.ipv6.append(words[1])
    return interfaces, warnings


def host_ips(interfaces: list[NetInterface]) -> list[str]:
    """``hostname -I``: every address of every administratively up, non-loopback interface; no IPv6
    link-local. An interface that is up but has no carrier (``docker0`` with no container attached) counts,
    as it does for ``hostname -I``.

    Like ``hostname -I`` (which walks getifaddrs), all IPv4 addresses come first, then IPv6.
    """
    out: list[str] = []

    def admin_up(i: NetInterface) -> bool:
        if i.flags:
            return "UP" in (f.upper() for f in i.flags)
        return i.is_up is not False

    up = [i for i in interfaces if not i.is_loopback and admin_up(i)]
    for iface in up:
        for a in iface.ipv4:
            out.append(a.split("/")[0])
    for iface in up:
        for a in iface.ipv6:
            addr = a.split("/")[0].split("%")[0]
            try:
                if ipaddress.IPv6Address(addr).is_link_local:
                    continue
            except ValueError:
                continue
            out.append(addr)
    return out


# --------------------------------------------------------------------------------------------------
# live probe
# --------------------------------------------------------------------------------------------------


def _prefix(netmask: str | None, default: int) -> int:
    if not netmask:
        return default
    try:
        if ":" in netmask:
            return bin(int(ipaddress.IPv6Address(netmask))).count("1")
        return ipaddress.IPv4Network(f"0.0.0.0/{netmask}").prefixlen
    except ValueError:
        return default


def probe_network(route_file: str = "/proc/net/route") -> NetworkInfo | Unavailable:
    try:
        import psutil
    except ImportError:
        return unavailable("network", UnavailableCode.MISSING_DEPENDENCY, "psutil not installed")
    info = NetworkInfo(hostname=socket.gethostname())
    try:
        addrs = psutil.net_if_addrs()
        stats = psutil.net_if_stats()
    except OSError as exc:
        return unavailable("network", UnavailableCode.FAILED, f"cannot list interfaces: {exc}")
    for name, entries in addrs.items():
        st = stats.get(name)
        iface = NetInterface(
            name=name,
            is_up=st.isup if st else None,
            mtu=st.mtu if st else None,
            speed_mbps=(st.speed or None) if st else None,
            flags=[f.upper() for f in (getattr(st, "flags", "") or "").split(",") if f] if st else [],
        )
        iface.is_loopback = "LOOPBACK" in iface.flags or name == "lo"
        for a in entries:
            if a.family == socket.AF_INET:
                iface.ipv4.append(f"{a.address}/{_prefix(a.netmask, 32)}")
            elif a.family == socket.AF_INET6:
                iface.ipv6.append(f"{a.address.split('%')[0]}/{_prefix(a.netmask, 128)}")
            elif a.family == psutil.AF_LINK:
                iface.mac = a.address or None
        info.interfaces.append(iface)
    for name, st in stats.items():  # up interfaces without any address are still interfaces
        if name not in addrs:
            info.interfaces.append(NetInterface(name=name, is_up=st.isup, mtu=st.mtu))
    try:
        with open(route_file, encoding="utf-8") as fh:
            routes = parse_proc_net_route(fh.read())
    except OSError as exc:
        routes = []
        info.warnings.append(f"cannot read {route_file}: {exc.strerror or exc}")
    if routes:
        info.default_interface, info.default_gateway = routes[0].interface, routes[0].gateway
    else:
        info.warnings.append("no default route")
    info.host_ips = host_ips(info.interfaces)
    return info
