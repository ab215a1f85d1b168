"""lakestream benchmarks: end-to-end ingest vs same-run baselines (``python -m benchmarks``)."""
