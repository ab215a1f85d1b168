"""The Python workers Flink starts: bundle ends, garbage collection, memory, a shared worker, start-up."""
