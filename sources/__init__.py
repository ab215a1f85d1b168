"""Delta tables read back out as exactly-once streams (issue 5).

Pure modules (no pyflink): ``options``, ``offsets``, ``delta_log``, ``schema_compat``, ``planner``,
``reader``, ``stream_reader``. The Flink operator is ``flink_source.delta_source``.
"""
