"""The ``verlctl`` command line: a thin layer that parses flags and calls the packages.

Keep this module and ``verlctl.commands.*`` light at import time: heavy modules (pydantic models,
docker, jinja2, questionary, pyarrow) are imported inside the command functions, so that
``verlctl --help`` stays fast (see ``bench/bench_cli.py``).
"""

from __future__ import annotations

import sys

import typer

from verlctl.commands import registry
from verlctl.commands.group import Commands
from verlctl.errors import exit_code_lines

app = typer.Typer(
    name="verlctl",
    cls=Commands,
    help="From bare Ascend NPU / NVIDIA GPU servers to a running, monitored verl RL job.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Exit status:\n\n" + exit_code_lines().replace("\n", "\n\n"),
)



def _version(value: bool) -> None:
    if not value:
        return
    import platform

    from verlctl import DEFAULT_VERL_VERSION, SUPPORTED_VERL_VERSIONS, __version__

    others = ", ".join(v for v in SUPPORTED_VERL_VERSIONS if v != DEFAULT_VERL_VERSION)
    typer.echo(f"verlctl {__version__}")
    typer.echo(f"Python {platform.python_version()} ({sys.executable})")
    typer.echo(f"verl targeted: {DEFAULT_VERL_VERSION} by default; also {others} (verl_version: auto reads the container's)")
    raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Print verlctl's, Python's and the targeted verl versions."
    ),
) -> None:
    """From bare Ascend NPU / NVIDIA GPU servers to a running, monitored verl RL job."""


registry.register(app)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one line and a non-zero exit for every user-facing failure."""
    try:  # typer >= 0.20 vendors click
        from typer._click.exceptions import ClickException
    except ImportError:  # pragma: no cover - older typer depends on click
        from click.exceptions import ClickException  # type: ignore[no-redef]

    from verlctl.errors import ExitCode, VerlctlError

    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in (args[: args.index("--")] if "--" in args else args)
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=args, prog_name="verlctl", standalone_mode=False)
    except VerlctlError as exc:
        _fail(exc.message, exc.hint, exc.code, as_json, details=exc.details)
    except typer.Abort:
        _fail("aborted", None, ExitCode.INTERRUPTED, as_json, prefix="")
    except typer.Exit as exc:
        code = getattr(exc, "exit_code", 0)
        if code == ExitCode.INTERRUPTED:
            _fail("interrupted", None, code, as_json, prefix="")
        sys.exit(code)
    except KeyboardInterrupt:
        _fail("interrupted", None, ExitCode.INTERRUPTED, as_json, prefix="\n")
    except EOFError:
        _fail("input ended before every question was answered", None, ExitCode.USAGE, as_json)
    except ClickException as exc:
        # One line, like every other error: what is wrong (click names the option or argument) and where the
        # usage is; click's own three-line usage block is not repeated.
        ctx = getattr(exc, "ctx", None)
        where = getattr(ctx, "command_path", None) or "verlctl"
        usage = f" (see `{where} --help`)" if type(exc).__name__ != "ClickException" else ""
        message = " ".join(exc.format_message().split()).removesuffix(".")
        _fail(message[:1].lower() + message[1:] + usage, None, exc.exit_code, as_json)
    except BrokenPipeError:
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)


#: Control characters shown escaped (a newline in a path given as input: "a\\nb"), so an error stays one line.
_ESCAPED = {c: repr(chr(c))[1:-1] for c in (*range(0x20), 0x7F) if c != 0x09}


def one_line(text: str) -> str:
    """``text`` with its control characters escaped: what the user gave, on one line."""
    return text.translate(_ESCAPED)


def _fail(message: str, hint: str | None, code: int, as_json: bool, prefix: str = "error: ",
          details: dict[str, object] | None = None) -> None:
    """End the command: one line (and a hint) on stderr; with ``--json`` also one JSON object on stdout
    (``{"error": {"message", "hint", "exit_code"}}``, and the command's own keys known so far, such as
    ``launch``'s findings), so a script parses every outcome the same way."""
    if as_json:
        import json

        doc = {**(details or {}), "error": {"message": message, "hint": hint, "exit_code": int(code)}}
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stderr.write(f"{prefix}{one_line(message)}\n")
    if hint:
        sys.stderr.write(f"hint: {one_line(hint)}\n")
    sys.exit(int(code))


if __name__ == "__main__":  # pragma: no cover
    main()
