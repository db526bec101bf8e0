"""A proxy URL with a user name or password is refused: it would be written into start_verl.sh,
spec.resolved.yaml, the run record and the plan (secrets never in rendered files, records or output).

Every way in (spec file, --set, the process environment's http_proxy) gives one line naming the field, exit 2,
the password nowhere in the output, and nothing written. A proxy without credentials still reaches the script.
"""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT, clean_env, run_cli

PASSWORD = "S3cret-Proxy-PW-9x"
EXAMPLE = str(ROOT / "examples" / "run.yaml")


def _refused(res, field: str, out: Path) -> None:  # type: ignore[no-untyped-def]
    text = res.out + res.err
    assert res.code == 2, text
    errors = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {field}: a user name or password"), res.err
    assert PASSWORD not in text and "Traceback" not in text
    assert not out.exists()


def test_a_proxy_password_from_the_spec_file_is_refused_and_not_shown(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f'container:\n  proxy:\n    http: "http://alice:{PASSWORD}@10.0.0.1:3128"\n')
    out = tmp_path / "plan"
    _refused(run_cli("plan", "-c", str(spec), "-o", str(out)), "container.proxy.http", out)


def test_a_proxy_password_from_a_flag_or_the_environment_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    res = run_cli("plan", "-c", EXAMPLE, "--set", f"container.proxy.https=https://bob:{PASSWORD}@proxy:8080",
                  "-o", str(out))
    _refused(res, "container.proxy.https", out)
    res = run_cli("plan", "-c", EXAMPLE, "-o", str(out),
                  env=clean_env(http_proxy=f"http://carol:{PASSWORD}@proxy.corp:3128"))
    _refused(res, "container.proxy.http", out)
    res = run_cli("check", "-c", EXAMPLE, env=clean_env(https_proxy=f"http://u:{PASSWORD}@p:1"))
    assert res.code == 2 and PASSWORD not in res.out + res.err, res.out + res.err


def test_a_proxy_without_credentials_reaches_the_script(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    res = run_cli("plan", "-c", EXAMPLE, "--set", "container.proxy.http=http://10.0.0.1:3128",
                  "--set", "container.proxy.no_proxy=localhost,127.0.0.1", "-o", str(out))
    assert res.code == 0, res.out + res.err
    script = (out / "start_verl.sh").read_text()
    assert "http://10.0.0.1:3128" in script
    # an "@" after the host part (a path) is not a credential
    res = run_cli("plan", "-c", EXAMPLE, "--set", "container.proxy.http=http://10.0.0.1:3128/a@b",
                  "-o", str(tmp_path / "plan2"))
    assert res.code == 0, res.out + res.err
