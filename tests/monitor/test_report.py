"""`verlctl report` (one self-contained HTML page) and the charts behind it and `status --plot`.

The page is opened in a real headless Chromium (Debian's package, installed by .ci/run) with the network
unreachable: it must load, show the four charts with the run's points, and its screenshot must not be blank.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from verlctl.monitor import charts
from verlctl.monitor.report_html import ReportData, render

from conftest import clean_env, run_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SECRET = "SECRETKEY-report-5d1c"


def _step_line(step: int) -> str:
    score = 0.1 + 0.02 * step
    return (
        f"(TaskRunner pid=7) step:{step} - critic/score/mean:{score:.4f} - response_length/mean:{300 + 5 * step}.0"
        f" - perf/throughput:{1200 + 10 * step}.5 - timing_s/step:{20 + step % 3}.25 - actor/pg_loss:-0.01\n"
    )


def _make_run(state_home: Path, steps: int = 30, error: bool = True) -> str:
    """A recorded host-runtime run whose log is a host file (the record format `launch` writes)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(state_home))
        return _record(state_home, steps, error)


def _record(state_home: Path, steps: int, error: bool) -> str:
    from verlctl.runtime.records import Attempt, RunRecord

    log = state_home / "train.log"
    body = "Total training steps: 100\n" + "".join(_step_line(s) for s in range(1, steps + 1))
    if error:
        body += "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n"
    log.write_text(body, encoding="utf-8")
    rec = RunRecord(
        run_id="20261130-120000-exp-ab12",
        created_at=time.time() - 600,
        runtime="host",
        workdir=str(state_home),
        scripts_dir=str(state_home),
        run_log=str(log),
        train_log=str(log),
        checkpoints=str(state_home / "ckpt"),
        experiment="exp <b>&amp;",
        verl_version="0.7.0",
        attempts=[
            Attempt(number=1, pgid=4242, started_at=time.time() - 600),
            Attempt(number=2, pgid=4343, started_at=time.time() - 60, reason="device_oom", features=["offload"],
                    resumed_from="global_step_20"),
        ],
    )
    rec.save()
    (rec.dir / rec.spec_file).write_text("train:\n  steps: 100\nlogging:\n  swanlab:\n    enabled: true\n", encoding="utf-8")
    rec.event("launch", container="<script>alert(1)</script>")
    rec.event("recovery", reason="device_oom", added=["offload"])
    return rec.run_id


def _env(tmp_path: Path) -> dict[str, str]:
    return clean_env(XDG_STATE_HOME=str(tmp_path), SWANLAB_API_KEY=SECRET)


# ------------------------------------------------------------------ charts (pure)


def test_series_takes_the_first_present_key_and_the_last_value_of_a_repeated_step() -> None:
    s = charts.series(
        [
            (1, {"critic/score/mean": 0.1, "timing/step": 9.0}),
            (2, {"critic/score/mean": 0.2, "timing_s/step": 3.0, "timing/step": 8.0}),
            (2, {"critic/score/mean": 0.25}),  # a restart printed step 2 again
            (3, {"critic/score/mean": float("nan"), "perf/throughput": True}),  # not numbers to chart
        ]
    )
    assert s["score"] == [(1, 0.1), (2, 0.25)]
    assert s["step_time"] == [(1, 9.0), (2, 3.0)]
    assert s["throughput"] == []


def test_thin_bounds_a_series_and_keeps_its_ends() -> None:
    pts = [(i, float(i)) for i in range(10_001)]
    out = charts.thin(pts, 100)
    assert len(out) == 100 and out[0] == (0, 0.0) and out[-1] == (10_000, 10_000.0)
    assert charts.thin(pts[:5], 100) == pts[:5]
    assert len(charts.series((i, {"critic/score/mean": 1.0}) for i in range(5000))["score"]) == charts.MAX_POINTS


def test_svg_chart_maps_extremes_to_the_plot_edges() -> None:
    spec = charts.CHARTS[0]
    svg = charts.svg_chart(spec, [(1, 0.0), (5, 1.0), (9, 0.5)], width=200, height=100)
    coords = re.search(r'<polyline points="([^"]+)"', svg).group(1).split()  # type: ignore[union-attr]
    xy = [tuple(map(float, c.split(","))) for c in coords]
    # plot area: left 56, right 200-12, top 28, bottom 100-28
    assert xy[0] == (56.0, 72.0) and xy[1] == (122.0, 28.0) and xy[2] == (188.0, 50.0)
    assert 'data-points="3"' in svg and svg.count("<circle") == 3
    assert "no data" in charts.svg_chart(spec, [])


def test_text_chart_draws_min_low_and_max_full() -> None:
    spec = charts.CHARTS[0]
    out = charts.text_chart(spec, [(1, 0.0), (2, 1.0)], width=10, height=2).splitlines()
    assert out[0] == "Score (mean)"
    assert out[1].endswith("│ █") and out[2].endswith("│▁█")
    assert out[3].strip().startswith("└") and out[-1].strip().startswith("step 1 … 2")
    long = charts.text_chart(spec, [(i, float(i)) for i in range(1000)], width=40, height=4).splitlines()
    assert all(len(line.split("│", 1)[1]) == 40 for line in long[1:5])


# ------------------------------------------------------------------ the page


def test_render_escapes_every_run_value() -> None:
    page = render(
        ReportData(
            run_id="r1",
            experiment="<img src=x onerror=alert(1)>",
            state="failed (exit 1)",
            spec_yaml="a: '<script>'\n",
            events=[{"time": 0, "event": "launch", "container": "</td><script>x()</script>"}],
            findings=[{"message": "<b>oom</b>", "line": 3, "hint": "h", "excerpt": "<i>"}],
        )
    )
    assert "<script>" not in page.replace("<script>'", "") and "<img" not in page
    assert "&lt;script&gt;x()&lt;/script&gt;" in page and 'class="bad"' in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched


def test_report_command_writes_one_page_without_secrets(tmp_path: Path) -> None:
    run_id = _make_run(tmp_path)
    out = tmp_path / "report.html"
    r = run_cli("report", run_id[:12], "-o", str(out), env=_env(tmp_path))
    assert r.code == 0, r.err
    assert "30 steps charted" in r.out
    page = out.read_text(encoding="utf-8")
    assert SECRET not in page
    assert re.findall(r'data-chart="(\w+)" data-points="(\d+)"', page) == [
        ("score", "30"), ("response_length", "30"), ("throughput", "30"), ("step_time", "30"),
        ("pg_loss", "30"),  # a health metric's chart: drawn because the log has actor/pg_loss
    ]
    assert "device_oom" in page and "global_step_20" in page and "step 30 of 100" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "exp &lt;b&gt;&amp;amp;" in page
    assert not list(tmp_path.glob(".report.html.*"))  # the temporary file is gone


def test_report_replaces_a_planted_symlink_instead_of_following_it(tmp_path: Path) -> None:
    run_id = _make_run(tmp_path, steps=3, error=False)
    victim = tmp_path / "victim"
    victim.write_text("keep\n", encoding="utf-8")
    out = tmp_path / "report.html"
    out.symlink_to(victim)
    refused = run_cli("report", run_id, "-o", str(out), env=_env(tmp_path))  # issue 22 A9: only with --force
    assert refused.code == 2 and "--force" in refused.err and out.is_symlink(), refused.err
    r = run_cli("report", run_id, "-o", str(out), "--force", env=_env(tmp_path))
    assert r.code == 0, r.err
    assert victim.read_text(encoding="utf-8") == "keep\n"
    assert not out.is_symlink() and "<svg" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-o", "{tmp}"], "is a directory"),
        (["-o", "{tmp}/missing/dir/r.html"], "does not exist"),
        (["--log", "{tmp}/nope.log", "-o", "{tmp}/r.html"], "--log"),
    ],
)
def test_report_bad_output_or_log_is_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    run_id = _make_run(tmp_path, steps=2, error=False)
    r = run_cli("report", run_id, *[a.format(tmp=tmp_path) for a in args], env=_env(tmp_path))
    assert r.code != 0 and needle in r.err and "Traceback" not in r.err
    assert not (tmp_path / "r.html").exists()


# ------------------------------------------------------------------ in a real browser


def _png_pixels(data: bytes) -> tuple[int, int, set[bytes]]:
    """Width, height and the distinct RGB(A) pixels of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = ctype = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and ctype in (2, 6)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 4 if ctype == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours: set[bytes] = set()
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        if y % 4 == 0:
            colours.update(bytes(line[i : i + 3]) for i in range(0, stride, bpp * 4))
        prev = line
    return width, height, colours


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM
    return subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",  # any network fetch would fail
            f"--user-data-dir={profile}", *args,
        ],
        capture_output=True, text=True, timeout=180, check=False,
    )


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (installed by .ci/run)")
def test_report_loads_offline_in_chromium_and_is_not_blank(tmp_path: Path) -> None:
    run_id = _make_run(tmp_path)
    out = tmp_path / "report.html"
    assert run_cli("report", run_id, "-o", str(out), env=_env(tmp_path)).code == 0
    url = out.as_uri()

    dom = _chromium("--dump-dom", url, profile=tmp_path / "p1")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<svg") == 5 and dom.stdout.count("<polyline") == 5  # + actor/pg_loss's chart
    assert "global_step_20" in dom.stdout

    shot = tmp_path / "shot.png"
    r = _chromium(f"--screenshot={shot}", "--window-size=1200,1400", "--hide-scrollbars", url, profile=tmp_path / "p2")
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    width, height, colours = _png_pixels(shot.read_bytes())
    assert (width, height) == (1200, 1400)
    assert len(colours) > 20, f"screenshot looks blank: {len(colours)} colours"
    # the chart line colour (#2f6fde) is on the page, i.e. the charts were drawn
    assert any(abs(c[0] - 0x2F) < 24 and abs(c[1] - 0x6F) < 24 and abs(c[2] - 0xDE) < 24 for c in colours)


# ------------------------------------------------------------------ bundle


def _bundle_members(path: Path) -> dict[str, str]:
    import tarfile

    with tarfile.open(path, "r:gz") as tar:
        out = {}
        for m in tar.getmembers():
            fh = tar.extractfile(m)
            assert fh is not None
            out[m.name.split("/", 1)[1]] = fh.read().decode()
        return out


def test_scrubber_removes_keys_private_hosts_and_homes() -> None:
    from verlctl.monitor.bundle import Scrubber

    s = Scrubber.from_env(["node-a.corp", "10.1.2.3"], {"SWANLAB_API_KEY": SECRET, "HOME": "/srv/alice"})
    text = (
        f"key {SECRET} api_key: 'abc123' SWANLAB_API_KEY=zzz token=t0k node-a.corp:6379 10.1.2.3 10.1.2.30 "
        "/srv/alice/models /home/bob/x node-a.corpus"
    )
    out = s(text)
    for leaked in (SECRET, "abc123", "zzz", "t0k", "node-a.corp:", "alice", "bob", " 10.1.2.3 "):
        assert leaked not in out, (leaked, out)
    assert "10.1.2.30" in out and "node-a.corpus" in out  # only whole names are replaced
    assert "~/models" in out and "/home/<user>/x" in out and "<private-host-" in out


def test_bundle_of_a_host_run_names_what_it_could_not_collect(tmp_path: Path) -> None:
    run_id = _make_run(tmp_path)
    log = tmp_path / "train.log"
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"login api_key={SECRET} on gpu-node-17 from {Path.home()}/ckpt /home/carol/data\n")
    out = tmp_path / "b.tar.gz"
    env = _env(tmp_path)
    r = run_cli("bundle", run_id, "-o", str(out), "--private", "gpu-node-17", env=env)
    assert r.code == 0, r.err
    raw = out.read_bytes()
    files = _bundle_members(out)
    blob = "\n".join(files.values())
    for leaked in (SECRET, "gpu-node-17", "/home/carol", f"{Path.home()}/ckpt"):
        assert leaked not in blob
    assert SECRET.encode() not in raw
    assert {"spec.resolved.yaml", "events.jsonl", "log-tail.txt", "diagnosis.json", "manifest.json",
            "versions-verlctl.txt", "target.json"} <= set(files)
    diag = json.loads(files["diagnosis.json"])
    assert diag["findings"][0]["category"] == "device_oom"
    manifest = json.loads(files["manifest.json"])
    assert "scripts/start_verl.sh" in manifest["unavailable"]  # this hand-made record has no scripts
    assert manifest["files"] == sorted(f for f in files if f != "manifest.json")


def test_status_plot_charts_the_steps_in_the_terminal(tmp_path: Path) -> None:
    run_id = _make_run(tmp_path, steps=30)
    r = run_cli("status", run_id, "--plot", env={**_env(tmp_path), "COLUMNS": "80"})
    assert r.code == 0, r.err
    for title in ("Score (mean)", "Response length (mean) (tokens)", "Throughput (tokens/s/device)", "Step time (s)"):
        assert title in r.out
    assert "step 1 … 30" in r.out and "█" in r.out
    j = run_cli("status", run_id, "--plot", "--json", env=_env(tmp_path))
    assert j.code == 0, j.err
    charts_doc = json.loads(j.out)["charts"]
    assert charts_doc["available"] is True
    assert [p[0] for p in charts_doc["series"]["score"]] == list(range(1, 31))


# ------------------------------------------------------------------ issue 24: ticks, restarts, smoothing


def test_svg_chart_has_round_ticks_restart_markers_and_a_moving_average() -> None:
    spec = charts.CHARTS[0]
    pts = [(i, 0.1 + 0.02 * i) for i in range(1, 31)]
    svg = charts.svg_chart(spec, pts, markers=[(20, "attempt 2: offload added after out of memory")], smooth=5)
    y_ticks = re.findall(r'data-axis="y">([^<]+)<', svg)
    x_ticks = [int(t) for t in re.findall(r'data-axis="x">(\d+)<', svg)]
    assert len(y_ticks) >= 3 and x_ticks[0] == 1 and x_ticks[-1] == 30 and len(x_ticks) >= 3, (y_ticks, x_ticks)
    assert 'data-markers="1"' in svg and 'data-step="20"' in svg
    assert ">attempt 2: offload added after out of memory</text>" in svg
    assert 'class="s" data-smooth="5"' in svg
    assert charts.smoothed([(1, 1.0), (2, 3.0), (3, 5.0)], 2) == [(1, 1.0), (2, 2.0), (3, 4.0)]
    assert charts.nice_ticks(0.12, 0.7) == [0.2, 0.4, 0.6] and charts.nice_ticks(0, 100) == [0, 25, 50, 75, 100]


def test_text_chart_has_step_ticks_and_marks_each_restart() -> None:
    spec = charts.CHARTS[0]
    out = charts.text_chart(spec, [(i, float(i)) for i in range(1, 31)], width=30, height=6,
                            markers=[(12, "attempt 2: offload added after out of memory")])
    lines = out.splitlines()
    tick_line = next(ln for ln in lines if "└" in ln)
    assert tick_line.count("┬") >= 3
    labels = lines[lines.index(tick_line) + 1]
    assert labels.split()[0] == "1" and labels.split()[-1] == "30"
    caret = lines[lines.index(tick_line) + 2]
    assert caret.strip() == "^" and caret.index("^") == tick_line.index("└") + 1 + 11  # the column of step 12
    assert "^ step 12: attempt 2: offload added after out of memory" in out


def _recovered_run(state_home: Path) -> str:
    from verlctl.runtime.records import Attempt, RunRecord

    log = state_home / "train.log"
    body = "".join(_step_line(s) for s in range(1, 21)) + "RuntimeError: NPU out of memory.\n"
    offset = len(body.encode())
    body += "".join(_step_line(s) for s in range(20, 41))
    log.write_text(body, encoding="utf-8")
    rec = RunRecord(run_id="20261201-110000-recov-cd34", created_at=time.time() - 600, runtime="host",
                    workdir=str(state_home), scripts_dir=str(state_home), run_log=str(log), train_log=str(log),
                    checkpoints=str(state_home / "ckpt"), experiment="recov", verl_version="0.7.0",
                    attempts=[Attempt(number=1, pgid=4242, started_at=time.time() - 600),
                              Attempt(number=2, pgid=4343, started_at=time.time() - 60, reason="device_oom",
                                      features=["offload"], resumed_from="/ckpt/global_step_20",
                                      log_offset=offset)])
    rec.save()
    (rec.dir / rec.spec_file).write_text("train:\n  steps: 40\n", encoding="utf-8")
    rec.event("started", attempt=1)
    rec.event("alert", category="device_oom", message="NPU out of memory", attempt=1, step=20)
    rec.event("recovery", category="device_oom", add_feature="offload", resumed_from="/ckpt/global_step_20")
    rec.event("started", attempt=2)
    rec.event("finished", attempt=2)
    return rec.run_id


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (installed by .ci/run)")
def test_the_report_draws_ticks_restart_markers_and_smoothing_in_chromium(tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(tmp_path))
        run_id = _recovered_run(tmp_path)
    out = tmp_path / "report.html"
    res = run_cli("report", run_id, "-o", str(out), "--smooth", "5", "--json", env=_env(tmp_path))
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["state"] == "finished" and doc["steps_charted"] == 40 and doc["written"] == str(out)
    dom = _chromium("--dump-dom", out.as_uri(), profile=tmp_path / "p1")
    assert dom.returncode == 0, dom.stderr[-2000:]
    charts = dom.stdout.count("<svg")  # the four of every run and the health charts of what the log has
    assert charts >= 4 and dom.stdout.count('data-markers="1"') == charts and dom.stdout.count('data-step="20"') == charts
    assert dom.stdout.count("attempt 2: offload added after out of memory") >= charts
    assert dom.stdout.count('data-smooth="5"') == charts and len(re.findall('data-axis="x"', dom.stdout)) >= 12
    assert '<span id="state" class="ok">finished</span>' in dom.stdout
    # the OOM of attempt 1 is what recovery dealt with: said as such, not as this run's diagnosis (U17)
    assert "recovered: attempt 2 added offload after out of memory in step 21" in dom.stdout
    assert 'id="findings"' not in dom.stdout and "No error found in the log." in dom.stdout
    shot = tmp_path / "report.png"
    r = _chromium(f"--screenshot={shot}", "--window-size=1200,1400", "--hide-scrollbars", out.as_uri(),
                  profile=tmp_path / "p2")
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    _w, _h, colours = _png_pixels(shot.read_bytes())

    def drawn(rgb: tuple[int, int, int]) -> bool:
        return any(all(abs(c[i] - rgb[i]) < 28 for i in range(3)) for c in colours)

    assert drawn((0x2F, 0x6F, 0xDE)), "the series line"
    assert drawn((0xD9, 0x48, 0x0F)), "the restart marker"
    assert drawn((0x0B, 0x8A, 0x5C)), "the moving average"


def test_bundle_replaces_this_hosts_and_the_runs_own_names_by_default_and_says_which(tmp_path: Path) -> None:
    # N6: the node's own name and addresses stay out of a shared bundle without --private; the manifest and
    # the output say which kinds were replaced (never the names themselves); --json says it too.
    import socket

    run_id = _make_run(tmp_path)
    host = socket.gethostname()
    with open(tmp_path / "train.log", "a", encoding="utf-8") as fh:
        fh.write(f"[verlctl 08:40:00] node {host}: Ray head at 198.51.100.7:37766, 8 x NPU\n"
                 "Local node IP: 198.51.100.7\n")
    out = tmp_path / "b.tar.gz"
    r = run_cli("bundle", run_id, "-o", str(out), "--json", env=_env(tmp_path))
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    files = _bundle_members(out)
    blob = "\n".join(files.values())
    assert "198.51.100.7" not in blob and f"node {host}:" not in blob
    kinds = set(doc["replaced_hosts"].values())
    assert "this host's name" in kinds and "a node name or address in the run's log" in kinds, doc
    manifest = json.loads(files["manifest.json"])
    assert manifest["replaced_hosts"] == doc["replaced_hosts"] and doc["written"] == str(out)
    text = run_cli("bundle", run_id, "-o", str(tmp_path / "c.tar.gz"), env=_env(tmp_path))
    assert "replaced host names and addresses: <private-host-" in text.out, text.out
    kept = run_cli("bundle", run_id, "-o", str(tmp_path / "d.tar.gz"), "--keep-host-names", env=_env(tmp_path))
    assert kept.code == 0 and "198.51.100.7" in _bundle_members(tmp_path / "d.tar.gz")["log-tail.txt"]
