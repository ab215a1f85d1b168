package io.lakestream.flink.ingest;

import org.apache.flink.api.common.state.KeyedStateStore;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;
import org.apache.flink.util.OutputTag;

import io.lakestream.flink.epoch.CheckpointEpochOperator;

/**
 * De-duplicates the gate's part rows by event id in checkpointed keyed state ({@link SeenIds}),
 * batches them for the Python resolve operator ({@link ResolveBatches}) with the checkpoint markers of
 * {@link CheckpointEpochOperator}, and sends the fresh events' gold inputs to {@link #GOLD_EVENTS}.
 *
 * <p>Why in Java and keyed: de-dup in the Python worker's memory started empty after every restore
 * and tied resolve to one subtask, and Python keyed state costs a JVM round trip per access. Input is
 * keyed by {@link BucketKeySelector}; every bucket of a part must belong to this subtask.
 */
public class KeyedDedupEpochOperator extends CheckpointEpochOperator<Row> {

    private static final long serialVersionUID = 1L;

    /** Positions in a {@link #resolveBatchType()} row. */
    public static final int RESOLVE_EVENTS = 0;
    public static final int RESOLVE_LATE_WATERMARKS = 1;
    public static final int RESOLVE_FRESH = 2;
    public static final int RESOLVE_EVENT_COUNT = 3;

    /** Positions in a {@link #goldEventsType()} row. */
    public static final int GOLD_EVENT_TIMES = 0;
    public static final int GOLD_EVENT_KINDS = 1;
    public static final int GOLD_EVENT_AMOUNTS = 2;
    public static final int GOLD_EVENT_ORDER_IDS = 3;
    public static final int GOLD_EVENT_USER_IDS = 4;
    public static final int GOLD_EVENT_ARRIVAL_WATERMARKS = 5;

    /**
     * Side output of the speed layer: per part with the gold columns ({@link EventTimeGate#GOLD_KINDS}
     * not null) and fresh events, one {@link #goldEventsType()} row ({@link FreshGoldEvents}),
     * timestamped like the part. The resolve output is the same with or without it.
     */
    public static final OutputTag<Row> GOLD_EVENTS =
            new OutputTag<>("lakestream-gold-events", goldEventsType());

    private final long ttlMillis;
    private final int maxEvents;
    private final long maxDelayMillis;
    private final int maxParallelism;

    private transient SeenIds seen;
    private transient KeyGroupRange keyGroups;
    private transient int subtask;
    private transient Counter unique;
    private transient Counter duplicate;
    private transient ResolveBatches batches;

    /**
     * @param ttlMillis how long an id counts as seen after its first sighting
     * @param maxEvents events that fill a resolve batch
     * @param maxDelayMillis processing time a batch waits at most after its first part
     * @param maxParallelism the job's max parallelism: the buckets are its key groups
     */
    public KeyedDedupEpochOperator(
            long ttlMillis, int maxEvents, long maxDelayMillis, int maxParallelism) {
        if (ttlMillis < 1) {
            throw new IllegalArgumentException(
                    "event_time.dedup_ttl must be at least 1 ms, got " + ttlMillis + " ms");
        }
        if (maxEvents < 1) {
            throw new IllegalArgumentException(
                    "resolve batch size must be at least 1 event, got " + maxEvents);
        }
        if (maxDelayMillis < 1) {
            throw new IllegalArgumentException(
                    "resolve batch delay must be at least 1 ms, got " + maxDelayMillis + " ms");
        }
        KeyGroupKeys.checkMaxParallelism(maxParallelism);
        this.ttlMillis = ttlMillis;
        this.maxEvents = maxEvents;
        this.maxDelayMillis = maxDelayMillis;
        this.maxParallelism = maxParallelism;
    }

    /** The DATA payload type: the buffered parts of one flush. */
    public static RowTypeInfo resolveBatchType() {
        return new RowTypeInfo(
                new TypeInformation<?>[] {
                    Types.OBJECT_ARRAY(Types.PRIMITIVE_ARRAY(Types.BYTE)),
                    Types.PRIMITIVE_ARRAY(Types.LONG),
                    Types.PRIMITIVE_ARRAY(Types.BOOLEAN),
                    Types.INT
                },
                new String[] {"events", "late_watermarks", "fresh", "event_count"});
    }

    /** The {@link #GOLD_EVENTS} row type: per fresh event of a part, column-wise. */
    public static RowTypeInfo goldEventsType() {
        return new RowTypeInfo(
                new TypeInformation<?>[] {
                    Types.PRIMITIVE_ARRAY(Types.LONG),
                    Types.PRIMITIVE_ARRAY(Types.BYTE),
                    Types.PRIMITIVE_ARRAY(Types.LONG),
                    Types.OBJECT_ARRAY(Types.STRING),
                    Types.OBJECT_ARRAY(Types.STRING),
                    Types.PRIMITIVE_ARRAY(Types.LONG)
                },
                new String[] {
                    "event_times", "kinds", "amounts", "order_ids", "user_ids", "arrival_watermarks"
                });
    }

    /** The operator's output type: markers carrying {@link #resolveBatchType()} payloads. */
    public static RowTypeInfo markedResolveBatchType() {
        return outputType(resolveBatchType());
    }

    @Override
    public void initializeState(StateInitializationContext context) throws Exception {
        super.initializeState(context);
        KeyedStateStore store = context.getKeyedStateStore();
        if (store == null) {
            throw new IllegalStateException(
                    "KeyedDedupEpochOperator must run on a keyed stream: keyBy(new BucketKeySelector("
                            + maxParallelism + "), Types.INT)");
        }
        seen = new SeenIds(
                store.getMapState(SeenIds.descriptor(ttlMillis)), KeyGroupKeys.of(maxParallelism), this);
    }

    @Override
    public void open() throws Exception {
        int jobMaxParallelism = getRuntimeContext().getTaskInfo().getMaxNumberOfParallelSubtasks();
        if (jobMaxParallelism != maxParallelism) {
            throw new IllegalStateException(
                    "KeyedDedupEpochOperator was built for max parallelism " + maxParallelism
                            + " (the buckets' key groups) but runs at max parallelism " + jobMaxParallelism
                            + ": set the job's max parallelism to " + maxParallelism);
        }
        super.open();
        subtask = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
        keyGroups =
                KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(
                        maxParallelism,
                        getRuntimeContext().getTaskInfo().getNumberOfParallelSubtasks(),
                        subtask);
        MetricGroup group = getMetricGroup().addGroup("lakestream");
        unique = group.counter("events_unique");
        duplicate = group.counter("events_duplicate");
        batches = new ResolveBatches(
                maxEvents, maxDelayMillis, getProcessingTimeService(), batch -> emit(DATA, -1L, batch));
    }

    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        emitOpen();
        PartRow part = new PartRow(element.getValue(), subtask, keyGroups, maxParallelism);
        int n = part.size();
        boolean[] fresh = new boolean[n];
        int freshCount = seen.markFirstSightings(part.buckets, part.idHi, part.idLo, fresh);
        unique.inc(freshCount);
        duplicate.inc(n - freshCount);
        if (freshCount > 0 && part.hasGoldColumns()) {
            Row gold = FreshGoldEvents.of(part, fresh, freshCount);
            if (element.hasTimestamp()) {
                output.collect(GOLD_EVENTS, new StreamRecord<>(gold, element.getTimestamp()));
            } else {
                output.collect(GOLD_EVENTS, new StreamRecord<>(gold));
            }
        }
        batches.add(part.events, part.lateWatermarks, fresh);
    }

    /** Emits the buffered parts before PRECOMMIT and END_OF_INPUT (size and delay flush in between). */
    @Override
    protected void flush() {
        if (batches != null) {
            batches.flush();
        }
    }

    Counter uniqueCounter() {
        return unique;
    }

    Counter duplicateCounter() {
        return duplicate;
    }
}
