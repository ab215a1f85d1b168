"""``lakestream changefeed``: stream a Delta table's change data feed to an audit Delta table or Kafka.

Both outputs are exactly once end to end: the audit table through the two-phase-commit Delta sink,
Kafka through Flink's transactional ``KafkaSink`` (consumers must read with
``isolation.level=read_committed``). ``--at-least-once`` writes Kafka without transactions (duplicates
possible after a failure). Each output records where the source stands with the changes it holds (the
audit table in its commits, Kafka in a positions topic), so the next run continues where a run that
ended by itself (``--polls``) stopped (DESIGN.md section 9).

Change events on Kafka are JSON objects: the table's columns plus ``_change_type``,
``_commit_version`` and ``_commit_timestamp`` (ISO 8601), like ``to_json(struct(*))`` of Spark's
change feed. They are written without a key by a single sink writer, so a one-partition topic keeps
the table's commit order; with more partitions order by ``_commit_version``.

Run: ``lakestream changefeed --table silver/orders --to delta:audit/orders`` (or
``python -m cli changefeed ...``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from flink_jobs.positions_topic import default_positions_topic
from lakestream.config import Config, ConfigError
from sinks.flink.kafka_changes import kafka_change_sink
from sources.offsets import SourceOffset


@dataclass(frozen=True)
class ChangefeedTarget:
    """Where the change feed goes: ``delta:PATH`` or ``kafka:TOPIC``."""

    kind: Literal["delta", "kafka"]
    value: str

    @classmethod
    def parse(cls, text: str) -> ChangefeedTarget:
        """Parse the ``--to`` argument."""
        kind, sep, value = text.partition(":")
        if not sep or kind not in ("delta", "kafka") or not value:
            raise ConfigError(
                f"--to: expected delta:PATH (a table under the lakehouse root, or an absolute path/URI) "
                f"or kafka:TOPIC, got {text!r}"
            )
        return cls(kind, value)  # type: ignore[arg-type]


def resolve_table(cfg: Config, name: str) -> str:
    """A table name under the lakehouse root, or an absolute path / URI as given."""
    if "://" in name or Path(name).is_absolute():
        return name
    return cfg.lakehouse.table_uri(name)


def build_changefeed_job(
    cfg: Config,
    *,
    table: str,
    target: ChangefeedTarget,
    from_version: int | Literal["latest"] | None = None,
    max_files_per_trigger: int | None = None,
    max_bytes_per_trigger: int | None = None,
    poll_interval: timedelta = timedelta(seconds=1),
    polls: int | None = None,
    fail_on_data_loss: bool = True,
    schema_changes: Literal["fail", "additive"] = "fail",
    bootstrap_servers: str | None = None,
    exactly_once: bool = True,
    restore_from: str | Path | None = None,
    checkpoint_dir: str | None = None,
    start: SourceOffset | None = None,
    positions_topic: str | None = None,
    run_id: str | None = None,
) -> Any:
    """Assemble the change-feed graph; returns the StreamExecutionEnvironment (not yet executed).

    ``polls`` bounds the number of polls (catch-up runs, tests); ``restore_from`` is a retained
    checkpoint (or savepoint) folder to resume from; ``start`` a recorded position to start a
    stream without state at (instead of ``from_version``); ``positions_topic`` where the Kafka output
    records its positions (default ``<topic>.lakestream-positions``).
    """
    from runtime.flink_env import build_env
    from sources.flink.delta_source import delta_source
    from sources.options import DeltaSourceOptions
    from sources.reader import output_schema
    from sources.stream_reader import resolve_read_schema

    source_uri = resolve_table(cfg, table)
    options = DeltaSourceOptions(
        mode="cdf",
        starting_version=from_version,
        max_files_per_trigger=max_files_per_trigger,
        max_bytes_per_trigger=max_bytes_per_trigger,
        poll_interval=poll_interval,
        fail_on_data_loss=fail_on_data_loss,
        schema_changes=schema_changes,
    )
    read_schema = resolve_read_schema(source_uri)
    schema = output_schema(read_schema, "cdf")
    extra: dict[str, str] = {}
    if restore_from:
        # The trigger ticks of an unbounded run and of a bounded one have different uids; their
        # positions mean nothing, so a restore across the two simply drops the old tick state.
        extra["execution.state-recovery.ignore-unclaimed-state"] = "true"
    env = build_env(
        cfg.flink,
        checkpoint_dir=checkpoint_dir,
        resume_from=restore_from or None,
        extra=extra,
        run_id=run_id,
        kind="changefeed",
        storage=cfg.storage,
    )
    slug = table.strip("/").replace("/", "-").replace(":", "-")
    rows = delta_source(
        env,
        source_uri,
        options,
        name=f"delta changes {table}",
        uid=f"changefeed-source-{slug}",
        ticks=polls,
        read_schema=read_schema,
        start=start,
        emit_progress=True,
        # One position record per feed (two feeds of one table to other targets share the source uid).
        reader_id=f"changefeed {table} -> {target.kind}:{target.value}",
    )
    if target.kind == "delta":
        from sinks.flink.delta_sink import sink_to_delta

        spec = audit_spec(cfg, table, target, schema)
        # One writer, chained to the source: each commit holds every change before the position it
        # records, so the audit table's position is exact after any commit.
        sink_to_delta(rows, spec, name=f"delta {target.value}", uid=f"changefeed-sink-{slug}", parallelism=1)
    else:
        if not bootstrap_servers:
            raise ConfigError("kafka:TOPIC output needs kafka.bootstrap_servers (or --bootstrap-servers)")
        kafka_change_sink(
            rows,
            names=schema.names,
            topic=target.value,
            positions_topic=positions_topic or default_positions_topic(target.value),
            position_key=app_prefix(table),
            bootstrap_servers=bootstrap_servers,
            exactly_once=exactly_once,
            transactional_id_prefix=f"lakestream-changefeed-{slug}",
            uid=f"changefeed-kafka-{slug}",
        )
    return env


def app_prefix(table: str) -> str:
    """The feed's name in its outputs: the audit sink's app prefix, the Kafka position records' key."""
    return f"changefeed/{table}"


def audit_spec(cfg: Config, table: str, target: ChangefeedTarget, schema: Any) -> Any:
    """The audit table's sink (``sinks.flink.delta_sink.DeltaSinkSpec``)."""
    from sinks.flink.delta_sink import DeltaSinkSpec
    from sinks.table_spec import TableSpec

    return DeltaSinkSpec(
        table=TableSpec(table_uri=resolve_table(cfg, target.value), schema=schema, mode="append"),
        app_prefix=app_prefix(table),
    )
