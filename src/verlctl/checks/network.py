"""``cluster.socket_ifname`` / ``cluster.master_addr``: the interface exists and is up; on the head, master_addr
is this machine's and on that interface."""

from __future__ import annotations

from verlctl.checks.findings import Finding, error, info, warning
from verlctl.detect.check_probes import literal_ipv4
from verlctl.detect.common import Unavailable
from verlctl.detect.network import NetInterface, NetworkInfo
from verlctl.spec.model import RunSpec


def local_ipv4(network: NetworkInfo) -> set[str]:
    addrs = {a for i in network.interfaces for a in i.ipv4_addresses}
    return addrs | {a for a in network.host_ips if ":" not in a}


def is_head(spec: RunSpec, network: NetworkInfo, master_ips: list[str]) -> bool:
    """As start_verl.sh decides: a single node is the head; otherwise the node that has master_addr."""
    if len(spec.cluster.nodes) <= 1:
        return True
    return bool(set(master_ips) & local_ipv4(network))


def find_interface(network: NetworkInfo, name: str) -> NetInterface | None:
    return network.interface(name) or next((i for i in network.interfaces if name in i.altnames), None)


def _interface_choices(network: NetworkInfo) -> str:
    usable = [i for i in network.interfaces if not i.is_loopback and i.is_up is not False]
    listed = [f"{i.name} ({', '.join(i.ipv4_addresses) or 'no IPv4'})" for i in usable]
    return ", ".join(listed) or "none up"


def _check_ifname(spec: RunSpec, network: NetworkInfo) -> tuple[list[Finding], NetInterface | None]:
    name = spec.cluster.socket_ifname
    if not name:
        return [], None
    iface = find_interface(network, name)
    if iface is None:
        return [
            error(
                "socket_ifname_unknown",
                f"network interface {name} does not exist on this machine",
                "cluster.socket_ifname",
                f"interfaces here: {_interface_choices(network)}",
            )
        ], None
    if iface.is_up is False:
        return [
            error(
                "socket_ifname_down",
                f"network interface {name} is down",
                "cluster.socket_ifname",
                f"bring it up (`ip link set {name} up`) or choose another: {_interface_choices(network)}",
            )
        ], iface
    return [], iface


def _check_master(
    spec: RunSpec, network: NetworkInfo, iface: NetInterface | None, master_ips: list[str]
) -> list[Finding]:
    master = spec.cluster.master_addr
    if not master:
        return []
    field = "cluster.master_addr"
    if not master_ips:
        return [error("master_addr_unresolved", f"master_addr {master} does not resolve to an IPv4 address", field)]
    local = local_ipv4(network)
    if not is_head(spec, network, master_ips):
        return [info("not_head", f"this machine is not the Ray head {master}: it was checked as a worker node", field)]
    if not set(master_ips) & local:
        return [
            error(
                "master_addr_not_local",
                f"master_addr {master} is not an address of this machine, which is the Ray head "
                "(`ray start --head --node-ip-address` fails)",
                field,
                f"addresses here: {', '.join(sorted(local)) or 'none'}",
            )
        ]
    if iface is not None and not set(master_ips) & set(iface.ipv4_addresses):
        carrier = next((i.name for i in network.interfaces if set(master_ips) & set(i.ipv4_addresses)), "?")
        return [
            error(
                "master_addr_not_on_ifname",
                f"master_addr {master} is on interface {carrier}, not on socket_ifname {iface.name} "
                f"({', '.join(iface.ipv4_addresses) or 'no IPv4'})",
                field,
                f"set socket_ifname: {carrier}, or a master_addr of {iface.name}",
            )
        ]
    return []


def check_network(
    spec: RunSpec, network: NetworkInfo | Unavailable | None, master_ips: list[str] | None = None
) -> list[Finding]:
    """socket_ifname exists and is up; on the head, master_addr is this machine's and on that interface."""
    c = spec.cluster
    if not c.socket_ifname and not c.master_addr:
        return []
    if network is None:
        return []
    if isinstance(network, Unavailable):
        field = "cluster.socket_ifname" if c.socket_ifname else "cluster.master_addr"
        return [warning("network_unchecked", f"the network interfaces were not checked: {network.reason}", field)]
    ips = master_ips if master_ips is not None else literal_ipv4(c.master_addr)
    found, iface = _check_ifname(spec, network)
    return found + _check_master(spec, network, iface, ips)
