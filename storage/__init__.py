"""Delta table access every layer shares: the log reader, Parquet encoding, retries, reader positions."""
