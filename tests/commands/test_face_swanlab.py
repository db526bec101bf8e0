"""The SwanLab host is tried before launch (issue 24): ``check`` and ``launch`` try ``logging.swanlab.host``
the way the container reaches it (the spec's proxy, unless its no_proxy covers the host), within 5 s, and say
which it is — reachable, the name does not resolve, refused, no answer, the proxy in the way, no_proxy not
covering the host — with the fix. ``plan`` and ``init`` say it was not checked.

Against real servers on the loopback (tests/reach_support.py): no mock of the network. The API key is never
in a request the servers got, nor in the output."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from reach_support import closed_port, http_server, proxy_server, raw_server
from test_verdict_cli import run_files, spec_file, verlctl
from verlctl.detect.reach import no_proxy_covers, proxy_for, try_url

from conftest import clean_env

KEY = "swl-SECRET-never-sent-7c41"


def test_reachable_directly_with_the_status_and_nothing_secret_in_the_request() -> None:
    with http_server() as (port, rec):
        r = try_url(f"http://127.0.0.1:{port}")
    assert (r.outcome, r.status, r.proxy) == ("reachable", 200, None)
    assert r.elapsed_s < 5
    assert rec.requests and rec.requests[0].startswith("GET / HTTP/1.1")


def test_refused_dns_not_http_and_no_answer_within_the_budget() -> None:
    r = try_url(f"http://127.0.0.1:{closed_port()}")
    assert r.outcome == "refused" and "refused the connection" in r.detail
    r = try_url("http://swanlab.invalid:8000", budget_s=3)
    assert r.outcome == "dns" and "swanlab.invalid" in r.detail and r.elapsed_s < 3.5
    with raw_server(b"SSH-2.0-OpenSSH_9.6\r\n\r\n") as port:
        r = try_url(f"http://127.0.0.1:{port}")
    assert r.outcome == "not_http"
    with raw_server(None) as port:
        t0 = time.monotonic()
        r = try_url(f"http://127.0.0.1:{port}", budget_s=1.5)
        took = time.monotonic() - t0
    assert r.outcome == "timeout" and "no answer" in r.detail
    assert 1.0 < took < 4.0  # bounded by the budget (generous for a loaded machine), not by the server


def test_the_default_budget_is_at_most_five_seconds() -> None:
    with raw_server(None) as port:
        t0 = time.monotonic()
        r = try_url(f"http://127.0.0.1:{port}")
        took = time.monotonic() - t0
    assert r.outcome == "timeout" and took < 5.0 + 1.5


def test_no_proxy_rules_are_the_ones_requests_applies() -> None:
    assert no_proxy_covers("localhost,10.0.0.0/8", "10.143.2.129")
    assert no_proxy_covers(".corp", "swanlab.corp") and no_proxy_covers("corp", "swanlab.corp")
    assert no_proxy_covers("*", "anything") and no_proxy_covers("swanlab.corp:8000", "swanlab.corp")
    assert not no_proxy_covers("localhost,127.0.0.1", "127.0.0.2")
    assert not no_proxy_covers("lab.corp", "swanlab.corp") and not no_proxy_covers(None, "h")
    assert proxy_for("https://h", "http://p:1", None, None) is None  # https uses https_proxy only
    assert proxy_for("http://h", "http://p:1", None, "h") is None
    assert proxy_for("http://h", "http://p:1", None, "other") == "http://p:1"


def test_a_proxy_that_cannot_reach_a_lan_host_no_proxy_gap_and_proxy_in_the_way() -> None:
    # SwanLab on 127.0.0.2 (a LAN host stand-in): no_proxy covers only localhost and 127.0.0.1
    with http_server("127.0.0.2") as (sport, srec), proxy_server(forward=False) as (pport, prec):
        url = f"http://127.0.0.2:{sport}"
        r = try_url(url, http_proxy=f"http://127.0.0.1:{pport}", no_proxy="localhost,127.0.0.1")
        assert r.outcome == "no_proxy" and r.status == 502 and r.direct == f"HTTP 200 from 127.0.0.2:{sport}"
        assert prec.requests[0].startswith(f"GET {url}/ HTTP/1.1")  # the container's way: through the proxy
        # no_proxy covering it: direct, the proxy gets nothing more
        before = len(prec.requests)
        r = try_url(url, http_proxy=f"http://127.0.0.1:{pport}", no_proxy="localhost,127.0.0.1,127.0.0.2")
        assert r.outcome == "reachable" and r.proxy is None and len(prec.requests) == before
        assert len(srec.requests) == 2
    # neither way: the proxy is in the way (and the host refuses directly)
    with proxy_server(forward=False) as (pport, _):
        r = try_url(f"http://127.0.0.2:{closed_port()}", http_proxy=f"http://127.0.0.1:{pport}")
    assert r.outcome == "proxy" and "HTTP 502" in r.detail and "refused" in (r.direct or "")
    # the proxy itself down
    r = try_url(f"http://127.0.0.2:{closed_port()}", http_proxy=f"http://127.0.0.1:{closed_port()}")
    assert r.outcome == "proxy" and "cannot be reached" in r.detail


def test_a_working_proxy_reaches_it() -> None:
    with http_server("127.0.0.2") as (sport, srec), proxy_server(forward=True) as (pport, prec):
        r = try_url(f"http://127.0.0.2:{sport}", http_proxy=f"http://user:pw@127.0.0.1:{pport}")
    assert r.outcome == "reachable" and r.proxy == f"http://127.0.0.1:{pport}" and r.status == 200
    assert len(prec.requests) == 1 and len(srec.requests) == 1
    assert "pw" not in r.model_dump_json()  # the proxy's credentials are never shown


def test_an_https_proxy_refusing_connect_is_the_proxy_in_the_way() -> None:
    with proxy_server(forward=False) as (pport, prec):
        r = try_url(f"https://127.0.0.2:{closed_port()}", https_proxy=f"http://127.0.0.1:{pport}")
    assert r.outcome == "proxy" and "refused to connect" in r.detail
    assert prec.requests[0].startswith("CONNECT 127.0.0.2:")


# ------------------------------------------------------------------ through the commands (the one verdict)


def swanlab_spec(tmp: Path, host: str, **extra: Any) -> Path:
    files = run_files(tmp)
    files.update({"logging.swanlab.enabled": True, "logging.swanlab.mode": "cloud", "logging.swanlab.host": host,
                  "container.runtime": "host", **extra})
    return spec_file(tmp, **files)


def codes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["code"]: f for f in doc["findings"] if f["code"].startswith("swanlab_")}


def test_check_says_reachable_and_the_key_is_never_sent_or_shown(tmp_path: Path) -> None:
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), SWANLAB_API_KEY=KEY)
    with http_server() as (port, rec):
        spec = swanlab_spec(tmp_path, f"http://127.0.0.1:{port}")
        rc, doc = verlctl("check", "-c", str(spec), "--json", env=env)
        assert "swanlab_reachable" in codes(doc), doc["findings"]
        assert rc in (0, 2)
        from conftest import run_cli

        res = run_cli("check", "-c", str(spec), env=env, timeout=300)
    assert "swanlab_reachable" in res.out + res.err and "answers from this host directly" in res.out + res.err
    assert KEY not in res.out + res.err and KEY not in str(doc)
    assert len(rec.requests) == 2 and KEY not in rec.text()


def test_check_refused_is_an_error_with_the_fix_and_plan_says_not_checked(tmp_path: Path) -> None:
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), SWANLAB_API_KEY=KEY)
    spec = swanlab_spec(tmp_path, f"http://127.0.0.1:{closed_port()}")
    rc, doc = verlctl("check", "-c", str(spec), "--json", env=env)
    f = codes(doc)["swanlab_refused"]
    assert rc == 2 and f["severity"] == "error" and f["field"] == "logging.swanlab.host"
    assert "SwanLab server runs there" in f["hint"]
    rc, doc = verlctl("plan", "-c", str(spec), "--json", env=env)
    assert not codes(doc)
    assert {"rule": "swanlab_reach", "need": "services",
            "reason": "plan does not try the SwanLab host; verlctl check and launch do"} in doc["not_checked"]


def test_launch_dry_run_refuses_a_no_proxy_gap_with_the_setting_that_fixes_it(tmp_path: Path) -> None:
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), SWANLAB_API_KEY=KEY)
    with http_server("127.0.0.2") as (sport, _srec), proxy_server(forward=False) as (pport, prec):
        spec = swanlab_spec(tmp_path, f"http://127.0.0.2:{sport}", **{
            "container.proxy.http": f"http://127.0.0.1:{pport}", "container.proxy.no_proxy": "localhost,127.0.0.1"})
        rc, doc = verlctl("launch", "-c", str(spec), "--dry-run", "--json", env=env)
        f = codes(doc)["swanlab_no_proxy"]
        assert rc == 2 and f["field"] == "container.proxy.no_proxy"
        assert f["hint"] == "add 127.0.0.2 to no_proxy: --set container.proxy.no_proxy=localhost,127.0.0.1,127.0.0.2"
        fixed = ["--set", "container.proxy.no_proxy=localhost,127.0.0.1,127.0.0.2"]
        rc, doc = verlctl("check", "-c", str(spec), "--json", *fixed, env=env)
        assert "swanlab_reachable" in codes(doc) and "swanlab_no_proxy" not in codes(doc)
    assert KEY not in prec.text()


@pytest.mark.parametrize("mode", ["offline", "local"])
def test_no_server_is_tried_when_swanlab_reaches_none(tmp_path: Path, mode: str) -> None:
    with http_server() as (port, rec):
        spec = swanlab_spec(tmp_path, f"http://127.0.0.1:{port}", **{"logging.swanlab.mode": mode})
        _rc, doc = verlctl("check", "-c", str(spec), "--json",
                           env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state")))
    assert not codes(doc) and rec.requests == []
