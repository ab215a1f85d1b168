"""Delta tables read back out as exactly-once streams, with the semantics of Spark's Delta source.

Pure modules (no pyflink): ``options``, ``offsets``, ``delta_log``, ``schema_compat``, ``planner``,
``reader``, ``stream_reader``. The Flink operator is ``flink_source.delta_source``. The contract is
DESIGN.md section 6.
"""
