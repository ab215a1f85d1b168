package io.lakestream.flink;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.api.common.state.KeyedStateStore;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;
import org.apache.flink.util.OutputTag;

/**
 * De-duplicates events by the hash of their event id in checkpointed keyed state, batches the gated
 * part rows for the Python resolve operator, and emits the checkpoint markers of
 * {@link CheckpointEpochOperator} in order with the batches.
 *
 * <p>Why in Java and keyed: de-dup in the Python worker's memory started empty after every restore
 * and tied resolve to one subtask; Python keyed state costs a JVM round trip per access. Here each
 * event id ({@code id_hi}, {@code id_lo}) is looked up in a {@link MapState} with Flink state TTL
 * (processing time, {@code ttlMillis} from its first sighting: {@code OnCreateAndWrite},
 * {@code NeverReturnExpired}), kept under a key of its bucket's key group, so it is checkpointed with
 * the source offsets and moves with its key group on a rescale. An id is fresh when absent or expired
 * (then written: the first write starts its clock, a hit does not refresh it), else a duplicate:
 * the answers of {@code lakestream.dedup.DedupCache.first_seen}. Expired ids are dropped by the
 * RocksDB compaction filter or, on the heap backend, incrementally on access.
 *
 * <p>Input: the gate's part rows ({@link EventTimeGate} layout), keyed by {@link BucketKeySelector};
 * every bucket of a part must belong to this subtask. Within a key group, ids are spread over
 * {@link KeyGroupKeys#keysPerKeyGroup()} keys, so no single map grows with the whole state (the heap
 * backend's incremental TTL cleanup copies one key's whole map per state access).
 *
 * <p>Output: DATA payloads of {@link #resolveBatchType()}, several parts per row: flushed at
 * {@code maxEvents} events, {@code maxDelayMillis} after the first buffered part, and always before
 * PRECOMMIT and END_OF_INPUT, so nothing buffered is ever part of a checkpoint (the buffer is not
 * state). Counters {@code lakestream.events_unique} and {@code lakestream.events_duplicate}.
 *
 * <p>Side output {@link #GOLD_EVENTS} (the speed layer): for each part that carries the gold columns
 * ({@link EventTimeGate#GOLD_KINDS} not null), one row of {@link #goldEventsType()} with the part's
 * fresh events only (first sightings: re-deliveries never reach the gold metrics), their event
 * times, gold inputs and arrival watermarks, timestamped like the part. A part without fresh events
 * emits nothing there. The resolve output is the same with or without it.
 */
public class KeyedDedupEpochOperator extends CheckpointEpochOperator<Row>
        implements ProcessingTimeCallback {

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

    /** Side output of the fresh events' gold inputs, one row per part (see the class comment). */
    public static final OutputTag<Row> GOLD_EVENTS =
            new OutputTag<>("lakestream-gold-events", goldEventsType());

    /**
     * Where a {@link #lookupOrder} entry keeps the state key's rank over all key groups' keys
     * ({@link KeyGroupKeys#ofRank}): its top bits, enough for {@link KeyGroupKeys#TOTAL_KEYS} ranks.
     */
    private static final int RANK_SHIFT = 63 - Integer.numberOfTrailingZeros(KeyGroupKeys.TOTAL_KEYS);

    private final long ttlMillis;
    private final int maxEvents;
    private final long maxDelayMillis;
    private final int maxParallelism;

    private transient MapState<Tuple2<Long, Long>, Boolean> seen;
    private transient KeyGroupKeys keys;
    private transient KeyGroupRange keyGroups;
    private transient int subtask;
    private transient Counter unique;
    private transient Counter duplicate;

    private transient List<byte[]> bufferedEvents;
    private transient List<long[]> bufferedLate;
    private transient List<boolean[]> bufferedFresh;
    private transient int bufferedCount;
    private transient long bufferedSince;
    private transient boolean timerPending;

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

    /** The TTL of the de-dup state (also what the tests check the configuration against). */
    static StateTtlConfig ttlConfig(long ttlMillis) {
        return StateTtlConfig.newBuilder(Duration.ofMillis(ttlMillis))
                .setTtlTimeCharacteristic(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)
                .setUpdateType(StateTtlConfig.UpdateType.OnCreateAndWrite)
                .setStateVisibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
                .cleanupInRocksdbCompactFilter(1000)
                .cleanupIncrementally(1, false)
                .build();
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
        MapStateDescriptor<Tuple2<Long, Long>, Boolean> descriptor =
                new MapStateDescriptor<>(
                        "lakestream-dedup-ids", Types.TUPLE(Types.LONG, Types.LONG), Types.BOOLEAN);
        descriptor.enableTimeToLive(ttlConfig(ttlMillis));
        seen = store.getMapState(descriptor);
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
        keys = KeyGroupKeys.of(maxParallelism);
        subtask = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
        keyGroups =
                KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(
                        maxParallelism,
                        getRuntimeContext().getTaskInfo().getNumberOfParallelSubtasks(),
                        subtask);
        MetricGroup group = getMetricGroup().addGroup("lakestream");
        unique = group.counter("events_unique");
        duplicate = group.counter("events_duplicate");
        bufferedEvents = new ArrayList<>();
        bufferedLate = new ArrayList<>();
        bufferedFresh = new ArrayList<>();
    }

    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        emitOpen();
        Row part = element.getValue();
        String split = String.valueOf(part.getField(EventTimeGate.SPLIT));
        Object partIndex = part.getField(EventTimeGate.PART);
        if (!(partIndex instanceof Integer) || (Integer) partIndex != subtask) {
            throw new IllegalStateException(
                    where(split, partIndex) + "field 'part' (" + EventTimeGate.PART + ") must be this"
                            + " subtask's index " + subtask + " (header rows stop at the gate), got "
                            + partIndex);
        }
        int[] buckets = field(part, EventTimeGate.BUCKETS, "buckets", int[].class, split, partIndex);
        int n = buckets.length;
        if (n == 0) {
            throw new IllegalStateException(
                    where(split, partIndex) + "field 'buckets' (" + EventTimeGate.BUCKETS
                            + ") is empty: a part row has at least one event");
        }
        long[] idHi = field(part, EventTimeGate.ID_HI, "id_hi", long[].class, split, partIndex);
        long[] idLo = field(part, EventTimeGate.ID_LO, "id_lo", long[].class, split, partIndex);
        long[] late =
                field(part, EventTimeGate.LATE_WATERMARKS, "late_watermarks", long[].class, split, partIndex);
        byte[] events = field(part, EventTimeGate.EVENTS, "events", byte[].class, split, partIndex);
        checkLength(idHi.length, n, "id_hi", EventTimeGate.ID_HI, split, partIndex);
        checkLength(idLo.length, n, "id_lo", EventTimeGate.ID_LO, split, partIndex);
        checkLength(late.length, n, "late_watermarks", EventTimeGate.LATE_WATERMARKS, split, partIndex);

        for (int k = 0; k < n; k++) {
            if (!keyGroups.contains(buckets[k])) {
                throw new IllegalStateException(
                        where(split, partIndex) + "buckets[" + k + "] = " + buckets[k]
                                + " is not a key group of this subtask (" + keyGroups + " of "
                                + maxParallelism + "): all buckets of a part belong to its subtask");
            }
        }
        long[] order = lookupOrder(buckets, idHi, idLo, keys.keysPerKeyGroup());
        int positionMask = (1 << positionBits(n)) - 1;
        boolean[] fresh = new boolean[n];
        int freshCount = 0;
        for (long entry : order) {
            int k = (int) (entry & positionMask);
            setCurrentKey(keys.ofRank((int) (entry >>> RANK_SHIFT)));
            Tuple2<Long, Long> id = Tuple2.of(idHi[k], idLo[k]);
            if (!seen.contains(id)) {
                seen.put(id, Boolean.TRUE);
                fresh[k] = true;
                freshCount++;
            }
        }
        unique.inc(freshCount);
        duplicate.inc(n - freshCount);
        if (freshCount > 0 && part.getArity() >= EventTimeGate.GOLD_ARITY
                && part.getField(EventTimeGate.GOLD_KINDS) != null) {
            emitGold(element, part, fresh, freshCount, split, partIndex);
        }

        if (bufferedCount == 0) {
            bufferedSince = getProcessingTimeService().getCurrentProcessingTime();
        }
        bufferedEvents.add(events);
        bufferedLate.add(late);
        bufferedFresh.add(fresh);
        bufferedCount += n;
        if (bufferedCount >= maxEvents) {
            flush();
        } else if (!timerPending) {
            timerPending = true;
            getProcessingTimeService().registerTimer(bufferedSince + maxDelayMillis, this);
        }
    }

    /** The fresh events' gold inputs of one part, to {@link #GOLD_EVENTS}. */
    private void emitGold(
            StreamRecord<Row> element, Row part, boolean[] fresh, int freshCount, String split,
            Object partIndex) {
        int n = fresh.length;
        long[] times = field(part, EventTimeGate.EVENT_TIMES, "event_times", long[].class, split, partIndex);
        byte[] kinds = field(part, EventTimeGate.GOLD_KINDS, "gold_kinds", byte[].class, split, partIndex);
        long[] amounts =
                field(part, EventTimeGate.GOLD_AMOUNTS, "gold_amounts", long[].class, split, partIndex);
        String[] orders =
                field(part, EventTimeGate.GOLD_ORDER_IDS, "gold_order_ids", String[].class, split, partIndex);
        String[] users =
                field(part, EventTimeGate.GOLD_USER_IDS, "gold_user_ids", String[].class, split, partIndex);
        long[] arrival =
                field(part, EventTimeGate.ARRIVAL_WATERMARKS, "arrival_watermarks", long[].class, split,
                        partIndex);
        checkLength(times.length, n, "event_times", EventTimeGate.EVENT_TIMES, split, partIndex);
        checkLength(kinds.length, n, "gold_kinds", EventTimeGate.GOLD_KINDS, split, partIndex);
        checkLength(amounts.length, n, "gold_amounts", EventTimeGate.GOLD_AMOUNTS, split, partIndex);
        checkLength(orders.length, n, "gold_order_ids", EventTimeGate.GOLD_ORDER_IDS, split, partIndex);
        checkLength(users.length, n, "gold_user_ids", EventTimeGate.GOLD_USER_IDS, split, partIndex);
        checkLength(
                arrival.length, n, "arrival_watermarks", EventTimeGate.ARRIVAL_WATERMARKS, split,
                partIndex);
        long[] outTimes = new long[freshCount];
        byte[] outKinds = new byte[freshCount];
        long[] outAmounts = new long[freshCount];
        String[] outOrders = new String[freshCount];
        String[] outUsers = new String[freshCount];
        long[] outArrival = new long[freshCount];
        int at = 0;
        for (int k = 0; k < n; k++) {
            if (fresh[k]) {
                outTimes[at] = times[k];
                outKinds[at] = kinds[k];
                outAmounts[at] = amounts[k];
                outOrders[at] = orders[k];
                outUsers[at] = users[k];
                outArrival[at] = arrival[k];
                at++;
            }
        }
        Row row = Row.of(outTimes, outKinds, outAmounts, outOrders, outUsers, outArrival);
        if (element.hasTimestamp()) {
            output.collect(GOLD_EVENTS, new StreamRecord<>(row, element.getTimestamp()));
        } else {
            output.collect(GOLD_EVENTS, new StreamRecord<>(row));
        }
    }

    /**
     * The order a part's ids are looked up in: ascending by where RocksDB keeps them (key group, key
     * within it, then the id's high half as unsigned), each entry a sort key with the state key's rank
     * in its top bits ({@link #RANK_SHIFT}) and the event's position in its low {@link #positionBits}
     * bits. Lookups that walk the memtable's skip list in key order
     * find most of their path in the CPU caches, and the write after a miss starts from the previous
     * one (RocksDB's sequential-insert splice); in arrival order every lookup misses the caches from
     * the top of the list down. Copies of one id sort by position, so the earliest stays the fresh one:
     * the answers are those of arrival order.
     */
    static long[] lookupOrder(int[] buckets, long[] idHi, long[] idLo, int keysPerKeyGroup) {
        int n = buckets.length;
        int positionBits = positionBits(n);
        int hiBits = RANK_SHIFT - positionBits;
        long[] order = new long[n];
        for (int k = 0; k < n; k++) {
            long rank = (long) buckets[k] * keysPerKeyGroup + spread(idHi[k], idLo[k], keysPerKeyGroup);
            order[k] = rank << RANK_SHIFT | (idHi[k] >>> (64 - hiBits)) << positionBits | k;
        }
        Arrays.sort(order);
        return order;
    }

    /** Bits that hold a position in a part of {@code n} events (at least 1, at most 31). */
    static int positionBits(int n) {
        return Math.max(1, 32 - Integer.numberOfLeadingZeros(Math.max(1, n - 1)));
    }

    /** Which of a key group's keys holds an id: a mix of all its bits, the same in every run. */
    static int spread(long idHi, long idLo, int keysPerKeyGroup) {
        long h = (idHi ^ Long.rotateLeft(idLo, 29)) * 0x9E3779B97F4A7C15L;
        return (int) (((h >>> 32) * keysPerKeyGroup) >>> 32);
    }

    private void flush() {
        if (bufferedCount == 0) {
            return;
        }
        byte[][] events = bufferedEvents.toArray(new byte[0][]);
        long[] late = new long[bufferedCount];
        boolean[] fresh = new boolean[bufferedCount];
        int at = 0;
        for (int i = 0; i < bufferedLate.size(); i++) {
            long[] partLate = bufferedLate.get(i);
            System.arraycopy(partLate, 0, late, at, partLate.length);
            System.arraycopy(bufferedFresh.get(i), 0, fresh, at, partLate.length);
            at += partLate.length;
        }
        int count = bufferedCount;
        bufferedEvents.clear();
        bufferedLate.clear();
        bufferedFresh.clear();
        bufferedCount = 0;
        emit(DATA, -1L, Row.of(events, late, fresh, count));
    }

    @Override
    public void onProcessingTime(long time) throws Exception {
        timerPending = false;
        if (bufferedCount == 0) {
            return;
        }
        long due = bufferedSince + maxDelayMillis;
        if (getProcessingTimeService().getCurrentProcessingTime() >= due) {
            flush();
        } else {
            // The buffer that set this timer was flushed; a later one started since.
            timerPending = true;
            getProcessingTimeService().registerTimer(due, this);
        }
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        flush();
        super.prepareSnapshotPreBarrier(checkpointId);
    }

    @Override
    public void endInput() throws Exception {
        flush();
        super.endInput();
    }

    Counter uniqueCounter() {
        return unique;
    }

    Counter duplicateCounter() {
        return duplicate;
    }

    private static String where(String split, Object part) {
        return "KeyedDedupEpochOperator: split " + split + ", part " + part + ": ";
    }

    private static <T> T field(
            Row row, int position, String name, Class<T> type, String split, Object part) {
        Object value = row.getField(position);
        if (!type.isInstance(value)) {
            throw new IllegalStateException(
                    where(split, part) + "field '" + name + "' (" + position + ") must be "
                            + type.getSimpleName() + ", got " + EventTimeGate.describe(value));
        }
        return type.cast(value);
    }

    private static void checkLength(
            int length, int expected, String name, int position, String split, Object part) {
        if (length != expected) {
            throw new IllegalStateException(
                    where(split, part) + "field '" + name + "' (" + position + ") has " + length
                            + " entries, 'buckets' has " + expected + ": one per event");
        }
    }
}
