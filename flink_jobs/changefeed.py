"""``lakestream changefeed``: stream a Delta table's change data feed to an audit Delta table or Kafka.

Both outputs are exactly once end to end: the Delta source keeps its offset in Flink state (restored
with the checkpoint), the audit table is written through the two-phase-commit Delta sink, and Kafka
through Flink's transactional ``KafkaSink`` (EXACTLY_ONCE, transactional id prefix; consumers must read
with ``isolation.level=read_committed``). ``--at-least-once`` switches Kafka to plain at-least-once
delivery (no transactions, duplicates possible after a failure).

Change events on Kafka are JSON objects: the table's columns plus ``_change_type``,
``_commit_version`` and ``_commit_timestamp`` (ISO 8601), like ``to_json(struct(*))`` of Spark's
change feed. They are written without a key by a single sink writer, so a one-partition topic keeps
the table's commit order; with more partitions order by ``_commit_version``.

Run: ``lakestream changefeed --table silver/orders --to delta:audit/orders`` (or
``python -m flink_jobs changefeed ...``).
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from flink_jobs.cli_common import JobFailedError, SubParsers, add_command, broker, checkpoints, load
from lakestream.config import Config, ConfigError, parse_duration


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


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value


def change_event_json(names: Sequence[str], row: Sequence[Any]) -> str:
    """One output row of the CDF source as a JSON change event (columns + metadata fields)."""
    return json.dumps(
        {name: _json_value(v) for name, v in zip(names, row, strict=True)},
        separators=(",", ":"),
        ensure_ascii=False,
    )


class _ToJson:
    """Picklable row -> JSON mapper (carries the column names into the Python worker)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def __call__(self, row: Any) -> str:
        return change_event_json(self.names, row)


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
) -> Any:
    """Assemble the change-feed graph; returns the StreamExecutionEnvironment (not yet executed).

    ``polls`` bounds the number of polls (catch-up runs, tests); ``restore_from`` is a retained
    checkpoint (or savepoint) folder to resume from.
    """
    from lakestream.flink_runtime import build_env
    from sources.flink_source import delta_source
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
        extra["execution.state-recovery.path"] = Path(restore_from).resolve().as_uri()
        # The trigger ticks of an unbounded run and of a bounded one have different uids; their
        # positions mean nothing, so a restore across the two simply drops the old tick state.
        extra["execution.state-recovery.ignore-unclaimed-state"] = "true"
    env = build_env(cfg.flink, checkpoint_dir=checkpoint_dir, extra=extra)
    slug = table.strip("/").replace("/", "-").replace(":", "-")
    rows = delta_source(
        env,
        source_uri,
        options,
        name=f"delta changes {table}",
        uid=f"changefeed-source-{slug}",
        ticks=polls,
        read_schema=read_schema,
    )
    if target.kind == "delta":
        from udfs.delta_sink import DeltaSinkSpec, sink_to_delta

        spec = DeltaSinkSpec(
            table_uri=resolve_table(cfg, target.value),
            app_prefix=f"changefeed/{table}",
            schema=schema,
            mode="append",
        )
        sink_to_delta(rows, spec, name=f"delta {target.value}", uid=f"changefeed-sink-{slug}")
    else:
        if not bootstrap_servers:
            raise ConfigError("kafka:TOPIC output needs kafka.bootstrap_servers (or --bootstrap-servers)")
        _kafka_sink(
            rows,
            names=schema.names,
            topic=target.value,
            bootstrap_servers=bootstrap_servers,
            exactly_once=exactly_once,
            transactional_id_prefix=f"lakestream-changefeed-{slug}",
            uid=f"changefeed-kafka-{slug}",
        )
    return env


def _kafka_sink(
    rows: Any,
    *,
    names: Sequence[str],
    topic: str,
    bootstrap_servers: str,
    exactly_once: bool,
    transactional_id_prefix: str,
    uid: str,
) -> None:
    from pyflink.common import Types
    from pyflink.common.serialization import SimpleStringSchema
    from pyflink.datastream.connectors.kafka import (
        DeliveryGuarantee,
        KafkaRecordSerializationSchema,
        KafkaSink,
    )

    events = (
        rows.map(_ToJson(names), output_type=Types.STRING()).name("to JSON change event").uid(f"{uid}-json")
    )
    events = events.set_parallelism(1)
    builder = (
        KafkaSink.builder()
        .set_bootstrap_servers(bootstrap_servers)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(topic)
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
    )
    if exactly_once:
        builder = (
            builder.set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_transactional_id_prefix(transactional_id_prefix)
            # Within the broker default cap (transaction.max.timeout.ms = 15 min).
            .set_property("transaction.timeout.ms", "900000")
        )
    else:
        builder = builder.set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE)
    # One writer keeps the commit order of the (keyless) events.
    events.sink_to(builder.build()).name(f"kafka {topic}").uid(uid).set_parallelism(1)


def _from_version(text: str) -> int | Literal["latest"]:
    if text == "latest":
        return "latest"
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a version number or 'latest', got {text!r}")
    return int(text)


def register(subparsers: SubParsers) -> argparse.ArgumentParser:
    """Register ``lakestream changefeed`` on the CLI's sub-command parsers."""
    p = add_command(
        subparsers,
        "changefeed",
        func=cmd_changefeed,
        flags=("lakehouse", "bootstrap_servers", "fresh", "job_name"),
        help="stream a Delta table's change data feed to an audit Delta table or a Kafka topic, exactly once",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--table", required=True, help="source table under the lakehouse root, e.g. silver/orders")
    p.add_argument("--to", required=True, type=ChangefeedTarget.parse, help="delta:PATH or kafka:TOPIC")
    p.add_argument(
        "--from-version",
        type=_from_version,
        default=None,
        help="first version to emit, or 'latest'; default: the current table as inserts, then its changes",
    )
    p.add_argument("--max-files-per-trigger", type=int, default=None)
    p.add_argument("--max-bytes-per-trigger", type=int, default=None)
    p.add_argument("--poll-interval", default="1s", help="time between polls of the Delta log (e.g. 500ms)")
    p.add_argument(
        "--polls", type=int, default=None, help="stop after this many polls (default: run forever)"
    )
    p.add_argument(
        "--no-fail-on-data-loss",
        dest="fail_on_data_loss",
        action="store_false",
        help="skip versions/files removed by retention or VACUUM (counted in metrics) instead of failing",
    )
    p.add_argument("--schema-changes", choices=["fail", "additive"], default="fail")
    p.add_argument(
        "--at-least-once",
        dest="exactly_once",
        action="store_false",
        help="Kafka output without transactions (duplicates possible after failures)",
    )
    p.add_argument(
        "--from-checkpoint",
        default=None,
        help="resume from this retained checkpoint or savepoint (default: the newest retained one)",
    )
    return p


def cmd_changefeed(args: argparse.Namespace) -> int:
    """Run the change-feed job until it is cancelled (or for ``--polls`` polls)."""
    cfg = load(args)
    checkpoint_dir, latest = checkpoints(
        cfg, f"changefeed/{args.table}/{args.to.kind}/{args.to.value}", resume=not args.fresh
    )
    env = build_changefeed_job(
        cfg,
        table=args.table,
        target=args.to,
        from_version=args.from_version,
        max_files_per_trigger=args.max_files_per_trigger,
        max_bytes_per_trigger=args.max_bytes_per_trigger,
        poll_interval=parse_duration(args.poll_interval, key="--poll-interval"),
        polls=args.polls,
        fail_on_data_loss=args.fail_on_data_loss,
        schema_changes=args.schema_changes,
        bootstrap_servers=broker(cfg) if args.to.kind == "kafka" else None,
        exactly_once=args.exactly_once,
        restore_from=args.from_checkpoint or latest,
        checkpoint_dir=checkpoint_dir,
    )
    from lakestream.cluster_slots import execute_job

    job_name = args.job_name or f"lakestream-changefeed {args.table} -> {args.to.kind}:{args.to.value}"
    try:
        execute_job(env, job_name, cfg.flink)
    except Exception as exc:  # the job failed inside Flink: surface the source's own message
        reason = source_failure(str(exc))
        if reason is None:
            raise
        raise JobFailedError(reason) from exc
    return 0


def source_failure(text: str) -> str | None:
    """The ``sources.errors`` exception line in a Flink job failure (Python traceback inside), if any."""
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        if stripped.startswith("sources.errors."):
            return stripped[len("sources.errors.") :]
    return None
