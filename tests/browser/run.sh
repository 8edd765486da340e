#!/usr/bin/env bash
# Tests the admin console in a real browser: a real dpgate server over a
# fresh SQLite file, seeded through its API, driven by Playwright
# (playwright-core) in Debian's headless chromium. Install both first with
# tests/browser/install.sh.
#
#   tests/browser/run.sh [DPGATE_BIN]
#
#   DPGATE_BIN  the dpgate binary (default: target/debug/dpgate, as the
#               preceding `cargo test` builds it; env DPGATE_BIN). A relative
#               path is taken from the caller's directory.
#
# Screenshots of every page land in target/browser/screenshots/.
# Exit status: 0 when every test passes, or when the browser or
# playwright-core is missing (then a banner says the browser tests were
# SKIPPED); non-zero on any failure.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$root/target/browser"
chromium=/usr/bin/chromium

bin=${1:-${DPGATE_BIN:-$root/target/debug/dpgate}}
case "$bin" in /*) ;; *) bin="$(pwd)/$bin" ;; esac

log() { printf 'browser: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

skip() {
    cat >&2 <<BANNER

########################################################################
##                                                                    ##
##   *** BROWSER TESTS SKIPPED: the admin console was NOT tested ***  ##
##   in a browser. Reason:                                            ##
##     $1
##                                                                    ##
########################################################################

BANNER
    echo "browser: SKIPPED ($1)"
    exit 0
}

[ ! -f "$out/SKIPPED" ] || skip "$(cat "$out/SKIPPED") (tests/browser/install.sh)"
[ -x "$chromium" ] || skip "no $chromium: run tests/browser/install.sh"
[ -f "$out/node_modules/playwright-core/package.json" ] ||
    skip "no playwright-core in $out/node_modules: run tests/browser/install.sh"
[ -x "$bin" ] || die "no dpgate binary at $bin (build it, or pass its path)"
command -v curl >/dev/null || die "curl is required"

# shellcheck source=../support/server.sh
source "$here/../support/server.sh" dpgate-browser

port=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')
export DPGATE_URL="http://127.0.0.1:$port"
export DPGATE_ADDR="127.0.0.1:$port"
export DPGATE_DB="$tmp/console.db"
export DATABASE_URL="sqlite://$DPGATE_DB"
export DPGATE_JWT_SECRET="dpgate-browser-test-secret-0123456789abcdef"
export DPGATE_NO_ADMIN_TOKEN=true
export DPGATE_BIN="$bin"
export BROWSER_OUT="$out"
unset DPGATE_KEY_FILE

mkdir -p "$out"
rm -rf "$out/screenshots"
log "starting $bin on $DPGATE_URL (database $DATABASE_URL)"
"$bin" serve >"$out/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
    curl -fsS -o /dev/null "$DPGATE_URL/healthz" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$out/server.log" >&2; die "the server exited before answering /healthz"; }
    sleep 0.1
done
curl -fsS -o /dev/null "$DPGATE_URL/healthz" || die "the server did not answer /healthz within 30 s"

rc=0
timeout --kill-after=10 300 node --test --test-reporter=spec --test-timeout=240000 \
    "$here/console.test.mjs" || rc=$?
kill -0 "$server_pid" 2>/dev/null || { log "the server died during the run; see $out/server.log"; [ "$rc" -ne 0 ] || rc=1; }
log "screenshots: $(cd "$out/screenshots" 2>/dev/null && ls -1 ./*.png 2>/dev/null | tr '\n' ' ')"
exit "$rc"
