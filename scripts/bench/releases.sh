#!/usr/bin/env bash
# A WALR release (map auto), an aggregate (count and mean of the measure
# by both dimensions) and a DP-GD release of STEPS steps (default 5), over a
# Parquet directory registered in place, against DuckDB's SQL for the same
# sums over the same files (for DP-GD, STEPS queries of the clipped
# logistic gradients' sum), timed side by side with farm-bench (tools
# library). The server streams every pass from the
# files through the engine (DPGATE_CACHE_BYTES=0: nothing is held in
# memory), as it must for a dataset larger than memory; DuckDB reads the
# files with read_parquet. Prints the server's peak RSS. Needs python3 with
# numpy, pyarrow and duckdb, and a built server:
#   cargo build --release --bin dpgate
#   bash scripts/bench/releases.sh [ROWS] [FILES]
# DATA=DIR reuses a directory written by parquet_data.py. CLUSTER=1 runs
# the releases on a Ballista cluster against the embedded engine instead;
# BASE=OTHER_BIN, on BIN against OTHER_BIN (e.g. a build of an earlier
# commit), two servers side by side on the same files. COLD=N (as root)
# times N cold aggregates against DuckDB's query instead, the page cache
# dropped before each run of either.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROWS="${1:-10000000}"
FILES="${2:-8}"
BIN="${BIN:-./target/release/dpgate}"
WORK="$(mktemp -d)"
SERVERS=()
trap 'kill "${SERVERS[@]}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
SRC="${DATA:-$WORK/src}"
if [ -z "${DATA:-}" ]; then
    mkdir -p "$SRC"
    python3 scripts/bench/parquet_data.py "$SRC" "$ROWS" "$FILES"
fi
du -sh "$SRC"

export DPGATE_DATA_ROOTS="$SRC" DPGATE_CACHE_BYTES=0
export DPGATE_JWT_SECRET="a-benchmark-secret-of-at-least-32-bytes"
features=$(python3 -c 'import json; print(json.dumps([{"name": f"x{j}", "min": 0, "max": 1} for j in range(1, 33)]))')
STEPS="${STEPS:-5}"

# A server NAME (engine ENGINE; binary $3, default BIN) with the directory
# registered, and its release scripts $WORK/NAME-{walr,aggregate,dp_gd}.
serve() {
    local name=$1 port=$((20000 + RANDOM % 20000)) bin=${3:-$BIN}
    DATABASE_URL="sqlite://$WORK/$name.db" DPGATE_DATA_DIR="$WORK/$name-data" DPGATE_ENGINE="$2" \
        "$bin" serve --addr "127.0.0.1:$port" >"$WORK/$name.log" 2>&1 &
    SERVERS+=("$!")
    for _ in $(seq 1 100); do curl -sf "127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
    local admin started registration id state analyst
    admin=$(DATABASE_URL="sqlite://$WORK/$name.db" "$BIN" token --role admin --sub bench)
    started=$(date +%s.%N)
    # In the background (10⁸ rows take longer than a request may), polled.
    registration=$(curl -sf -X POST "127.0.0.1:$port/v1/datasets" -H "authorization: Bearer $admin" \
      -H 'prefer: respond-async' \
      -H 'content-type: application/json' -d '{"name": "bench", "privacy_unit": "label",
      "features": '"$features"', "label": "converted",
      "measures": [{"name": "value", "min": 0, "max": 100}],
      "dimensions": [{"name": "d1", "values": ["a", "b", "c", "d"]},
                     {"name": "d2", "values": ["s", "t", "u", "v", "w", "x", "y", "z"]}],
      "budget": {"epsilon": 1000000, "delta": 0.5},
      "source": {"uri": "file://'"$SRC"'/"}}' | python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["id"], r["dataset_id"])')
    read -r registration id <<<"$registration"
    state=running
    while [ "$state" = running ]; do
        sleep 0.2
        state=$(curl -sf "127.0.0.1:$port/v1/registrations/$registration" -H "authorization: Bearer $admin" |
            python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])')
    done
    [ "$state" = done ] || { echo "$name: registration $state" >&2; exit 1; }
    echo "$name: registered $SRC in $(echo "$(date +%s.%N) - $started" | bc) s; peak RSS so far: $(grep VmHWM /proc/"${SERVERS[-1]}"/status)"
    analyst=$(DATABASE_URL="sqlite://$WORK/$name.db" "$BIN" token --role analyst --sub bench --datasets "$id")
    release() {
        cat >"$WORK/$name-$1" <<SH
#!/bin/sh
curl -sf -X POST 127.0.0.1:$port/v1/datasets/$id/releases -H "authorization: Bearer $analyst" \
  -H 'content-type: application/json' -H "idempotency-key: \$(cat /proc/sys/kernel/random/uuid)" \
  -d '$2' >/dev/null
SH
        chmod +x "$WORK/$name-$1"
        "$WORK/$name-$1"  # fails here, not silently in the timing
    }
    release walr '{"kind": "walr", "epsilon": 1, "delta": 1e-9, "map": "auto"}'
    release aggregate '{"kind": "aggregate", "epsilon": 1, "delta": 1e-9, "statistics": ["count", "mean:value"], "group_by": ["d1", "d2"]}'
    release dp_gd '{"kind": "model/dp-gd", "epsilon": 1, "delta": 1e-9, "steps": '"$STEPS"', "clip": 1}'
}

# CLUSTER=1: the same releases with the passes on a Ballista scheduler and
# two executors of one core each (a build with --features ballista),
# against the embedded engine on the same files.
if [ -n "${CLUSTER:-}" ]; then
    SCHEDULER="127.0.0.1:$((20000 + RANDOM % 20000))"
    "$BIN" scheduler --bind "$SCHEDULER" >"$WORK/scheduler.log" 2>&1 &
    SERVERS+=("$!")
    sleep 1
    PORTS=$((40000 + RANDOM % 5000 * 4))
    for executor in 1 2; do
        DPGATE_DATA_DIR="$WORK/ballista-data" "$BIN" executor --scheduler "$SCHEDULER" --cores 1 \
            --bind "127.0.0.1:$((PORTS + 2 * executor))" >"$WORK/executor$executor.log" 2>&1 &
        SERVERS+=("$!")
    done
    serve embedded embedded
    serve ballista "ballista://$SCHEDULER"
    for kind in walr aggregate dp_gd; do
        echo "== $kind: dpgate on Ballista (2 executors) vs embedded"
        farm-bench -n "${RUNS:-5}" --timeout 3600 --vs "$WORK/embedded-$kind" -- "$WORK/ballista-$kind"
    done
    names=(scheduler executor1 executor2 embedded ballista)
    for i in "${!names[@]}"; do echo "${names[$i]} peak RSS: $(grep VmHWM /proc/"${SERVERS[$i]}"/status)"; done
    exit 0
fi
if [ -n "${BASE:-}" ]; then
    serve base embedded "$BASE"
    serve dpgate embedded
    for kind in walr aggregate dp_gd; do
        echo "== $kind: $BIN vs $BASE"
        farm-bench -n "${RUNS:-5}" --timeout 3600 --vs "$WORK/base-$kind" -- "$WORK/dpgate-$kind"
    done
    echo "peak RSS: $BASE $(grep VmHWM /proc/"${SERVERS[0]}"/status), $BIN $(grep VmHWM /proc/"${SERVERS[1]}"/status)"
    exit 0
fi
serve dpgate embedded
SERVER=${SERVERS[0]}

if [ -n "${COLD:-}" ]; then
    cold() { sync; echo 1 >/proc/sys/vm/drop_caches; }
    for _ in $(seq 1 "$COLD"); do
        cold
        started=$(date +%s.%N)
        "$WORK/dpgate-aggregate"
        ours=$(echo "$(date +%s.%N) - $started" | bc)
        cold
        echo "cold aggregate: dpgate $ours s, DuckDB's query $(python3 scripts/bench/duckdb_peer.py "$SRC" aggregate) s"
    done
    echo "server peak RSS: $(grep VmHWM /proc/$SERVER/status)"
    exit 0
fi

# farm-bench starts commands without a shell: name the interpreter that has duckdb.
PYTHON=$(python3 -c 'import sys; print(sys.executable)')
# DuckDB's queries (scripts/bench/duckdb_peer.py); the process is timed,
# its interpreter's start (about 0.15 s) included.
for kind in walr aggregate dp_gd; do
    peer="$PYTHON scripts/bench/duckdb_peer.py $SRC $kind $STEPS"
    echo "== $kind: dpgate (engine over the files) vs DuckDB (read_parquet); DuckDB's query alone: $($peer) s"
    farm-bench -n "${RUNS:-5}" --timeout 3600 --vs "$peer" -- "$WORK/dpgate-$kind"
done
echo "server peak RSS: $(grep VmHWM /proc/$SERVER/status)"
