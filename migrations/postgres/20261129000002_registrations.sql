-- Registrations of Parquet in place that run in the background
-- (`Prefer: respond-async`). The replica running one writes `beat_at`
-- every few seconds, so that any replica can tell one whose replica
-- stopped (failed) from one still reading. `dataset_id` is not a foreign
-- key: a registration that creates its dataset runs before the dataset
-- exists. Exactly one of `report` (JSON, once done) and `problem` (JSON,
-- once failed) is set when `finished_at` is.
CREATE TABLE registrations (
    id TEXT PRIMARY KEY,
    dataset_id TEXT NOT NULL,
    actor TEXT NOT NULL,
    created_at TEXT NOT NULL,
    beat_at TEXT NOT NULL,
    finished_at TEXT,
    report TEXT,
    problem TEXT
);
