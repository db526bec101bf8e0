"""SwanLab inside the target: install when missing, log in (cloud mode) without exposing the key.

The key only ever lives in the 0600 env file beside the scripts. The login command sources that file
inside the target and reads the key from its environment, so it appears in no argv, no other file and no
output. ``swanlab.login(save=False)`` checks the key and host against the server without writing
credentials to ``~/.swanlab``: verl logs in by itself at start from ``SWANLAB_API_KEY`` (tracking.py).
Offline / local modes need no key and must not export one (verl would try to log in with it).
"""

from __future__ import annotations

from typing import Any

from verlctl.errors import RuntimeFailure
from verlctl.render.render import ENV_FILE
from verlctl.runtime.executor import Executor
from verlctl.spec.resolve import ResolvedSpec
from verlctl.verl.environment import proxy_env
from verlctl.verl.table import Ctx

_LOGIN = (
    "import os, sys, swanlab\n"
    "key = os.environ.get('SWANLAB_API_KEY')\n"
    "if not key:\n"
    "    print('VERLCTL_SWANLAB no API key in the env file'); sys.exit(4)\n"
    "try:\n"
    "    ok = swanlab.login(api_key=key, host=os.environ.get('SWANLAB_HOST'), save=False, relogin=True)\n"
    "except Exception as exc:\n"
    "    msg = ' '.join(str(exc).replace(key, '***').split())[:300]\n"
    "    print('VERLCTL_SWANLAB login failed: %s: %s' % (type(exc).__name__, msg)); sys.exit(5)\n"
    "print('VERLCTL_SWANLAB ok' if ok else 'VERLCTL_SWANLAB login failed'); sys.exit(0 if ok else 5)\n"
)


def _with_env_file(env_file: str, argv: list[str]) -> list[str]:
    """Run argv with the env file's variables exported (they never pass through argv)."""
    return ["bash", "-c", 'set -a; . "$1"; set +a; shift; exec "$@"', "verlctl-env", env_file, *argv]


def setup(ex: Executor, resolved: ResolvedSpec, scripts_dir: str, report: Any, login: bool = True) -> str | None:
    spec = resolved.spec
    sw = spec.logging.swanlab
    report.step(f"SwanLab ({sw.mode}) in {ex.describe()}")
    res = ex.run(["python3", "-c", "import swanlab; print(swanlab.__version__)"], timeout=120)
    if not res.ok:
        report.note("swanlab is not installed: installing it with pip")
        env = proxy_env(Ctx(spec, spec.verl_version))
        res = ex.run(["python3", "-m", "pip", "install", "-q", "swanlab"], env=env, timeout=900)
        if not res.ok:
            raise RuntimeFailure(
                f"could not install swanlab in {ex.describe()}: {' '.join((res.err or res.out).split())[-300:]}",
                hint="set container.proxy (http/https) if the target needs a proxy, or install swanlab in the image",
            )
        res = ex.run(["python3", "-c", "import swanlab; print(swanlab.__version__)"], timeout=120)
        if not res.ok:
            raise RuntimeFailure(f"swanlab still does not import in {ex.describe()} after installing it")
    report.note(f"swanlab {res.out.strip().splitlines()[-1] if res.out.strip() else ''}".strip())
    if sw.mode == "cloud" and login:
        res = ex.run(_with_env_file(f"{scripts_dir}/{ENV_FILE}", ["python3", "-c", _LOGIN]), timeout=120)
        line = next((ln for ln in res.out.splitlines() if ln.startswith("VERLCTL_SWANLAB")), "")
        if not res.ok or not line.endswith(" ok"):
            detail = line.removeprefix("VERLCTL_SWANLAB ").strip() or f"exit {res.code}"
            raise RuntimeFailure(
                f"SwanLab login to {sw.host} failed: {detail}",
                hint="check logging.swanlab.host and SWANLAB_API_KEY, or use mode offline",
            )
        report.note(f"logged in to {sw.host} (verified; start_verl.sh keeps the key in the run's 0600 SwanLab "
                    "login store, out of the environment of Ray's processes)")
        return f"{sw.host}/@{sw.workspace}/{spec.logging.project}" if sw.workspace else f"{sw.host}/{spec.logging.project}"
    report.note(f"{sw.mode} mode: records go to {sw.log_dir} (upload later with `swanlab sync`)")
    return None
