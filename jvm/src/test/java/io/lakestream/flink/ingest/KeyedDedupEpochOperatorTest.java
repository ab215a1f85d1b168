package io.lakestream.flink.ingest;

import static io.lakestream.flink.Harnesses.drain;
import static io.lakestream.flink.Harnesses.kinds;
import static io.lakestream.flink.Harnesses.payloads;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.DATA;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.END_OF_INPUT;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.OPEN;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.PRECOMMIT;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.streaming.util.KeyedOneInputStreamOperatorTestHarness;
import org.apache.flink.types.Row;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import io.lakestream.flink.Harnesses;

class KeyedDedupEpochOperatorTest {

    private static final int MAX_PARALLELISM = 128;

    /** An event id hash; its bucket is a function of it, as on the Python side. */
    record Id(long hi, long lo) {
        int bucket(int maxParallelism) {
            return (int) Math.floorMod(hi * 31 + lo, (long) maxParallelism);
        }
    }

    /** Test ids: 2k and 2k + 1 share their high half, 4k + j share their low half. */
    private static Id id(long n) {
        return new Id((n / 2) * 0x9E3779B97F4A7C15L, n % 4);
    }

    /**
     * The dedup operator at some parallelism, fed like the Python standardise feeds it: a batch's
     * events split into one part per subtask that owns any of their buckets.
     */
    private static final class Cluster implements AutoCloseable {
        final JobID job = new JobID();
        final int parallelism;
        final String backend;
        final long ttl;
        final List<KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row>> subtasks = new ArrayList<>();
        final List<Row> opens = new ArrayList<>();

        Cluster(int parallelism, String backend, long ttl, List<OperatorSubtaskState> restoreFrom, long now)
                throws Exception {
            this.parallelism = parallelism;
            this.backend = backend;
            this.ttl = ttl;
            for (int i = 0; i < parallelism; i++) {
                KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h =
                        Harnesses.keyed(
                                new KeyedDedupEpochOperator(ttl, 1, 60_000, MAX_PARALLELISM),
                                job, MAX_PARALLELISM, parallelism, i, backend);
                if (restoreFrom != null) {
                    h.initializeState(Harnesses.rescale(restoreFrom, MAX_PARALLELISM, parallelism, i));
                }
                h.open();
                h.setStateTtlProcessingTime(now);
                opens.add(drain(h).get(0));
                subtasks.add(h);
            }
        }

        void setTime(long now) {
            for (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h : subtasks) {
                h.setStateTtlProcessingTime(now);
            }
        }

        /** Fresh (true) or duplicate, per id in order. */
        boolean[] process(List<Id> ids) throws Exception {
            boolean[] fresh = new boolean[ids.size()];
            for (int s = 0; s < parallelism; s++) {
                List<Integer> positions = new ArrayList<>();
                for (int i = 0; i < ids.size(); i++) {
                    int bucket = ids.get(i).bucket(MAX_PARALLELISM);
                    if (KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup(MAX_PARALLELISM, parallelism, bucket) == s) {
                        positions.add(i);
                    }
                }
                if (positions.isEmpty()) {
                    continue;
                }
                KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h = subtasks.get(s);
                h.processElement(gatedPart(s, ids, positions), 0);
                List<Row> out = payloads(drain(h));
                assertEquals(1, out.size());
                boolean[] partFresh = (boolean[]) out.get(0).getField(KeyedDedupEpochOperator.RESOLVE_FRESH);
                assertEquals(positions.size(), partFresh.length);
                for (int k = 0; k < partFresh.length; k++) {
                    fresh[positions.get(k)] = partFresh[k];
                }
            }
            return fresh;
        }

        List<OperatorSubtaskState> snapshot(long checkpointId) throws Exception {
            List<OperatorSubtaskState> states = new ArrayList<>();
            for (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h : subtasks) {
                h.prepareSnapshotPreBarrier(checkpointId);
                states.add(h.snapshot(checkpointId, 0));
                drain(h);
            }
            return states;
        }

        @Override
        public void close() throws Exception {
            for (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h : subtasks) {
                h.close();
            }
        }
    }

    /** A part row for subtask {@code subtask} holding the ids at {@code positions}, as the gate emits it. */
    private static Row gatedPart(int subtask, List<Id> ids, List<Integer> positions) {
        int n = positions.size();
        int[] pos = new int[n];
        int[] buckets = new int[n];
        long[] hi = new long[n];
        long[] lo = new long[n];
        long[] late = new long[n];
        for (int k = 0; k < n; k++) {
            Id id = ids.get(positions.get(k));
            pos[k] = positions.get(k);
            buckets[k] = id.bucket(MAX_PARALLELISM);
            hi[k] = id.hi;
            lo[k] = id.lo;
            late[k] = k % 2 == 0 ? EventTimeGate.NOT_LATE : 1000 + k;
        }
        Row row = Harnesses.part("t#0", subtask, new long[n], pos, buckets, hi, lo, new byte[] {(byte) n});
        row.setField(EventTimeGate.LATE_WATERMARKS, late);
        return row;
    }

    /** A part for a single-subtask operator. */
    private static Row part(Id... ids) {
        List<Integer> positions = new ArrayList<>();
        for (int i = 0; i < ids.length; i++) {
            positions.add(i);
        }
        return gatedPart(0, Arrays.asList(ids), positions);
    }

    private static boolean[] bools(boolean... values) {
        return values;
    }

    // ------------------------------------------------------------------------------------------
    // The reference: lakestream/dedup.py DedupCache.first_seen, line by line (no max_entries).

    private static final class DedupCacheModel {
        final long ttl;
        final LinkedHashMap<Id, Long> expiry = new LinkedHashMap<>();

        DedupCacheModel(long ttl) {
            this.ttl = ttl;
        }

        boolean[] firstSeen(List<Id> ids, long now) {
            Iterator<Map.Entry<Id, Long>> sweep = expiry.entrySet().iterator();
            while (sweep.hasNext()) {
                long first = sweep.next().getValue();
                if (first > now) {
                    break;
                }
                sweep.remove();
            }
            long untilNew = now + ttl;
            boolean[] fresh = new boolean[ids.size()];
            for (int i = 0; i < ids.size(); i++) {
                Id id = ids.get(i);
                Long until = expiry.get(id);
                if (until != null) {
                    if (until > now) {
                        fresh[i] = false;
                        continue;
                    }
                    expiry.remove(id); // move_to_end
                }
                expiry.put(id, untilNew);
                fresh[i] = true;
            }
            return fresh;
        }
    }

    // ------------------------------------------------------------------------------------------

    /** A part with the speed layer's columns, as the gate emits it (arrival watermarks filled in). */
    private static Row goldPart(List<Id> ids, long[] times, long[] arrival) {
        int n = ids.size();
        int[] pos = new int[n];
        int[] buckets = new int[n];
        long[] hi = new long[n];
        long[] lo = new long[n];
        byte[] kinds = new byte[n];
        long[] amounts = new long[n];
        String[] orders = new String[n];
        String[] users = new String[n];
        for (int k = 0; k < n; k++) {
            Id id = ids.get(k);
            pos[k] = k;
            buckets[k] = id.bucket(MAX_PARALLELISM);
            hi[k] = id.hi;
            lo[k] = id.lo;
            kinds[k] = (byte) (10 + k);
            amounts[k] = k == 1 ? EventTimeGate.NO_AMOUNT : 100 + k;
            orders[k] = "o" + id.lo;
            users[k] = k == 0 ? null : "u" + k;
        }
        Row row = Harnesses.goldPart("t#0", 0, times, pos, buckets, hi, lo, kinds, amounts, orders, users);
        row.setField(EventTimeGate.LATE_WATERMARKS, new long[n]);
        row.setField(EventTimeGate.ARRIVAL_WATERMARKS, arrival);
        return row;
    }

    @ParameterizedTest
    @ValueSource(strings = {"hashmap", "rocksdb"})
    void theGoldSideOutputCarriesTheFreshEventsOfEachPartOnly(String backend) throws Exception {
        Id a = id(1), b = id(2), c = id(3);
        List<OperatorSubtaskState> state;
        try (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h =
                Harnesses.keyed(new KeyedDedupEpochOperator(60_000, 100, 60_000, MAX_PARALLELISM),
                        new JobID(), MAX_PARALLELISM, 1, 0, backend)) {
            h.open();
            h.processElement(goldPart(List.of(a, b, a), new long[] {7, 8, 9}, new long[] {-5, -4, -3}), 77);
            h.processElement(goldPart(List.of(b, a), new long[] {1, 2}, new long[] {0, 0}), 78);
            h.processElement(goldPart(List.of(b, c), new long[] {3, 4}, new long[] {1, 2}), 79);
            // The plain (resolve) path is unchanged: every event with its fresh flag.
            h.prepareSnapshotPreBarrier(1);
            List<Row> resolve = payloads(drain(h));
            assertEquals(1, resolve.size());
            assertArrayEquals(bools(true, true, false, false, false, false, true),
                    (boolean[]) resolve.get(0).getField(KeyedDedupEpochOperator.RESOLVE_FRESH));
            List<org.apache.flink.streaming.runtime.streamrecord.StreamRecord<Row>> gold =
                    new ArrayList<>(h.getSideOutput(KeyedDedupEpochOperator.GOLD_EVENTS));
            assertEquals(2, gold.size()); // the all-duplicates part emits nothing
            Row first = gold.get(0).getValue();
            assertEquals(77, gold.get(0).getTimestamp());
            assertArrayEquals(new long[] {7, 8}, (long[]) first.getField(KeyedDedupEpochOperator.GOLD_EVENT_TIMES));
            assertArrayEquals(new byte[] {10, 11}, (byte[]) first.getField(KeyedDedupEpochOperator.GOLD_EVENT_KINDS));
            assertArrayEquals(new long[] {100, EventTimeGate.NO_AMOUNT},
                    (long[]) first.getField(KeyedDedupEpochOperator.GOLD_EVENT_AMOUNTS));
            assertArrayEquals(new String[] {"o" + a.lo, "o" + b.lo},
                    (String[]) first.getField(KeyedDedupEpochOperator.GOLD_EVENT_ORDER_IDS));
            assertArrayEquals(new String[] {null, "u1"},
                    (String[]) first.getField(KeyedDedupEpochOperator.GOLD_EVENT_USER_IDS));
            assertArrayEquals(new long[] {-5, -4},
                    (long[]) first.getField(KeyedDedupEpochOperator.GOLD_EVENT_ARRIVAL_WATERMARKS));
            Row third = gold.get(1).getValue();
            assertEquals(79, gold.get(1).getTimestamp());
            assertArrayEquals(new long[] {4}, (long[]) third.getField(KeyedDedupEpochOperator.GOLD_EVENT_TIMES));
            assertArrayEquals(new byte[] {11}, (byte[]) third.getField(KeyedDedupEpochOperator.GOLD_EVENT_KINDS));
            assertArrayEquals(new long[] {2},
                    (long[]) third.getField(KeyedDedupEpochOperator.GOLD_EVENT_ARRIVAL_WATERMARKS));
            state = List.of(h.snapshot(1, 0));
        }
        // Across a restore, a re-delivery stays out of the side output.
        try (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h =
                Harnesses.keyed(new KeyedDedupEpochOperator(60_000, 100, 60_000, MAX_PARALLELISM),
                        new JobID(), MAX_PARALLELISM, 1, 0, backend)) {
            h.initializeState(Harnesses.rescale(state, MAX_PARALLELISM, 1, 0));
            h.open();
            h.processElement(goldPart(List.of(c, id(4)), new long[] {5, 6}, new long[] {3, 3}), 80);
            List<org.apache.flink.streaming.runtime.streamrecord.StreamRecord<Row>> gold =
                    new ArrayList<>(h.getSideOutput(KeyedDedupEpochOperator.GOLD_EVENTS));
            assertEquals(1, gold.size());
            assertArrayEquals(new long[] {6}, (long[]) gold.get(0).getValue().getField(KeyedDedupEpochOperator.GOLD_EVENT_TIMES));
        }
    }

    @Test
    void partsWithoutTheGoldColumnsHaveNoSideOutput() throws Exception {
        try (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h =
                Harnesses.keyed(new KeyedDedupEpochOperator(60_000, 100, 60_000, MAX_PARALLELISM),
                        new JobID(), MAX_PARALLELISM, 1, 0, "hashmap")) {
            h.open();
            h.processElement(part(id(1), id(2)), 0);
            assertEquals(null, h.getSideOutput(KeyedDedupEpochOperator.GOLD_EVENTS));
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"hashmap", "rocksdb"})
    void duplicatesWithinAPartAcrossPartsAndAcrossCheckpoints(String backend) throws Exception {
        Id a = id(1), b = id(2), c = id(3);
        List<OperatorSubtaskState> state;
        try (Cluster cluster = new Cluster(1, backend, 60_000, null, 1000)) {
            assertArrayEquals(bools(true, true, false, false), cluster.process(List.of(a, b, a, b)));
            assertArrayEquals(bools(false, true, false, true), cluster.process(List.of(b, c, c, id(4))));
            state = cluster.snapshot(1);
        }
        try (Cluster cluster = new Cluster(1, backend, 60_000, state, 2000)) {
            assertArrayEquals(bools(false, false, false, true), cluster.process(List.of(a, b, c, id(5))));
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"hashmap", "rocksdb"})
    void idsThatShareOneHalfAndTheirStateKeyAreStillDistinct(String backend) throws Exception {
        // Same bucket and same key within it, so only the map key tells them apart.
        int perKeyGroup = KeyGroupKeys.of(MAX_PARALLELISM).keysPerKeyGroup();
        Id a = new Id(12345, 7);
        Id sameHi = null;
        Id sameLo = null;
        for (long m = 1; sameHi == null || sameLo == null; m++) {
            Id x = new Id(a.hi, a.lo + MAX_PARALLELISM * m);
            Id y = new Id(a.hi + MAX_PARALLELISM * m, a.lo);
            if (sameHi == null && sameKey(a, x, perKeyGroup)) {
                sameHi = x;
            }
            if (sameLo == null && sameKey(a, y, perKeyGroup)) {
                sameLo = y;
            }
        }
        try (Cluster cluster = new Cluster(1, backend, 60_000, null, 0)) {
            assertArrayEquals(bools(true, true, true, false), cluster.process(List.of(a, sameHi, sameLo, a)));
        }
    }

    @Test
    void looksIdsUpInTheStateKeyOrderWithCopiesInArrivalOrder() {
        Random random = new Random(7);
        for (int maxParallelism : new int[] {1, 128, 100, 32768}) {
            KeyGroupKeys keys = KeyGroupKeys.of(maxParallelism);
            int perKeyGroup = keys.keysPerKeyGroup();
            for (int round = 0; round < 200; round++) {
                int n = 1 + random.nextInt(round < 100 ? 12 : 3000);
                int[] buckets = new int[n];
                long[] hi = new long[n];
                long[] lo = new long[n];
                for (int k = 0; k < n; k++) {
                    int copyOf = k > 0 && random.nextInt(4) == 0 ? random.nextInt(k) : -1;
                    hi[k] = copyOf >= 0 ? hi[copyOf] : random.nextLong() >> random.nextInt(64);
                    lo[k] = copyOf >= 0 ? lo[copyOf] : random.nextLong();
                    buckets[k] = copyOf >= 0 ? buckets[copyOf] : random.nextInt(maxParallelism);
                }
                long[] order = LookupOrder.of(buckets, hi, lo, perKeyGroup);
                int mask = (1 << LookupOrder.positionBits(n)) - 1;
                int hiShift = 64 - (63 - 18 - LookupOrder.positionBits(n));
                boolean[] visited = new boolean[n];
                Map<Id, Integer> lastCopy = new LinkedHashMap<>();
                int previous = -1;
                for (long entry : order) {
                    int k = (int) (entry & mask);
                    assertTrue(k < n && !visited[k], "each position once, got " + k);
                    visited[k] = true;
                    Integer earlier = lastCopy.put(new Id(hi[k], lo[k]), k);
                    assertTrue(earlier == null || earlier < k, "copies in arrival order: " + earlier + ", " + k);
                    if (previous >= 0) {
                        int p = previous;
                        int keyP = keys.key(
                                buckets[p], LookupOrder.spread(hi[p], lo[p], perKeyGroup));
                        int keyK = keys.key(
                                buckets[k], LookupOrder.spread(hi[k], lo[k], perKeyGroup));
                        // RocksDB's order: key group, then the key (non-negative, big-endian), then the id.
                        int cmp = Integer.compare(buckets[p], buckets[k]);
                        if (cmp == 0) {
                            cmp = Integer.compare(keyP, keyK);
                        }
                        if (cmp == 0) {
                            cmp = Long.compareUnsigned(hi[p] >>> hiShift, hi[k] >>> hiShift);
                        }
                        assertTrue(cmp <= 0, "max parallelism " + maxParallelism + ": " + p + " before " + k);
                    }
                    previous = k;
                }
            }
        }
    }

    private static boolean sameKey(Id a, Id b, int perKeyGroup) {
        return a.bucket(MAX_PARALLELISM) == b.bucket(MAX_PARALLELISM)
                && LookupOrder.spread(a.hi, a.lo, perKeyGroup)
                        == LookupOrder.spread(b.hi, b.lo, perKeyGroup);
    }

    @ParameterizedTest
    @ValueSource(strings = {"hashmap", "rocksdb"})
    void idsExpireTtlAfterTheirFirstSightingAndHitsDoNotRefresh(String backend) throws Exception {
        Id a = id(1), b = id(2);
        try (Cluster cluster = new Cluster(1, backend, 100, null, 0)) {
            assertArrayEquals(bools(true), cluster.process(List.of(a)));
            cluster.setTime(50);
            assertArrayEquals(bools(false, true), cluster.process(List.of(a, b)));
            cluster.setTime(99);
            assertArrayEquals(bools(false, false), cluster.process(List.of(a, b)));
            cluster.setTime(100); // until = 0 + 100 <= now: expired, though it was hit at 50 and 99
            assertArrayEquals(bools(true, false, false), cluster.process(List.of(a, b, a)));
            cluster.setTime(150); // b recorded at 50: until 150
            assertArrayEquals(bools(false, true), cluster.process(List.of(a, b)));
            cluster.setTime(199);
            assertArrayEquals(bools(false, false), cluster.process(List.of(a, b)));
            cluster.setTime(10_000);
            assertArrayEquals(bools(true, true), cluster.process(List.of(a, b)));
        }
    }

    @Test
    void expiredIdsLeaveTheHeapStateAsItIsAccessed() throws Exception {
        List<Id> old = new ArrayList<>();
        List<Id> young = new ArrayList<>();
        for (int i = 0; i < 50; i++) {
            old.add(id(i));
            young.add(id(1000 + i));
        }
        java.util.Set<Integer> youngKeys = new java.util.HashSet<>();
        KeyGroupKeys keys = KeyGroupKeys.of(MAX_PARALLELISM);
        for (Id id : young) {
            youngKeys.add(keys.key(id.bucket(MAX_PARALLELISM), LookupOrder.spread(id.hi, id.lo, keys.keysPerKeyGroup())));
        }
        try (Cluster cluster = new Cluster(1, "hashmap", 100, null, 0)) {
            cluster.process(old);
            cluster.setTime(100);
            // Every access sweeps one slot of the heap state tables (128 per key group).
            int rounds = 0;
            do {
                cluster.process(young);
                rounds++;
            } while (cluster.subtasks.get(0).numKeyedStateEntries() > youngKeys.size() && rounds < 1000);
            assertEquals(youngKeys.size(), cluster.subtasks.get(0).numKeyedStateEntries(), rounds + " rounds");
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"hashmap", "rocksdb"})
    void aClockSteppingBackKeepsIdsWhoseTtlHasNotRunOut(String backend) throws Exception {
        Id a = id(1), b = id(2);
        try (Cluster cluster = new Cluster(1, backend, 100, null, 1000)) {
            assertArrayEquals(bools(true), cluster.process(List.of(a))); // until 1100
            cluster.setTime(1050);
            assertArrayEquals(bools(false), cluster.process(List.of(a)));
            cluster.setTime(900); // before the first sighting: still a duplicate
            assertArrayEquals(bools(false, true), cluster.process(List.of(a, b))); // b: until 1000
            cluster.setTime(1000);
            assertArrayEquals(bools(false, true), cluster.process(List.of(a, b))); // b: until 1100
            cluster.setTime(1100); // both ran out: until 1200 now
            assertArrayEquals(bools(true, true), cluster.process(List.of(a, b)));
            cluster.setTime(1050);
            assertArrayEquals(bools(false, false), cluster.process(List.of(a, b)));
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"hashmap", "rocksdb"})
    void rescalingKeepsTheDedupStateAndTheRunId(String backend) throws Exception {
        List<Id> first = new ArrayList<>();
        for (int i = 0; i < 300; i++) {
            first.add(id(i)); // every bucket several times over
        }
        List<Id> second = new ArrayList<>();
        for (int i = 300; i < 400; i++) {
            second.add(id(i));
        }
        boolean[] allFresh = new boolean[first.size()];
        Arrays.fill(allFresh, true);
        boolean[] noneFresh = new boolean[first.size()];
        String run;
        List<OperatorSubtaskState> two;
        try (Cluster cluster = new Cluster(2, backend, 60_000, null, 1000)) {
            run = Harnesses.runId(cluster.opens.get(0));
            assertArrayEquals(allFresh, cluster.process(first));
            two = cluster.snapshot(1);
        }
        List<OperatorSubtaskState> one;
        try (Cluster cluster = new Cluster(1, backend, 60_000, two, 2000)) {
            assertEquals(run, Harnesses.runId(cluster.opens.get(0)));
            assertArrayEquals(noneFresh, cluster.process(first));
            boolean[] fresh = cluster.process(second);
            for (boolean f : fresh) {
                assertTrue(f);
            }
            one = cluster.snapshot(2);
        }
        try (Cluster cluster = new Cluster(2, backend, 60_000, one, 3000)) {
            for (Row open : cluster.opens) {
                assertEquals(run, Harnesses.runId(open));
            }
            assertArrayEquals(noneFresh, cluster.process(first));
            assertArrayEquals(new boolean[second.size()], cluster.process(second));
            cluster.setTime(1000 + 60_000); // the first ids' TTL ran out; the second's did not
            assertArrayEquals(allFresh, cluster.process(first));
            assertArrayEquals(new boolean[second.size()], cluster.process(second));
        }
    }

    @Test
    void matchesThePythonReferenceOnRandomHistories() throws Exception {
        long[] seen = new long[4];
        for (long seed = 0; seed < 40; seed++) {
            randomHistory(seed, "hashmap", 100, seen);
        }
        // The histories do cover what they are for.
        assertTrue(seen[0] > 500 && seen[1] > 500, "fresh " + seen[0] + ", duplicates " + seen[1]);
        assertTrue(seen[2] > 50, "steps back " + seen[2]);
        assertTrue(seen[3] > 50, "restores " + seen[3]);
    }

    @Test
    void matchesThePythonReferenceOnRandomHistoriesInRocksDb() throws Exception {
        long[] seen = new long[4];
        for (long seed = 1000; seed < 1004; seed++) {
            randomHistory(seed, "rocksdb", 80, seen);
        }
        assertTrue(seen[1] > 0 && seen[2] > 0 && seen[3] > 0, Arrays.toString(seen));
    }

    /**
     * Batches of ids from a small pool at a clock that mostly advances, sometimes stands still or
     * steps back, with restores at other parallelisms in between, against {@link DedupCacheModel}.
     *
     * <p>A step back goes no further than the latest expiry already passed: what the reference swept
     * at a later time, Flink's cleanup may or may not have dropped yet, so earlier times are not
     * comparable. {@code seen} counts fresh ids, duplicates, steps back and restores.
     */
    private static void randomHistory(long seed, String backend, int steps, long[] seen) throws Exception {
        Random random = new Random(seed);
        long ttl = 1 + random.nextInt(40);
        int pool = 1 + random.nextInt(30);
        long now = 1000;
        long maxNow = now;
        List<Long> untils = new ArrayList<>();
        DedupCacheModel model = new DedupCacheModel(ttl);
        Cluster cluster = new Cluster(1 + random.nextInt(3), backend, ttl, null, now);
        long checkpoint = 0;
        String where = "";
        try {
            for (int step = 0; step < steps; step++) {
                int action = random.nextInt(25);
                if (action < 8) {
                    now += random.nextInt((int) ttl + 5);
                } else if (action < 10) {
                    long passed = Long.MIN_VALUE;
                    for (long until : untils) {
                        if (until <= maxNow) {
                            passed = Math.max(passed, until);
                        }
                    }
                    long lowest = Math.max(passed, 0);
                    if (lowest < maxNow) {
                        now = lowest + (long) (random.nextDouble() * (maxNow - lowest));
                        seen[2]++;
                    }
                } else if (action == 10) {
                    List<OperatorSubtaskState> state = cluster.snapshot(++checkpoint);
                    cluster.close();
                    cluster = new Cluster(1 + random.nextInt(3), backend, ttl, state, now);
                    seen[3]++;
                }
                maxNow = Math.max(maxNow, now);
                cluster.setTime(now);
                List<Id> batch = new ArrayList<>();
                int size = 1 + random.nextInt(8);
                for (int i = 0; i < size; i++) {
                    batch.add(id(random.nextInt(pool)));
                }
                where = "seed " + seed + " step " + step + " ttl " + ttl + " now " + now + " p "
                        + cluster.parallelism + " batch " + batch;
                boolean[] expected = model.firstSeen(batch, now);
                for (boolean f : expected) {
                    if (f) {
                        untils.add(now + ttl);
                    }
                    seen[f ? 0 : 1]++;
                }
                assertArrayEquals(expected, cluster.process(batch), where);
            }
        } finally {
            cluster.close();
        }
    }

    // ------------------------------------------------------------------------------------------

    private static KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> single(
            int maxEvents, long maxDelayMillis) throws Exception {
        KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h =
                Harnesses.keyed(
                        new KeyedDedupEpochOperator(60_000, maxEvents, maxDelayMillis, MAX_PARALLELISM),
                        new JobID(), MAX_PARALLELISM, 1, 0, "hashmap");
        h.open();
        return h;
    }

    @Test
    void flushesWholePartsOnceMaxEventsAreBuffered() throws Exception {
        try (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h = single(5, 60_000)) {
            assertEquals(List.of(OPEN), kinds(drain(h)));
            Row p1 = part(id(1), id(2));
            Row p2 = part(id(3), id(1));
            Row p3 = part(id(4), id(5), id(4));
            h.processElement(p1, 0);
            h.processElement(p2, 0);
            assertEquals(List.of(), kinds(drain(h)));
            h.processElement(p3, 0);
            List<Row> out = drain(h);
            assertEquals(List.of(DATA), kinds(out));
            Row batch = payloads(out).get(0);
            assertEquals(KeyedDedupEpochOperator.resolveBatchType().getArity(), batch.getArity());
            byte[][] events = (byte[][]) batch.getField(KeyedDedupEpochOperator.RESOLVE_EVENTS);
            assertEquals(3, events.length);
            assertArrayEquals((byte[]) p1.getField(EventTimeGate.EVENTS), events[0]);
            assertArrayEquals((byte[]) p3.getField(EventTimeGate.EVENTS), events[2]);
            long[] late = new long[7];
            System.arraycopy((long[]) p1.getField(EventTimeGate.LATE_WATERMARKS), 0, late, 0, 2);
            System.arraycopy((long[]) p2.getField(EventTimeGate.LATE_WATERMARKS), 0, late, 2, 2);
            System.arraycopy((long[]) p3.getField(EventTimeGate.LATE_WATERMARKS), 0, late, 4, 3);
            assertArrayEquals(late, (long[]) batch.getField(KeyedDedupEpochOperator.RESOLVE_LATE_WATERMARKS));
            assertArrayEquals(
                    bools(true, true, true, false, true, true, false),
                    (boolean[]) batch.getField(KeyedDedupEpochOperator.RESOLVE_FRESH));
            assertEquals(7, batch.getField(KeyedDedupEpochOperator.RESOLVE_EVENT_COUNT));
            KeyedDedupEpochOperator op = (KeyedDedupEpochOperator) h.getOperator();
            assertEquals(5, op.uniqueCounter().getCount());
            assertEquals(2, op.duplicateCounter().getCount());
        }
    }

    @Test
    void flushesBeforeThePrecommitMarkerAndAtTheEndOfInput() throws Exception {
        try (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h = single(1000, 60_000)) {
            drain(h);
            h.processElement(part(id(1)), 0);
            h.processElement(part(id(2)), 0);
            h.prepareSnapshotPreBarrier(4);
            List<Row> out = drain(h);
            assertEquals(List.of(DATA, PRECOMMIT), kinds(out));
            assertEquals(2, payloads(out).get(0).getField(KeyedDedupEpochOperator.RESOLVE_EVENT_COUNT));
            assertEquals(4L, Harnesses.checkpointId(out.get(1)));
            h.snapshot(4, 0);
            h.prepareSnapshotPreBarrier(5);
            assertEquals(List.of(PRECOMMIT), kinds(drain(h)), "an empty buffer emits nothing");
            h.processElement(part(id(3)), 0);
            h.endInput();
            assertEquals(List.of(DATA, END_OF_INPUT), kinds(drain(h)));
        }
    }

    @Test
    void flushesMaxDelayAfterTheFirstBufferedPart() throws Exception {
        try (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h = single(1000, 100)) {
            drain(h);
            h.setProcessingTime(10);
            h.processElement(part(id(1)), 0);
            h.setProcessingTime(50);
            h.processElement(part(id(2)), 0);
            h.setProcessingTime(109);
            assertEquals(List.of(), kinds(drain(h)));
            h.setProcessingTime(110);
            List<Row> out = drain(h);
            assertEquals(List.of(DATA), kinds(out));
            assertEquals(2, payloads(out).get(0).getField(KeyedDedupEpochOperator.RESOLVE_EVENT_COUNT));
            // A barrier flushes the buffer whose timer is pending; the timer then waits for the next one.
            h.setProcessingTime(120);
            h.processElement(part(id(3)), 0);
            h.prepareSnapshotPreBarrier(1);
            drain(h);
            h.setProcessingTime(150);
            h.processElement(part(id(4)), 0);
            h.setProcessingTime(220); // the timer of the part at 120
            assertEquals(List.of(), kinds(drain(h)));
            h.setProcessingTime(249);
            assertEquals(List.of(), kinds(drain(h)));
            h.setProcessingTime(250);
            assertEquals(List.of(DATA), kinds(drain(h)));
            h.setProcessingTime(1000);
            assertEquals(List.of(), kinds(drain(h)), "no timer while nothing is buffered");
        }
    }

    @Test
    void rejectsMalformedPartsNamingTheField() throws Exception {
        try (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h = single(1000, 60_000)) {
            assertRejected(h, part(id(1)), EventTimeGate.ID_HI, new long[0], "'id_hi'");
            assertRejected(h, part(id(1)), EventTimeGate.ID_LO, null, "'id_lo'");
            assertRejected(h, part(id(1)), EventTimeGate.LATE_WATERMARKS, null, "'late_watermarks'");
            assertRejected(h, part(id(1)), EventTimeGate.EVENTS, null, "'events'");
            assertRejected(h, part(id(1)), EventTimeGate.PART, 1, "'part'");
            assertRejected(h, part(id(1)), EventTimeGate.PART, EventTimeGate.HEADER, "'part'");
            Row empty = part(id(1));
            empty.setField(EventTimeGate.BUCKETS, new int[0]);
            empty.setField(EventTimeGate.ID_HI, new long[0]);
            empty.setField(EventTimeGate.ID_LO, new long[0]);
            empty.setField(EventTimeGate.LATE_WATERMARKS, new long[0]);
            IllegalStateException e = assertThrows(
                    IllegalStateException.class, () -> h.getOneInputOperator().processElement(Harnesses.record(empty)));
            assertTrue(e.getMessage().contains("'buckets'"), e.getMessage());
        }
        // At parallelism 2, subtask 0 owns key groups 0-63 only.
        try (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h =
                Harnesses.keyed(new KeyedDedupEpochOperator(60_000, 10, 100, MAX_PARALLELISM),
                        new JobID(), MAX_PARALLELISM, 2, 0, "hashmap")) {
            h.open();
            Row row = part(id(1), id(2));
            row.setField(EventTimeGate.BUCKETS, new int[] {3, 64});
            IllegalStateException e = assertThrows(
                    IllegalStateException.class, () -> h.getOneInputOperator().processElement(Harnesses.record(row)));
            assertTrue(e.getMessage().contains("buckets[1] = 64"), e.getMessage());
        }
    }

    private static void assertRejected(
            KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h, Row row, int field, Object value,
            String name) {
        row.setField(field, value);
        IllegalStateException e = assertThrows(
                IllegalStateException.class, () -> h.getOneInputOperator().processElement(Harnesses.record(row)));
        assertTrue(e.getMessage().contains(name), e.getMessage());
        assertTrue(e.getMessage().contains("t#0"), e.getMessage());
    }

    @Test
    void refusesAJobOfAnotherMaxParallelism() throws Exception {
        try (KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> h =
                Harnesses.keyed(new KeyedDedupEpochOperator(60_000, 10, 100, 256),
                        new JobID(), MAX_PARALLELISM, 1, 0, "hashmap")) {
            IllegalStateException e = assertThrows(IllegalStateException.class, h::open);
            assertTrue(e.getMessage().contains("256"), e.getMessage());
        }
    }

    @Test
    void configuresProcessingTimeTtlFromTheFirstWrite() {
        StateTtlConfig ttl = SeenIds.ttlConfig(1234);
        assertEquals(Duration.ofMillis(1234), ttl.getTimeToLive());
        assertEquals(StateTtlConfig.UpdateType.OnCreateAndWrite, ttl.getUpdateType());
        assertEquals(StateTtlConfig.StateVisibility.NeverReturnExpired, ttl.getStateVisibility());
        assertEquals(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime, ttl.getTtlTimeCharacteristic());
        assertNotNull(ttl.getCleanupStrategies().getRocksdbCompactFilterCleanupStrategy());
        assertNotNull(ttl.getCleanupStrategies().getIncrementalCleanupStrategy());
        assertThrows(IllegalArgumentException.class, () -> new KeyedDedupEpochOperator(0, 1, 1, 128));
        assertThrows(IllegalArgumentException.class, () -> new KeyedDedupEpochOperator(1, 0, 1, 128));
        assertThrows(IllegalArgumentException.class, () -> new KeyedDedupEpochOperator(1, 1, 0, 128));
        assertThrows(IllegalArgumentException.class, () -> new KeyedDedupEpochOperator(1, 1, 1, 0));
    }
}
