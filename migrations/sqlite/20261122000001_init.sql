-- dpgate schema, SQLite.

CREATE TABLE datasets (
    pk INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    privacy_unit TEXT NOT NULL CHECK (privacy_unit IN ('label', 'row')),
    accountant TEXT NOT NULL CHECK (accountant IN ('rdp', 'basic')),
    schema TEXT NOT NULL,
    -- The budget in exact units: ε in 1e-9, δ in 1e-30 (a decimal string).
    budget_epsilon INTEGER NOT NULL,
    budget_delta TEXT NOT NULL,
    -- The running composition of the ledger's releases (JSON), updated in
    -- the same transaction as every debit.
    composition TEXT NOT NULL,
    n_rows INTEGER NOT NULL DEFAULT 0,
    -- Running sums for WALR releases (JSON), updated by every upload.
    stats TEXT NOT NULL,
    created_at TEXT NOT NULL
);

-- One row per data row; features as one little-endian f32 BLOB.
CREATE TABLE rows (
    dataset_pk INTEGER NOT NULL REFERENCES datasets (pk),
    row_id TEXT NOT NULL,
    label INTEGER NOT NULL CHECK (label IN (0, 1)),
    features BLOB NOT NULL,
    measures BLOB NOT NULL,
    dimensions BLOB NOT NULL,
    PRIMARY KEY (dataset_pk, row_id)
) WITHOUT ROWID;

CREATE TABLE ledger (
    dataset_pk INTEGER NOT NULL REFERENCES datasets (pk),
    seq INTEGER NOT NULL,
    event TEXT NOT NULL,
    actor TEXT NOT NULL,
    release_id TEXT,
    epsilon INTEGER NOT NULL,
    delta TEXT NOT NULL,
    loss TEXT,
    details TEXT,
    created_at TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (dataset_pk, seq)
);

-- Nothing is ever changed or deleted in the ledger.
CREATE TRIGGER ledger_is_append_only_on_update BEFORE UPDATE ON ledger
BEGIN
    SELECT RAISE(ABORT, 'the ledger is append-only');
END;

CREATE TRIGGER ledger_is_append_only_on_delete BEFORE DELETE ON ledger
BEGIN
    SELECT RAISE(ABORT, 'the ledger is append-only');
END;

CREATE TABLE releases (
    id TEXT PRIMARY KEY,
    dataset_pk INTEGER NOT NULL REFERENCES datasets (pk),
    ledger_seq INTEGER NOT NULL,
    analyst TEXT NOT NULL,
    kind TEXT NOT NULL,
    idempotency_key TEXT,
    request_hash TEXT NOT NULL,
    request TEXT NOT NULL,
    -- The response body, stored after the noise is drawn; NULL if it was
    -- lost after the debit (the budget stays spent).
    response TEXT,
    created_at TEXT NOT NULL,
    UNIQUE (dataset_pk, analyst, idempotency_key)
);

CREATE TABLE revoked_tokens (
    jti TEXT PRIMARY KEY,
    revoked_at TEXT NOT NULL
);

CREATE TABLE settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
