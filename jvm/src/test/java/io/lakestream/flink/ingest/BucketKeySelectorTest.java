package io.lakestream.flink.ingest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.Set;

import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.types.Row;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import io.lakestream.flink.Harnesses;

class BucketKeySelectorTest {

    private static Row partIn(int... buckets) {
        int n = buckets.length;
        return Harnesses.part("t#0", 0, new long[n], new int[n], buckets, new long[n], new long[n], new byte[0]);
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 2, 7, 128, 129, 1000, 4096, 32768})
    void everyKeyGroupRoundTripsThroughItsKey(int maxParallelism) throws Exception {
        BucketKeySelector selector = new BucketKeySelector(maxParallelism);
        for (int group = 0; group < maxParallelism; group++) {
            int key = BucketKeySelector.keyForKeyGroup(group, maxParallelism);
            assertTrue(key >= 0);
            assertEquals(group, KeyGroupRangeAssignment.assignToKeyGroup(key, maxParallelism), "key " + key);
            assertEquals(key, selector.getKey(partIn(group, (group + 1) % maxParallelism)));
            // The part goes to the subtask that owns its bucket, at any parallelism.
            for (int parallelism : new int[] {1, 2, 3, maxParallelism}) {
                if (parallelism <= maxParallelism) {
                    assertEquals(
                            KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup(maxParallelism, parallelism, group),
                            KeyGroupRangeAssignment.assignKeyToParallelOperator(key, maxParallelism, parallelism));
                }
            }
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 7, 128})
    void theKeyIsTheSmallestIntOfItsKeyGroupAndTheSpareKeysStayInIt(int maxParallelism) {
        KeyGroupKeys keys = KeyGroupKeys.of(maxParallelism);
        int[] smallest = new int[maxParallelism];
        java.util.Arrays.fill(smallest, -1);
        int found = 0;
        for (int key = 0; found < maxParallelism; key++) {
            int group = KeyGroupRangeAssignment.assignToKeyGroup(key, maxParallelism);
            if (smallest[group] < 0) {
                smallest[group] = key;
                found++;
            }
        }
        Set<Integer> all = new HashSet<>();
        for (int group = 0; group < maxParallelism; group++) {
            assertEquals(smallest[group], BucketKeySelector.keyForKeyGroup(group, maxParallelism));
            int previous = -1;
            for (int j = 0; j < keys.keysPerKeyGroup(); j++) {
                int key = keys.key(group, j);
                assertEquals(group, KeyGroupRangeAssignment.assignToKeyGroup(key, maxParallelism));
                assertTrue(key > previous, "ascending and distinct");
                previous = key;
                all.add(key);
            }
        }
        assertEquals(maxParallelism * keys.keysPerKeyGroup(), all.size());
        assertTrue(all.size() > KeyGroupKeys.TOTAL_KEYS - maxParallelism);
    }

    @ParameterizedTest
    @ValueSource(ints = {128, 1024})
    void spreadUsesEveryKeyOfAKeyGroup(int maxParallelism) {
        int perKeyGroup = KeyGroupKeys.of(maxParallelism).keysPerKeyGroup();
        int[] hits = new int[perKeyGroup];
        java.util.Random random = new java.util.Random(7);
        int n = perKeyGroup * 50;
        for (int i = 0; i < n; i++) {
            int j = LookupOrder.spread(random.nextLong(), random.nextLong(), perKeyGroup);
            hits[j]++;
        }
        for (int j = 0; j < perKeyGroup; j++) {
            assertTrue(hits[j] > 10 && hits[j] < 110, "key " + j + ": " + hits[j] + " of " + n);
        }
        assertNotEquals(
                LookupOrder.spread(1, 2, perKeyGroup), LookupOrder.spread(2, 1, perKeyGroup));
    }

    @ParameterizedTest
    @ValueSource(ints = {128})
    void rejectsRowsWithoutAValidFirstBucket(int maxParallelism) {
        BucketKeySelector selector = new BucketKeySelector(maxParallelism);
        assertThrows(IllegalStateException.class, () -> selector.getKey(partIn()));
        assertThrows(IllegalStateException.class, () -> selector.getKey(partIn(-1)));
        IllegalStateException outside =
                assertThrows(IllegalStateException.class, () -> selector.getKey(partIn(maxParallelism)));
        assertTrue(outside.getMessage().contains("buckets[0] = " + maxParallelism), outside.getMessage());
        Row header = Harnesses.header("t#0", 5);
        header.setField(EventTimeGate.BUCKETS, null);
        assertThrows(IllegalStateException.class, () -> selector.getKey(header));
        assertThrows(IllegalArgumentException.class, () -> new BucketKeySelector(0));
        assertThrows(IllegalArgumentException.class, () -> new BucketKeySelector(32769));
        assertThrows(IllegalArgumentException.class, () -> BucketKeySelector.keyForKeyGroup(128, 128));
    }
}
