-- Rows carry the dataset version they were added at: the row count before
-- the upload that stored them. The snapshot of a dataset at N rows is every
-- row with version < N; uploads are serialised and rows never change, so a
-- snapshot reads the same rows however many uploads follow it.
ALTER TABLE rows ADD COLUMN version INTEGER NOT NULL DEFAULT 0;

-- A release that failed after its debit: the problem document it answered
-- with (its ledger entry stays; a retry with its key gets the same answer).
ALTER TABLE releases ADD COLUMN failure TEXT;
