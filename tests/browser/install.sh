#!/usr/bin/env bash
# Installs what tests/browser/run.sh needs: Debian's `chromium` (only if
# /usr/bin/chromium is missing) and npm's playwright-core, pinned by the
# committed package-lock.json, into target/browser/node_modules.
#
# It never lets Playwright download a browser build of its own: those
# downloads do not work here, and Debian's chromium is the browser tested.
#
# Exit status 0 also when something cannot be installed: then a banner says
# the browser tests will be SKIPPED and why, and target/browser/SKIPPED
# keeps the reason for run.sh to repeat.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$root/target/browser"
chromium=/usr/bin/chromium
min_node=20

log() { printf 'browser: %s\n' "$*" >&2; }

skip() {
    mkdir -p "$out"
    printf '%s\n' "$1" >"$out/SKIPPED"
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

mkdir -p "$out"
rm -f "$out/SKIPPED"

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        return 1
    fi
}

if [ ! -x "$chromium" ]; then
    command -v apt-get >/dev/null || skip "no $chromium and no apt-get to install it"
    log "installing Debian's chromium"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q >&2 || skip "apt-get update failed (or no root)"
    as_root apt-get install -y -q --no-install-recommends chromium >&2 ||
        skip "apt-get install chromium failed"
    [ -x "$chromium" ] || skip "apt-get installed chromium but there is no $chromium"
fi
"$chromium" --version >/dev/null 2>&1 || skip "$chromium does not run"

command -v node >/dev/null || skip "no node (Node.js >= $min_node is needed)"
command -v npm >/dev/null || skip "no npm"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge "$min_node" ] || skip "node $(node --version) is older than $min_node"

# Reinstall only when the lock changed.
stamp=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$out/.lock-stamp" 2>/dev/null)" = "$stamp" ] &&
    [ -f "$out/node_modules/playwright-core/package.json" ]; then
    log "reusing playwright-core in $out/node_modules"
else
    log "installing playwright-core (package-lock.json) into $out/node_modules"
    cp "$here/package.json" "$here/package-lock.json" "$out/"
    rm -rf "$out/node_modules"
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix "$out" --no-audit --no-fund >&2 ||
        skip "npm ci (playwright-core) failed"
    printf '%s\n' "$stamp" >"$out/.lock-stamp"
fi
log "ready: $("$chromium" --version 2>/dev/null | head -1), playwright-core $(node -p "require('$out/node_modules/playwright-core/package.json').version")"
