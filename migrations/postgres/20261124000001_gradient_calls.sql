-- The calls of pre-paid gradient sessions: a session is a release, debited
-- once for all its T calls; each call index is spent once. A call's row is
-- its claim (the first request for that index, with the hash of its θ);
-- `response` is the body sent, or `failure` the problem answered when it
-- could not be made after its claim (the index stays spent). Retries with
-- the same θ get that same ending.
CREATE TABLE gradient_calls (
    release_id TEXT NOT NULL REFERENCES releases (id),
    call BIGINT NOT NULL,
    theta_hash TEXT NOT NULL,
    response TEXT,
    failure TEXT,
    PRIMARY KEY (release_id, call)
);
