package io.lakestream.flink;

import java.math.BigDecimal;

import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;
import org.apache.flink.util.OutputTag;

/**
 * The speed layer's allowed lateness: drops the fresh events whose tumbling window had closed for good
 * when they arrived, and flattens the rest into one row per event, timestamped with its event time.
 *
 * <p>Input: {@link KeyedDedupEpochOperator#GOLD_EVENTS} rows (the fresh events of a part,
 * column-wise). An event with time {@code t} belongs to the window {@code [floor(t / W) * W,
 * floor(t / W) * W + W)} ({@code W = windowMillis}, aligned to the epoch like Flink's tumbling
 * windows); it is <em>beyond the allowed lateness</em> when {@code window_end + allowedLatenessMillis
 * <= arrival watermark}, the watermark of its own Kafka partition at its arrival, as the {@link
 * EventTimeGate} recorded it. That watermark depends only on the partition's records before it, so
 * the decision is the same in every run and after every restore, however subtasks interleave. Such
 * events are counted ({@code lakestream.gold_events_beyond_lateness}) and left to the batch layer:
 * they are in bronze and in the late table already. The others ({@code lakestream.gold_events})
 * come out as {@link #eventType()} rows, whose record timestamp is the event time: the rowtime of
 * the gold SQL.
 *
 * <p>A new lineage (DESIGN.md section 9: every {@code --bounded} run, a settled or {@code --fresh}
 * start) begins with empty SQL state, while the gold table holds the previous lineage's rows, which
 * counted events this one never sees. Recomputing such a window from this lineage's events alone
 * would replace a complete row with a partial one, so the windows that start at or before {@code
 * lineageStartMillis} (the newest event time the previous lineage recorded, over all partitions; no
 * cut for a first run) are left to the batch layer too ({@code lakestream.gold_events_before_lineage}).
 * The cut is kept in union operator state: a restore keeps its lineage's cut whatever it is given.
 *
 * <p>Watermarks pass through unchanged.
 */
public class GoldLatenessGate extends AbstractStreamOperator<Row> implements OneInputStreamOperator<Row, Row> {

    private static final long serialVersionUID = 1L;

    /** Positions in an {@link #eventType()} row. */
    public static final int EVENT_TIME = 0;
    public static final int KIND = 1;
    public static final int AMOUNT = 2;
    public static final int ORDER_ID = 3;
    public static final int USER_ID = 4;

    /**
     * A side output that never carries a record: its stream has this operator's watermarks only, for
     * {@link GoldUpsertEpochOperator} (the gold SQL's mini-batch replaces them on the main path).
     */
    public static final OutputTag<Row> WATERMARKS = new OutputTag<>("lakestream-gold-watermarks", eventType());

    /** {@code lineageStartMillis} of a lineage without a predecessor: no window is cut. */
    public static final long NO_CUT = Long.MIN_VALUE;

    private final long windowMillis;
    private final long allowedLatenessMillis;
    private final long lineageStartMillis;

    private transient ListState<Long> cutState;
    private transient long cut;
    private transient Counter kept;
    private transient Counter beyond;
    private transient Counter beforeLineage;

    public GoldLatenessGate(long windowMillis, long allowedLatenessMillis) {
        this(windowMillis, allowedLatenessMillis, NO_CUT);
    }

    /**
     * @param lineageStartMillis the newest event time of the lineage this one continues ({@link
     *     #NO_CUT} for none): windows starting at or before it are not recomputed
     */
    public GoldLatenessGate(long windowMillis, long allowedLatenessMillis, long lineageStartMillis) {
        if (windowMillis < 1) {
            throw new IllegalArgumentException("gold.window must be at least 1 ms, got " + windowMillis + " ms");
        }
        if (allowedLatenessMillis < 0) {
            throw new IllegalArgumentException(
                    "gold.allowed_lateness must not be negative, got " + allowedLatenessMillis + " ms");
        }
        this.windowMillis = windowMillis;
        this.allowedLatenessMillis = allowedLatenessMillis;
        this.lineageStartMillis = lineageStartMillis;
    }

    @Override
    public void initializeState(StateInitializationContext context) throws Exception {
        super.initializeState(context);
        cutState =
                context.getOperatorStateStore()
                        .getUnionListState(
                                new ListStateDescriptor<>("lakestream-gold-lineage-start", Long.class));
        cut = lineageStartMillis;
        if (context.isRestored()) {
            boolean any = false;
            long restored = NO_CUT;
            for (Long value : cutState.get()) {
                restored = any ? Math.max(restored, value) : value;
                any = true;
            }
            if (any) {
                cut = restored;
            }
        }
        cutState.update(java.util.List.of(cut));
    }

    /** The cut in force (for tests). */
    long cut() {
        return cut;
    }

    /**
     * One event: epoch-ms event time, gold kind, amount in yuan with scale 2 (null: none), order id,
     * user id. The amount is made here from the fen without arithmetic ({@code BigDecimal.valueOf(fen,
     * 2)}), so the Table API takes it as {@code DECIMAL(18, 2)} without a cast or a division per event.
     */
    public static RowTypeInfo eventType() {
        return new RowTypeInfo(
                new TypeInformation<?>[] {Types.LONG, Types.BYTE, Types.BIG_DEC, Types.STRING, Types.STRING},
                new String[] {"event_time_ms", "kind", "amount", "order_id", "user_id"});
    }

    /** End of the window of an event at {@code eventTime} (epoch ms). */
    public static long windowEnd(long eventTime, long windowMillis) {
        return Math.floorDiv(eventTime, windowMillis) * windowMillis + windowMillis;
    }

    /** Whether an event at {@code eventTime} that arrived at {@code arrivalWatermark} is dropped. */
    public static boolean beyondLateness(
            long eventTime, long arrivalWatermark, long windowMillis, long allowedLatenessMillis) {
        if (arrivalWatermark == EventTimeGate.NO_WATERMARK) {
            return false;
        }
        long end = windowEnd(eventTime, windowMillis);
        // Saturating: a window at the end of time never closes.
        long closesAt = end > Long.MAX_VALUE - allowedLatenessMillis ? Long.MAX_VALUE : end + allowedLatenessMillis;
        return closesAt <= arrivalWatermark;
    }

    @Override
    public void open() throws Exception {
        super.open();
        MetricGroup group = getMetricGroup().addGroup("lakestream");
        kept = group.counter("gold_events");
        beyond = group.counter("gold_events_beyond_lateness");
        beforeLineage = group.counter("gold_events_before_lineage");
    }

    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        Row in = element.getValue();
        long[] times = (long[]) in.getField(KeyedDedupEpochOperator.GOLD_EVENT_TIMES);
        byte[] kinds = (byte[]) in.getField(KeyedDedupEpochOperator.GOLD_EVENT_KINDS);
        long[] amounts = (long[]) in.getField(KeyedDedupEpochOperator.GOLD_EVENT_AMOUNTS);
        String[] orders = (String[]) in.getField(KeyedDedupEpochOperator.GOLD_EVENT_ORDER_IDS);
        String[] users = (String[]) in.getField(KeyedDedupEpochOperator.GOLD_EVENT_USER_IDS);
        long[] arrival = (long[]) in.getField(KeyedDedupEpochOperator.GOLD_EVENT_ARRIVAL_WATERMARKS);
        int dropped = 0;
        int cutOff = 0;
        for (int k = 0; k < times.length; k++) {
            long t = times[k];
            if (beyondLateness(t, arrival[k], windowMillis, allowedLatenessMillis)) {
                dropped++;
                continue;
            }
            if (cut != NO_CUT && windowEnd(t, windowMillis) - windowMillis <= cut) {
                cutOff++;
                continue;
            }
            BigDecimal amount =
                    amounts[k] == EventTimeGate.NO_AMOUNT ? null : BigDecimal.valueOf(amounts[k], 2);
            output.collect(new StreamRecord<>(Row.of(t, kinds[k], amount, orders[k], users[k]), t));
        }
        kept.inc(times.length - dropped - cutOff);
        beyond.inc(dropped);
        beforeLineage.inc(cutOff);
    }

    Counter beforeLineageCounter() {
        return beforeLineage;
    }

    Counter keptCounter() {
        return kept;
    }

    Counter beyondCounter() {
        return beyond;
    }
}
