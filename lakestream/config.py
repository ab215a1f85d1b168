"""One validated configuration object for every lakestream job: TOML file, then environment overrides.

One object, so that the ingest job, the change feed, the benchmarks and the tests agree on topics,
tables and event-time settings, validated at start so that a typo fails with the key and the fix; the
rules and the override syntax (``LAKESTREAM__<SECTION>__<KEY>``) are in DESIGN.md section 7.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

import tomllib

from lakestream.errors import LakestreamError
from lakestream.quality import DEFAULT_RULES
from lakestream.time import format_duration, parse_duration, parse_size

ENV_PREFIX = "LAKESTREAM__"
#: The flag naming the TOML file :func:`load_config` reads: (option strings, ``add_argument`` options),
#: declared once for the ``lakestream`` command and the demo's job process.
CONFIG_FLAG: tuple[tuple[str, ...], dict[str, Any]] = (
    ("--config",),
    {"type": Path, "help": "TOML config file (see config/)"},
)


def env_variable(key: str) -> str:
    """The variable that overrides ``key``: ``lakehouse.root`` is ``LAKESTREAM__LAKEHOUSE__ROOT``."""
    return ENV_PREFIX + "__".join(part.upper() for part in key.split("."))


class ConfigError(LakestreamError, ValueError):
    """A configuration value is missing, unknown or malformed; the message names the key and the fix."""

    names_command = False
    preface = "configuration error: "


class PortRange(str):
    """A TCP port (``"9249"``) or an inclusive port range (``"9249-9259"``); empty means off."""


def parse_port_range(value: object, *, key: str) -> PortRange:
    """Parse ``9249``, ``"9249"`` or ``"9249-9259"`` (ports 1-65535, low <= high); ``""`` is off."""
    text = str(value).strip() if isinstance(value, int | str) and not isinstance(value, bool) else None
    if text == "":
        return PortRange("")
    m = _PORTS.match(text or "")
    if m is not None:
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if 1 <= low <= high <= 65535:
            return PortRange(text or "")
    raise ConfigError(
        f'{key}: expected a port (9249) or a port range ("9249-9259") between 1 and 65535, '
        f'or "" for off, got {value!r}'
    )


_PORTS = re.compile(r"^(\d{1,5})(?:-(\d{1,5}))?$")


@dataclass(frozen=True, slots=True)
class LakehouseConfig:
    """Where the Delta tables live."""

    root: str = "lakehouse"

    def table_uri(self, name: str) -> str:
        """Location of table ``name`` (e.g. ``silver/orders``) under the lakehouse root."""
        if "://" in self.root:
            return f"{self.root.rstrip('/')}/{name}"
        return str((Path(self.root) / name).resolve())


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    """Kafka connection and the topic of each source adapter."""

    bootstrap_servers: str = "embedded"
    group_id: str = "lakestream-ingest"
    starting_offsets: Literal["committed", "earliest", "latest"] = "committed"
    topics: Mapping[str, str] = field(
        default_factory=lambda: {
            "orders_db": "orders.db.changes",
            "payments": "payments.callbacks",
            "logistics": "logistics.pushes",
            "behaviour": "behaviour.logs",
        }
    )

    #: Extra Kafka consumer properties of the Flink Kafka source (``source.reader.*`` included), merged
    #: key by key over these defaults. Measured on 2 cores (README, performance): the consumer's defaults
    #: (500 records per poll, 1 MiB per partition and fetch, a 2-poll hand-off queue) made the source task
    #: refill the standardise worker in small steps after every Beam bundle; these cut the standardise
    #: phase of a 484k-event run by ~9% (7 of 7 paired runs faster). Memory: at most 8 queued polls of
    #: 5,000 records plus 4 MiB per partition per subtask.
    consumer: Mapping[str, str] = field(
        default_factory=lambda: {
            "max.poll.records": "5000",
            "max.partition.fetch.bytes": str(4 * 1024 * 1024),
            "fetch.max.bytes": str(64 * 1024 * 1024),
            "receive.buffer.bytes": str(1024 * 1024),
            "source.reader.element.queue.capacity": "8",
        }
    )

    def __post_init__(self) -> None:
        """Refuse consumer properties the job sets itself: overriding them would break its guarantees."""
        reserved = sorted(set(self.consumer) & set(RESERVED_CONSUMER_PROPERTIES))
        if reserved:
            fixes = "; ".join(f"{k}: {RESERVED_CONSUMER_PROPERTIES[k]}" for k in reserved)
            raise ConfigError(f"kafka.consumer: {', '.join(reserved)} cannot be set here ({fixes})")
        bad = [k for k in self.consumer if not k or any(c.isspace() for c in k)]
        if bad:
            raise ConfigError(f"kafka.consumer: property names must be non-empty without spaces, got {bad}")

    @property
    def embedded(self) -> bool:
        """True when lakestream should start its own local broker."""
        return self.bootstrap_servers == "embedded"


#: Consumer properties the Kafka source sets from other keys or needs as they are, with the fix.
RESERVED_CONSUMER_PROPERTIES: dict[str, str] = {
    "bootstrap.servers": "use kafka.bootstrap_servers",
    "group.id": "use kafka.group_id",
    "auto.offset.reset": "use kafka.starting_offsets",
    "enable.auto.commit": "offsets are committed on checkpoints",
    "commit.offsets.on.checkpoint": "offsets are committed on checkpoints",
    "partition.discovery.interval.ms": "set by the job (off for bounded runs)",
    "client.id.prefix": "derived from the group id",
    "key.deserializer": "the job reads raw bytes",
    "value.deserializer": "the job reads raw bytes",
}


#: A memory size as Flink reads it, in the units the config takes (``flink.managed_memory``).
_MEMORY_SIZE = re.compile(r"[1-9][0-9]*[kmg]")


def _is_buffer_size(size: str) -> bool:
    """A ``_MEMORY_SIZE`` Flink takes as a memory segment: a power of two, at least 4 KiB (Flink's
    smallest page); at most 16 MiB here."""
    n = parse_size(size, key="flink.network_buffer_size", error=ConfigError)
    return 4 << 10 <= n <= 16 << 20 and n & (n - 1) == 0


@dataclass(frozen=True, slots=True)
class FlinkConfig:
    """How the job graph runs: parallelism, checkpoints, restarts, Python execution mode."""

    parallelism: int = 2
    #: Key groups of keyed state (Flink's max parallelism): the most subtasks a job can ever be rescaled
    #: to. Fixed for the life of a job's state: a checkpoint does not restore under another value.
    max_parallelism: int = 128
    #: Where keyed state lives: ``rocksdb`` (local disk, incremental checkpoints, state larger than
    #: memory) or ``hashmap`` (JVM heap). ``default``: rocksdb for ingest (its de-dup state grows with
    #: the event rate times ``event_time.dedup_ttl``), hashmap for land and changefeed (a few offsets).
    state_backend: Literal["default", "rocksdb", "hashmap"] = "default"
    #: How RocksDB compacts keyed state. Each checkpoint flushes the state's memtables into new small
    #: files; with ``level`` (RocksDB's default) every few of them were merged into the whole next level,
    #: and the de-dup's ids are random, so each merge rewrote the level: at one checkpoint a second its
    #: CPU grew with the state. ``universal`` merges files of similar size (tiered, as Paimon's sorted
    #: runs): far less rewriting, up to about twice the state's size on local disk between merges.
    #: Either restores the other's checkpoints.
    rocksdb_compaction: Literal["universal", "level"] = "universal"
    checkpoint_interval: timedelta = timedelta(seconds=1)
    #: A local folder, or ``s3://bucket/prefix`` on the store of ``[storage]`` (Flink's S3 plugin, built by
    #: ``make jvm``; docs/object-storage.md).
    checkpoint_dir: str = ".lakestream/checkpoints"
    #: Restarts after a failure before the job fails (0: none), each from the newest completed
    #: checkpoint and after a longer wait: ``restart_delay``, doubled each time up to
    #: ``restart_max_delay`` (Flink's exponential-delay strategy). Bounded, so that a job that keeps
    #: failing ends with its error instead of looking hung; long enough in total (the defaults: about
    #: 2 minutes of waits) that an object store or broker away for a minute does not end the job.
    restart_attempts: int = 8
    restart_delay: timedelta = timedelta(seconds=1)
    restart_max_delay: timedelta = timedelta(seconds=30)
    #: A job that ran this long after its last restart without failing has its whole budget again:
    #: the budget is per incident, not for the life of an unbounded job.
    restart_reset_after: timedelta = timedelta(minutes=10)
    python_execution_mode: Literal["process", "thread"] = "process"
    #: How Python operators map to worker processes. ``slot``: one worker per task slot runs every
    #: Python operator of that slot (Flink's default; its operators share one GIL). ``operator``: one
    #: worker per Python operator subtask (a GIL each, ~220 MiB and ~2 s of start-up CPU each). On 2
    #: cores ``slot`` ran the ingest job with two workers instead of five: peak RSS ~600 MiB lower at
    #: the same throughput (benchmarks/RESULTS.md); ``operator`` suits slots that each have more than
    #: one core of their own.
    python_workers: Literal["slot", "operator"] = "slot"
    bundle_size: int = 10_000
    bundle_time: timedelta = timedelta(milliseconds=100)
    #: Kafka records per batch crossing into Python (one Kafka partition per batch), and the longest a
    #: batch waits to fill; every batch is also flushed before each checkpoint barrier.
    batch_size: int = 5_000
    batch_time: timedelta = timedelta(milliseconds=100)
    jobmanager: str = ""  # "host:port" of a running cluster for `flink run`; empty = local MiniCluster
    #: Options of the local MiniCluster's JVM (this process launches it). C1 only by default: on 2 cores
    #: the C2 compiler spent about 4 CPU-seconds in the first 25 s of an ingest run, more than the JVM's
    #: record handling itself, while the Python workers wait for CPU (README, performance). A 1 GiB
    #: heap: without a cap G1 grew the heap to 2.8 GB for about 0.25 GB live over 40 minutes of ingest
    #: (state lives in RocksDB, off the heap; 124-185 MiB after young collections). ``GCTimeRatio=12``
    #: (the heap grows once collections take more than 7.7 % of the time): fewer young collections
    #: than 512 MiB with ``GCTimeRatio=4``, +4.6 % sustained in paired bounded runs. The parallel
    #: collector rather than G1: on this small, mostly short-lived heap G1's write barriers and
    #: concurrent work cost more CPU than the parallel collector's pauses (paired bounded runs: sustained
    #: +8 %, the JVM's CPU -10 %; the 40-minute run flat, peak RSS 1,761 MiB against G1's 2,321;
    #: visibility p99 no worse). Measurements: benchmarks/RESULTS.md.
    jvm_options: tuple[str, ...] = (
        "-XX:TieredStopAtLevel=1",
        "-Xmx1g",
        "-XX:GCTimeRatio=12",
        "-XX:+UseParallelGC",
    )
    #: Flink managed memory of the local MiniCluster (``taskmanager.memory.managed.size``; a cluster sets
    #: its own), shared by the slots: RocksDB's block cache and memtables, which hold the de-dup ids and
    #: the gold aggregate's distinct values, and the Python workers' share. 384m instead of Flink's local
    #: 128m: the JVM spent ~10 % less CPU per event and sustained ingest was ~4 % faster in paired
    #: bounded runs (768m: no better), the 40-minute run still under 3 GB (benchmarks/RESULTS.md).
    managed_memory: str = "384m"
    #: Size of one network buffer of the local MiniCluster (``taskmanager.memory.segment-size``; a
    #: cluster sets its own): a power of two, 4k-16m. The ingest job's records between its tasks are
    #: batches of events (hundreds of KiB each); at Flink's 32k a record filled dozens of buffers and
    #: the few buffers of a channel held less than one record, so a Python worker busy with one batch
    #: stalled every task feeding it. 256k: +11 and +21 % sustained in two sets of paired bounded
    #: runs, ~0.1 core more busy (benchmarks/RESULTS.md). The local network memory grows with it where
    #: the parallelism needs more buffers than Flink's local 64m holds
    #: (``flink_runtime.local_network_memory``).
    network_buffer_size: str = "256k"
    #: Map Flink's classes into the local JVM from a class-data archive, which the first run writes at
    #: its exit, one per kind of job (``runtime.class_archive``): building the ingest graph ~2.5 s faster.
    class_archive: bool = True
    #: Port (or range) of Flink's Prometheus reporter in the local MiniCluster, scraped at
    #: ``http://127.0.0.1:PORT/metrics``; empty: no reporter. A cluster configures its own (README).
    prometheus_port: PortRange = PortRange("")

    def __post_init__(self) -> None:
        """Reject sizes the JVM operators would refuse only once the job runs."""
        parse_port_range(self.prometheus_port, key="flink.prometheus_port")
        scheme, sep, _ = self.checkpoint_dir.partition("://")
        if sep and scheme != "s3":
            raise ConfigError(
                f"flink.checkpoint_dir: a local folder or an s3:// URI (Flink's S3 plugin), got "
                f"{self.checkpoint_dir!r}"
            )
        if self.batch_size < 1:
            raise ConfigError(f"flink.batch_size: must be at least 1 record, got {self.batch_size}")
        if not 1 <= self.parallelism <= self.max_parallelism <= 32768:
            raise ConfigError(
                f"flink.parallelism ({self.parallelism}) and flink.max_parallelism ({self.max_parallelism}): "
                "need 1 <= parallelism <= max_parallelism <= 32768; raise max_parallelism only for a new "
                "job (existing state keeps its key groups)"
            )
        if self.batch_time < timedelta(milliseconds=1):
            raise ConfigError(f"flink.batch_time: must be at least 1ms, got {self.batch_time}")
        if not timedelta(milliseconds=1) <= self.restart_delay <= self.restart_max_delay:
            raise ConfigError(
                f"flink.restart_delay ({self.restart_delay}) and flink.restart_max_delay "
                f"({self.restart_max_delay}): need 1ms <= restart_delay <= restart_max_delay"
            )
        if self.restart_reset_after < timedelta(seconds=1):
            raise ConfigError(
                f"flink.restart_reset_after: must be at least 1s, got {self.restart_reset_after}"
            )
        if not _MEMORY_SIZE.fullmatch(self.managed_memory):
            raise ConfigError(
                f"flink.managed_memory: a size such as '128m' or '1g' (k, m or g), "
                f"got {self.managed_memory!r}"
            )
        if not _MEMORY_SIZE.fullmatch(self.network_buffer_size) or not _is_buffer_size(
            self.network_buffer_size
        ):
            raise ConfigError(
                f"flink.network_buffer_size: a power of two from 4k to 16m such as '256k' or '1m' "
                f"(k, m or g), got {self.network_buffer_size!r}"
            )
        bad = [o for o in self.jvm_options if not o.startswith("-") or any(c.isspace() for c in o)]
        if bad:
            raise ConfigError(
                f"flink.jvm_options: each entry is one JVM option starting with '-' and without spaces, "
                f'got {bad}; write e.g. ["-XX:TieredStopAtLevel=1", "-Xss2m"]'
            )


@dataclass(frozen=True, slots=True)
class EventTimeConfig:
    """Watermark, lateness and state-retention settings (see DESIGN.md, event-time rules)."""

    max_out_of_orderness: timedelta = timedelta(minutes=5)
    idleness_timeout: timedelta = timedelta(minutes=1)
    #: A partition whose newest recorded event time trails the newest of all by more than this is
    #: quiet: it no longer holds the windows of backfill, reconcile and the next run open
    #: (``lakestream.horizon``).
    quiet_after: timedelta = timedelta(hours=1)
    allowed_lateness: timedelta = timedelta(0)
    #: Event ids are remembered this long (processing time) to drop re-deliveries; bounds the memory.
    dedup_ttl: timedelta = timedelta(minutes=30)
    source_zone: str = "Asia/Shanghai"

    def __post_init__(self) -> None:
        if self.quiet_after <= timedelta(0):
            raise ConfigError(
                f"event_time.quiet_after: must be positive, got {format_duration(self.quiet_after)}; "
                'a partition must trail by some event time before it counts as quiet (default "1h")'
            )


@dataclass(frozen=True, slots=True)
class QualityConfig:
    """Thresholds that turn a parsable event into SUSPICIOUS rather than VALID.

    The defaults are ``lakestream.quality.DEFAULT_RULES``'s, so the job and the pure rules agree.
    """

    max_future: timedelta = DEFAULT_RULES.max_future
    amount_ceiling: Decimal = DEFAULT_RULES.amount_ceiling
    known_statuses: tuple[str, ...] = tuple(sorted(DEFAULT_RULES.known_statuses))


@dataclass(frozen=True, slots=True)
class TablesConfig:
    """Physical layout of the Delta tables, per layer (the part before ``/`` of a table name).

    Partition columns must be columns of the table; the job checks that before it starts.
    """

    bronze_partition_by: tuple[str, ...] = ("source",)
    late_partition_by: tuple[str, ...] = ()
    quarantine_partition_by: tuple[str, ...] = ()
    review_partition_by: tuple[str, ...] = ()
    silver_partition_by: tuple[str, ...] = ()
    #: Staged Parquet files are split at about this size (one file per partition per checkpoint below it).
    target_file_size_mb: int = 128
    #: Files of tables written by MERGE (silver). A MERGE rewrites every file holding a matched key; in
    #: files of this size it rewrites them in parallel (one 100 MB file: one core, 1.0 s for a
    #: 100k-row MERGE into 150k orders; 16 MB files: 0.6 s).
    merge_target_file_size_mb: int = 16
    #: Columns whose Parquet bloom filters lakestream's delta-rs writers (MERGE, folds, OPTIMIZE) write,
    #: where a table has them: ``explain order`` skips every row group without the order.
    bloom_filter_columns: tuple[str, ...] = ("order_id",)
    #: How ``silver/orders`` is kept current (DESIGN.md section 13). ``copy_on_write``: each checkpoint
    #: MERGEs into it, rewriting every file that holds one of its orders. ``merge_on_read``: each
    #: checkpoint appends its folded rows to ``silver/orders_changes``, and a fold beside the job merges
    #: those into ``silver/orders``; read the current state with ``lakestream query silver``.
    silver_layout: Literal["copy_on_write", "merge_on_read"] = "merge_on_read"
    #: merge_on_read: the job folds once this long passed since its last fold ...
    silver_fold_every: timedelta = timedelta(minutes=1)
    #: ... or once this many change rows wait, whichever comes first (0: time only).
    silver_fold_rows: int = 1_000_000
    #: merge_on_read: folded changes stay this long, so a reader of a snapshot this old still finds
    #: every change above it (``lakestream query silver`` reads the newest snapshot).
    silver_changes_retention: timedelta = timedelta(minutes=10)
    #: merge_on_read: every sorted run of silver/orders is merged into one when the runs above the
    #: oldest hold more than this percentage of its bytes (silver/orders stays below 1 + this / 100
    #: times its live size, before VACUUM) ...
    silver_max_size_amplification_percent: int = 100
    #: ... the newest runs are merged while the next older one is at most this percentage larger ...
    silver_run_size_ratio_percent: int = 1
    #: ... and above this many runs the newest are merged whatever their sizes.
    silver_max_runs: int = 5

    def __post_init__(self) -> None:
        """File sizes reach the writers only inside the workers; refuse nonsense before the job starts."""
        for key in ("target_file_size_mb", "merge_target_file_size_mb"):
            value = getattr(self, key)
            if value < 1:
                raise ConfigError(f"tables.{key}: must be at least 1 (MB), got {value}")
        if self.silver_layout == "merge_on_read" and self.silver_partition_by:
            raise ConfigError(
                "tables.silver_partition_by: the merge_on_read layout keeps silver unpartitioned; set it "
                'to [] or use silver_layout = "copy_on_write"'
            )
        if self.silver_fold_every <= timedelta(0):
            raise ConfigError(f"tables.silver_fold_every: must be positive, got {self.silver_fold_every}")
        if self.silver_fold_rows < 0:
            raise ConfigError(f"tables.silver_fold_rows: must be 0 or more, got {self.silver_fold_rows}")
        if self.silver_changes_retention < timedelta(0):
            raise ConfigError("tables.silver_changes_retention: must not be negative")
        for key, least in (
            ("silver_max_size_amplification_percent", 1),
            ("silver_run_size_ratio_percent", 0),
            ("silver_max_runs", 1),
        ):
            if getattr(self, key) < least:
                raise ConfigError(f"tables.{key}: must be at least {least}, got {getattr(self, key)}")

    def partition_by(self, table: str) -> tuple[str, ...]:
        """Partition columns of ``table`` (e.g. ``bronze/order_events``); none for unknown layers."""
        value: tuple[str, ...] = getattr(self, f"{table.split('/', 1)[0]}_partition_by", ())
        return value


@dataclass(frozen=True, slots=True)
class MaintenanceConfig:
    """What ``lakestream maintain auto`` does to each table per round, and when (README, maintenance).

    A partition is compacted once it holds ``min_small_files`` files below ``small_file_mb``; the log is
    checkpointed once ``checkpoint_every`` commits followed the last checkpoint; vacuum (files removed
    from the table, never staged ones) and log cleanup run at most every ``vacuum_every``, only where
    the retention is safe for the jobs and readers (DESIGN.md section 10).
    """

    #: Time between two rounds of ``maintain auto`` (and of a job's own rounds).
    interval: timedelta = timedelta(minutes=10)
    #: The ingest job runs these rounds over its own tables itself (``maintenance.in_job``).
    in_job: bool = True
    #: Table names under the lakehouse root to maintain; empty: every table found there.
    tables: tuple[str, ...] = ()
    small_file_mb: int = 8
    min_small_files: int = 16
    checkpoint_every: int = 100
    vacuum: bool = True
    vacuum_every: timedelta = timedelta(days=1)
    cleanup_logs: bool = True
    #: Attempts of an OPTIMIZE that conflicts with a streaming commit (first one included).
    retry_attempts: int = 10
    #: Files a compaction or Z-order rewrites at once (delta-rs' ``max_concurrent_tasks``), each keeping
    #: about a core busy. 1 leaves the other cores to the job it runs beside (delta-rs' default, a task
    #: per core, left none on a 2-core machine while the job's round compacted); raise it for a
    #: ``maintain optimize`` on a machine of its own.
    rewrite_tasks: int = 1
    #: Table name -> comma-separated columns: those tables are Z-ordered instead of compacted.
    zorder: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Thresholds of zero would compact or checkpoint on every round, or never stop retrying."""
        for key in ("small_file_mb", "checkpoint_every", "retry_attempts", "rewrite_tasks"):
            if getattr(self, key) < 1:
                raise ConfigError(f"maintenance.{key}: must be at least 1, got {getattr(self, key)}")
        if self.min_small_files < 2:
            raise ConfigError(
                f"maintenance.min_small_files: must be at least 2 (one file cannot be compacted), "
                f"got {self.min_small_files}"
            )
        if self.interval < timedelta(seconds=1):
            raise ConfigError(f"maintenance.interval: must be at least 1s, got {self.interval}")
        bad = {t: c for t, c in self.zorder.items() if not [x for x in c.split(",") if x.strip()]}
        if bad:
            raise ConfigError(
                f"maintenance.zorder: each table needs comma-separated column names, got {bad}; "
                'write e.g. "silver/orders" = "order_id"'
            )

    def zorder_columns(self, table: str) -> tuple[str, ...]:
        """Z-order columns of ``table`` (a name under the lakehouse root); empty: compact it."""
        return tuple(c.strip() for c in self.zorder.get(table, "").split(",") if c.strip())


def check_gold_window(window: timedelta, allowed_lateness: timedelta) -> None:
    """Refuse a gold window that does not tile a UTC day in whole minutes, or a negative lateness.

    Whole minutes: the unit windows are given and named in (``5m``, ``1h``); dividing a day evenly:
    every UTC day starts a window, so windows of different days and of the batch and speed layers
    line up.
    """
    minutes, rest = divmod(window, timedelta(minutes=1))
    if window <= timedelta(0) or rest or (24 * 60) % minutes:
        raise ConfigError(
            f"gold.window: must be a whole number of minutes that divides a day evenly (e.g. '1m', '5m', "
            f"'15m', '1h', '1d'), got {window}"
        )
    if allowed_lateness < timedelta(0):
        raise ConfigError(f"gold.allowed_lateness: must be zero or positive, got {allowed_lateness}")


@dataclass(frozen=True, slots=True)
class GoldConfig:
    """The gold metrics table (``lakestream.gold``): its window, lateness, location and speed layer.

    ``allowed_lateness`` is how long after a window's end (in watermark time) the speed layer still
    updates it; later events reach gold only through ``lakestream backfill`` (DESIGN.md section 11).
    """

    window: timedelta = timedelta(minutes=5)
    allowed_lateness: timedelta = timedelta(minutes=10)
    table: str = "gold/order_metrics_5m"
    #: Whether ``ingest`` also computes the realtime rows (the speed layer).
    enabled: bool = True

    def __post_init__(self) -> None:
        """A window that does not tile a day would put the layers' windows at different starts."""
        check_gold_window(self.window, self.allowed_lateness)
        if not self.table.strip("/"):
            raise ConfigError(
                'gold.table: must name a table under lakehouse.root, e.g. "gold/order_metrics_5m"'
            )


@dataclass(frozen=True, slots=True)
class ReconcileConfig:
    """What ``lakestream reconcile`` calls a difference, how often it may fix, and where it records.

    ``threshold`` is absolute and per metric: a window's metric differs when
    ``|gold - recomputed| > threshold`` (0: any difference).
    """

    threshold: Decimal = Decimal(0)
    #: Fix runs (``reconcile --fix`` that backfilled something) allowed per UTC day.
    max_fixes_per_day: int = 2
    table: str = "ops/reconciliation"

    def __post_init__(self) -> None:
        """A negative threshold would report every window, equal ones included."""
        if self.threshold < 0:
            raise ConfigError(f"reconcile.threshold: must be zero or positive, got {self.threshold}")
        if not self.table.strip("/"):
            raise ConfigError(
                'reconcile.table: must name a table under lakehouse.root, e.g. "ops/reconciliation"'
            )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is on the loopback interface only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """``lakestream serve``: where the gold metrics' HTTP server listens and how often its page refreshes.

    Loopback by default: the server has no authentication, so another address needs ``allow_remote``
    (``--allow-remote``) and is announced with a warning.
    """

    host: str = "127.0.0.1"
    #: 0: a free port, chosen at start and printed.
    port: int = 8000
    allow_remote: bool = False
    #: How often the page fetches the numbers again.
    refresh: timedelta = timedelta(seconds=5)
    #: Host names the server answers to besides loopback names and ``host`` (``*.example.com``: a domain).
    allowed_hosts: tuple[str, ...] = ()
    #: The longest ``[from, to)`` one ``/api/metrics`` request may ask for (31 days: about 3 MB of JSON).
    max_range: timedelta = timedelta(days=31)

    def __post_init__(self) -> None:
        """A bad address or port would only fail when the socket is bound; say which key to fix now."""
        if not self.host.strip():
            raise ConfigError('serve.host: must be an address such as "127.0.0.1", got an empty string')
        object.__setattr__(self, "allowed_hosts", tuple(n.lower() for n in self.allowed_hosts))
        for name in self.allowed_hosts:
            if not _HOST_NAME.fullmatch(name):
                raise ConfigError(
                    f"serve.allowed_hosts: {name!r} is not a host name; give names as clients send them in "
                    'Host, without scheme or port, e.g. "metrics.example.com" or "*.example.com"'
                )
        if self.max_range <= timedelta(0):
            raise ConfigError(f"serve.max_range: must be positive, e.g. '31d', got {self.max_range}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"serve.port: must be between 0 (a free port) and 65535, got {self.port}")
        if self.refresh < timedelta(milliseconds=200):
            raise ConfigError(f"serve.refresh: must be at least 200ms, got {self.refresh}")
        if not self.allow_remote and not is_loopback(self.host):
            raise ConfigError(
                f"serve.host: {self.host!r} is not a loopback address and the server has no authentication; "
                "set serve.allow_remote = true (or pass --allow-remote) to listen there anyway"
            )


#: A host name or address as a ``Host`` header names it (lower case, no port), or ``*.`` and a domain.
_HOST_NAME = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*|[0-9a-f:.]+")


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """How to reach the object store of an ``s3://`` lakehouse or checkpoint folder.

    Only where the store is and how to talk to it; credentials come from the standard AWS variables
    (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``) or the
    host's role, so no secret is ever part of the configuration (DESIGN.md section 15). Empty keys leave
    the matching AWS variable, or the SDK default, in charge.
    """

    #: e.g. "http://127.0.0.1:9000" for a local server; empty: AWS_ENDPOINT_URL or AWS itself.
    endpoint: str = ""
    #: empty: AWS_REGION, else us-east-1.
    region: str = ""
    #: Path-style requests (``endpoint/bucket/key``), which most S3-compatible servers need.
    path_style: bool = False
    #: Plain http to the endpoint (a local server); off: https only.
    allow_http: bool = False

    def __post_init__(self) -> None:
        """An endpoint without a scheme or with the wrong one only fails at the first request; say so now."""
        endpoint = self.endpoint.strip()
        if endpoint and not endpoint.startswith(("http://", "https://")):
            raise ConfigError(
                f"storage.endpoint: must start with http:// or https://, got {self.endpoint!r} "
                '(e.g. "http://127.0.0.1:9000")'
            )
        if endpoint.startswith("http://") and not self.allow_http:
            raise ConfigError(
                f"storage.endpoint: {self.endpoint!r} is plain http; set storage.allow_http = true for a "
                "local server, or use https"
            )


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration; build it with :func:`load_config`."""

    lakehouse: LakehouseConfig = field(default_factory=LakehouseConfig)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    flink: FlinkConfig = field(default_factory=FlinkConfig)
    event_time: EventTimeConfig = field(default_factory=EventTimeConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    tables: TablesConfig = field(default_factory=TablesConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    gold: GoldConfig = field(default_factory=GoldConfig)
    reconcile: ReconcileConfig = field(default_factory=ReconcileConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)

    def replace(self, section: str, **values: Any) -> Config:
        """A copy with some keys of one section changed (validated like the file)."""
        current = dataclasses.asdict(getattr(self, section))
        current.update(values)
        return dataclasses.replace(self, **{section: _build_section(section, current)})


_SECTIONS: dict[str, type[Any]] = {
    "lakehouse": LakehouseConfig,
    "kafka": KafkaConfig,
    "flink": FlinkConfig,
    "event_time": EventTimeConfig,
    "quality": QualityConfig,
    "tables": TablesConfig,
    "maintenance": MaintenanceConfig,
    "gold": GoldConfig,
    "reconcile": ReconcileConfig,
    "serve": ServeConfig,
    "storage": StorageConfig,
}


@dataclass(frozen=True, slots=True)
class _EnvText:
    """The text of one environment override, read only once the type of its key is known."""

    variable: str
    text: str


def _toml_string(text: str) -> str | None:
    """The string ``text`` spells as a TOML string literal (``"a"``, ``'a'``), else None."""
    stripped = text.strip()
    if len(stripped) < 2 or stripped[0] not in "\"'" or stripped[-1] != stripped[0]:
        return None
    try:
        value = tomllib.loads(f"v = {stripped}")["v"]
    except tomllib.TOMLDecodeError:
        return None
    return value if isinstance(value, str) else None


def _env_value(hint: Any, text: str) -> Any:
    """An environment override's text as a value of type ``hint`` (DESIGN.md section 7).

    Text keys take the text as given (``LAKESTREAM__KAFKA__GROUP_ID=12345`` is the group ``"12345"``;
    a quoted TOML string is unquoted); every other key reads the text as a TOML value when it parses as
    one (numbers, booleans, arrays, inline tables), else as the text itself, which its type then checks.
    """
    origin = typing.get_origin(hint)
    text_only = hint is str or hint is Decimal
    if origin is Literal:
        text_only = all(isinstance(c, str) for c in typing.get_args(hint))
    if text_only:
        quoted = _toml_string(text)
        return text if quoted is None else quoted
    if hint is bool and text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _env_leaf(value: Any) -> Any:
    """A value inside a table key (``[kafka.topics]``): an override's text is taken as given."""
    if isinstance(value, _EnvText):
        quoted = _toml_string(value.text)
        return value.text if quoted is None else quoted
    return value


def _coerce(key: str, hint: Any, value: Any) -> Any:
    if isinstance(value, _EnvText):
        try:
            return _coerce(key, hint, _env_value(hint, value.text))
        except ConfigError as exc:
            raise ConfigError(f"environment variable {value.variable}: {exc}") from None
    origin = typing.get_origin(hint)
    if hint is timedelta:
        return parse_duration(value, key=key, error=ConfigError)
    if hint is PortRange:
        return parse_port_range(value, key=key)
    if hint is Decimal:
        try:
            if isinstance(value, bool):
                raise InvalidOperation
            return Decimal(str(value))
        except InvalidOperation:
            raise ConfigError(f"{key}: expected a decimal number, got {value!r}") from None
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise ConfigError(f"{key}: must not be negative, got {value}")
            return value
        raise ConfigError(f"{key}: expected a whole number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if origin is Literal:
        choices = typing.get_args(hint)
        if value in choices:
            return value
        raise ConfigError(f"{key}: expected one of {', '.join(map(repr, choices))}, got {value!r}")
    if origin is tuple:
        if isinstance(value, list | tuple) and all(isinstance(v, str) and v for v in value):
            return tuple(value)
        raise ConfigError(f"{key}: expected an array of strings, got {value!r}")
    if origin is Mapping or origin is dict:
        if isinstance(value, Mapping):
            value = {k: _env_leaf(v) for k, v in value.items()}
        # Whole numbers are accepted as their text (``"max.poll.records" = 5000``).
        if isinstance(value, Mapping) and all(
            isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in value.values()
        ):
            return {k: str(v) for k, v in value.items()}
        raise ConfigError(f"{key}: expected a table of strings, got {value!r}")
    raise ConfigError(f"{key}: unsupported setting type {hint!r}")  # pragma: no cover - programming error


def _build_section(name: str, raw: Mapping[str, Any]) -> Any:
    cls = _SECTIONS[name]
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(
            f"[{name}] has unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(known))}"
        )
    values = {k: _coerce(f"{name}.{k}", hints[k], v) for k, v in raw.items()}
    for f in dataclasses.fields(cls):
        # A table such as [kafka.topics] overrides key by key, so one env variable can move one topic.
        if (
            f.name in values
            and isinstance(values[f.name], dict)
            and f.default_factory is not dataclasses.MISSING
        ):
            values[f.name] = {**f.default_factory(), **values[f.name]}
    return cls(**values)


def _apply_env(raw: dict[str, Any], environ: Mapping[str, str]) -> None:
    for name, text in environ.items():
        if not name.upper().startswith(ENV_PREFIX):
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
        if len(path) < 2 or path[0] not in _SECTIONS:
            raise ConfigError(
                f"environment variable {name}: expected {ENV_PREFIX}<SECTION>__<KEY> with SECTION one of "
                f"{', '.join(_SECTIONS)}"
            )
        node = raw.setdefault(path[0], {})
        for depth, part in enumerate(path[1:-1], start=2):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(
                    f"environment variable {name}: {'.'.join(path[:depth])} is not a table, so it has no "
                    f"key {path[depth]!r}"
                )
        node[path[-1]] = _EnvText(name, text)


def load_config(path: str | Path | None = None, *, environ: Mapping[str, str] | None = None) -> Config:
    """Read the TOML file (optional), apply environment overrides, validate everything at once."""
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist; pass an existing TOML file (see config/)")
        try:
            raw = tomllib.loads(p.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None
    _apply_env(raw, os.environ if environ is None else environ)
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        raise ConfigError(
            f"unknown config section(s) {', '.join(unknown)}; known sections: {', '.join(_SECTIONS)}"
        )
    sections = {name: _build_section(name, raw.get(name, {})) for name in _SECTIONS}
    return Config(**sections)
