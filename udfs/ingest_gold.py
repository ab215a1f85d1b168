"""The speed layer of the gold metrics inside ``lakestream ingest``: gold inputs out of standardise,
the metrics per window in the JVM, the realtime rows into ``gold/order_metrics_5m`` exactly once.

Standardise fills the gold columns (``gold_columns``), the de-dup passes on first sightings only, and
the Java operators compute the metrics per window from ``lakestream.gold.METRICS`` (``java_metrics``),
defining none themselves. ``GoldSinkFunction`` upserts the rows by ``window_start`` under the
two-phase-commit protocol, never over a ``layer = 'batch'`` row, in the silver committer's Python
worker. Path: DESIGN.md section 11.6; protocol: section 3.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyflink.common import Types
from pyflink.datastream import ProcessFunction

from lakestream.gold import GOLD_SCHEMA, LAYER_REALTIME, METRICS_SCHEMA, GoldSettings, kind_array
from lakestream.merge_spec import MergeSpec
from lakestream.time import EPOCH
from runtime.checkpoint_markers import DATA, KIND_FIELD, OPEN, PAYLOAD_FIELD, Marker
from sinks.flink.delta_sink import DeltaSinkSpec, TableWriterFunction, TableWriters
from sinks.flink.global_commit import SecondSink
from sinks.table_spec import TableSpec
from udfs.ingest_rows import from_epoch_millis, string_list

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import DataStream

    from lakestream.config import Config

_MS = timedelta(milliseconds=1)

#: ``EventTimeGate.NO_AMOUNT``: the fen entry of an event without an amount.
NO_AMOUNT = -(2**63)
#: Upsert by window; a row the batch layer wrote (``layer = 'batch'``) is never replaced.
GOLD_MERGE = MergeSpec(keys=("window_start",), protected={"layer": "batch"})
#: The aggregate's columns the sink takes, in ``GOLD_SCHEMA`` order (window bounds, then the metrics).
EXPORTED = tuple(METRICS_SCHEMA.names)
_FEN = Decimal("0.01")

#: Types of the four part columns standardise fills (``EventTimeGate.GOLD_KINDS`` ..): kinds as bytes,
#: amounts as unscaled fen, ids as string arrays (null entries for none).
GOLD_COLUMN_TYPES = [
    Types.PRIMITIVE_ARRAY(Types.BYTE()),
    Types.PRIMITIVE_ARRAY(Types.LONG()),
    Types.BASIC_ARRAY(Types.STRING()),
    Types.BASIC_ARRAY(Types.STRING()),
]


def gold_columns(events: pa.RecordBatch) -> tuple[bytes, list[int], list[str | None], list[str | None]]:
    """The gold inputs of a part's VALID bronze rows, column-wise, in the part's order.

    The kind is ``lakestream.gold.kind_array`` (the shared ``KIND_RULES``); amount, order and user id
    are the bronze columns as ``gold_inputs`` takes them. What ``gold_inputs`` adds, first delivery per
    event id, is the Java de-dup's: checkpointed across batches and restores.
    """
    kinds = kind_array(events.column("source"), events.column("op"))
    amount = events.column("amount")
    # decimal(18, 2) -> unscaled int64 (fen): exact; nulls become NO_AMOUNT.
    fen = pc.cast(pc.multiply(amount, pa.scalar(Decimal(100), pa.decimal128(3, 0))), pa.int64())
    amounts = np.where(
        pc.is_valid(fen).to_numpy(zero_copy_only=False),
        pc.fill_null(fen, 0).to_numpy(zero_copy_only=False),
        NO_AMOUNT,
    )
    return (
        kinds.to_numpy(zero_copy_only=False).astype(np.int8).tobytes(),
        amounts.astype(np.int64).tolist(),
        string_list(events.column("order_id")),
        string_list(events.column("user_id")),
    )


def _ms(td: timedelta) -> int:
    return int(td / _MS)


def state_ttl(cfg: Config) -> timedelta:
    """How long the gold aggregate keeps a window's state after its last update (processing time).

    A window takes events until every partition's watermark passed its end plus the allowed
    lateness; a partition's watermark trails its newest event by the out-of-orderness, and an idle
    partition holds nobody back for the idleness timeout. So after a window's last event (at the
    latest its end) the window is open for at most window + allowed lateness + out-of-orderness +
    idleness of watermark time, which in a live stream passes at the speed of processing time (a
    replay of old data is faster in event time, so safer). DESIGN.md section 11.6.
    """
    et = cfg.event_time
    return cfg.gold.window + cfg.gold.allowed_lateness + et.max_out_of_orderness + et.idleness_timeout


def gold_spec(cfg: Config, job_name: str) -> DeltaSinkSpec:
    """The realtime writer of the gold table: an upsert by window start, app ids of ``job_name``."""
    table = cfg.gold.table
    return DeltaSinkSpec(
        table=TableSpec(
            table_uri=cfg.lakehouse.table_uri(table),
            schema=GOLD_SCHEMA,
            mode="upsert",
            merge=GOLD_MERGE,
            target_file_size=cfg.tables.merge_target_file_size_mb * 1024 * 1024,
        ),
        app_prefix=f"{job_name}/{table}",
    )


def gold_row(payload: Any) -> tuple[Any, ...]:
    """A ``GoldUpsertEpochOperator`` payload (epoch ms, counts, gmv in fen, stamps) as a
    ``GOLD_SCHEMA`` tuple of the realtime layer."""
    values = list(payload)
    n = len(EXPORTED)
    exported = dict(zip(EXPORTED, values[:n], strict=True))
    data_time, updated_at = values[n], values[n + 1]
    out: list[Any] = []
    for field in METRICS_SCHEMA:
        value = exported[field.name]
        if pa.types.is_timestamp(field.type):
            out.append(from_epoch_millis(value))
        elif pa.types.is_decimal(field.type):
            out.append((Decimal(value) * _FEN).quantize(_FEN))
        else:
            out.append(value)
    # No watermark yet (the first seconds of a run, or up to the idleness timeout while some gate
    # subtask has no partition with records): the epoch, "nothing is known to be complete".
    out += [
        LAYER_REALTIME,
        from_epoch_millis(data_time) if data_time is not None else EPOCH,
        None,
        from_epoch_millis(updated_at),
    ]
    return tuple(out)


class GoldSinkFunction(TableWriterFunction):
    """The realtime writer of the gold table: ``GoldUpsertEpochOperator``'s markers and rows in.

    Creates the table with ``GOLD_SCHEMA`` when missing (``ensure_gold_table``, also refusing one with
    other columns), then follows the markers like any sink (DESIGN.md section 3).
    """

    def __init__(self, spec: DeltaSinkSpec) -> None:
        self.spec = spec
        self.tables = TableWriters({"gold": spec})

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[str]:
        """A gold row to stage, or a marker (OPEN creates the table first)."""
        if value[KIND_FIELD] == DATA:
            self.tables.add("gold", gold_row(value[PAYLOAD_FIELD]))
            return
        if Marker.of(value).kind == OPEN:
            from lakestream.gold import ensure_gold_table

            table = self.spec.table
            ensure_gold_table(table.table_uri, storage_options=table.storage_options)
        yield from self.tables.on_marker(value)


def speed_layer(
    deduped: DataStream,
    cfg: Config,
    spec: DeltaSinkSpec,
    *,
    parallelism: int,
    lineage_start_ms: int | None = None,
) -> SecondSink:
    """Attach the speed layer to the de-dup operator's stream ``deduped`` (its side output), up to the
    gold writer, which it returns: the caller runs it (``commit_globally(beside=...)`` runs it in the
    silver committer's Python worker).

    ``lineage_start_ms``: the newest event time the lineage this run continues recorded (the maximum
    of the watermark seeds); windows starting at or before it are left to the batch layer, as this
    run's gold state does not hold the previous lineage's events (``GoldLatenessGate``).

    Operator uids: ``ingest-gold-lateness`` (Java, at the job's parallelism, chained to the de-dup),
    ``aggregate_uid(settings)`` (Java, 1), ``ingest-gold-upsert-markers`` (Java, 1); the writer gets the
    uid of the operator it runs in.
    """
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    gold, ingest = jvm.io.lakestream.flink.gold, jvm.io.lakestream.flink.ingest
    settings = GoldSettings.from_config(cfg)
    metrics = java_metrics()
    j_side = deduped._j_data_stream.getSideOutput(ingest.KeyedDedupEpochOperator.GOLD_EVENTS)
    cut = gold.GoldLatenessGate.NO_CUT if lineage_start_ms is None else int(lineage_start_ms)
    gate = gold.GoldLatenessGate(
        _ms(settings.window),
        _ms(settings.allowed_lateness),
        cut,
        metrics,
        gold.GoldLatenessGate.DEFAULT_MAX_BUFFERED,
    )
    j_partials = (
        j_side.transform("gold lateness gate + partials", gold.GoldLatenessGate.PARTIAL_TYPE, gate)
        .uid("ingest-gold-lateness")
        .setParallelism(parallelism)
    )
    aggregate = gold.GoldWindowAggregate(
        _ms(settings.window), _ms(settings.allowed_lateness), _ms(state_ttl(cfg)), metrics
    )
    j_rows = (
        j_partials.keyBy(gold.GoldWindowAggregate.BY_WINDOW_START)
        .transform("gold windows", gold.GoldWindowAggregate.outputType(metrics), aggregate)
        .uid(aggregate_uid(settings))
        .setParallelism(1)
    )
    fields = get_gateway().new_array(jvm.java.lang.String, len(EXPORTED))
    for i, name in enumerate(EXPORTED):
        fields[i] = name
    upsert = gold.GoldUpsertEpochOperator("window_start", "window_end", fields, 2, 2)
    # The event-time watermarks, without records, as the stamp's second input: the rows of the
    # aggregate (parallelism 1) carry no useful watermark of their own.
    j_watermarks = j_partials.getSideOutput(gold.GoldLatenessGate.WATERMARKS)
    j_marked = (
        j_rows.connect(j_watermarks)
        .transform("gold rows + markers", gold.GoldUpsertEpochOperator.markedPayloadType(fields), upsert)
        .uid("ingest-gold-upsert-markers")
        .setParallelism(1)
    )
    return SecondSink(DataStream(j_marked), GoldSinkFunction(spec), "gold writer")


def java_metrics() -> Any:
    """``METRICS`` as the JVM's ``GoldMetrics`` (its interpretation of the one definition)."""
    from pyflink.java_gateway import get_gateway

    gateway = get_gateway()
    jvm = gateway.jvm

    def array(kind: Any, values: list[Any]) -> Any:
        out = gateway.new_array(kind, len(values))
        for i, value in enumerate(values):
            out[i] = value
        return out

    names, kinds, aggregates, columns = metric_spec()
    return jvm.io.lakestream.flink.gold.GoldMetrics(
        array(jvm.java.lang.String, names),
        array(jvm.int, kinds),
        array(jvm.java.lang.String, aggregates),
        array(jvm.java.lang.String, columns),
    )


#: ``GoldMetrics.ANY_KIND``: the kind of a metric over every event.
ANY_KIND = -1


def metric_spec() -> tuple[list[str], list[int], list[str], list[str | None]]:
    """``METRICS`` column-wise: names, kinds (``ANY_KIND`` for all), aggregates, columns."""
    from lakestream.gold import METRICS

    return (
        [m.name for m in METRICS],
        [ANY_KIND if m.kind is None else m.kind for m in METRICS],
        [m.aggregate for m in METRICS],
        [m.column for m in METRICS],
    )


def aggregate_uid(settings: GoldSettings) -> str:
    """The uid of the gold aggregate: names its state by a digest of the window and the metrics.

    The state holds one value per metric and window of ``gold.window``; another definition (a metric
    added, another window) must not restore it, so it gets another uid: its state starts empty and
    the old one is unclaimed, which a restore refuses (DESIGN.md section 11.6 says what to run instead).
    ``gold.allowed_lateness`` is not part of it: changing it restores.
    """
    import hashlib

    names, kinds, aggregates, columns = metric_spec()
    definition = repr((_ms(settings.window), names, kinds, aggregates, columns))
    return f"ingest-gold-aggregate-{hashlib.sha256(definition.encode()).hexdigest()[:8]}"
