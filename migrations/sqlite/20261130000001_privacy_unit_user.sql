-- no-transaction
-- Privacy unit `user`: datasets.privacy_unit may be 'user'. SQLite cannot
-- change a CHECK constraint in place, so the table is rebuilt as SQLite's
-- documentation prescribes (lang_altertable.html, "other kinds of table
-- schema changes"): foreign keys off for this connection, the copy, drop
-- and rename in one transaction, foreign keys back on. The tables that
-- refer to datasets (pk) refer to the rebuilt one by name; pk values are
-- copied unchanged.
PRAGMA foreign_keys = OFF;

BEGIN IMMEDIATE;

CREATE TABLE datasets_rebuilt (
    pk INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    privacy_unit TEXT NOT NULL CHECK (privacy_unit IN ('label', 'row', 'user')),
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

INSERT INTO datasets_rebuilt (pk, id, name, privacy_unit, accountant, schema, budget_epsilon,
                              budget_delta, composition, n_rows, stats, created_at)
SELECT pk, id, name, privacy_unit, accountant, schema, budget_epsilon, budget_delta,
       composition, n_rows, stats, created_at
FROM datasets;

DROP TABLE datasets;

ALTER TABLE datasets_rebuilt RENAME TO datasets;

COMMIT;

PRAGMA foreign_keys = ON;
