-- A file registered in place may be in an object store (`s3://…`), where
-- a modification time is coarse (seconds) and can be set back: the
-- object's entity tag, which changes with its bytes, is recorded too and
-- checked with the size and time before a release is debited. Local
-- files get one as well (object_store derives it from the inode, size
-- and modification time). NULL for dpgate's own files and for files
-- registered before this migration (their size and time still apply).
ALTER TABLE version_files ADD COLUMN etag TEXT;
