"""DuckDB's SQL for the sums of dpgate's benchmark releases, over a Parquet
directory written by parquet_data.py (read with read_parquet), run once:

- ctas: CREATE TABLE ... AS SELECT * FROM read_parquet(...) into a database
  file in a temporary directory (what registration is compared with);
- walr: SUM(converted * xj) for every feature, and SUM(converted);
- aggregate: COUNT(*) and AVG(value) GROUP BY d1, d2;
- dp_gd: STEPS times every row's logistic gradient (sigma(theta'u) - y)·u,
  u = (1, x), clipped to norm 1, summed, at a theta of no special value.

    python3 scripts/bench/duckdb_peer.py DIR ctas|walr|aggregate|dp_gd [STEPS]

Prints the query's own wall time in seconds (the interpreter's start and
duckdb's import are not counted), so a caller timing in process compares
like with like; scripts/bench/releases.sh times the whole process instead.
"""
import sys
import tempfile
import time

import duckdb

K = 32


def queries(files, steps):
    xs = [f"x{j}" for j in range(1, K + 1)]
    walr = ", ".join([f"SUM(converted * {x})" for x in xs] + ["SUM(converted)"])
    z = "0.1 + " + " + ".join(f"{0.01 * j:.2f} * x{j}" for j in range(1, K + 1))
    norm = "sqrt(1 + " + " + ".join(f"{x} * {x}" for x in xs) + ")"
    inner = (
        f"SELECT {', '.join(xs)}, 1 / (1 + exp(-({z}))) - converted AS r, {norm} AS n "
        f"FROM read_parquet({files})"
    )
    clipped = "r * least(1, 1 / (abs(r) * n))"
    gradient = (
        f"SELECT SUM({clipped})"
        + "".join(f", SUM({clipped} * {x})" for x in xs)
        + f" FROM ({inner})"
    )
    return {
        "walr": [f"SELECT {walr} FROM read_parquet({files})"],
        "aggregate": [
            f"SELECT d1, d2, COUNT(*), AVG(value) FROM read_parquet({files}) GROUP BY d1, d2"
        ],
        "dp_gd": [gradient] * steps,
    }


def main():
    directory, kind = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    files = f"'{directory}/*.parquet'"
    with tempfile.TemporaryDirectory() as scratch:
        if kind == "ctas":
            connection = duckdb.connect(f"{scratch}/bench.duckdb")
            statements = [f"CREATE OR REPLACE TABLE t AS SELECT * FROM read_parquet({files})"]
        else:
            connection = duckdb.connect()
            statements = queries(files, steps)[kind]
        started = time.perf_counter()
        for statement in statements:
            connection.execute(statement).fetchall()
        print(f"{time.perf_counter() - started:.6f}")


main()
