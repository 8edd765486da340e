"""Writes the digits 4-vs-9 subset of the classic UCI handwritten digits
(8x8 images, pixels 0..16, as shipped inside scikit-learn's wheel) as
train/test CSVs for `cargo run --release --example walr_figures`.

    pip download scikit-learn --no-deps -d /tmp/skl
    python3 examples/digits49.py /tmp/skl/scikit_learn-*.whl /tmp/digits49

Stdlib only: the data file is read out of the wheel, nothing is installed.
Label y = 1 for a 9, 0 for a 4; a seeded 70/30 split.
"""

import csv
import gzip
import io
import random
import sys
import zipfile


def main(wheel, out_dir):
    with zipfile.ZipFile(wheel) as archive:
        raw = archive.read("sklearn/datasets/data/digits.csv.gz")
    rows = list(csv.reader(io.StringIO(gzip.decompress(raw).decode())))
    subset = [r for r in rows if r and int(float(r[-1])) in (4, 9)]
    random.Random(49).shuffle(subset)
    cut = int(0.7 * len(subset))
    header = ["row_id", "y"] + [f"p{j}" for j in range(64)]
    for name, part in (("train", subset[:cut]), ("test", subset[cut:])):
        with open(f"{out_dir}/{name}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            for i, r in enumerate(part):
                label = 1 if int(float(r[-1])) == 9 else 0
                writer.writerow([f"{name}{i}", label] + [int(float(v)) for v in r[:-1]])
        print(f"{name}: {len(part)} rows")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
