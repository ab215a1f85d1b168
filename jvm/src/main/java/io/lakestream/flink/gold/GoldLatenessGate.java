package io.lakestream.flink.gold;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;
import org.apache.flink.util.OutputTag;

import io.lakestream.flink.epoch.FlushBeforeBarrierOperator;
import io.lakestream.flink.ingest.EventTimeGate;
import io.lakestream.flink.ingest.KeyedDedupEpochOperator;

/**
 * The speed layer's allowed lateness and pre-aggregation: drops the fresh events whose tumbling window
 * had closed for good when they arrived, and adds the rest into one partial aggregate per window
 * ({@link #PARTIAL_TYPE}), emitted before every checkpoint barrier and at the end of input.
 *
 * <p>Why: lateness is judged by each event's arrival watermark of its own Kafka partition, as {@link
 * EventTimeGate} recorded it, so the decision is the same in every run and after every restore; the
 * dropped events are left to the batch layer. The aggregate downstream gets a partial per window,
 * gate subtask and flush, not a row per event. Watermarks pass through, also to {@link #WATERMARKS}.
 */
public class GoldLatenessGate extends FlushBeforeBarrierOperator<Row>
        implements OneInputStreamOperator<Row, Row> {

    private static final long serialVersionUID = 1L;

    /** Positions in a {@link #PARTIAL_TYPE} row. */
    public static final int WINDOW_START = 0;
    public static final int VALUES = 1;
    public static final int SETS = 2;

    /**
     * A window's partial aggregate: its start (epoch ms), per metric a count or a sum in fen (unused
     * for distinct counts), per distinct count ({@link GoldMetrics#slot}) the values seen.
     */
    public static final RowTypeInfo PARTIAL_TYPE =
            new RowTypeInfo(
                    new TypeInformation<?>[] {
                        Types.LONG,
                        PrimitiveArrayTypeInfo.LONG_PRIMITIVE_ARRAY_TYPE_INFO,
                        Types.OBJECT_ARRAY(Types.OBJECT_ARRAY(Types.STRING))
                    },
                    new String[] {"window_start", "values", "sets"});

    /**
     * A side output that never carries a record: its stream has this operator's watermarks only, for
     * {@link GoldUpsertEpochOperator}, which stamps rows with them.
     */
    public static final OutputTag<Row> WATERMARKS = new OutputTag<>("lakestream-gold-watermarks", PARTIAL_TYPE);

    /** Default of {@code maxBuffered}: events added before the partials are flushed regardless. */
    public static final int DEFAULT_MAX_BUFFERED = 200_000;

    /** {@code lineageStartMillis} of a lineage without a predecessor: no window is cut. */
    public static final long NO_CUT = Long.MIN_VALUE;

    private final long windowMillis;
    private final long allowedLatenessMillis;
    private final long lineageStartMillis;
    private final GoldMetrics metrics;
    private final int maxBuffered;

    private transient Map<Long, Partial> partials;
    private transient int buffered;
    private transient ListState<Long> cutState;
    private transient long cut;
    private transient Counter kept;
    private transient Counter beyond;
    private transient Counter beforeLineage;

    /**
     * A new lineage (DESIGN.md section 9: every {@code --bounded} run, a settled or {@code --fresh}
     * start) begins with an empty gold aggregate while the gold table holds the previous lineage's
     * rows, which counted events this one never sees; recomputing such a window would replace a
     * complete row with a partial one. So windows starting at or before {@code lineageStartMillis} are
     * left to the batch layer ({@code lakestream.gold_events_before_lineage}). The cut is kept in union
     * operator state: a restore keeps its lineage's cut whatever it is given.
     *
     * @param lineageStartMillis the newest event time the previous lineage recorded, over all
     *     partitions ({@link #NO_CUT} for a first run): windows starting at or before it are not
     *     recomputed
     * @param metrics what an event adds to its window's partial
     * @param maxBuffered events added before the partials are flushed between barriers
     */
    public GoldLatenessGate(
            long windowMillis, long allowedLatenessMillis, long lineageStartMillis, GoldMetrics metrics,
            int maxBuffered) {
        if (windowMillis < 1) {
            throw new IllegalArgumentException("gold.window must be at least 1 ms, got " + windowMillis + " ms");
        }
        if (allowedLatenessMillis < 0) {
            throw new IllegalArgumentException(
                    "gold.allowed_lateness must not be negative, got " + allowedLatenessMillis + " ms");
        }
        this.windowMillis = windowMillis;
        this.allowedLatenessMillis = allowedLatenessMillis;
        if (maxBuffered < 1) {
            throw new IllegalArgumentException("maxBuffered must be at least 1 event, got " + maxBuffered);
        }
        this.lineageStartMillis = lineageStartMillis;
        this.metrics = metrics;
        this.maxBuffered = maxBuffered;
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

    /** End of the window of an event at {@code eventTime} (epoch ms). */
    public static long windowEnd(long eventTime, long windowMillis) {
        return Math.floorDiv(eventTime, windowMillis) * windowMillis + windowMillis;
    }

    /**
     * Whether an event at {@code eventTime} that arrived at {@code arrivalWatermark} is dropped: its
     * {@code window_end + allowedLatenessMillis <= arrivalWatermark}. Such events are already in bronze
     * and in the late table.
     */
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
        partials = new HashMap<>();
    }

    /**
     * Takes one {@link KeyedDedupEpochOperator#GOLD_EVENTS} row (a part's fresh events, column-wise).
     * An event at {@code t} belongs to the window {@code [floor(t / W) * W, floor(t / W) * W + W)}
     * ({@code W = windowMillis}); events {@link #beyondLateness} are counted ({@code
     * lakestream.gold_events_beyond_lateness}), those before the lineage cut too, and the others
     * ({@code lakestream.gold_events}) are added to their window's partial ({@link GoldMetrics#add}).
     */
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
        long start = Long.MIN_VALUE;
        Partial partial = null;
        for (int k = 0; k < times.length; k++) {
            long t = times[k];
            if (beyondLateness(t, arrival[k], windowMillis, allowedLatenessMillis)) {
                dropped++;
                continue;
            }
            long windowStart = windowEnd(t, windowMillis) - windowMillis;
            if (cut != NO_CUT && windowStart <= cut) {
                cutOff++;
                continue;
            }
            if (partial == null || windowStart != start) {
                start = windowStart;
                partial = partials.get(windowStart);
                if (partial == null) {
                    partial = new Partial(metrics);
                    partials.put(windowStart, partial);
                }
            }
            metrics.add(partial.values, partial.sets, kinds[k], amounts[k], orders[k], users[k]);
        }
        int added = times.length - dropped - cutOff;
        kept.inc(added);
        beyond.inc(dropped);
        beforeLineage.inc(cutOff);
        buffered += added;
        if (buffered >= maxBuffered) {
            flush();
        }
    }

    /**
     * Emits every window's partial (for {@link GoldWindowAggregate}, keyed by window start, timestamped
     * with it) and starts afresh: before a barrier, at the end of input, and when {@code maxBuffered}
     * events were added since the last flush.
     */
    @Override
    protected void flush() {
        for (Map.Entry<Long, Partial> entry : partials.entrySet()) {
            Partial partial = entry.getValue();
            String[][] sets = new String[partial.sets.length][];
            for (int d = 0; d < sets.length; d++) {
                sets[d] = partial.sets[d].toArray(new String[0]);
            }
            long windowStart = entry.getKey();
            output.collect(new StreamRecord<>(Row.of(windowStart, partial.values, sets), windowStart));
        }
        partials.clear();
        buffered = 0;
    }

    /** The partials not yet flushed (for tests). */
    int bufferedWindows() {
        return partials.size();
    }

    /** One window's partial aggregate since the last flush. */
    private static final class Partial {
        final long[] values;
        final Set<String>[] sets;

        Partial(GoldMetrics metrics) {
            values = new long[metrics.size()];
            sets = metrics.newSets();
        }
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
