package io.lakestream.flink.ingest;

import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.types.Row;

/**
 * Keys a part row (see {@link EventTimeGate}) by its bucket: an Integer whose key group is
 * {@code buckets[0]}, so {@code keyBy} sends the part to the subtask that owns its buckets.
 *
 * <p>The Python side already assigned every event a bucket (a key group) and grouped a part's events
 * by the subtask owning them; hashing a key again would scatter them. The key is the smallest
 * non-negative int in that key group ({@link #keyForKeyGroup}), so routing depends on nothing but
 * the bucket and the max parallelism, which must be the job's.
 */
public class BucketKeySelector implements KeySelector<Row, Integer> {

    private static final long serialVersionUID = 1L;

    private final int maxParallelism;
    private transient KeyGroupKeys keys;

    public BucketKeySelector(int maxParallelism) {
        KeyGroupKeys.checkMaxParallelism(maxParallelism);
        this.maxParallelism = maxParallelism;
    }

    /** The smallest non-negative int that Flink assigns to {@code keyGroup} at {@code maxParallelism}. */
    public static int keyForKeyGroup(int keyGroup, int maxParallelism) {
        KeyGroupKeys table = KeyGroupKeys.of(maxParallelism);
        if (keyGroup < 0 || keyGroup >= maxParallelism) {
            throw new IllegalArgumentException(
                    "key group must be in [0, " + maxParallelism + "), got " + keyGroup);
        }
        return table.first(keyGroup);
    }

    @Override
    public Integer getKey(Row row) {
        KeyGroupKeys table = keys;
        if (table == null) {
            table = keys = KeyGroupKeys.of(maxParallelism);
        }
        Object field = row.getField(EventTimeGate.BUCKETS);
        if (!(field instanceof int[]) || ((int[]) field).length == 0) {
            throw new IllegalStateException(
                    "BucketKeySelector: a part row needs its events' buckets (ARRAY<INT>, at least one) at "
                            + EventTimeGate.BUCKETS + ", got " + EventTimeGate.describe(field)
                            + " (split " + row.getField(EventTimeGate.SPLIT) + ", part "
                            + row.getField(EventTimeGate.PART) + ")");
        }
        int bucket = ((int[]) field)[0];
        if (bucket < 0 || bucket >= maxParallelism) {
            throw new IllegalStateException(
                    "BucketKeySelector: split " + row.getField(EventTimeGate.SPLIT) + ": buckets[0] = "
                            + bucket + " is not a key group of max parallelism " + maxParallelism);
        }
        return table.first(bucket);
    }
}
