"""Network: the `ip addr` parser on the real capture, /proc/net/route, and the live psutil probe checked
against the real `hostname -I` and `ip route` of this machine."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from detect_helpers import capture
from verlctl.detect.network import (
    NetInterface,
    NetworkInfo,
    host_ips,
    parse_ip_addr,
    parse_proc_net_route,
    probe_network,
)

IP_ADDR = "ip-addr-multi-nic-bond-partial-sglang-issue3514.txt"


def test_ip_addr_capture() -> None:
    interfaces, warnings = parse_ip_addr(capture("network", IP_ADDR))
    assert [i.name for i in interfaces] == ["lo", "ens8f0np0", "ens8f1np1", "ens16f0", "ens16f1", "ens16f2"]
    lo, s0, s1, d0, d1, cut = interfaces
    assert lo.is_loopback and lo.is_up and lo.ipv4 == ["127.0.0.1/8"] and lo.ipv6 == ["::1/128"]
    assert lo.state == "UNKNOWN" and lo.mtu == 65536
    assert (s0.master, s0.state, s0.is_up, s0.mac, s0.altnames) == (
        "bond0", "UP", True, "8e:ce:cf:7f:81:d6", ["enp151s0f0np0"],
    )  # fmt: skip
    assert (s1.master, s1.altnames) == ("bond0", ["enp151s0f1np1"])
    assert s0.ipv4 == [] and s1.ipv4 == []  # bonded slaves carry no address
    assert (d0.state, d0.is_up, d0.mac, d0.altnames) == ("DOWN", False, "6c:fe:54:a1:40:30", ["enp50s0f0"])
    assert "NO-CARRIER" in d0.flags and "UP" in d0.flags
    assert (d1.state, d1.is_up, d1.mac) == ("DOWN", False, "6c:fe:54:a1:40:31")
    assert (cut.name, cut.is_up, cut.state, cut.flags) == (
        "ens16f2",
        None,
        None,
        ["NO-CARRIER", "BROADCAST", "MULTICAST"],
    )
    assert warnings == ["ens16f2: the line is cut inside its flags; its state is unknown"]
    assert host_ips(interfaces) == []  # only loopback has an address in the visible part


def test_ip_addr_with_addresses_and_hostname_i_order() -> None:
    # derived from the capture: an address added on a visible, up interface
    text = capture("network", IP_ADDR).replace(
        "    altname enp151s0f0np0\n",
        "    altname enp151s0f0np0\n    inet 10.1.2.3/24 brd 10.1.2.255 scope global ens8f0np0\n"
        "    inet6 fe80::1/64 scope link \n    inet6 2001:db8::5/64 scope global \n",
    )
    interfaces, _ = parse_ip_addr(text)
    s0 = interfaces[1]
    assert s0.ipv4 == ["10.1.2.3/24"] and s0.ipv6 == ["fe80::1/64", "2001:db8::5/64"]
    assert host_ips(interfaces) == ["10.1.2.3", "2001:db8::5"]  # no loopback, no link-local
    info = NetworkInfo(interfaces=interfaces, host_ips=host_ips(interfaces))
    assert info.primary_ipv4 == "10.1.2.3"


def test_proc_net_route_default() -> None:
    text = (
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
        "bond0\t00000000\t0101A8C0\t0003\t0\t0\t50\t00000000\t0\t0\t0\n"
        "docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
        "down0\t00000000\t0102A8C0\t0002\t0\t0\t1\t00000000\t0\t0\t0\n"
    )
    routes = parse_proc_net_route(text)
    assert [(r.interface, r.gateway, r.metric) for r in routes] == [
        ("bond0", "192.168.1.1", 50),
        ("eth0", "192.0.2.1", 100),
    ]


@pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2 'ip'")
def test_live_default_route_matches_ip_route() -> None:
    info = probe_network()
    assert isinstance(info, NetworkInfo)
    out = subprocess.run(
        ["ip", "-4", "route", "show", "default"], capture_output=True, text=True, check=True
    ).stdout
    if not out.strip():
        assert info.default_interface is None
        return
    words = out.split()
    assert info.default_interface == words[words.index("dev") + 1]
    if "via" in words:
        assert info.default_gateway == words[words.index("via") + 1]


@pytest.mark.skipif(shutil.which("hostname") is None, reason="needs hostname(1)")
def test_live_host_ips_match_hostname_dash_i() -> None:
    proc = subprocess.run(["hostname", "-I"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("this hostname(1) has no -I")
    info = probe_network()
    assert isinstance(info, NetworkInfo)
    assert info.host_ips == proc.stdout.split()


def test_live_interfaces_match_ip_addr() -> None:
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2 'ip'")
    live = probe_network()
    assert isinstance(live, NetworkInfo)
    parsed, warnings = parse_ip_addr(
        subprocess.run(["ip", "addr"], capture_output=True, text=True, check=True).stdout
    )
    assert warnings == []
    by_name = {i.name: i for i in parsed}
    for iface in live.interfaces:
        other: NetInterface = by_name[iface.name]
        assert sorted(iface.ipv4) == sorted(other.ipv4), iface.name
        assert iface.mtu == other.mtu
        assert iface.is_loopback == other.is_loopback
