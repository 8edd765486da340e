#!/usr/bin/env bash
# Fuzz a real dpgate server over the committed OpenAPI document with
# schemathesis: every check on, once with an admin token and once with an
# analyst token, against seeded datasets (privacy unit `label` and `row`).
#
#   tests/fuzz/run.sh [DPGATE_BIN] [SPEC]
#
#   DPGATE_BIN   the dpgate binary (default: target/debug/dpgate; env DPGATE_BIN)
#   SPEC         the OpenAPI document (default: openapi.yaml; env DPGATE_FUZZ_SPEC)
#   Relative paths given as arguments or in the environment are taken from
#   the caller's directory; the defaults from the repository root.
#
# Environment knobs (defaults in brackets):
#   FUZZ_MAX_EXAMPLES [25]  most test cases per operation in one fuzzing cycle
#   FUZZ_MAX_TIME     [100] seconds for each of the two schemathesis runs;
#                           schemathesis keeps fuzzing (and stateful testing)
#                           in new cycles until it is spent, so each run lasts
#                           about this long
#   FUZZ_SEED         [20240601] the seed of both runs
#   FUZZ_WORKERS      [2]   schemathesis workers
#   FUZZ_OUT          [target/fuzz] reports, server log, generated config
#   FUZZ_VENV         [target/fuzz-venv] the virtualenv schemathesis lives in
#
# Exit status: 0 when both runs pass, or when schemathesis cannot be
# installed (then a banner says the fuzz step was SKIPPED); non-zero on any
# failure: a check that failed, an error schemathesis hit, a server that
# would not start or seed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
caller_dir=$(pwd)

abspath() { # abspath PATH BASE: PATH made absolute against BASE
    case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s/%s\n' "$2" "$1" ;;
    esac
}

if [ $# -ge 1 ]; then
    bin=$(abspath "$1" "$caller_dir")
elif [ -n "${DPGATE_BIN:-}" ]; then
    bin=$(abspath "$DPGATE_BIN" "$caller_dir")
else
    bin="$root/target/debug/dpgate"
fi
if [ $# -ge 2 ]; then
    spec=$(abspath "$2" "$caller_dir")
elif [ -n "${DPGATE_FUZZ_SPEC:-}" ]; then
    spec=$(abspath "$DPGATE_FUZZ_SPEC" "$caller_dir")
else
    spec="$root/openapi.yaml"
fi

max_examples=${FUZZ_MAX_EXAMPLES:-25}
max_time=${FUZZ_MAX_TIME:-100}
seed=${FUZZ_SEED:-20240601}
workers=${FUZZ_WORKERS:-2}
out="$root/target/fuzz"
[ -z "${FUZZ_OUT:-}" ] || out=$(abspath "$FUZZ_OUT" "$caller_dir")
venv="$root/target/fuzz-venv"
[ -z "${FUZZ_VENV:-}" ] || venv=$(abspath "$FUZZ_VENV" "$caller_dir")

log() { printf 'fuzz: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

skip_banner() {
    cat >&2 <<EOF

########################################################################
##                                                                    ##
##   FUZZ STEP SKIPPED: schemathesis could not be installed.          ##
##   The API was NOT fuzzed. Reason:                                  ##
##     $1
##                                                                    ##
########################################################################

EOF
    echo "fuzz: SKIPPED (schemathesis could not be installed: $1)"
    exit 0
}

[ -x "$bin" ] || die "no dpgate binary at $bin (build it, or pass its path as the first argument)"
[ -f "$spec" ] || die "no OpenAPI document at $spec"
command -v curl >/dev/null || die "curl is required"

# --- schemathesis, in its own virtualenv -----------------------------------
# The interpreter: $PYTHON if set, else the first Python >= 3.11 found
# (python3 first, then python3.13, python3.12, pyenv's) that is free of
# CPython bug gh-106905, else the first Python >= 3.11 at all. Up to 3.11.7
# and 3.12.1, after a deep recursion `ast.parse` raises "SystemError: AST
# constructor recursion depth mismatch", which hypothesis (inside
# schemathesis) runs into: a schemathesis error, not a server finding.
runs_python() { "$1" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; }
fixed_python() {
    "$1" -c 'import sys; v = sys.version_info[:3]; sys.exit(not ((3, 11, 8) <= v < (3, 12) or v >= (3, 12, 2)))' >/dev/null 2>&1
}
pick_python() {
    if [ -n "${PYTHON:-}" ]; then
        printf '%s\n' "$PYTHON"
        return
    fi
    local pyenv_root candidate
    local candidates=(python3 python3.13 python3.12)
    pyenv_root=$(pyenv root 2>/dev/null || true)
    if [ -n "$pyenv_root" ]; then
        candidates+=("$pyenv_root"/versions/3.1[1-9]*/bin/python3)
    fi
    for candidate in "${candidates[@]}"; do
        if runs_python "$candidate" && fixed_python "$candidate"; then
            printf '%s\n' "$candidate"
            return
        fi
    done
    for candidate in "${candidates[@]}"; do
        if runs_python "$candidate"; then
            log "WARNING: $candidate ($("$candidate" --version 2>&1)) has CPython bug gh-106905; schemathesis may report 'AST constructor recursion depth mismatch' errors"
            printf '%s\n' "$candidate"
            return
        fi
    done
    printf '%s\n' python3
}
python=$(pick_python)
want_version=$(sed -n 's/^schemathesis==\([^ ]*\).*/\1/p' "$here/requirements.txt")
stamp_of() { # what the venv was built from: the lock and the interpreter
    printf '%s %s\n' "$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)" \
        "$("$1" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo none)"
}
if runs_python "$python" && [ -x "$venv/bin/schemathesis" ] &&
    [ "$(cat "$venv/.dpgate-fuzz-stamp" 2>/dev/null)" = "$(stamp_of "$python")" ]; then
    log "reusing schemathesis $want_version in $venv ($("$venv/bin/python" --version))"
else
    runs_python "$python" || skip_banner "no Python >= 3.11 with venv ($python)"
    log "installing schemathesis $want_version into $venv with $python ($("$python" --version 2>&1))"
    rm -rf "$venv"
    "$python" -m venv "$venv" >&2 || skip_banner "'$python -m venv $venv' failed"
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --require-hashes --no-deps -r "$here/requirements.txt" >&2; then
        rm -rf "$venv"
        skip_banner "pip install -r tests/fuzz/requirements.txt failed (see above)"
    fi
    if ! "$venv/bin/schemathesis" --version >/dev/null 2>&1; then
        rm -rf "$venv"
        skip_banner "schemathesis $want_version does not run after install"
    fi
    stamp_of "$python" >"$venv/.dpgate-fuzz-stamp"
fi
st="$venv/bin/schemathesis"
vpy="$venv/bin/python"

# --- one fresh, seeded server per run ----------------------------------------
rm -rf "$out/admin" "$out/analyst" "$out/findings.md"
mkdir -p "$out"
# shellcheck source=../support/server.sh
source "$here/../support/server.sh" dpgate-fuzz

export DPGATE_JWT_SECRET="dpgate-fuzz-test-secret-0123456789abcdef"
export DPGATE_NO_ADMIN_TOKEN=true
unset DPGATE_KEY_FILE

start_server() { # start_server DIR: a new server over a new SQLite file
    local dir=$1 db_dir port
    db_dir="$tmp/$(basename "$dir")"
    mkdir -p "$db_dir"
    port=$("$vpy" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    base="http://127.0.0.1:$port"
    export DATABASE_URL="sqlite://$db_dir/fuzz.db"
    export DPGATE_ADDR="127.0.0.1:$port"
    log "starting $bin on $base (database $DATABASE_URL)"
    "$bin" serve --no-admin-token >"$dir/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 300); do
        if curl -fsS -o /dev/null "$base/healthz" 2>/dev/null; then
            return 0
        fi
        if ! kill -0 "$server_pid" 2>/dev/null; then
            cat "$dir/server.log" >&2
            die "the server exited before answering /healthz"
        fi
        sleep 0.1
    done
    cat "$dir/server.log" >&2
    die "the server did not answer /healthz within 30 s"
}

json_field() { # json_field FIELD < JSON
    "$vpy" -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}
api() { # api METHOD PATH TOKEN [curl args…]: prints the body; dies on a non-2xx
    local method=$1 path=$2 token=$3
    shift 3
    curl -sS --fail-with-body -X "$method" "$base$path" -H "authorization: Bearer $token" "$@" ||
        die "seeding: $method $path failed"
}
create_dataset() { # create_dataset NAME UNIT ACCOUNTANT: prints the new id
    api POST /v1/datasets "$admin_token" -H 'content-type: application/json' --data-binary @- <<EOF | json_field id
{"name": "$1", "privacy_unit": "$2", "accountant": "$3",
 "features": [{"name": "f0", "min": 0, "max": 1}, {"name": "f1", "min": 0, "max": 10}],
 "label": "converted",
 "measures": [{"name": "value", "min": 0, "max": 100}],
 "dimensions": [{"name": "campaign", "values": ["a", "b"]}],
 "budget": {"epsilon": 1000, "delta": 1e-3}}
EOF
}
rows_csv() { # 200 deterministic rows
    awk 'BEGIN {
        print "row_id,converted,f0,f1,value,campaign"
        for (i = 1; i <= 200; i++)
            printf "r%03d,%d,%.2f,%.1f,%d,%s\n", i, (i % 3 == 0), (i % 11) / 10, (i * 7 % 101) / 10, (i * 37) % 101, (i % 2 ? "a" : "b")
    }'
}

seed() { # seed DIR: tokens, two datasets of 200 rows, one release on each, the config
    local dir=$1 id rid
    admin_token=$("$bin" token --role admin --sub fuzz-admin)
    label_id=$(create_dataset fuzz-label label rdp)
    row_id=$(create_dataset fuzz-row row basic)
    for id in "$label_id" "$row_id"; do
        rows_csv | api POST "/v1/datasets/$id/rows" "$admin_token" -H 'content-type: text/csv' --data-binary @- >/dev/null
    done
    analyst_token=$("$bin" token --role analyst --sub fuzz-analyst --datasets "$label_id,$row_id")
    release_ids=()
    for id in "$label_id" "$row_id"; do
        rid=$(api POST "/v1/datasets/$id/releases" "$analyst_token" -H 'content-type: application/json' \
            --data-binary '{"kind": "aggregate", "epsilon": 1, "delta": 1e-6, "statistics": ["count", "mean:converted", "sum:value"], "group_by": ["campaign"]}' |
            json_field id)
        release_ids+=("$rid")
    done
    log "seeded datasets label=$label_id row=$row_id (200 rows each), releases ${release_ids[*]}"
    printf 'ADMIN=%s\nANALYST=%s\nBASE=%s\n' "$admin_token" "$analyst_token" "$base" >"$dir/env"
    # The path parameters `id` and `release_id` are drawn from the seeded ids
    # (a tenth of the time they are left to the generator, so that unknown
    # ids are exercised too); the token comes from the environment.
    # Dictionaries for a few body fields make part of the generated requests
    # meaningful to this server (sane ε, δ, λ, bounds, statistics of the
    # seeded columns), so that releases and dataset creation get past input
    # validation; the rest of the time the fields are left to the generator.
    # None of this changes which checks run or what they accept. δ has no
    # dictionary: each release kind has its own δ schema (walr requires
    # δ > 0, objective perturbation δ = 0), and schemathesis checks a
    # dictionary entry against one of them whatever the body's kind, so an
    # entry valid for the kind drawn was reported as schema-violating data
    # the server accepted (a 0 for model/output-perturbation, in one run).
    cat >"$dir/schemathesis.toml" <<EOF
# Generated by tests/fuzz/run.sh for one run; not a file to edit.
[cache]
directory = "$dir/cache"

[auth.openapi.bearer]
bearer = "\${DPGATE_FUZZ_TOKEN}"

[dictionaries.dataset-ids]
values = ["$label_id", "$row_id"]

[dictionaries.release-ids]
values = ["${release_ids[0]}", "${release_ids[1]}"]

[dictionaries.epsilons]
values = [0.1, 0.5, 1, 2]

[dictionaries.lambdas]
values = [0.01, 0.1, 1]

[dictionaries.statistics]
values = ["count", "sum:converted", "mean:converted", "sum:value", "mean:value"]

[dictionaries.dimensions]
values = ["campaign"]

[dictionaries.budget-epsilons]
values = [10, 100, 1000, 5000]

[dictionaries.budget-deltas]
values = [1e-6, 1e-3]

[dictionaries.lower-bounds]
values = [-1, 0]

[dictionaries.upper-bounds]
values = [1, 10, 100]

[parameters]
"path.id" = { dictionary = "dataset-ids", probability = 0.9 }
"path.release_id" = { dictionary = "release-ids", probability = 0.9 }
"body.epsilon" = { dictionary = "epsilons", probability = 0.5 }
"body.lambda" = { dictionary = "lambdas", probability = 0.5 }
"body.statistics[*]" = { dictionary = "statistics", probability = 0.7 }
"body.group_by[*]" = { dictionary = "dimensions", probability = 0.7 }
"body.budget.epsilon" = { dictionary = "budget-epsilons", probability = 0.5 }
"body.budget.delta" = { dictionary = "budget-deltas", probability = 0.5 }
"body.features[*].min" = { dictionary = "lower-bounds", probability = 0.7 }
"body.features[*].max" = { dictionary = "upper-bounds", probability = 0.7 }
"body.measures[*].min" = { dictionary = "lower-bounds", probability = 0.7 }
"body.measures[*].max" = { dictionary = "upper-bounds", probability = 0.7 }

# Six operations have rules JSON Schema cannot state: cross-field ones
# (a column's min below its max, names unique across the whole schema; a
# ledger export takes no after or limit), ones inside a string (the δ of a
# privacy profile, comma-separated numbers in [0, 1) at the ledger's 10⁻³⁰
# resolution) and ones that depend on stored state (the columns a
# statistic names, the dataset's privacy unit, the lambda below which its
# fit cannot be certified, the rows a supplied vector names, a CSV's header
# and values, whether a release is a gradient session, its T and θ's
# length). A schema-valid request they refuse gets 422 with the reason,
# which positive_data_acceptance accepts there; every other status, and
# every other check, stays as schemathesis has it.
[[operations]]
include-operation-id = [
  "createDataset", "createRelease", "uploadRows", "callGradientSession",
  "getLedger", "getPrivacyProfile",
]
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", 401, 403, 404, 409, 422, 429, "5xx"]
EOF
}

fuzz() { # fuzz ROLE: a fresh server, seeded, fuzzed with ROLE's token
    local role=$1 dir="$out/$1" rc=0 token
    mkdir -p "$dir"
    start_server "$dir"
    seed "$dir"
    case $role in
    admin) token=$admin_token ;;
    analyst) token=$analyst_token ;;
    esac
    local cmd=("$st" --config-file "$dir/schemathesis.toml" run "$spec"
        --url "$base"
        --checks all
        --seed "$seed"
        --max-examples "$max_examples"
        --max-time "$max_time"
        --workers "$workers"
        --continue-on-failure
        --request-timeout 30
        --generation-database none
        --output-sanitize false
        --report junit,ndjson
        --report-junit-path "$dir/junit.xml"
        --report-ndjson-path "$dir/events.ndjson"
        --no-color)
    log "[$role] DPGATE_FUZZ_TOKEN=<$role token> ${cmd[*]}"
    # A hard stop well past --max-time, in case a run hangs.
    DPGATE_FUZZ_TOKEN=$token SCHEMATHESIS_HOOKS="$here/hooks.py" \
        timeout --kill-after=10 $((max_time + 60)) "${cmd[@]}" 2>&1 |
        tee "$dir/output.txt" || rc=${PIPESTATUS[0]}
    if ! kill -0 "$server_pid" 2>/dev/null; then
        log "[$role] the server died during the run; see $dir/server.log"
        touch "$dir/server-died"
        [ "$rc" -ne 0 ] || rc=1
    fi
    stop_server
    echo "$rc" >"$dir/exit-code"
    return "$rc"
}

# The spec itself first: a document that is not valid OpenAPI (duplicate
# operationIds, say) fails here, whatever the server does.
"$venv/bin/openapi-spec-validator" "$spec" >&2 || die "$spec is not a valid OpenAPI document"

start=$SECONDS
admin_rc=0
analyst_rc=0
fuzz admin || admin_rc=$?
fuzz analyst || analyst_rc=$?
elapsed=$((SECONDS - start))

"$vpy" "$here/findings.py" "$out" >"$out/findings.md" || log "could not write $out/findings.md"
summary=$("$vpy" "$here/findings.py" --summary "$out") || summary="admin exit $admin_rc, analyst exit $analyst_rc"
echo "fuzz: $summary; ${elapsed}s; findings in ${out#"$root"/}/findings.md"
[ "$admin_rc" -eq 0 ] && [ "$analyst_rc" -eq 0 ]
