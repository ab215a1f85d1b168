"""``lakestream demo``: sample events, the ingest job on them, a live view and an HTML report."""
