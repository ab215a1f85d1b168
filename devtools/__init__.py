"""Local services and development helpers: a Kafka broker, a standalone Flink cluster, sample events.

The demo, the tests and the benchmarks use them; the jobs themselves never do, so this package may
depend on ``lakestream`` but ``lakestream`` never on it.
"""
