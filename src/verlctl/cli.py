"""The ``verlctl`` command line: a thin layer that parses flags and calls the packages.

Keep this module and ``verlctl.commands.*`` light at import time: heavy modules (pydantic models,
docker, jinja2, questionary, pyarrow) are imported inside the command functions, so that
``verlctl --help`` stays fast (see ``bench/bench_cli.py``).
"""

from __future__ import annotations

import sys

import typer

from verlctl.commands import registry

app = typer.Typer(
    name="verlctl",
    help="From bare Ascend NPU / NVIDIA GPU servers to a running, monitored verl RL job.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
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

    from verlctl.errors import VerlctlError

    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="verlctl", standalone_mode=False)
    except VerlctlError as exc:
        sys.stderr.write(f"error: {exc.message}\n")
        if exc.hint:
            sys.stderr.write(f"hint: {exc.hint}\n")
        sys.exit(exc.code)
    except typer.Abort:
        sys.stderr.write("aborted\n")
        sys.exit(130)
    except typer.Exit as exc:
        code = getattr(exc, "exit_code", 0)
        if code == 130:
            sys.stderr.write("interrupted\n")
        sys.exit(code)
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        sys.exit(130)
    except EOFError:
        sys.stderr.write("error: input ended before every question was answered\n")
        sys.exit(2)
    except ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
