package io.lakestream.flink.ingest;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.api.common.operators.ProcessingTimeService;
import org.apache.flink.types.Row;

/**
 * Collects de-duplicated parts into rows of {@link KeyedDedupEpochOperator#resolveBatchType()} for the
 * Python resolve operator, flushed at {@code maxEvents} events or {@code maxDelayMillis} of processing
 * time after the first buffered part, and whenever the operator flushes.
 *
 * <p>Why: each row that crosses into Python pays a fixed cost, so several parts travel together, while
 * the delay bounds how long a slow stream waits. The buffer is not state: the operator empties it
 * before every barrier.
 */
final class ResolveBatches implements ProcessingTimeCallback {

    private final int maxEvents;
    private final long maxDelayMillis;
    private final ProcessingTimeService time;
    private final Consumer<Row> out;

    private final List<byte[]> events = new ArrayList<>();
    private final List<long[]> late = new ArrayList<>();
    private final List<boolean[]> fresh = new ArrayList<>();
    private int count;
    private long since;
    private boolean timerPending;

    /** Batches that go to {@code out}, timed by {@code time}. */
    ResolveBatches(int maxEvents, long maxDelayMillis, ProcessingTimeService time, Consumer<Row> out) {
        this.maxEvents = maxEvents;
        this.maxDelayMillis = maxDelayMillis;
        this.time = time;
        this.out = out;
    }

    /** Adds one part: its events (opaque), late watermarks and fresh flags, one entry per event. */
    void add(byte[] partEvents, long[] partLate, boolean[] partFresh) {
        if (count == 0) {
            since = time.getCurrentProcessingTime();
        }
        events.add(partEvents);
        late.add(partLate);
        fresh.add(partFresh);
        count += partLate.length;
        if (count >= maxEvents) {
            flush();
        } else if (!timerPending) {
            timerPending = true;
            time.registerTimer(since + maxDelayMillis, this);
        }
    }

    /** Emits the buffered parts as one row, if any. */
    void flush() {
        if (count == 0) {
            return;
        }
        byte[][] batchEvents = events.toArray(new byte[0][]);
        long[] batchLate = new long[count];
        boolean[] batchFresh = new boolean[count];
        int at = 0;
        for (int i = 0; i < late.size(); i++) {
            long[] partLate = late.get(i);
            System.arraycopy(partLate, 0, batchLate, at, partLate.length);
            System.arraycopy(fresh.get(i), 0, batchFresh, at, partLate.length);
            at += partLate.length;
        }
        int batchCount = count;
        events.clear();
        late.clear();
        fresh.clear();
        count = 0;
        out.accept(Row.of(batchEvents, batchLate, batchFresh, batchCount));
    }

    @Override
    public void onProcessingTime(long timestamp) throws Exception {
        timerPending = false;
        if (count == 0) {
            return;
        }
        long due = since + maxDelayMillis;
        if (time.getCurrentProcessingTime() >= due) {
            flush();
        } else {
            // The buffer that set this timer was flushed; a later one started since.
            timerPending = true;
            time.registerTimer(due, this);
        }
    }
}
