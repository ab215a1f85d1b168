"""Delta tables read back out as exactly-once streams, with the semantics of Spark's Delta source.

Pure modules (no pyflink): ``options``, ``offsets``, ``schema_compat``, ``planner``, ``reader``,
``stream_reader``, ``trigger_progress``. The thin Flink shells are in ``sources.flink``: the Delta
source (``delta_source``) and the Kafka input of every job (``kafka_input``). The contract is
DESIGN.md section 6.
"""
