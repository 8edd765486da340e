"""Writes ROWS benchmark rows as Parquet into OUT: a row id, a 0/1 label
`converted`, 32 features x1..x32 in [0, 1], one measure `value` in
[0, 100], and two dimensions d1 (4 values) and d2 (8 values), in FILES
files (default 8), written a million rows at a time so memory stays small.

    python3 scripts/bench/parquet_data.py OUT ROWS [FILES]
"""
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

out, rows = sys.argv[1], int(float(sys.argv[2]))
files = int(sys.argv[3]) if len(sys.argv) > 3 else 8
rng = np.random.default_rng(7)
step = 1_000_000
for f in range(files):
    lo, hi = f * rows // files, (f + 1) * rows // files
    writer = None
    for start in range(lo, hi, step):
        end = min(start + step, hi)
        n = end - start
        columns = {"row_id": pa.array([f"r{i}" for i in range(start, end)])}
        columns["converted"] = pa.array(rng.integers(0, 2, n, dtype=np.int8))
        for j in range(32):
            columns[f"x{j + 1}"] = pa.array(rng.random(n))
        columns["value"] = pa.array(rng.random(n) * 100)
        columns["d1"] = pa.array(np.array(["a", "b", "c", "d"])[rng.integers(0, 4, n)])
        columns["d2"] = pa.array(np.array(list("stuvwxyz"))[rng.integers(0, 8, n)])
        table = pa.table(columns)
        if writer is None:
            writer = pq.ParquetWriter(f"{out}/part-{f}.parquet", table.schema)
        writer.write_table(table)
    if writer is not None:
        writer.close()
