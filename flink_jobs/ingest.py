"""Ingest job: the four source topics into bronze, quarantine, review, late and silver Delta tables.

Standardise (adapters + quality tags) writes bronze, review and quarantine; a per-partition event-time
gate and keyed de-dup in Java feed resolve, which writes late and stages silver for one global
committer (one MERGE per checkpoint); the gold speed layer runs beside it in the JVM. The graph with
its operator uids: DESIGN.md section 14.1; the rules behind it: sections 2, 3, 4 and 11.6.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakestream.config import Config, ConfigError
from lakestream.table_names import (
    BRONZE_TABLE,
    LATE_TABLE,
    QUARANTINE_TABLE,
    REVIEW_TABLE,
    SILVER_CHANGES_TABLE,
    SILVER_TABLE,
)
from merge_on_read.table import silver_mor_table

if TYPE_CHECKING:  # pragma: no cover
    from maintenance.in_job import JobMaintenance
    from sources.flink.kafka_input import EndOffsets

JOB_NAME = "lakestream-ingest"


def table_specs(cfg: Config, job_name: str = JOB_NAME) -> dict[str, Any]:
    """The tables' sinks (``sinks.flink.delta_sink.DeltaSinkSpec``) by table name: the five of ``TABLES``, and
    ``gold.table`` when ``gold.enabled``; ``job_name`` prefixes their app ids. The CLI needs them too:
    to tell whether a run ended and to settle one."""
    from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA
    from lakestream.standard import BRONZE_SCHEMA, LATE_SCHEMA, QUARANTINE_SCHEMA
    from sinks.committable import CommitMode
    from sinks.flink.delta_sink import DeltaSinkSpec
    from sinks.table_spec import TableSpec

    def spec(table: str, schema: Any, *, commit: CommitMode = "subtask", **options: Any) -> Any:
        """The sink of ``table``; ``options`` are ``TableSpec`` fields."""
        partition_by = cfg.tables.partition_by(table)
        unknown = [c for c in partition_by if c not in schema.names]
        if unknown:
            layer = table.split("/", 1)[0]
            raise ConfigError(
                f"tables.{layer}_partition_by: {', '.join(unknown)} not a column of {table}; "
                f"choose from {', '.join(schema.names)}"
            )
        merged = options.get("mode", "append") != "append"
        size_mb = cfg.tables.merge_target_file_size_mb if merged else cfg.tables.target_file_size_mb
        return DeltaSinkSpec(
            table=TableSpec(
                table_uri=cfg.lakehouse.table_uri(table),
                schema=schema,
                partition_by=partition_by,
                target_file_size=size_mb * 1024 * 1024,
                bloom_filter_columns=cfg.tables.bloom_filter_columns,
                **options,
            ),
            app_prefix=f"{job_name}/{table}",
            commit=commit,
        )

    from udfs.ingest_gold import gold_spec

    gold = {cfg.gold.table: gold_spec(cfg, job_name)} if cfg.gold.enabled else {}
    if cfg.tables.silver_layout == "merge_on_read":
        from lakestream.silver import CHANGE_SEQ, LAST_EVENT_TIME
        from merge_on_read.fold_schedule import FoldSchedule, FoldTask

        silver = DeltaSinkSpec(
            table=TableSpec(
                table_uri=cfg.lakehouse.table_uri(SILVER_CHANGES_TABLE),
                schema=SILVER_SCHEMA,
                mode="changes",
                merge=SILVER_MERGE,
                sequence_column=CHANGE_SEQ,
                freshness_column=LAST_EVENT_TIME,
            ),
            app_prefix=f"{job_name}/{SILVER_CHANGES_TABLE}",
            commit="global",
            fold=FoldTask(
                silver_mor_table(cfg),
                FoldSchedule(
                    every=cfg.tables.silver_fold_every,
                    rows=cfg.tables.silver_fold_rows,
                    retention=cfg.tables.silver_changes_retention,
                ),
            ),
        )
    else:
        silver = spec(
            SILVER_TABLE,
            SILVER_SCHEMA,
            mode="merge",
            merge=SILVER_MERGE,
            commit="global",
            freshness_column="last_event_time",
        )
    return {
        BRONZE_TABLE: spec(BRONZE_TABLE, BRONZE_SCHEMA),
        QUARANTINE_TABLE: spec(QUARANTINE_TABLE, QUARANTINE_SCHEMA),
        REVIEW_TABLE: spec(REVIEW_TABLE, BRONZE_SCHEMA),
        LATE_TABLE: spec(LATE_TABLE, LATE_SCHEMA),
        SILVER_TABLE: silver,
        **gold,
    }


def build_ingest_job(
    cfg: Config,
    *,
    bootstrap_servers: str,
    bounded: bool,
    end_offsets: EndOffsets | None = None,
    start_offsets: EndOffsets | None = None,
    checkpoint_dir: str | None = None,
    resume_from: str | Path | None = None,
    job_name: str = JOB_NAME,
    run_id: str | None = None,
    watermark_seeds: Mapping[str, int] | None = None,
) -> Any:
    """Assemble the ingest graph and return its StreamExecutionEnvironment (not yet executed).

    ``end_offsets`` fixes where a bounded run stops (``kafka_input.snapshot_end_offsets``),
    ``start_offsets`` where a new lineage starts; ``resume_from`` restores a retained checkpoint.
    ``watermark_seeds`` (``topic#partition`` -> newest VALID event time, epoch ms, as bronze recorded
    it) start the event-time gate where the previous run's ended. ``job_name`` prefixes the sinks'
    Delta transaction ids: keep it stable for a deployment.
    """
    from datetime import datetime, timezone

    from lakestream.adapters import AdapterSettings
    from lakestream.progress import watermark_key
    from lakestream.quality import QualityRules
    from runtime.checkpoint_markers import kafka_batches_with_markers
    from runtime.flink_env import build_env
    from sinks.flink.global_commit import COMMITTABLE_TYPE, commit_globally
    from sources.flink.kafka_input import kafka_records, parse_split
    from udfs.ingest_gate import dedup_by_key, event_time_gate
    from udfs.ingest_resolve import LATE, SILVER, ResolveBatches
    from udfs.ingest_standardise import BATCH_TYPE, BRONZE, QUARANTINE, REVIEW, StandardiseFunction

    topics = dict(cfg.kafka.topics)
    sources_by_topic = {topic: source for source, topic in topics.items()}
    if len(sources_by_topic) != len(topics):
        raise ValueError(f"kafka.topics: two sources share one topic ({topics}); give each source its own")
    et = cfg.event_time
    rules = QualityRules(
        max_future=cfg.quality.max_future,
        amount_ceiling=cfg.quality.amount_ceiling,
        known_statuses=frozenset(cfg.quality.known_statuses),
        min_event_time=datetime(2000, 1, 1, tzinfo=timezone.utc),
    )

    env = build_env(
        cfg.flink,
        checkpoint_dir=checkpoint_dir,
        resume_from=resume_from,
        state_backend="rocksdb",
        run_id=run_id,
        kind="ingest",
        storage=cfg.storage,
    )
    seeds = dict(watermark_seeds or {})
    records = kafka_records(
        env,
        bootstrap_servers=bootstrap_servers,
        topics=sorted(sources_by_topic),
        group_id=cfg.kafka.group_id,
        starting_offsets=cfg.kafka.starting_offsets,
        bounded=bounded,
        end_offsets=end_offsets,
        start_offsets=start_offsets,
        consumer_properties=cfg.kafka.consumer,
        name="kafka source records",
        uid="ingest-kafka-source",
    )

    specs = table_specs(cfg, job_name)
    # Kafka records cross into Python in per-partition batches, with the checkpoint markers in between;
    # the standardise operator writes bronze, review and quarantine itself.
    batches = kafka_batches_with_markers(
        records,
        batch_size=cfg.flink.batch_size,
        batch_time_ms=max(1, int(cfg.flink.batch_time.total_seconds() * 1000)),
        name="kafka batches + standardise markers",
        uid="ingest-standardise-markers",
    )
    standard = (
        batches.process(
            StandardiseFunction(
                sources_by_topic=sources_by_topic,
                adapter_settings=AdapterSettings(source_zone=et.source_zone),
                rules=rules,
                tables={
                    BRONZE: specs[BRONZE_TABLE],
                    REVIEW: specs[REVIEW_TABLE],
                    QUARANTINE: specs[QUARANTINE_TABLE],
                },
                parallelism=cfg.flink.parallelism,
                max_parallelism=cfg.flink.max_parallelism,
                watermark_seeds={watermark_key(*parse_split(s)): ms for s, ms in seeds.items()},
                gold=cfg.gold.enabled,
            ),
            output_type=BATCH_TYPE,
        )
        .name("standardise + bronze/review/quarantine writers")
        .uid("ingest-standardise")
    )
    gated = event_time_gate(
        standard,
        max_out_of_orderness=et.max_out_of_orderness,
        idleness_timeout=et.idleness_timeout,
        name="event-time gate",
        uid="ingest-event-time-gate",
        seeds=seeds,
    )
    # Keyed by order from here on: one order's events and every copy of an event meet in one subtask,
    # whose de-dup state is Flink keyed state; this operator also emits the resolve operator's markers.
    marked = dedup_by_key(
        gated,
        ttl=et.dedup_ttl,
        batch_size=cfg.flink.batch_size,
        batch_time=cfg.flink.batch_time,
        max_parallelism=cfg.flink.max_parallelism,
        name="de-dup by event id + resolve markers",
        uid="ingest-dedup",
    )
    # Silver is committed globally: the resolve subtasks stage it and emit its committables, one
    # committer makes each checkpoint ONE MERGE (parallel MERGEs would conflict and serialize).
    silver = specs[SILVER_TABLE]
    committables = (
        marked.process(
            ResolveBatches(
                tables={LATE: specs[LATE_TABLE], SILVER: silver},
            ),
            output_type=COMMITTABLE_TYPE,
        )
        .name("resolve orders + late writer, silver stager")
        .uid("ingest-resolve-orders")
    )
    gold = None
    if cfg.gold.enabled:
        from udfs.ingest_gold import speed_layer

        # The speed layer: gold rows per window from the de-dup's side output (DESIGN.md section 11.6);
        # its writer runs in the silver committer's Python worker (both at parallelism 1).
        gold = speed_layer(
            marked,
            cfg,
            specs[cfg.gold.table],
            parallelism=cfg.flink.parallelism,
            lineage_start_ms=max(seeds.values()) if seeds else None,
        )
    commit_globally(
        committables,
        [silver],
        name="silver committer",
        uid="ingest-silver-committer",
        beside=gold,
        maintenance=job_maintenance(cfg) if cfg.maintenance.in_job else None,
    )
    return env


def job_maintenance(cfg: Config) -> JobMaintenance:
    """The tables the ingest job writes, for its own maintenance rounds: a merge-on-read snapshot and
    its changes table are not compacted (folds keep the snapshot's files sorted and disjoint, and trim
    the changes)."""
    from maintenance.in_job import JobMaintenance

    tables = [BRONZE_TABLE, QUARANTINE_TABLE, REVIEW_TABLE, LATE_TABLE, SILVER_TABLE]
    not_compacted: frozenset[str] = frozenset()
    if cfg.tables.silver_layout == "merge_on_read":
        tables.append(SILVER_CHANGES_TABLE)
        not_compacted = frozenset({SILVER_TABLE, SILVER_CHANGES_TABLE})
    if cfg.gold.enabled:
        tables.append(cfg.gold.table)
    return JobMaintenance(cfg, tuple(tables), not_compacted)


def check_silver_layout(cfg: Config, job_name: str = JOB_NAME) -> None:
    """Refuse a start whose ``tables.silver_layout`` would strand the other layout's work.

    Work the last run of the other layout staged for silver would never be committed, and a
    merge-on-read snapshot cannot take copy-on-write MERGEs again (it has the sequence column).
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from lakestream.silver import CHANGE_SEQ
    from maintenance.facts import manifests
    from storage.table_files import table_files

    mor = cfg.tables.silver_layout == "merge_on_read"
    other = SILVER_TABLE if mor else SILVER_CHANGES_TABLE
    found = manifests(table_files(cfg.lakehouse.table_uri(other)))
    staged = [m for m in found if m.app_prefix == f"{job_name}/{other}"]
    if staged:
        layout = "copy_on_write" if mor else "merge_on_read"
        raise ConfigError(
            f"tables.silver_layout = {cfg.tables.silver_layout!r}, but {other} holds work staged by a "
            f"{layout} run that did not end ({len(staged)} manifest(s)). Fix: run once more with "
            f'silver_layout = "{layout}" and --bounded, so that run settles it, then switch.'
        )
    if not mor:
        try:
            columns = DeltaTable(cfg.lakehouse.table_uri(SILVER_TABLE)).schema().to_arrow().names
        except TableNotFoundError:
            return
        if CHANGE_SEQ in columns:
            raise ConfigError(
                f'tables.silver_layout = "copy_on_write", but {SILVER_TABLE} is a merge-on-read snapshot '
                f"(it has {CHANGE_SEQ}); switching back is not supported. Fix: keep silver_layout = "
                f'"merge_on_read", or rebuild {SILVER_TABLE} from bronze with a fresh lakehouse.'
            )
