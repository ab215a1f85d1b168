package io.lakestream.flink.ingest;

import java.util.concurrent.ConcurrentHashMap;

import org.apache.flink.runtime.state.KeyGroupRangeAssignment;

/**
 * Integer keys that land in a chosen key group: for each key group of a max parallelism, the
 * {@link #keysPerKeyGroup()} smallest non-negative ints Flink assigns to it, in ascending order.
 *
 * <p>Why: Flink places a key by hashing it; rows that already know their key group (a bucket computed
 * on the Python side) are keyed by one of these ints instead. Computed once per max parallelism and
 * JVM, shared by every operator and key selector.
 */
final class KeyGroupKeys {

    /**
     * Keys over all key groups. Part of the de-dup state layout (which key holds an id), so never
     * change it: ids recorded before would be looked up under other keys.
     */
    static final int TOTAL_KEYS = 1 << 18;

    private static final ConcurrentHashMap<Integer, KeyGroupKeys> CACHE = new ConcurrentHashMap<>();

    private final int maxParallelism;
    private final int perKeyGroup;
    /** keys[keyGroup * perKeyGroup + j], ascending in j. */
    private final int[] keys;

    private KeyGroupKeys(int maxParallelism) {
        this.maxParallelism = maxParallelism;
        this.perKeyGroup = Math.max(1, TOTAL_KEYS / maxParallelism);
        this.keys = new int[maxParallelism * perKeyGroup];
        int[] filled = new int[maxParallelism];
        int missing = keys.length;
        for (int key = 0; missing > 0; key++) {
            if (key < 0) {
                throw new IllegalStateException(
                        "no int key for some key group of max parallelism " + maxParallelism);
            }
            int group = KeyGroupRangeAssignment.assignToKeyGroup(key, maxParallelism);
            if (filled[group] < perKeyGroup) {
                keys[group * perKeyGroup + filled[group]++] = key;
                missing--;
            }
        }
    }

    static KeyGroupKeys of(int maxParallelism) {
        checkMaxParallelism(maxParallelism);
        return CACHE.computeIfAbsent(maxParallelism, KeyGroupKeys::new);
    }

    static void checkMaxParallelism(int maxParallelism) {
        if (maxParallelism < 1 || maxParallelism > KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM) {
            throw new IllegalArgumentException(
                    "max parallelism must be in [1, " + KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM
                            + "], got " + maxParallelism);
        }
    }

    int maxParallelism() {
        return maxParallelism;
    }

    int keysPerKeyGroup() {
        return perKeyGroup;
    }

    /** The smallest non-negative int in {@code keyGroup}. */
    int first(int keyGroup) {
        return keys[keyGroup * perKeyGroup];
    }

    /** The {@code index}-th smallest non-negative int in {@code keyGroup}, {@code 0 <= index < keysPerKeyGroup()}. */
    int key(int keyGroup, int index) {
        return ofRank(keyGroup * perKeyGroup + index);
    }

    /** The key of rank {@code keyGroup * keysPerKeyGroup() + index} over all key groups' keys. */
    int ofRank(int rank) {
        return keys[rank];
    }
}
