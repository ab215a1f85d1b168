package io.lakestream.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.JobID;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.types.Row;
import org.junit.jupiter.api.Test;

class GoldLatenessGateTest {

    private static final long W = 300_000; // 5 minutes
    private static final long NONE = EventTimeGate.NO_AMOUNT;

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

    private static List<StreamRecord<Row>> records(OneInputStreamOperatorTestHarness<Row, Row> h) {
        List<StreamRecord<Row>> out = new ArrayList<>();
        for (Object o : h.getOutput()) {
            if (o instanceof StreamRecord) {
                @SuppressWarnings("unchecked")
                StreamRecord<Row> r = (StreamRecord<Row>) o;
                out.add(r);
            }
        }
        return out;
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
    void dropsEventsBeyondTheLatenessCountsThemAndFlattensTheRestWithTheirEventTimes() throws Exception {
        long allowed = 60_000;
        GoldLatenessGate op = new GoldLatenessGate(W, allowed);
        try (OneInputStreamOperatorTestHarness<Row, Row> h = Harnesses.oneInput(op, new JobID(), 1, 0)) {
            h.open();
            long[] times = {10 * W + 5, 10 * W + 6, 12 * W, 10 * W + 7};
            // Event 1 arrived once its window had closed for good (11W + allowed); event 3 a ms before.
            long[] arrival = {11 * W, 11 * W + allowed, EventTimeGate.NO_WATERMARK, 11 * W + allowed - 1};
            h.processElement(in(times, arrival), 42);
            h.processWatermark(new Watermark(7));
            List<StreamRecord<Row>> out = records(h);
            assertEquals(3, out.size());
            // amounts in yuan with scale 2 (BigDecimal.equals compares the scale too)
            assertEquals(Row.of(10 * W + 5, (byte) 0, new BigDecimal("0.00"), "o0", "u0"), out.get(0).getValue());
            assertEquals(Row.of(12 * W, (byte) 2, new BigDecimal("2.00"), "o2", "u2"), out.get(1).getValue());
            assertEquals(Row.of(10 * W + 7, (byte) 0, null, "o3", "u3"), out.get(2).getValue());
            assertEquals(10 * W + 5, out.get(0).getTimestamp());
            assertEquals(12 * W, out.get(1).getTimestamp());
            assertEquals(3, op.keptCounter().getCount());
            assertEquals(1, op.beyondCounter().getCount());
            assertTrue(h.getOutput().contains(new Watermark(7)));
        }
    }

    @Test
    void aNewLineageLeavesTheWindowsOfThePreviousOneAloneAndARestoreKeepsItsCut() throws Exception {
        long cutAt = 10 * W + 100; // the previous lineage's newest event: window [10W, 11W) is its
        long[] times = {10 * W - 1, 10 * W, 11 * W - 1, 11 * W};
        long[] arrival = new long[4];
        org.apache.flink.runtime.checkpoint.OperatorSubtaskState state;
        GoldLatenessGate op = new GoldLatenessGate(W, 0, cutAt);
        try (OneInputStreamOperatorTestHarness<Row, Row> h = Harnesses.oneInput(op, new JobID(), 1, 0)) {
            h.open();
            h.processElement(in(times, arrival), 0);
            List<StreamRecord<Row>> out = records(h);
            assertEquals(1, out.size());
            assertEquals(11 * W, out.get(0).getTimestamp());
            assertEquals(3, op.beforeLineageCounter().getCount());
            assertEquals(0, op.beyondCounter().getCount());
            state = h.snapshot(1, 0);
        }
        // Restored with another (or no) cut: the lineage's own stays.
        GoldLatenessGate restored = new GoldLatenessGate(W, 0);
        try (OneInputStreamOperatorTestHarness<Row, Row> h = Harnesses.oneInput(restored, new JobID(), 1, 0)) {
            h.initializeState(state);
            h.open();
            assertEquals(cutAt, restored.cut());
        }
        // A first lineage cuts nothing.
        GoldLatenessGate first = new GoldLatenessGate(W, 0);
        try (OneInputStreamOperatorTestHarness<Row, Row> h = Harnesses.oneInput(first, new JobID(), 1, 0)) {
            h.open();
            h.processElement(in(times, arrival), 0);
            assertEquals(4, records(h).size());
        }
    }

    @Test
    void refusesBadSettings() {
        assertThrows(IllegalArgumentException.class, () -> new GoldLatenessGate(0, 0));
        assertThrows(IllegalArgumentException.class, () -> new GoldLatenessGate(W, -1));
    }
}
