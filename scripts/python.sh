#!/usr/bin/env bash
# The Python package's suite (scripts/test.sh runs it after the Rust
# tests): a virtualenv with the pinned test requirements, the package
# built from python/ and installed into it as `pip install ./python` does,
# its types and style checked (mypy --strict, ruff), then pytest against
# real servers (SQLite; Postgres too when TEST_POSTGRES_URL is set), the
# quickstart notebook among the tests.
#
#   scripts/python.sh [PYTEST_ARGS…]
#
#   DPGATE_BIN         [target/debug/dpgate]        the server the tests start
#   DPGATE_CLIENT_BIN  [target/debug/dpgate-client] the CLI the round trips use
#   PY_VENV            [target/py-venv]
#   PY_PROFILE         [dev] the cargo profile the package is built in:
#                      dev reuses what `cargo test` built (a release build of
#                      the client is what `pip install ./python` makes, and
#                      takes minutes more)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${PY_VENV:-$root/target/py-venv}
profile=${PY_PROFILE:-dev}

log() { printf 'python: %s\n' "$*" >&2; }

# The CLI of the round trips (`cargo test` builds the server, not it),
# built with the package's crate selected too: cargo then resolves the
# dependencies' features as the package's build below does, so that
# build compiles only the package's own crates, not the client's
# dependencies a second time (about two minutes of CI).
[ -n "${DPGATE_CLIENT_BIN:-}" ] ||
    cargo build -q -p dpgate-client -p dpgate-python --bin dpgate-client

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
log "installing the pinned test requirements into $venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r python/requirements-test.txt
log "building and installing the package (cargo profile $profile)"
start=$(date +%s)
PATH="$venv/bin:$PATH" MATURIN_PEP517_ARGS="--profile $profile" \
    "$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps --no-build-isolation ./python
log "installed in $(($(date +%s) - start)) s"
# The notebook's kernel: this virtualenv's Python.
"$venv/bin/python" -m ipykernel install --sys-prefix --name python3 >/dev/null

# The package's types and style (python/pyproject.toml configures both).
(cd python && "$venv/bin/mypy" && "$venv/bin/ruff" check . && "$venv/bin/ruff" format --check .)

export DPGATE_BIN=${DPGATE_BIN:-$root/target/debug/dpgate}
export DPGATE_CLIENT_BIN=${DPGATE_CLIENT_BIN:-$root/target/debug/dpgate-client}
# From python/tests, so that `import dpgate` is the installed package, not
# the source tree beside it: tests/ is no package (no __init__.py), so pytest
# puts python/tests on the path, not python/.
cd python/tests
"$venv/bin/python" -m pytest -q "$@"
