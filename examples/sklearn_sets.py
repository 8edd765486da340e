"""Writes two small real tables shipped inside scikit-learn's wheel as
train/test CSVs for `cargo run --release --example walr_figures`:

- OUT/train.csv, OUT/test.csv: the digits 4-vs-9 subset of the UCI
  handwritten digits (8x8 images, pixels 0..16); y = 1 for a 9, 0 for a 4.
- OUT/breast-cancer/train.csv, test.csv: the Wisconsin diagnostic breast
  cancer set (569 rows, 30 features); y = 1 for benign. Each feature is
  divided by its bound, the largest value in the set rounded up to two
  significant digits, so every value lies in [0, 1] (bounds taken from the
  published table, as an analyst declaring a schema would).

    pip download scikit-learn --no-deps -d /tmp/skl
    python3 examples/sklearn_sets.py /tmp/skl/scikit_learn-*.whl /tmp/sets

Stdlib only: the data files are read out of the wheel, nothing is
installed. Seeded 70/30 splits.
"""

import csv
import gzip
import io
import math
import os
import random
import sys
import zipfile


def write_split(out_dir, header, rows, seed):
    """rows: (label, values); a seeded 70/30 split."""
    random.Random(seed).shuffle(rows)
    cut = int(0.7 * len(rows))
    os.makedirs(out_dir, exist_ok=True)
    for name, part in (("train", rows[:cut]), ("test", rows[cut:])):
        with open(f"{out_dir}/{name}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["row_id", "y"] + header)
            for i, (label, values) in enumerate(part):
                writer.writerow([f"{name}{i}", label] + values)
        print(f"{out_dir}/{name}.csv: {len(part)} rows")


def digits(archive, out_dir):
    raw = archive.read("sklearn/datasets/data/digits.csv.gz")
    rows = list(csv.reader(io.StringIO(gzip.decompress(raw).decode())))
    subset = [
        (1 if int(float(r[-1])) == 9 else 0, [int(float(v)) for v in r[:-1]])
        for r in rows
        if r and int(float(r[-1])) in (4, 9)
    ]
    write_split(out_dir, [f"p{j}" for j in range(64)], subset, 49)


def breast_cancer(archive, out_dir):
    raw = archive.read("sklearn/datasets/data/breast_cancer.csv").decode()
    rows = [r for r in csv.reader(io.StringIO(raw))][1:]
    values = [[float(v) for v in r[:-1]] for r in rows]
    bounds = []
    for j in range(30):
        top = max(v[j] for v in values)
        digits = 1 - math.floor(math.log10(top))
        bounds.append(math.ceil(top * 10**digits) / 10**digits)
    table = [
        (int(r[-1]), [round(v[j] / bounds[j], 6) for j in range(30)])
        for r, v in zip(rows, values)
    ]
    write_split(out_dir, [f"c{j}" for j in range(30)], table, 569)


if __name__ == "__main__":
    with zipfile.ZipFile(sys.argv[1]) as archive:
        digits(archive, sys.argv[2])
        breast_cancer(archive, f"{sys.argv[2]}/breast-cancer")
