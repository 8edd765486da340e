# Sourced by the scripts that run a dpgate server of their own (fuzz,
# browser): a temporary directory `tmp`, the server's pid in `server_pid`
# once started, and traps that stop the server and remove `tmp` however
# the script ends. The caller defines `log` and passes the prefix of the
# temporary directory's name.
#
#   source tests/support/server.sh dpgate-fuzz

tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
server_pid=

stop_server() { # SIGTERM, then SIGKILL if it has not exited within 10 s
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$server_pid" 2>/dev/null; then
            log "the server did not stop within 10 s of SIGTERM; killing it"
            kill -KILL "$server_pid" 2>/dev/null || true
        fi
        wait "$server_pid" 2>/dev/null || true
    fi
    server_pid=
}
cleanup() {
    local rc=$?
    stop_server
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
