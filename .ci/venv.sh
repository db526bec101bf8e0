#!/usr/bin/env bash
# The venv step of .ci/run, in its own file so that tests can run it against a broken venv.
# Sourced (not executed) by .ci/run; defines ensure_venv_with_pip and setup_venv, which work on ./.venv.

# ensure_venv_with_pip: make ./.venv a venv whose python runs pip. A .venv left behind by a failed
# `python3 -m venv .venv` (Debian's python3 without python3-venv: "ensurepip is not available") has a
# python but no pip; it is removed and created again (.ci/run installs python3-venv first).
ensure_venv_with_pip() {
    if [[ -e .venv || -L .venv ]] && ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
        echo ".venv has no working pip (created while python3-venv was missing?): creating it again"
        rm -rf .venv
    fi
    if [[ ! -x .venv/bin/python ]]; then
        python3 -m venv .venv ||
            { echo "python3 -m venv failed: install python3-venv first (apt-get install python3-venv)" >&2; return 1; }
    fi
}

setup_venv() {
    local stamp
    ensure_venv_with_pip
    stamp="$(sha256sum pyproject.toml | cut -c1-16)"
    if [[ "$(cat .venv/.verlctl-ci-stamp 2>/dev/null || true)" == "$stamp" ]] &&
        .venv/bin/python -c 'import verlctl' >/dev/null 2>&1; then
        echo "venv up to date with pyproject.toml ($stamp)"
        return
    fi
    .venv/bin/python -m pip install -e '.[dev]'
    # The prompt-length check's tokenizer: without its huggingface-hub dependency, which would install click
    # next to typer's vendored copy (mypy then rejects cli.py's fallback import); Tokenizer.from_file needs none.
    .venv/bin/python -m pip install --no-deps 'tokenizers>=0.15'
    echo "$stamp" >.venv/.verlctl-ci-stamp
}
