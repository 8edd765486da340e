-- Rows are stored in blocks: up to 16,384 rows of one upload, in the order
-- they arrived, each column packed into one BLOB (the encoding is in
-- src/snapshots/stored.rs). An upload writes, and a snapshot reads, one
-- database row per block instead of one per data row. `version` is the
-- dataset's row count before the upload (the snapshot at N rows is every
-- block with version < N) and `seq` the block's place in its upload.
--
-- Row ids are unique within a dataset: an upload checks its ids against
-- the stored ones while it holds the write lock. Rows stored before this
-- migration are converted into blocks at start-up, and `rows` dropped.
CREATE TABLE row_blocks (
    dataset_pk INTEGER NOT NULL REFERENCES datasets (pk),
    version INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    row_count INTEGER NOT NULL,
    ids BLOB NOT NULL,
    id_ends BLOB NOT NULL,
    labels BLOB NOT NULL,
    features BLOB NOT NULL,
    measures BLOB NOT NULL,
    dimensions BLOB NOT NULL,
    PRIMARY KEY (dataset_pk, version, seq)
);
