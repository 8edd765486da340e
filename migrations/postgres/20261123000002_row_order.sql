-- Row ids sort by their bytes, whatever the database's collation: the
-- primary key's order is then the order every snapshot is read and summed
-- in, and the in-memory index (a binary search over bytes) agrees with it.
-- SQLite's TEXT compares bytes already (BINARY collation).
ALTER TABLE rows ALTER COLUMN row_id TYPE TEXT COLLATE "C";
