"""Schemathesis hooks for dpgate (loaded through SCHEMATHESIS_HOOKS by run.sh).

Upload bodies may be Arrow IPC streams or Parquet files, media types
schemathesis has no serializer for: without one it filters out every
example it would send as either, and fails its health check. They go on
the wire as raw bytes, as `application/octet-stream` would: whatever is
generated is not a valid stream or file, so the server must answer 400
(or 401/403/404/413 before it reads the body), never 5xx.
"""

import schemathesis

schemathesis.serializer.alias(
    ["application/vnd.apache.arrow.stream", "application/vnd.apache.parquet"],
    "application/octet-stream",
)
