-- dpgate schema, PostgreSQL.

CREATE TABLE datasets (
    pk BIGSERIAL PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    privacy_unit TEXT NOT NULL CHECK (privacy_unit IN ('label', 'row')),
    accountant TEXT NOT NULL CHECK (accountant IN ('rdp', 'basic')),
    schema TEXT NOT NULL,
    -- The budget in exact units: ε in 1e-9, δ in 1e-30 (a decimal string).
    budget_epsilon BIGINT NOT NULL,
    budget_delta TEXT NOT NULL,
    -- The running composition of the ledger's releases (JSON), updated in
    -- the same transaction as every debit.
    composition TEXT NOT NULL,
    n_rows BIGINT NOT NULL DEFAULT 0,
    -- Running sums for WALR releases (JSON), updated by every upload.
    stats TEXT NOT NULL,
    created_at TEXT NOT NULL
);

-- One row per data row; features as one little-endian f32 BYTEA.
CREATE TABLE rows (
    dataset_pk BIGINT NOT NULL REFERENCES datasets (pk),
    row_id TEXT NOT NULL,
    label SMALLINT NOT NULL CHECK (label IN (0, 1)),
    features BYTEA NOT NULL,
    measures BYTEA NOT NULL,
    dimensions BYTEA NOT NULL,
    PRIMARY KEY (dataset_pk, row_id)
);

CREATE TABLE ledger (
    dataset_pk BIGINT NOT NULL REFERENCES datasets (pk),
    seq BIGINT NOT NULL,
    event TEXT NOT NULL,
    actor TEXT NOT NULL,
    release_id TEXT,
    epsilon BIGINT NOT NULL,
    delta TEXT NOT NULL,
    loss TEXT,
    details TEXT,
    created_at TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (dataset_pk, seq)
);

-- Nothing is ever changed or deleted in the ledger.
CREATE FUNCTION ledger_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ledger is append-only';
END;
$$;

CREATE TRIGGER ledger_is_append_only BEFORE UPDATE OR DELETE ON ledger
    FOR EACH ROW EXECUTE FUNCTION ledger_is_append_only();

CREATE TABLE releases (
    id TEXT PRIMARY KEY,
    dataset_pk BIGINT NOT NULL REFERENCES datasets (pk),
    ledger_seq BIGINT NOT NULL,
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
