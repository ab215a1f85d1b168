package io.lakestream.flink.ingest;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.runtime.state.StateSnapshotContext;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.types.Row;

/**
 * Per-partition bounded-out-of-orderness watermarks, advanced record by record, that decide which
 * events are late and stamp every event with its partition's watermark at its arrival.
 *
 * <p>Why here, in Java: event times are only known after the Python adapters, and periodic
 * generators, a Python operator's watermark (held for a whole bundle) or a watermark combined over
 * partitions read at different speeds all make "late at arrival" change from run to run. Here it
 * depends only on the partition's own records, the same in every run and after every restore.
 * Input, per Kafka batch of one split: a header row, then one part row per downstream subtask.
 */
public class EventTimeGate extends AbstractStreamOperator<Row>
        implements OneInputStreamOperator<Row, Row>, ProcessingTimeCallback {

    private static final long serialVersionUID = 6L;

    /** Field positions of the batch row (standardise's {@code BATCH_TYPE}). */
    public static final int SPLIT = 0;
    /** {@code -1} in a header row, else the downstream subtask the part row is for. */
    public static final int PART = 1;
    /** Event times, epoch millis: a header's in Kafka order, a part's in the part's order. */
    public static final int EVENT_TIMES = 2;
    /** Per event of a part: its index in the header's {@link #EVENT_TIMES}. */
    public static final int POSITIONS = 3;
    /** Per event of a part: its bucket, a key group (see {@link BucketKeySelector}). */
    public static final int BUCKETS = 4;
    /** Per event of a part: high 64 bits of the hash of its event id. */
    public static final int ID_HI = 5;
    /** Per event of a part: low 64 bits of the hash of its event id. */
    public static final int ID_LO = 6;
    /** Per event of a part: filled in here, the split's watermark when late, else {@link #NOT_LATE}. */
    public static final int LATE_WATERMARKS = 7;
    /** A part's events as Arrow IPC (opaque here). */
    public static final int EVENTS = 8;
    /** Per event of a part, or null without the speed layer: its gold kind ({@code lakestream.gold}). */
    public static final int GOLD_KINDS = 9;
    /** Per event of a part (speed layer): its amount in fen, unscaled ({@link #NO_AMOUNT} for none). */
    public static final int GOLD_AMOUNTS = 10;
    /** Per event of a part (speed layer): its order id (STRING array, null entries for none). */
    public static final int GOLD_ORDER_IDS = 11;
    /** Per event of a part (speed layer): its user id (STRING array, null entries for none). */
    public static final int GOLD_USER_IDS = 12;
    /**
     * Per event of a part, filled in here when the part carries {@link #GOLD_KINDS}: its split's
     * watermark at its arrival ({@link #NO_WATERMARK} before the split's first event).
     */
    public static final int ARRIVAL_WATERMARKS = 13;
    /** Fields of a batch row with the speed layer's columns. */
    public static final int GOLD_ARITY = 14;
    /** {@link #GOLD_AMOUNTS} entry of an event without an amount. */
    public static final long NO_AMOUNT = Long.MIN_VALUE;
    /** {@link #ARRIVAL_WATERMARKS} entry of an event that arrived before its split had a watermark. */
    public static final long NO_WATERMARK = Long.MIN_VALUE;
    /** {@link #PART} of a header row. */
    public static final int HEADER = -1;
    /** Late watermark of an event that is not late. */
    public static final long NOT_LATE = Long.MIN_VALUE;

    /** State entry that carries the watermark itself (split ids are never empty). */
    private static final String WATERMARK_ENTRY = "";

    private static final class Split {
        long maxEventTime = Long.MIN_VALUE;
        long lastRecordAt;
        boolean idle;
        /** Late watermarks of the split's last header, by header position (null before one). */
        long[] late;
        /** The split's watermark at the arrival of each event of its last header, by position. */
        long[] arrival;
    }

    private final long boundMillis;
    private final long idleMillis;
    /** Split id -> max VALID event time of the splits' earlier runs, for a start without state. */
    private final HashMap<String, Long> seeds;

    private transient ListState<Tuple2<String, Long>> state;
    private transient Map<String, Split> splits;
    private transient long watermark;
    /** Min of maxEventTime over active splits at the last recomputation (MAX_VALUE when none). */
    private transient long activeMin;
    private transient long lastRecordAt;
    private transient boolean outputIdle;

    public EventTimeGate(long boundMillis, long idleMillis) {
        this(boundMillis, idleMillis, new HashMap<>());
    }

    /**
     * A gate whose splits start at {@code seeds} (split id -> max VALID event time) when the job starts
     * without state: a run that continues where an earlier, finished one ended (whose maxima its
     * tables recorded) decides lateness as one continuous run would. A restore ignores the seeds: the
     * checkpointed maxima are the exact ones. Seeded splits are idle until their first header, like
     * restored ones.
     */
    public EventTimeGate(long boundMillis, long idleMillis, Map<String, Long> seeds) {
        if (boundMillis < 0) {
            throw new IllegalArgumentException(
                    "event_time.max_out_of_orderness must not be negative, got " + boundMillis + " ms");
        }
        this.boundMillis = boundMillis;
        this.idleMillis = idleMillis;
        this.seeds = new HashMap<>(seeds);
    }

    /**
     * Restores the per-split maxima and the emitted watermark from union state: at any parallelism every
     * subtask gets each split's max (the highest copy) and the lowest emitted watermark of the
     * snapshot's subtasks.
     */
    @Override
    public void initializeState(StateInitializationContext context) throws Exception {
        super.initializeState(context);
        state =
                context.getOperatorStateStore()
                        .getUnionListState(
                                new ListStateDescriptor<>(
                                        "lakestream-split-max-event-time",
                                        Types.TUPLE(Types.STRING, Types.LONG)));
        splits = new HashMap<>();
        // Every subtask snapshots every split it knows; a split's reader has the highest copy. The
        // watermark restarts at the lowest one emitted (downstream saw the minimum over subtasks), and
        // restored splits count for it only once they send a header here: after a rescale most of
        // them are read by other subtasks.
        long restoredWatermark = Long.MAX_VALUE;
        for (Tuple2<String, Long> entry : state.get()) {
            if (WATERMARK_ENTRY.equals(entry.f0)) {
                if (entry.f1 != Long.MIN_VALUE) {
                    restoredWatermark = Math.min(restoredWatermark, entry.f1);
                }
            } else {
                Split split = splits.computeIfAbsent(entry.f0, k -> new Split());
                split.maxEventTime = Math.max(split.maxEventTime, entry.f1);
                split.idle = true;
            }
        }
        watermark = restoredWatermark == Long.MAX_VALUE ? Long.MIN_VALUE : restoredWatermark;
        if (!context.isRestored()) {
            for (Map.Entry<String, Long> seed : seeds.entrySet()) {
                Split split = splits.computeIfAbsent(seed.getKey(), k -> new Split());
                split.maxEventTime = Math.max(split.maxEventTime, seed.getValue());
                split.idle = true;
            }
        }
    }

    @Override
    public void open() throws Exception {
        super.open();
        lastRecordAt = getProcessingTimeService().getCurrentProcessingTime();
        for (Split split : splits.values()) {
            split.lastRecordAt = lastRecordAt;
        }
        recomputeMin();
        if (watermark != Long.MIN_VALUE) {
            output.emitWatermark(new Watermark(watermark));
        }
        if (idleMillis > 0) {
            getProcessingTimeService().registerTimer(lastRecordAt + idleMillis, this);
        }
    }

    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        Row row = element.getValue();
        Object splitField = row.getField(SPLIT);
        Object partField = row.getField(PART);
        if (!(splitField instanceof String) || ((String) splitField).isEmpty()
                || !(partField instanceof Integer)) {
            throw new IllegalStateException(
                    "EventTimeGate: a batch row needs a non-empty split id (STRING) at " + SPLIT
                            + " and a part (INT, -1 for a header) at " + PART + ", got "
                            + describe(splitField) + " " + splitField + " and " + describe(partField));
        }
        String splitId = (String) splitField;
        int part = (Integer) partField;
        if (part == HEADER) {
            processHeader(splitId, row);
        } else if (part >= 0) {
            processPart(splitId, part, element);
        } else {
            throw new IllegalStateException(
                    "EventTimeGate: split " + splitId + ": part must be -1 (header) or a subtask index, got "
                            + part);
        }
    }

    /**
     * Advances the split event by event: the split's watermark is {@code max(event time so far) - bound
     * - 1} (Flink's {@code BoundedOutOfOrdernessWatermarks}) and an event is late when its time is at or
     * below it. The late and arrival watermarks are kept for the split's parts until its next header;
     * headers are not emitted. A split's headers must reach one subtask in Kafka order: the gate runs
     * chained after standardise at the job's parallelism, and each split is read by one source subtask.
     */
    private void processHeader(String splitId, Row header) throws Exception {
        Object times = header.getField(EVENT_TIMES);
        if (!(times instanceof long[])) {
            throw new IllegalStateException(
                    "EventTimeGate: split " + splitId + ": a header needs the event times in epoch"
                            + " milliseconds (ARRAY<BIGINT>) at " + EVENT_TIMES + ", got "
                            + describe(times));
        }
        long[] eventTimes = (long[]) times;
        Split split = splits.get(splitId);
        if (eventTimes.length == 0) {
            if (split != null) {
                split.late = new long[0];
                split.arrival = new long[0];
            }
            return;
        }
        if (outputIdle) {
            outputIdle = false;
            output.emitWatermarkStatus(WatermarkStatus.ACTIVE);
        }
        if (idleMillis > 0) {
            lastRecordAt = getProcessingTimeService().getCurrentProcessingTime();
        }
        boolean recompute = false;
        if (split == null) {
            split = new Split();
            splits.put(splitId, split);
            recompute = true;
        } else if (split.idle) {
            split.idle = false;
            recompute = true;
        }
        split.lastRecordAt = lastRecordAt;
        long before = split.maxEventTime;
        long[] late = new long[eventTimes.length];
        long[] arrival = new long[eventTimes.length];
        for (int i = 0; i < eventTimes.length; i++) {
            long eventTime = eventTimes[i];
            late[i] = NOT_LATE;
            arrival[i] = NO_WATERMARK;
            if (split.maxEventTime != Long.MIN_VALUE) {
                long splitWatermark = split.maxEventTime - boundMillis - 1;
                arrival[i] = splitWatermark;
                if (eventTime <= splitWatermark) {
                    late[i] = splitWatermark;
                }
            }
            if (eventTime > split.maxEventTime) {
                split.maxEventTime = eventTime;
            }
        }
        split.late = late;
        split.arrival = arrival;
        // Only the split(s) at the minimum can move the minimum.
        recompute |= split.maxEventTime > before && before <= activeMin;
        if (recompute) {
            recomputeMin();
            advance();
        }
    }

    /**
     * Fills in the part's {@code late_watermarks[k] = late[positions[k]]} ({@link #NOT_LATE} when on
     * time) from its split's last header and, when it carries the speed layer's columns, {@code
     * arrival_watermarks[k]} (so the speed layer's lateness decision is as deterministic as this one),
     * and emits it with the split's max event time as its timestamp. A part without a header fails.
     */
    private void processPart(String splitId, int part, StreamRecord<Row> element) {
        Row row = element.getValue();
        Split split = splits.get(splitId);
        if (split == null || split.late == null) {
            throw new IllegalStateException(
                    "EventTimeGate: split " + splitId + ": part " + part
                            + " arrived without a header row (part = -1) of its split before it");
        }
        Object positionsField = row.getField(POSITIONS);
        if (!(positionsField instanceof int[])) {
            throw new IllegalStateException(
                    "EventTimeGate: split " + splitId + ": part " + part + " needs its events' header"
                            + " positions (ARRAY<INT>) at " + POSITIONS + ", got "
                            + describe(positionsField));
        }
        int[] positions = (int[]) positionsField;
        long[] late = split.late;
        boolean gold = row.getArity() >= GOLD_ARITY && row.getField(GOLD_KINDS) != null;
        long[] partLate = new long[positions.length];
        long[] partArrival = gold ? new long[positions.length] : null;
        for (int k = 0; k < positions.length; k++) {
            int position = positions[k];
            if (position < 0 || position >= late.length) {
                throw new IllegalStateException(
                        "EventTimeGate: split " + splitId + ": part " + part + ": positions[" + k + "] = "
                                + position + " is outside the header's " + late.length + " events");
            }
            partLate[k] = late[position];
            if (gold) {
                partArrival[k] = split.arrival[position];
            }
        }
        row.setField(LATE_WATERMARKS, partLate);
        if (gold) {
            row.setField(ARRIVAL_WATERMARKS, partArrival);
        }
        output.collect(element.replace(row, split.maxEventTime));
    }

    static String describe(Object value) {
        if (value == null) {
            return "null";
        }
        return value.getClass().getSimpleName();
    }

    /**
     * The emitted watermark combines the splits like a source does: the minimum over the splits this
     * subtask has seen that are not idle, never moving backwards.
     */
    private void recomputeMin() {
        long min = Long.MAX_VALUE;
        for (Split split : splits.values()) {
            if (!split.idle && split.maxEventTime < min) {
                min = split.maxEventTime;
            }
        }
        activeMin = min;
    }

    private void advance() {
        if (activeMin == Long.MAX_VALUE || activeMin == Long.MIN_VALUE) {
            return;
        }
        long next = activeMin - boundMillis - 1;
        if (next > watermark) {
            watermark = next;
            output.emitWatermark(new Watermark(next));
        }
    }

    @Override
    public void processWatermark(Watermark mark) throws Exception {
        // Our watermark is generated here; only the end of a bounded input passes through.
        if (mark.getTimestamp() == Long.MAX_VALUE && watermark != Long.MAX_VALUE) {
            watermark = Long.MAX_VALUE;
            output.emitWatermark(mark);
        }
    }

    @Override
    public void processWatermarkStatus(WatermarkStatus status) throws Exception {
        // Idleness of the inputs does not matter: splits are tracked from the records themselves.
    }

    /**
     * A split without records for {@code idleMillis} of processing time is idle until its next header;
     * when every split is idle (or none was seen) the output is IDLE, and the next header makes it
     * ACTIVE.
     */
    @Override
    public void onProcessingTime(long time) throws Exception {
        long now = getProcessingTimeService().getCurrentProcessingTime();
        boolean changed = false;
        boolean anyActive = false;
        long nextCheck = now + idleMillis;
        for (Split split : splits.values()) {
            if (split.idle) {
                continue;
            }
            if (now - split.lastRecordAt >= idleMillis) {
                split.idle = true;
                changed = true;
            } else {
                anyActive = true;
                nextCheck = Math.min(nextCheck, split.lastRecordAt + idleMillis);
            }
        }
        if (changed) {
            recomputeMin();
            advance();
        }
        if (!anyActive && !outputIdle && now - lastRecordAt >= idleMillis) {
            outputIdle = true;
            output.emitWatermarkStatus(WatermarkStatus.IDLE);
        }
        getProcessingTimeService().registerTimer(nextCheck, this);
    }

    @Override
    public void snapshotState(StateSnapshotContext context) throws Exception {
        super.snapshotState(context);
        List<Tuple2<String, Long>> entries = new ArrayList<>(splits.size() + 1);
        for (Map.Entry<String, Split> e : splits.entrySet()) {
            entries.add(Tuple2.of(e.getKey(), e.getValue().maxEventTime));
        }
        entries.add(Tuple2.of(WATERMARK_ENTRY, watermark));
        state.update(entries);
    }
}
