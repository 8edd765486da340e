-- Rows are stored in blocks: up to 16,384 rows of one upload, in the order
-- they arrived, each column packed into one bytea (the encoding is in
-- src/snapshots/stored.rs). An upload writes, and a snapshot reads, one
-- database row per block instead of one per data row. `version` is the
-- dataset's row count before the upload (the snapshot at N rows is every
-- block with version < N) and `seq` the block's place in its upload.
--
-- Row ids are unique within a dataset: an upload checks its ids against
-- the stored ones while it holds the dataset's row lock. Rows stored before
-- this migration are converted into blocks at start-up, and `rows` dropped.
CREATE TABLE row_blocks (
    dataset_pk BIGINT NOT NULL REFERENCES datasets (pk),
    version BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    row_count BIGINT NOT NULL,
    ids BYTEA NOT NULL,
    id_ends BYTEA NOT NULL,
    labels BYTEA NOT NULL,
    features BYTEA NOT NULL,
    measures BYTEA NOT NULL,
    dimensions BYTEA NOT NULL,
    PRIMARY KEY (dataset_pk, version, seq)
);

-- Packed numbers barely compress: store them out of line without trying.
ALTER TABLE row_blocks
    ALTER COLUMN ids SET STORAGE EXTERNAL,
    ALTER COLUMN id_ends SET STORAGE EXTERNAL,
    ALTER COLUMN labels SET STORAGE EXTERNAL,
    ALTER COLUMN features SET STORAGE EXTERNAL,
    ALTER COLUMN measures SET STORAGE EXTERNAL,
    ALTER COLUMN dimensions SET STORAGE EXTERNAL;
