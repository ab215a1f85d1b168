package io.lakestream.flink;

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
 * Per-partition bounded-out-of-orderness watermarks, advanced record by record, that also stamp every
 * record with the watermark of its partition at its arrival: "late" is decided here, in Java.
 *
 * <p>Why here and not with Flink's {@code WatermarkStrategy} plus a lateness check downstream:
 * periodic generators emit on processing time, a Python operator holds its watermark for the whole
 * bundle in flight (PyFlink advances it only between bundles), and a watermark combined over several
 * partitions depends on how fast each partition happens to be read. Any of these makes "late at
 * arrival" change from run to run. Event times are only known after the Python adapters, so the
 * source's own per-split watermarks are not available; this operator computes them:
 *
 * <ul>
 *   <li>records are batches {@code (split, event_times_ms[], late_watermarks_ms[], payload)} of one
 *       source partition's events in arrival order ({@code split} names it, e.g. {@code "topic#3"});
 *       batches, not single events, because every record a Python operator emits costs a fixed
 *       crossing; the gate fills {@code late_watermarks_ms} ({@link #NOT_LATE} for events on time)
 *       and passes the payload through untouched; the record timestamp is the split's max event time;
 *   <li>per split, the watermark is {@code max(event_time_ms so far) - bound - 1} (Flink's
 *       {@code BoundedOutOfOrdernessWatermarks}). A record is late when its event time is at or below
 *       its split's watermark before the record (Flink's definition); {@code late_watermark_ms} is then
 *       set to that watermark. This depends only on the order of the split's
 *       own records, which Kafka fixes, so it is the same in every run and after every restore; and a
 *       partition read ahead of the others (any catch-up) never makes the others' records late;
 *   <li>the emitted Flink watermark, for event-time operators downstream, combines the splits like a
 *       source does: the minimum over the splits seen so far that are not idle, never moving backwards;
 *   <li>a split without records for {@code idleMillis} of processing time is idle: it leaves that
 *       minimum until its next record. When every split is idle (or none was ever seen) the output is
 *       marked IDLE so multi-input operators downstream are not held back; the next record marks it
 *       ACTIVE;
 *   <li>the per-split maxima and the emitted watermark are checkpointed (union state, max on restore).
 * </ul>
 *
 * <p>Run it at parallelism 1 (one state for all splits, one combined watermark). Upstream watermarks
 * and idleness are ignored (the source has none), except the final MAX_WATERMARK of a bounded input,
 * which is forwarded.
 */
public class EventTimeGate extends AbstractStreamOperator<Row>
        implements OneInputStreamOperator<Row, Row>, ProcessingTimeCallback {

    private static final long serialVersionUID = 4L;

    /** Position of the split (source partition) id in the batch row. */
    public static final int SPLIT = 0;
    /** Position of the event times (epoch millis, arrival order) in the batch row. */
    public static final int EVENT_TIMES = 1;
    /** Position of the late watermarks the gate fills in (one per event) in the batch row. */
    public static final int LATE_WATERMARKS = 2;
    /** Late watermark of an event that is not late. */
    public static final long NOT_LATE = Long.MIN_VALUE;

    /** State entry that carries the watermark itself (split ids are never empty). */
    private static final String WATERMARK_ENTRY = "";

    private static final class Split {
        long maxEventTime = Long.MIN_VALUE;
        long lastRecordAt;
        boolean idle;
    }

    private final long boundMillis;
    private final long idleMillis;

    private transient ListState<Tuple2<String, Long>> state;
    private transient Map<String, Split> splits;
    private transient long watermark;
    /** Min of maxEventTime over active splits at the last recomputation (MAX_VALUE when none). */
    private transient long activeMin;
    private transient long lastRecordAt;
    private transient boolean outputIdle;

    public EventTimeGate(long boundMillis, long idleMillis) {
        if (boundMillis < 0) {
            throw new IllegalArgumentException(
                    "event_time.max_out_of_orderness must not be negative, got " + boundMillis + " ms");
        }
        this.boundMillis = boundMillis;
        this.idleMillis = idleMillis;
    }

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
        watermark = Long.MIN_VALUE;
        for (Tuple2<String, Long> entry : state.get()) {
            if (WATERMARK_ENTRY.equals(entry.f0)) {
                watermark = Math.max(watermark, entry.f1);
            } else {
                Split split = splits.computeIfAbsent(entry.f0, k -> new Split());
                split.maxEventTime = Math.max(split.maxEventTime, entry.f1);
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
        Row batch = element.getValue();
        Object splitId = batch.getField(SPLIT);
        Object times = batch.getField(EVENT_TIMES);
        if (!(times instanceof long[]) || !(splitId instanceof String) || ((String) splitId).isEmpty()) {
            throw new IllegalStateException(
                    "EventTimeGate: a batch row needs a non-empty split id (STRING) at " + SPLIT
                            + " and the event times in epoch milliseconds (ARRAY<BIGINT>) at "
                            + EVENT_TIMES + ", got " + batch);
        }
        long[] eventTimes = (long[]) times;
        if (eventTimes.length == 0) {
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
        Split split = splits.get(splitId);
        if (split == null) {
            split = new Split();
            splits.put((String) splitId, split);
            recompute = true;
        } else if (split.idle) {
            split.idle = false;
            recompute = true;
        }
        split.lastRecordAt = lastRecordAt;
        long before = split.maxEventTime;
        long[] late = new long[eventTimes.length];
        for (int i = 0; i < eventTimes.length; i++) {
            long eventTime = eventTimes[i];
            late[i] = NOT_LATE;
            if (split.maxEventTime != Long.MIN_VALUE) {
                long splitWatermark = split.maxEventTime - boundMillis - 1;
                if (eventTime <= splitWatermark) {
                    late[i] = splitWatermark;
                }
            }
            if (eventTime > split.maxEventTime) {
                split.maxEventTime = eventTime;
            }
        }
        batch.setField(LATE_WATERMARKS, late);
        output.collect(element.replace(batch, split.maxEventTime));
        // Only the split(s) at the minimum can move the minimum.
        recompute |= split.maxEventTime > before && before <= activeMin;
        if (recompute) {
            recomputeMin();
            advance();
        }
    }

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
