#!/usr/bin/env bash
# moto's S3 server (`moto_server`), for the tests of data in an object
# store, installed in target/moto-venv at a pinned version; the test
# command puts its bin/ on PATH. If it cannot be installed this says so
# loudly and the tests skip loudly too, unless DPGATE_REQUIRE_MOTO is set
# (CI sets it), which makes its absence a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

version=5.2.5
venv=target/moto-venv
if [ -x "$venv/bin/moto_server" ] && [ "$(cat "$venv/.dpgate-moto" 2>/dev/null)" = "$version" ]; then
    exit 0
fi
if python3 -m venv "$venv" &&
    "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$version"; then
    echo "$version" >"$venv/.dpgate-moto"
else
    echo "*** moto $version could not be installed: the object store tests will skip ***" >&2
fi
