-- A dataset version is a set of immutable Parquet files in the data
-- directory (DPGATE_DATA_DIR), and this table is their manifest: each
-- upload writes one file of the rows' inputs (row ids, features,
-- dimensions) and one of their outcomes (labels, measures: private, so
-- written without statistics, page indexes or bloom filters), and records
-- both here in the transaction that bumps the dataset's row count. The
-- snapshot at N rows is every file with version < N, as `row_blocks` was.
-- `path` is relative to the data directory; `byte_count` and `sha256`
-- let a reader refuse a file that changed after it was written.
--
-- Data registered in place (a `source` URI under DPGATE_DATA_ROOTS) is
-- recorded here too, one version being any number of the operator's
-- Parquet files (`seq` orders them): each file is listed twice, as the
-- version's inputs and as its outcomes (read with those columns alone),
-- `path` its `file://` URI, and `modified_ns` its modification time at
-- registration, so that a file changed since is refused from its
-- metadata before a release is debited.
--
-- Blocks stored before this migration are written out as files at
-- start-up, and their rows deleted from `row_blocks`.
CREATE TABLE version_files (
    dataset_pk INTEGER NOT NULL REFERENCES datasets (pk),
    version INTEGER NOT NULL,
    part TEXT NOT NULL CHECK (part IN ('inputs', 'outcomes')),
    seq INTEGER NOT NULL,
    path TEXT NOT NULL,
    row_count INTEGER NOT NULL,
    byte_count INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    modified_ns INTEGER,
    PRIMARY KEY (dataset_pk, version, seq, part)
);
