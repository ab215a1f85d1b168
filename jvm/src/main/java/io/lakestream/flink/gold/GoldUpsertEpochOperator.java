package io.lakestream.flink.gold;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.metrics.Counter;
import org.apache.flink.streaming.api.operators.TwoInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;
import org.apache.flink.types.RowKind;

import io.lakestream.flink.epoch.CheckpointEpochOperator;

/**
 * The speed layer's gold rows for its Python Delta sink: keeps the newest row of each window from the
 * aggregate's changelog and emits them, stamped, as DATA rows of {@link #payloadType(String[])} right
 * before PRECOMMIT(n) and END_OF_INPUT, with the checkpoint markers of {@link CheckpointEpochOperator}.
 *
 * <p>Why: one row per window touched in a checkpoint, whatever the number of events, gives the Python
 * sink few rows and the table one upsert per window and checkpoint; values leave as longs, so the
 * payload crosses into Python with basic types. Counter {@code lakestream.gold_rows_emitted}.
 */
public class GoldUpsertEpochOperator extends CheckpointEpochOperator<Row>
        implements TwoInputStreamOperator<Row, Row, Row> {

    private static final long serialVersionUID = 1L;

    /** Names of the stamps after the exported fields of a payload row. */
    public static final String DATA_TIME = "data_time";
    public static final String UPDATED_AT = "updated_at";

    private final int inputs;
    private final String keyField;
    private final String endField;
    private final String[] fields;
    private final int decimalScale;

    private transient Map<Object, Row> newest;
    private transient long watermark;
    private transient boolean endOfTime;
    private transient long latestEnd;
    private transient int endedInputs;
    private transient Counter emitted;

    /**
     * @param keyField the window start column of the query's result: one table row per value
     * @param endField the window end column (the data time at the end of a bounded input)
     * @param fields the result columns exported, in payload order (the key among them)
     * @param decimalScale the scale decimals are exported at, as unscaled longs
     */
    public GoldUpsertEpochOperator(String keyField, String endField, String[] fields, int decimalScale) {
        this(keyField, endField, fields, decimalScale, 1);
    }

    /**
     * It runs as a one-input operator (the watermark comes with the changelog) or, in the job, as a
     * two-input one: input 1 the rows, input 2 a stream of the event-time watermarks only ({@link
     * GoldLatenessGate#WATERMARKS}); input 1's watermarks are then ignored.
     *
     * @param inputs 2 to run as a two-input operator (the watermarks on input 2): Flink calls {@code
     *     endInput()} once per ended input, and the end of input is the end of both
     */
    public GoldUpsertEpochOperator(
            String keyField, String endField, String[] fields, int decimalScale, int inputs) {
        if (inputs != 1 && inputs != 2) {
            throw new IllegalArgumentException("inputs must be 1 or 2, got " + inputs);
        }
        this.inputs = inputs;
        for (String name : new String[] {keyField, endField}) {
            if (!Arrays.asList(fields).contains(name)) {
                throw new IllegalArgumentException(
                        "field " + name + " is not among the exported fields " + Arrays.toString(fields));
            }
        }
        this.keyField = keyField;
        this.endField = endField;
        this.fields = fields.clone();
        this.decimalScale = decimalScale;
    }

    /** The DATA payload: every exported field, then {@link #DATA_TIME} and {@link #UPDATED_AT}, as longs. */
    public static RowTypeInfo payloadType(String[] fields) {
        int n = fields.length + 2;
        TypeInformation<?>[] types = new TypeInformation<?>[n];
        String[] names = new String[n];
        for (int i = 0; i < fields.length; i++) {
            types[i] = Types.LONG;
            names[i] = fields[i];
        }
        types[n - 2] = Types.LONG;
        names[n - 2] = DATA_TIME;
        types[n - 1] = Types.LONG;
        names[n - 1] = UPDATED_AT;
        return new RowTypeInfo(types, names);
    }

    /** The operator's output type: markers carrying {@link #payloadType(String[])} payloads. */
    public static RowTypeInfo markedPayloadType(String[] fields) {
        return outputType(payloadType(fields));
    }

    @Override
    public void open() throws Exception {
        super.open();
        newest = new LinkedHashMap<>();
        watermark = Long.MIN_VALUE;
        latestEnd = Long.MIN_VALUE;
        emitted = getMetricGroup().addGroup("lakestream").counter("gold_rows_emitted");
    }

    /**
     * Keeps a changelog row of {@link GoldWindowAggregate} as its window's newest (by {@code keyField}).
     * Only {@code +I} and {@code +U} matter, each the whole current aggregate of its window; {@code -U}
     * is ignored and {@code -D} cannot occur on insert-only input. The buffer is empty whenever a
     * barrier passes, so a restore replays into an empty one.
     */
    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        emitOpen();
        Row row = element.getValue();
        RowKind kind = row.getKind();
        if (kind != RowKind.INSERT && kind != RowKind.UPDATE_AFTER) {
            return;
        }
        Object key = row.getField(keyField);
        if (key == null) {
            throw new IllegalStateException(
                    "GoldUpsertEpochOperator: a gold row without " + keyField + ": " + row);
        }
        newest.remove(key); // re-inserted last: rows leave in the order of their latest update
        newest.put(key, row);
        Long end = export(endField, row.getField(endField));
        if (end != null) {
            latestEnd = Math.max(latestEnd, end);
        }
    }

    @Override
    public void processElement1(StreamRecord<Row> element) throws Exception {
        processElement(element);
    }

    @Override
    public void processElement2(StreamRecord<Row> element) {
        // The watermark input carries no records.
    }

    @Override
    public void processWatermark(Watermark mark) throws Exception {
        observe(mark);
        super.processWatermark(mark);
    }

    @Override
    public void processWatermark1(Watermark mark) {
        // The changelog's watermarks are the mini-batch assigner's processing-time marks.
    }

    @Override
    public void processWatermark2(Watermark mark) {
        observe(mark);
    }

    private void observe(Watermark mark) {
        if (mark.getTimestamp() == Long.MAX_VALUE) {
            endOfTime = true;
        } else {
            watermark = Math.max(watermark, mark.getTimestamp());
        }
    }

    /**
     * The {@code data_time} stamp: this operator's event-time watermark (windows ending at or before it
     * are complete, up to the allowed lateness), null before the first one. Rows are stamped at
     * PRECOMMIT(n), after barrier n arrived on both inputs, so it is the watermark of the events before
     * n, all aggregated before n. Once the input ended or its final watermark (end of time) arrived,
     * every window is complete: the latest window end ({@code endField}) seen.
     */
    Long dataTime() {
        if (endOfTime && latestEnd != Long.MIN_VALUE) {
            return Math.max(watermark, latestEnd);
        }
        return watermark == Long.MIN_VALUE ? null : watermark;
    }

    /**
     * Emits the newest row of each window touched since the last flush, stamped with {@link #dataTime()}
     * and {@code updated_at}, the processing time of the flush (both epoch milliseconds).
     */
    @Override
    protected void flush() {
        if (newest.isEmpty()) {
            return;
        }
        Long dataTime = dataTime();
        long now = getProcessingTimeService().getCurrentProcessingTime();
        for (Row row : newest.values()) {
            Row out = new Row(fields.length + 2);
            for (int i = 0; i < fields.length; i++) {
                out.setField(i, export(fields[i], row.getField(fields[i])));
            }
            out.setField(fields.length, dataTime);
            out.setField(fields.length + 1, now);
            emit(DATA, -1L, out);
        }
        emitted.inc(newest.size());
        newest.clear();
    }

    /**
     * A value as a long: timestamps in epoch milliseconds, decimals unscaled at {@code decimalScale}
     * (fen for yuan at scale 2), integers as they are.
     */
    private Long export(String name, Object value) {
        if (value == null) {
            return null;
        }
        if (value instanceof Long) {
            return (Long) value;
        }
        if (value instanceof Integer || value instanceof Short || value instanceof Byte) {
            return ((Number) value).longValue();
        }
        if (value instanceof LocalDateTime) {
            return ((LocalDateTime) value).toInstant(ZoneOffset.UTC).toEpochMilli();
        }
        if (value instanceof Instant) {
            return ((Instant) value).toEpochMilli();
        }
        if (value instanceof BigDecimal) {
            return ((BigDecimal) value).setScale(decimalScale, RoundingMode.UNNECESSARY).unscaledValue()
                    .longValueExact();
        }
        throw new IllegalStateException(
                "GoldUpsertEpochOperator: column " + name + " has a " + value.getClass().getName()
                        + " (" + value + "); export takes integers, timestamps and decimals");
    }

    @Override
    public void endInput() throws Exception {
        if (++endedInputs < inputs) {
            return;
        }
        // The input is complete: so is every window (whether or not the final watermark came first).
        endOfTime = true;
        super.endInput(); // flush(), then END_OF_INPUT
    }
}
