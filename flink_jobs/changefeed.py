"""``lakestream changefeed``: stream a Delta table's change data feed to an audit Delta table or Kafka.

Both outputs are exactly once end to end: the Delta source keeps its offset in Flink state (restored
with the checkpoint), the audit table is written through the two-phase-commit Delta sink (one writer),
and Kafka through Flink's transactional ``KafkaSink`` (EXACTLY_ONCE, transactional id prefix; consumers
must read with ``isolation.level=read_committed``). ``--at-least-once`` switches Kafka to plain
at-least-once delivery (no transactions, duplicates possible after a failure).

Each output also records where the source stands, with the changes it holds: the audit table in its
commits (``lakestream.progress``), Kafka in a positions topic in the same transaction. A run that ends
by itself (``--polls``) leaves no checkpoint, so the next run starts there (DESIGN.md section 9).

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
from typing import TYPE_CHECKING, Any, Literal

from flink_jobs.cli_common import JobFailedError, SubParsers, add_command, broker, detached, job_folder, load
from flink_jobs.positions_topic import default_positions_topic
from lakestream.config import Config, ConfigError, parse_duration
from lakestream.progress import Progress
from sources.offsets import SourceOffset

if TYPE_CHECKING:  # pragma: no cover
    from flink_jobs.resume import JobFolder, StartPlan


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


class _ToKafkaRecord:
    """Picklable row -> ``(topic, key, value)`` mapper: a change event for the output topic, or, for a
    ``Progress``, the source's position for the positions topic (key: the feed's app prefix)."""

    def __init__(self, names: Sequence[str], topic: str, positions_topic: str, position_key: str) -> None:
        self.names = tuple(names)
        self.topic = topic
        self.positions_topic = positions_topic
        self.position_key = position_key

    def __call__(self, row: Any) -> Any:
        from pyflink.common import Row

        from flink_jobs.positions_topic import position_value

        if type(row) is Progress:
            return Row(self.positions_topic, self.position_key, position_value(row.values))
        return Row(self.topic, None, change_event_json(self.names, row))


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
    env = build_env(cfg.flink, checkpoint_dir=checkpoint_dir, extra=extra, run_id=run_id, kind="changefeed")
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
        from udfs.delta_sink import sink_to_delta

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
    """The audit table's sink (``udfs.delta_sink.DeltaSinkSpec``)."""
    from udfs.delta_sink import DeltaSinkSpec

    return DeltaSinkSpec(
        table_uri=resolve_table(cfg, target.value),
        app_prefix=app_prefix(table),
        schema=schema,
        mode="append",
    )


def kafka_change_sink(
    rows: Any,
    *,
    names: Sequence[str],
    topic: str,
    positions_topic: str,
    position_key: str,
    bootstrap_servers: str,
    exactly_once: bool,
    transactional_id_prefix: str,
    uid: str,
) -> None:
    """Write the Delta source's rows (with ``Progress`` records) as JSON change events to ``topic``.

    One writer (keeps the commit order); each ``Progress`` becomes a position record in
    ``positions_topic`` in the same transaction as the events before it. Operator uids: ``<uid>-json``,
    ``<uid>``.
    """
    from pyflink.common import Types
    from pyflink.datastream.connectors.kafka import DeliveryGuarantee, KafkaSink
    from pyflink.java_gateway import get_gateway

    record_type = Types.ROW_NAMED(["topic", "key", "value"], [Types.STRING(), Types.STRING(), Types.STRING()])
    events = (
        rows.map(_ToKafkaRecord(names, topic, positions_topic, position_key), output_type=record_type)
        .name("to JSON change event")
        .uid(f"{uid}-json")
    )
    events = events.set_parallelism(1)
    builder = KafkaSink.builder().set_bootstrap_servers(bootstrap_servers)
    # The topic (and key) travel with each record: PyFlink's builder offers a fixed topic only.
    builder._j_builder.setRecordSerializer(get_gateway().jvm.io.lakestream.flink.RoutedKafkaRecords())
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
        help="first version to emit, or 'latest', for a first run or with --fresh (a later run continues "
        "where the previous one ended); default: the current table as inserts, then its changes",
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
        help="resume from this retained checkpoint or savepoint (default: the previous run's newest one, "
        "else the position its output recorded)",
    )
    p.add_argument(
        "--positions-topic",
        default=None,
        help="kafka:TOPIC output: the compacted topic its positions are recorded in, in the same "
        "transactions as the changes (default: TOPIC.lakestream-positions, created when missing)",
    )
    return p


def cmd_changefeed(args: argparse.Namespace) -> int:
    """Run the change-feed job until it is cancelled (or for ``--polls`` polls), from where the previous
    run ended (DESIGN.md section 9)."""
    from flink_jobs.positions_topic import ensure_positions_topic
    from flink_jobs.resume import lineage_for_run
    from lakestream.flink_runtime import check_runtime

    cfg = load(args)
    check_runtime(cfg.flink)
    target: ChangefeedTarget = args.to
    bootstrap = broker(cfg) if target.kind == "kafka" else None
    positions_topic = (args.positions_topic or default_positions_topic(target.value)) if bootstrap else None
    folder = job_folder(cfg, f"changefeed/{args.table}/{target.kind}/{target.value}")
    if bootstrap and positions_topic:
        ensure_positions_topic(bootstrap, positions_topic)
    plan = changefeed_start_plan(cfg, args, folder)
    start = None if args.fresh else recorded_position(cfg, args.table, target, positions_topic, bootstrap)
    if plan.action == "restore":
        print(f"resuming from checkpoint {plan.checkpoint} ({plan.reason})", flush=True)
    else:
        print(describe_start(args, start, plan.reason, positions_topic), flush=True)
    if args.from_version is not None and not args.fresh and (start is not None or plan.action == "restore"):
        print(
            f"note: --from-version {args.from_version} applies to a first run or with --fresh only; this run "
            "continues where the previous one ended (add --fresh to start there again)",
            flush=True,
        )
    lineage = lineage_for_run(
        folder,
        plan,
        bounded=args.polls is not None,
        parallelism=1,
        start={"offset": start.to_json() if start is not None else None},
    )
    folder.begin(lineage)
    folder.prune(lineage, keep_checkpoint=plan.checkpoint)
    env = build_changefeed_job(
        cfg,
        table=args.table,
        target=target,
        from_version=args.from_version,
        max_files_per_trigger=args.max_files_per_trigger,
        max_bytes_per_trigger=args.max_bytes_per_trigger,
        poll_interval=parse_duration(args.poll_interval, key="--poll-interval"),
        polls=args.polls,
        fail_on_data_loss=args.fail_on_data_loss,
        schema_changes=args.schema_changes,
        bootstrap_servers=bootstrap,
        exactly_once=args.exactly_once,
        restore_from=plan.checkpoint,
        checkpoint_dir=str(lineage.folder),
        start=start,
        positions_topic=positions_topic,
        run_id=lineage.run_id,
    )
    from lakestream.cluster_slots import execute_job

    job_name = args.job_name or f"lakestream-changefeed {args.table} -> {args.to.kind}:{args.to.value}"
    try:
        result = execute_job(env, job_name, cfg.flink)
    except Exception as exc:  # the job failed inside Flink: surface the source's own message
        reason = source_failure(str(exc))
        if reason is None:
            raise
        raise JobFailedError(reason) from exc
    if detached(result):
        print("submitted detached: the next run continues from this run's checkpoints", flush=True)
    elif args.polls is not None:
        folder.finish(lineage)
    return 0


def changefeed_start_plan(cfg: Config, args: argparse.Namespace, folder: JobFolder) -> StartPlan:
    """Where the run starts (``flink_jobs.resume.plan_start``). The change feed has one writer, whose
    recorded position is exact after any commit: a run that ended by itself is never completed."""
    from flink_jobs.resume import StartPlan, lineage_ended, plan_start, table_txn_version

    if args.from_checkpoint:
        path = Path(args.from_checkpoint).resolve()
        owner = next((lin for lin in folder.lineages() if lin.folder in path.parents), None)
        return StartPlan("restore", owner, path, "--from-checkpoint")
    newest = None if args.fresh else folder.newest()
    ended = False
    if newest is not None and args.to.kind == "delta":
        audit = (resolve_table(cfg, args.to.value), app_prefix(args.table))
        ended = lineage_ended([audit], newest.run_id, newest.widest, txn_version=table_txn_version)
    return plan_start(
        fresh=args.fresh,
        newest=newest,
        checkpoint=folder.checkpoint(newest) if newest is not None else None,
        legacy=None if args.fresh else folder.legacy_checkpoint(),
        ended=ended,
        bounded=args.polls is not None,
        kafka=False,
    )


def recorded_position(
    cfg: Config, table: str, target: ChangefeedTarget, positions_topic: str | None, bootstrap: str | None
) -> SourceOffset | None:
    """The source position the output recorded with its last changes (None: nothing recorded yet)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from flink_jobs.positions_topic import parse_position, read_position
    from lakestream.progress import read_progress
    from sources.offsets import PROGRESS_KEYS

    values: dict[str, int] = {}
    if target.kind == "delta":
        try:
            values = read_progress(
                DeltaTable(resolve_table(cfg, target.value)), app_prefix(table), PROGRESS_KEYS
            )
        except TableNotFoundError:
            return None
    elif bootstrap and positions_topic:
        text = read_position(bootstrap, positions_topic, app_prefix(table))
        values = parse_position(text) if text is not None else {}
    if not values:
        return None
    source_uri = resolve_table(cfg, table)
    return SourceOffset.from_progress(
        values, table_id=str(DeltaTable(source_uri).metadata().id), table_uri=source_uri
    )


def describe_start(
    args: argparse.Namespace, start: SourceOffset | None, why: str, positions_topic: str | None
) -> str:
    """The first line of a run that starts without a checkpoint: where, and on whose record."""
    where = f"{args.to.kind}:{args.to.value}" if positions_topic is None else positions_topic
    if start is not None:
        by = "the previous run's last changes" if positions_topic else "the previous run's last commit"
        return f"resuming changefeed of {args.table} at {start.describe()} (recorded by {by} in {where})"
    if args.from_version == "latest":
        first = "the first version after the current one"
    elif args.from_version is not None:
        first = f"version {args.from_version}"
    else:
        first = "the current table as inserts, then its changes"
    because = why if args.fresh else f"nothing recorded in {where} yet"
    return f"starting changefeed of {args.table} at {first} ({because})"


def source_failure(text: str) -> str | None:
    """The ``sources.errors`` exception line in a Flink job failure (Python traceback inside), if any."""
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        if stripped.startswith("sources.errors."):
            return stripped[len("sources.errors.") :]
    return None
