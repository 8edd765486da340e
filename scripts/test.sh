#!/usr/bin/env bash
# Every suite, in one command (the README's; .ci/run calls it): the Rust
# tests (and the Postgres ones when TEST_POSTGRES_URL is set; those of
# data in an object store against moto's S3 server; the engine's passes
# on a Ballista cluster; the audit's mutation test), the Python package's
# tests and notebook, a short privacy audit of the cheap release kinds,
# the API fuzzed from outside, and the admin console in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's wall time, printed at the end (also when a stage fails), so
# that a CI log shows where its time went.
timings=()
stage_start=$(date +%s)
stage() {
    local now
    now=$(date +%s)
    timings+=("$(printf '%5d s  %s' $((now - stage_start)) "$1")")
    stage_start=$now
}
report() {
    local status=$?
    printf 'stage times:\n'
    printf '  %s\n' "${timings[@]}"
    [ "$status" -eq 0 ] || printf '  (failed %d s into the stage after these)\n' $(($(date +%s) - stage_start))
}
trap report EXIT

# moto's S3 server, for the tests of data in an object store.
bash scripts/moto.sh
export PATH="$PWD/target/moto-venv/bin:$PATH"
stage "moto"

# With Ballista (`--features ballista`): its tests run a scheduler and one
# or two executors in the test process, then `dpgate serve` on `dpgate
# scheduler` and two `dpgate executor` processes. With `mutants`: the
# audit's mutation test switches known privacy faults on one at a time in
# its own test process (the audit must fail each that is non-private and
# pass the real code); nothing else switches one on, so every other suite
# runs the real code. One build serves every suite: a second build of the
# crate for Ballista alone cost about ten minutes of CI, one for the
# mutants about four.
log=$(mktemp)
# `--tests`: every unit and integration test, without building the
# examples (clippy checks them) or running doc tests (there are none).
cargo test --workspace --features ballista,mutants --tests 2>&1 | tee "$log"
# One closing line for all the test binaries (cargo prints one per binary).
awk '/^test result:/ { passed += $4; failed += $6 }
     END { printf "all tests: %d passed, %d failed\n", passed, failed }' "$log"
stage "Rust tests (build and run)"

# The Python package against real servers (SQLite, and Postgres when
# TEST_POSTGRES_URL is set), its notebook among the tests (docs/python.md).
bash scripts/python.sh
stage "Python package (build, checks, pytest)"

# The release kinds that take seconds, audited through the real release
# path (about two minutes; fails if any lower bound exceeds its ε, which a
# correct build does with probability at most 13·10⁻⁶ at this confidence).
# The full audit of every kind is in docs/audit.md.
mkdir -p target/audit
target/debug/dpgate audit --kind walr --kind aggregate --kind gradient \
    --trials 100000 --confidence 0.999999 --report target/audit/report.md
cat target/audit/report.md
stage "privacy audit"

# The API fuzzed from outside: schemathesis over the committed openapi.yaml
# against the binary the tests just built (skips loudly if it cannot be
# installed; about 4 minutes).
bash tests/fuzz/run.sh target/debug/dpgate openapi.yaml
stage "fuzz"

# The admin console in headless Chromium (Playwright), against a seeded
# server; screenshots in target/browser/screenshots (skips loudly if the
# browser or playwright-core cannot be installed; about 2 minutes).
bash tests/browser/install.sh && bash tests/browser/run.sh target/debug/dpgate
stage "browser"

