"""lakestream: messy Kafka event streams into exactly-once Delta Lake tables, and back out as streams.

This package is the model every layer shares, testable without Flink: configuration, the standard
event and its adapters, quality rules, keys, the merge rule (``merge_spec``), the silver and gold
definitions, the one time module and the one error root. Everything else builds on it.
"""
