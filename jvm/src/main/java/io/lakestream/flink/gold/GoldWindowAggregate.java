package io.lakestream.flink.gold;

import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

import org.apache.flink.api.common.state.KeyedStateStore;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;
import org.apache.flink.types.RowKind;

import io.lakestream.flink.ingest.SeenIds;

/**
 * The speed layer's gold metrics per window, in checkpointed keyed state: merges the partials of
 * {@link GoldLatenessGate} (keyed by {@link #BY_WINDOW_START}) and emits the window's whole current
 * row after each, {@code +I} first and {@code +U} after, for {@link GoldUpsertEpochOperator}.
 *
 * <p>Why this layout: a distinct count keeps the ids it counted as 128-bit hashes ({@link IdHash128})
 * in a heap set per open window, and appends the new ones to the window's list state once per
 * checkpoint, so RocksDB sees one write per window and checkpoint, not a lookup and a write per id.
 * State TTL in processing time ends a window once it can take no more events (DESIGN.md section 11.6).
 */
public class GoldWindowAggregate extends AbstractStreamOperator<Row> implements OneInputStreamOperator<Row, Row> {

    private static final long serialVersionUID = 1L;

    public static final KeySelector<Row, Long> BY_WINDOW_START = new WindowStart();

    private final long windowMillis;
    private final long allowedLatenessMillis;
    private final long ttlMillis;
    private final GoldMetrics metrics;
    private transient long watermark;

    private transient ValueState<long[]> values;
    private transient ListState<long[]>[] chunks;
    private transient Map<Long, Open> open;

    /** A window's heap part: its sets, and the hashes first seen since the last checkpoint. */
    private static final class Open {
        final LongPairSet[] sets;
        final long[][] pending;
        final int[] pendingSize;
        long lastWrite;

        Open(int slots) {
            sets = new LongPairSet[slots];
            pending = new long[slots][];
            pendingSize = new int[slots];
            for (int i = 0; i < slots; i++) {
                sets[i] = new LongPairSet();
                pending[i] = new long[64];
            }
        }

        void note(int slot, long hi, long lo) {
            long[] p = pending[slot];
            int n = pendingSize[slot];
            if (n + 2 > p.length) {
                p = java.util.Arrays.copyOf(p, p.length * 2);
                pending[slot] = p;
            }
            p[n] = hi;
            p[n + 1] = lo;
            pendingSize[slot] = n + 2;
        }
    }

    public GoldWindowAggregate(long windowMillis, long allowedLatenessMillis, long ttlMillis, GoldMetrics metrics) {
        if (windowMillis < 1) {
            throw new IllegalArgumentException("gold.window must be at least 1 ms, got " + windowMillis + " ms");
        }
        if (allowedLatenessMillis < 0) {
            throw new IllegalArgumentException(
                    "gold.allowed_lateness must not be negative, got " + allowedLatenessMillis + " ms");
        }
        if (ttlMillis < 1) {
            throw new IllegalArgumentException("gold state TTL must be at least 1 ms, got " + ttlMillis + " ms");
        }
        this.windowMillis = windowMillis;
        this.allowedLatenessMillis = allowedLatenessMillis;
        this.ttlMillis = ttlMillis;
        this.metrics = metrics;
    }

    /**
     * The output rows: {@code window_start}, {@code window_end} (epoch ms) and the metric names (longs;
     * sums in fen). The partials of checkpoint n arrive before barrier n, so its rows leave before it too.
     */
    public static RowTypeInfo outputType(GoldMetrics metrics) {
        int n = metrics.size() + 2;
        TypeInformation<?>[] types = new TypeInformation<?>[n];
        String[] names = new String[n];
        names[0] = "window_start";
        names[1] = "window_end";
        for (int i = 0; i < metrics.size(); i++) {
            names[i + 2] = metrics.name(i);
        }
        for (int i = 0; i < n; i++) {
            types[i] = Types.LONG;
        }
        return new RowTypeInfo(types, names);
    }

    /**
     * State per window: its values ({@code long} per metric: counts, sums in fen, the distinct counts'
     * sizes) and, per distinct count, the hashes counted so far, all with TTL {@code ttlMillis} since
     * the last write. A window whose values expired starts again from nothing.
     */
    @Override
    @SuppressWarnings("unchecked")
    public void initializeState(StateInitializationContext context) throws Exception {
        super.initializeState(context);
        KeyedStateStore store = context.getKeyedStateStore();
        if (store == null) {
            throw new IllegalStateException(
                    "GoldWindowAggregate must run on a keyed stream: keyBy(GoldWindowAggregate.BY_WINDOW_START)");
        }
        ValueStateDescriptor<long[]> valuesDescriptor =
                new ValueStateDescriptor<>(
                        "lakestream-gold-values", PrimitiveArrayTypeInfo.LONG_PRIMITIVE_ARRAY_TYPE_INFO);
        valuesDescriptor.enableTimeToLive(SeenIds.ttlConfig(ttlMillis));
        values = store.getState(valuesDescriptor);
        chunks = new ListState[metrics.distinctCount()];
        for (int i = 0; i < metrics.size(); i++) {
            int slot = metrics.slot(i);
            if (slot >= 0) {
                ListStateDescriptor<long[]> descriptor =
                        new ListStateDescriptor<>(
                                "lakestream-gold-distinct-" + metrics.name(i),
                                PrimitiveArrayTypeInfo.LONG_PRIMITIVE_ARRAY_TYPE_INFO);
                descriptor.enableTimeToLive(SeenIds.ttlConfig(ttlMillis));
                chunks[slot] = store.getListState(descriptor);
            }
        }
        open = new HashMap<>();
        watermark = Long.MIN_VALUE;
    }

    @Override
    public void processWatermark(Watermark mark) throws Exception {
        watermark = Math.max(watermark, mark.getTimestamp());
        super.processWatermark(mark);
    }

    /**
     * Adds one partial to its window. A window without a heap set (after a restore, or once dropped)
     * reads it back from its list state the first time it is touched.
     */
    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        Row partial = element.getValue();
        long windowStart = (Long) partial.getField(GoldLatenessGate.WINDOW_START);
        long[] added = (long[]) partial.getField(GoldLatenessGate.VALUES);
        String[][] sets = (String[][]) partial.getField(GoldLatenessGate.SETS);
        long[] current = values.value();
        boolean first = current == null;
        Open w = open.get(windowStart);
        if (first) {
            current = new long[metrics.size()];
            for (ListState<long[]> c : chunks) {
                c.clear();
            }
            w = new Open(chunks.length);
            open.put(windowStart, w);
        } else if (w == null) {
            w = new Open(chunks.length);
            for (int slot = 0; slot < chunks.length; slot++) {
                Iterable<long[]> stored = chunks[slot].get();
                if (stored != null) {
                    for (long[] chunk : stored) {
                        for (int k = 0; k + 1 < chunk.length; k += 2) {
                            w.sets[slot].add(chunk[k], chunk[k + 1]);
                        }
                    }
                }
            }
            open.put(windowStart, w);
        }
        for (int i = 0; i < metrics.size(); i++) {
            switch (metrics.aggregate(i)) {
                case COUNT:
                    current[i] = Math.addExact(current[i], added[i]);
                    break;
                case SUM:
                    current[i] = metrics.checkedSum(i, windowStart, Math.addExact(current[i], added[i]));
                    break;
                default:
                    int slot = metrics.slot(i);
                    LongPairSet set = w.sets[slot];
                    for (String value : sets[slot]) {
                        long[] h = IdHash128.of(value);
                        if (set.add(h[0], h[1])) {
                            w.note(slot, h[0], h[1]);
                            current[i]++;
                        }
                    }
            }
        }
        values.update(current);
        w.lastWrite = getProcessingTimeService().getCurrentProcessingTime();
        Row out = Row.withNames(first ? RowKind.INSERT : RowKind.UPDATE_AFTER);
        out.setField("window_start", windowStart);
        out.setField("window_end", windowStart + windowMillis);
        for (int i = 0; i < metrics.size(); i++) {
            out.setField(metrics.name(i), current[i]);
        }
        output.collect(new StreamRecord<>(out));
    }

    /**
     * Appends each window's new hashes to its list state as one element, then drops the heap sets of
     * windows that are closed (the watermark passed their end plus {@code allowedLatenessMillis}) or
     * were not written for {@code ttlMillis}: memory follows the open windows, not the TTL, and a late
     * partial for a dropped window reads its set back, so dropping never affects correctness.
     */
    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        super.prepareSnapshotPreBarrier(checkpointId);
        long now = getProcessingTimeService().getCurrentProcessingTime();
        Iterator<Map.Entry<Long, Open>> it = open.entrySet().iterator();
        while (it.hasNext()) {
            Map.Entry<Long, Open> e = it.next();
            Open w = e.getValue();
            boolean any = false;
            for (int s = 0; s < chunks.length; s++) {
                any |= w.pendingSize[s] > 0;
            }
            if (any) {
                setCurrentKey(e.getKey());
                for (int s = 0; s < chunks.length; s++) {
                    if (w.pendingSize[s] > 0) {
                        chunks[s].add(java.util.Arrays.copyOf(w.pending[s], w.pendingSize[s]));
                        w.pendingSize[s] = 0;
                    }
                }
            }
            if (closed(e.getKey()) || w.lastWrite + ttlMillis < now) {
                it.remove();
            }
        }
    }

    /** Whether the window starting at {@code windowStart} can take no more events (its lateness is over). */
    private boolean closed(long windowStart) {
        long end = windowStart + windowMillis;
        return end <= Long.MAX_VALUE - allowedLatenessMillis && end + allowedLatenessMillis <= watermark;
    }

    /** The windows whose sets are in memory (for tests). */
    int openWindows() {
        return open.size();
    }

    /** An open-addressing set of 128-bit hashes as (hi, lo) pairs, at most half full. */
    static final class LongPairSet {
        private long[] keys = new long[2 * 16];
        private boolean[] used = new boolean[16];
        private int size;

        boolean add(long hi, long lo) {
            if ((size + 1) * 2 > used.length) {
                grow();
            }
            int mask = used.length - 1;
            int i = (int) (lo ^ (lo >>> 32) ^ hi) & mask;
            while (used[i]) {
                if (keys[2 * i] == hi && keys[2 * i + 1] == lo) {
                    return false;
                }
                i = (i + 1) & mask;
            }
            used[i] = true;
            keys[2 * i] = hi;
            keys[2 * i + 1] = lo;
            size++;
            return true;
        }

        private void grow() {
            long[] oldKeys = keys;
            boolean[] oldUsed = used;
            keys = new long[oldKeys.length * 2];
            used = new boolean[oldUsed.length * 2];
            size = 0;
            for (int i = 0; i < oldUsed.length; i++) {
                if (oldUsed[i]) {
                    add(oldKeys[2 * i], oldKeys[2 * i + 1]);
                }
            }
        }
    }

    private static final class WindowStart implements KeySelector<Row, Long> {
        private static final long serialVersionUID = 1L;

        @Override
        public Long getKey(Row partial) {
            return (Long) partial.getField(GoldLatenessGate.WINDOW_START);
        }
    }
}
