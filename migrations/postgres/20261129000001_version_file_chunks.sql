-- A pass reads a few columns of a file, yet checked it whole against its
-- SHA-256: reading one column of 36 hashed all of them. Each file now
-- records the BLAKE3 hash of each of its column chunks and of its footer
-- (the last `footer_bytes`), 32 bytes each in file order, the footer's
-- last, so a pass checks exactly the bytes it reads (BLAKE3, faster than
-- SHA-256, as a pass hashes every byte it reads). NULL for files recorded
-- before this migration, which a pass still checks whole.
ALTER TABLE version_files ADD COLUMN footer_bytes BIGINT;
ALTER TABLE version_files ADD COLUMN chunk_blake3 BYTEA;
