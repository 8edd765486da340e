-- The rows a release was debited at (its version's N). A gradient
-- session's calls read that snapshot; under privacy unit `user`, where N
-- is private, the response cannot say it, so it is kept here. NULL for
-- releases recorded before.
ALTER TABLE releases ADD COLUMN n_rows BIGINT;
