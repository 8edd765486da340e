#!/usr/bin/env bash
# Registration of a Parquet directory in place against DuckDB's
# `CREATE TABLE … AS SELECT * FROM read_parquet(…)` on the same files, timed
# side by side with farm-bench (tools library): ROWS rows × 32 features, one
# measure, two dimensions, in 8 files. Needs python3 with pyarrow and duckdb
# (pip install numpy pyarrow duckdb) and a built server:
#   cargo build --profile test --bin dpgate
#   bash scripts/bench/registration.sh [ROWS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROWS="${1:-1000000}"
WORK="$(mktemp -d)"
trap 'kill "${SERVER:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/src"

python3 scripts/bench/parquet_data.py "$WORK/src" "$ROWS"
du -sh "$WORK/src"

export DATABASE_URL="sqlite://$WORK/dpgate.db" DPGATE_DATA_ROOTS="$WORK/src"
export DPGATE_JWT_SECRET="a-benchmark-secret-of-at-least-32-bytes"
PORT=$((20000 + RANDOM % 20000))
./target/debug/dpgate serve --addr "127.0.0.1:$PORT" >"$WORK/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 100); do curl -sf "127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.2; done
ADMIN=$(./target/debug/dpgate token --role admin --sub bench)

features=$(python3 -c 'import json; print(json.dumps([{"name": f"x{j}", "min": 0, "max": 1} for j in range(1, 33)]))')
cat >"$WORK/register" <<SH
#!/bin/sh
curl -sf -X POST 127.0.0.1:$PORT/v1/datasets -H "authorization: Bearer $ADMIN" \
  -H 'content-type: application/json' -d '{"name": "'\$(cat /proc/sys/kernel/random/uuid)'",
  "privacy_unit": "label", "features": $features, "label": "converted",
  "measures": [{"name": "value", "min": 0, "max": 100}],
  "dimensions": [{"name": "d1", "values": ["a", "b", "c", "d"]},
                 {"name": "d2", "values": ["s", "t", "u", "v", "w", "x", "y", "z"]}],
  "budget": {"epsilon": 10, "delta": 1e-6},
  "source": {"uri": "file://$WORK/src/"}}' >/dev/null
SH
chmod +x "$WORK/register"
# farm-bench starts commands without a shell: name the interpreter that has duckdb.
PYTHON=$(python3 -c 'import sys; print(sys.executable)')
CTAS="$PYTHON scripts/bench/duckdb_peer.py $WORK/src ctas"
$CTAS  # fails here, not silently in the timing
farm-bench -n 5 --timeout 1800 --vs "$CTAS" -- "$WORK/register"
