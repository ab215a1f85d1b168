"""lakestream: messy Kafka event streams into exactly-once Delta Lake tables, and back out as streams.

This package holds what every layer shares and what can be tested without Flink: configuration,
paths, building the Flink environment of a job, and the pure event semantics (standard schema,
adapters, quality rules, resolution rules). Local services for development live in ``devtools``.
"""
