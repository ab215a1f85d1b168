package io.lakestream.flink.gold;

import static io.lakestream.flink.Harnesses.records;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.flink.api.common.JobID;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.types.Row;
import org.junit.jupiter.api.Test;

import io.lakestream.flink.Harnesses;
import io.lakestream.flink.ingest.EventTimeGate;

class GoldLatenessGateTest {

    private static final long W = 300_000; // 5 minutes
    private static final long NONE = EventTimeGate.NO_AMOUNT;

    /** The shape of lakestream.gold.METRICS: events, orders created, payments, gmv, active users. */
    static GoldMetrics metrics() {
        return new GoldMetrics(
                new String[] {"events", "orders_created", "payments", "gmv", "active_users"},
                new int[] {GoldMetrics.ANY_KIND, 1, 2, 2, GoldMetrics.ANY_KIND},
                new String[] {"count", "count_distinct", "count", "sum", "count_distinct"},
                new String[] {null, "order_id", null, "amount", "user_id"});
    }

    static GoldLatenessGate gate(long allowed, long cut) {
        return new GoldLatenessGate(W, allowed, cut, metrics(), GoldLatenessGate.DEFAULT_MAX_BUFFERED);
    }

    /** The flushed partials by window start: values, then each set sorted. */
    private static Map<Long, String> partials(OneInputStreamOperatorTestHarness<Row, Row> h) {
        Map<Long, String> out = new TreeMap<>();
        for (StreamRecord<Row> r : records(h)) {
            Row p = r.getValue();
            long start = (Long) p.getField(GoldLatenessGate.WINDOW_START);
            assertEquals(start, r.getTimestamp());
            StringBuilder text = new StringBuilder(Arrays.toString((long[]) p.getField(GoldLatenessGate.VALUES)));
            for (String[] set : (String[][]) p.getField(GoldLatenessGate.SETS)) {
                String[] sorted = set.clone();
                Arrays.sort(sorted);
                text.append(' ').append(Arrays.toString(sorted));
            }
            assertFalse(out.containsKey(start), "one partial per window and flush");
            out.put(start, text.toString());
        }
        return out;
    }

    private static Row in(long[] times, long[] arrival) {
        int n = times.length;
        byte[] kinds = new byte[n];
        long[] amounts = new long[n];
        String[] orders = new String[n];
        String[] users = new String[n];
        for (int k = 0; k < n; k++) {
            kinds[k] = (byte) (k % 3);
            amounts[k] = k % 2 == 0 ? 100L * k : NONE;
            orders[k] = "o" + k;
            users[k] = k == 1 ? null : "u" + k;
        }
        return Row.of(times, kinds, amounts, orders, users, arrival);
    }

    @Test
    void windowEndsAreAlignedToTheEpochAndFloorNegativeTimes() {
        assertEquals(W, GoldLatenessGate.windowEnd(0, W));
        assertEquals(W, GoldLatenessGate.windowEnd(W - 1, W));
        assertEquals(2 * W, GoldLatenessGate.windowEnd(W, W));
        assertEquals(0, GoldLatenessGate.windowEnd(-1, W));
    }

    @Test
    void anEventIsBeyondTheLatenessExactlyWhenItsWindowEndPlusTheLatenessIsAtOrBelowItsArrival() {
        long t = 10 * W + 5; // window [10W, 11W)
        long end = 11 * W;
        long allowed = 60_000;
        assertFalse(GoldLatenessGate.beyondLateness(t, end + allowed - 1, W, allowed));
        assertTrue(GoldLatenessGate.beyondLateness(t, end + allowed, W, allowed));
        assertFalse(GoldLatenessGate.beyondLateness(t, end - 1, W, 0));
        assertTrue(GoldLatenessGate.beyondLateness(t, end, W, 0));
        assertFalse(GoldLatenessGate.beyondLateness(t, EventTimeGate.NO_WATERMARK, W, 0));
    }

    @Test
    void dropsEventsBeyondTheLatenessCountsThemAndAddsTheRestToTheirWindowsPartialsUntilTheBarrier()
            throws Exception {
        long allowed = 60_000;
        GoldLatenessGate op = gate(allowed, GoldLatenessGate.NO_CUT);
        try (OneInputStreamOperatorTestHarness<Row, Row> h = Harnesses.oneInput(op, new JobID(), 1, 0)) {
            h.open();
            long[] times = {10 * W + 5, 10 * W + 6, 12 * W, 10 * W + 7};
            // Event 1 arrived once its window had closed for good (11W + allowed); event 3 a ms before.
            long[] arrival = {11 * W, 11 * W + allowed, EventTimeGate.NO_WATERMARK, 11 * W + allowed - 1};
            h.processElement(in(times, arrival), 42);
            h.processWatermark(new Watermark(7));
            assertTrue(records(h).isEmpty(), "nothing leaves before the barrier");
            assertEquals(2, op.bufferedWindows());
            assertEquals(3, op.keptCounter().getCount());
            assertEquals(1, op.beyondCounter().getCount());
            assertTrue(h.getOutput().contains(new Watermark(7)));
            // Kinds 0, _, 2, 0; amounts 0, _, 200, none; order ids o0, o2, o3; users u0, u2, u3.
            h.prepareSnapshotPreBarrier(1);
            Map<Long, String> out = partials(h);
            assertEquals("[2, 0, 0, 0, 0] [] [u0, u3]", out.get(10 * W));
            assertEquals("[1, 0, 1, 200, 0] [] [u2]", out.get(12 * W));
            assertEquals(2, out.size());
            assertEquals(0, op.bufferedWindows());
        }
    }

    @Test
    void countsKindsAndDistinctValuesAsTheDefinitionSays() throws Exception {
        GoldLatenessGate op = gate(0, GoldLatenessGate.NO_CUT);
        try (OneInputStreamOperatorTestHarness<Row, Row> h = Harnesses.oneInput(op, new JobID(), 1, 0)) {
            h.open();
            long t = 3 * W;
            Row part =
                    Row.of(
                            new long[] {t, t + 1, t + 2, t + 3, t + 4, t + 5},
                            new byte[] {1, 1, 2, 2, 1, 0},
                            new long[] {1_000, NONE, 250, NONE, 5, 7},
                            new String[] {"a", "a", "a", null, null, "b"},
                            new String[] {"x", null, "x", "y", "z", null},
                            new long[6]);
            h.processElement(part, 0);
            h.endInput();
            // 6 events; orders created: a (twice) and a null id; 2 payments, one without an amount;
            // users x, y, z (nulls are not values).
            assertEquals("[6, 0, 2, 250, 0] [a] [x, y, z]", partials(h).get(3 * W));
        }
    }

    @Test
    void flushesEarlyOnceMaxBufferedEventsWereAdded() throws Exception {
        GoldLatenessGate op = new GoldLatenessGate(W, 0, GoldLatenessGate.NO_CUT, metrics(), 3);
        try (OneInputStreamOperatorTestHarness<Row, Row> h = Harnesses.oneInput(op, new JobID(), 1, 0)) {
            h.open();
            h.processElement(in(new long[] {W, W + 1}, new long[2]), 0);
            assertTrue(records(h).isEmpty());
            h.processElement(in(new long[] {W + 2}, new long[1]), 0);
            assertEquals(1, records(h).size());
            assertEquals(0, op.bufferedWindows());
        }
    }

    @Test
    void aNewLineageLeavesTheWindowsOfThePreviousOneAloneAndARestoreKeepsItsCut() throws Exception {
        long cutAt = 10 * W + 100; // the previous lineage's newest event: window [10W, 11W) is its
        long[] times = {10 * W - 1, 10 * W, 11 * W - 1, 11 * W};
        long[] arrival = new long[4];
        org.apache.flink.runtime.checkpoint.OperatorSubtaskState state;
        GoldLatenessGate op = gate(0, cutAt);
        try (OneInputStreamOperatorTestHarness<Row, Row> h = Harnesses.oneInput(op, new JobID(), 1, 0)) {
            h.open();
            h.processElement(in(times, arrival), 0);
            h.prepareSnapshotPreBarrier(1);
            assertEquals(List.of(11 * W), List.copyOf(partials(h).keySet()));
            assertEquals(3, op.beforeLineageCounter().getCount());
            assertEquals(0, op.beyondCounter().getCount());
            state = h.snapshot(1, 0);
        }
        // Restored with another (or no) cut: the lineage's own stays.
        GoldLatenessGate restored = gate(0, GoldLatenessGate.NO_CUT);
        try (OneInputStreamOperatorTestHarness<Row, Row> h = Harnesses.oneInput(restored, new JobID(), 1, 0)) {
            h.initializeState(state);
            h.open();
            assertEquals(cutAt, restored.cut());
        }
        // A first lineage cuts nothing.
        GoldLatenessGate first = gate(0, GoldLatenessGate.NO_CUT);
        try (OneInputStreamOperatorTestHarness<Row, Row> h = Harnesses.oneInput(first, new JobID(), 1, 0)) {
            h.open();
            h.processElement(in(times, arrival), 0);
            h.endInput();
            assertEquals(List.of(9 * W, 10 * W, 11 * W), List.copyOf(partials(h).keySet()));
        }
    }

    @Test
    void refusesBadSettings() {
        GoldMetrics m = metrics();
        assertThrows(IllegalArgumentException.class, () -> new GoldLatenessGate(0, 0, GoldLatenessGate.NO_CUT, m, 1));
        assertThrows(IllegalArgumentException.class, () -> new GoldLatenessGate(W, -1, GoldLatenessGate.NO_CUT, m, 1));
        assertThrows(IllegalArgumentException.class, () -> new GoldLatenessGate(W, 0, GoldLatenessGate.NO_CUT, m, 0));
    }
}
