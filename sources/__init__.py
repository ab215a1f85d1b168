"""Delta tables read back out as exactly-once streams, with the semantics of Spark's Delta source.

Pure modules (no pyflink): ``options``, ``offsets``, ``schema_compat``, ``planner`` (the coordinator of
``start_point``, ``snapshot_plan``, ``change_plan``, ``admission``, ``backlog``, ``metadata_tracker``,
``data_loss``, which produce a ``batch_plan``), ``reader``, ``stream_reader``, ``trigger_progress``.
The thin Flink shells are in ``sources.flink``: the Delta source (``delta_source``) and the Kafka input
of every job (``kafka_input``). The contract is DESIGN.md section 6.
"""
