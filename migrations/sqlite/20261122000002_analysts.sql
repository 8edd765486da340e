-- Per-analyst spending and optional caps, updated in the same transaction as
-- every debit and every budget change.
CREATE TABLE analysts (
    dataset_pk INTEGER NOT NULL REFERENCES datasets (pk),
    analyst TEXT NOT NULL,
    -- The cap in exact units, or NULL for none.
    cap_epsilon INTEGER,
    cap_delta TEXT,
    -- The running composition of this analyst's releases (JSON).
    composition TEXT NOT NULL,
    PRIMARY KEY (dataset_pk, analyst)
);

CREATE INDEX releases_by_dataset ON releases (dataset_pk, ledger_seq);
