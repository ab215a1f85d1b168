package io.lakestream.flink.ingest;

import static io.lakestream.flink.Harnesses.MAX_PARALLELISM;
import static io.lakestream.flink.Harnesses.header;
import static io.lakestream.flink.Harnesses.records;
import static io.lakestream.flink.Harnesses.rescale;
import static io.lakestream.flink.ingest.EventTimeGate.NOT_LATE;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.JobID;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.types.Row;
import org.junit.jupiter.api.Test;

import io.lakestream.flink.Harnesses;

class EventTimeGateTest {

    private static final long BOUND = 10;

    private static OneInputStreamOperatorTestHarness<Row, Row> gate(
            long idleMillis, int parallelism, int subtask, OperatorSubtaskState restored)
            throws Exception {
        OneInputStreamOperatorTestHarness<Row, Row> h =
                Harnesses.oneInput(new EventTimeGate(BOUND, idleMillis), new JobID(), parallelism, subtask);
        if (restored != null) {
            h.initializeState(restored);
        }
        h.open();
        return h;
    }

    private static OneInputStreamOperatorTestHarness<Row, Row> gate() throws Exception {
        return gate(0, 1, 0, null);
    }

    /** A part row with the given header positions (the other per-event arrays sized to match). */
    private static Row part(String split, int part, int... positions) {
        int n = positions.length;
        byte[] events = {(byte) part, 42};
        return Harnesses.part(
                split, part, new long[n], positions, new int[n], new long[n], new long[n], events);
    }

    private static long[] late(Row part) {
        return (long[]) part.getField(EventTimeGate.LATE_WATERMARKS);
    }

    /** Watermarks and watermark statuses emitted so far, in order. */
    private static List<Object> signals(OneInputStreamOperatorTestHarness<Row, Row> h) {
        List<Object> out = new ArrayList<>();
        for (Object o : h.getOutput()) {
            if (o instanceof Watermark || o instanceof WatermarkStatus) {
                out.add(o);
            }
        }
        return out;
    }

    /** The late watermarks of the header's events, read back through one part holding all of them. */
    private static long[] decide(OneInputStreamOperatorTestHarness<Row, Row> h, String split, long... times)
            throws Exception {
        h.processElement(header(split, times), 0);
        int[] positions = new int[times.length];
        for (int i = 0; i < positions.length; i++) {
            positions[i] = i;
        }
        h.getOutput().clear();
        h.processElement(part(split, 0, positions), 0);
        List<StreamRecord<Row>> out = records(h);
        h.getOutput().clear();
        return late(out.get(0).getValue());
    }

    @Test
    void decidesLatenessPerSplitInKafkaOrderAndFillsPartsByPosition() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> h = gate()) {
            h.processElement(header("t#0", 100, 95, 89, 120, 109, 110), 0);
            assertEquals(List.of(), records(h), "headers are not emitted");
            Row p1 = part("t#0", 1, 5, 2, 4);
            Row p0 = part("t#0", 0, 0, 1, 3);
            h.processElement(p1, 0);
            h.processElement(p0, 0);
            List<StreamRecord<Row>> out = records(h);
            assertEquals(2, out.size());
            // 89 <= 100 - 10 - 1 and 109 <= 120 - 10 - 1: late with the watermark they met.
            assertArrayEquals(new long[] {NOT_LATE, 89, 109}, late(out.get(0).getValue()));
            assertArrayEquals(new long[] {NOT_LATE, NOT_LATE, NOT_LATE}, late(out.get(1).getValue()));
            Row expected = Row.copy(p1);
            expected.setField(EventTimeGate.LATE_WATERMARKS, new long[] {NOT_LATE, 89, 109});
            assertEquals(expected, out.get(0).getValue(), "only the late watermarks are filled in");
            assertArrayEquals(new byte[] {1, 42}, (byte[]) out.get(0).getValue().getField(EventTimeGate.EVENTS));
            assertEquals(120, out.get(0).getTimestamp(), "stamped with the split's max event time");
            assertEquals(120, out.get(1).getTimestamp());
            h.getOutput().clear();

            // Another split has its own watermark, however far ahead t#0 is.
            assertArrayEquals(new long[] {NOT_LATE, NOT_LATE, 39}, decide(h, "t#1", 50, 45, 39));
            // And t#0 continues from its own max, across headers.
            assertArrayEquals(new long[] {109, NOT_LATE, NOT_LATE, 139}, decide(h, "t#0", 109, 110, 150, 139));
        }
    }

    @Test
    void goldPartsGetEachEventsSplitWatermarkAtItsArrivalLateOrNot() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> h = gate()) {
            // Bound 10: watermark before each event = max so far - 11.
            h.processElement(header("t#0", 100, 95, 89, 120, 109, 110), 0);
            int[] positions = {5, 0, 2, 3, 4};
            int n = positions.length;
            Row gold = Harnesses.goldPart("t#0", 0, new long[n], positions, new int[n], new long[n],
                    new long[n], new byte[n], new long[n], new String[n], new String[n]);
            h.processElement(gold, 0);
            Row plain = Harnesses.goldPart("t#0", 0, new long[2], new int[] {5, 0}, new int[2],
                    new long[2], new long[2], null, null, null, null);
            h.processElement(plain, 0);
            List<StreamRecord<Row>> out = records(h);
            assertEquals(2, out.size());
            Row g = out.get(0).getValue();
            assertArrayEquals(
                    new long[] {109, EventTimeGate.NO_WATERMARK, 89, 89, 109},
                    (long[]) g.getField(EventTimeGate.ARRIVAL_WATERMARKS));
            assertArrayEquals(new long[] {NOT_LATE, NOT_LATE, 89, NOT_LATE, 109}, late(g));
            // A part without the gold columns (the speed layer off) gets no arrival watermarks.
            assertEquals(null, out.get(1).getValue().getField(EventTimeGate.ARRIVAL_WATERMARKS));
            assertArrayEquals(new long[] {NOT_LATE, NOT_LATE}, late(out.get(1).getValue()));
        }
    }

    @Test
    void seedsStartTheSplitsOfAStartWithoutStateAndARestoreIgnoresThem() throws Exception {
        Map<String, Long> seeds = Map.of("t#0", 1000L, "t#9", 5000L);
        OperatorSubtaskState snapshot;
        try (OneInputStreamOperatorTestHarness<Row, Row> h =
                Harnesses.oneInput(new EventTimeGate(BOUND, 0, seeds), new JobID(), 1, 0)) {
            h.open();
            // A seeded split that sends nothing here holds no watermark back (idle, like a restored one).
            h.processElement(header("t#0", 989, 990), 0);
            assertEquals(List.of(new Watermark(989)), signals(h));
            // As if the run that recorded t#0's max had gone on: 989 is behind 1000 - 10 - 1.
            assertArrayEquals(new long[] {989, NOT_LATE}, decide(h, "t#0", 989, 990));
            assertArrayEquals(new long[] {NOT_LATE}, decide(h, "t#1", 10));
            snapshot = h.snapshot(1, 0);
        }
        // A restore takes the checkpointed maxima, not the seeds.
        Map<String, Long> other = Map.of("t#0", 90_000L);
        try (OneInputStreamOperatorTestHarness<Row, Row> h =
                Harnesses.oneInput(new EventTimeGate(BOUND, 0, other), new JobID(), 1, 0)) {
            h.initializeState(snapshot);
            h.open();
            assertArrayEquals(new long[] {NOT_LATE}, decide(h, "t#0", 990));
            assertArrayEquals(new long[] {4989}, decide(h, "t#9", 4989));
        }
    }

    @Test
    void aPartUsesItsSplitsLatestHeader() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> h = gate()) {
            h.processElement(header("t#0", 100, 50), 0);
            h.processElement(header("t#1", 10), 0);
            h.processElement(part("t#0", 0, 1), 0);
            h.processElement(header("t#0", 200, 60, 190), 0);
            h.processElement(part("t#0", 0, 2, 1, 0), 0);
            h.processElement(part("t#1", 0, 0), 0);
            List<StreamRecord<Row>> out = records(h);
            assertArrayEquals(new long[] {89}, late(out.get(0).getValue()));
            assertArrayEquals(new long[] {NOT_LATE, 189, NOT_LATE}, late(out.get(1).getValue()));
            assertArrayEquals(new long[] {NOT_LATE}, late(out.get(2).getValue()));
            assertEquals(10, out.get(2).getTimestamp());
        }
    }

    @Test
    void aPartWithoutItsHeaderOrOutsideItFails() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> h = gate()) {
            h.processElement(header("t#0", 100, 50), 0);
            IllegalStateException noHeader =
                    assertThrows(IllegalStateException.class, () -> h.processElement(part("t#7", 0, 0), 0));
            assertTrue(noHeader.getMessage().contains("t#7"), noHeader.getMessage());
            assertTrue(noHeader.getMessage().contains("header"), noHeader.getMessage());
            IllegalStateException outside =
                    assertThrows(IllegalStateException.class, () -> h.processElement(part("t#0", 0, 0, 2), 0));
            assertTrue(outside.getMessage().contains("t#0"), outside.getMessage());
            assertTrue(outside.getMessage().contains("positions[1] = 2"), outside.getMessage());
            assertThrows(IllegalStateException.class, () -> h.processElement(part("t#0", 0, -1), 0));
            Row noPositions = part("t#0", 0, 0);
            noPositions.setField(EventTimeGate.POSITIONS, null);
            IllegalStateException missing =
                    assertThrows(IllegalStateException.class, () -> h.processElement(noPositions, 0));
            assertTrue(missing.getMessage().contains("positions"), missing.getMessage());
            Row badPart = header("t#0", 1);
            badPart.setField(EventTimeGate.PART, -2);
            assertThrows(IllegalStateException.class, () -> h.processElement(badPart, 0));
            Row noSplit = header("", 1);
            assertThrows(IllegalStateException.class, () -> h.processElement(noSplit, 0));
        }
    }

    @Test
    void unionStateKeepsEverySplitsMaxAcrossRescales() throws Exception {
        // Parallelism 2: subtask 0 reads t#0, subtask 1 reads t#1.
        List<OperatorSubtaskState> two = new ArrayList<>();
        try (OneInputStreamOperatorTestHarness<Row, Row> h0 = gate(0, 2, 0, null);
                OneInputStreamOperatorTestHarness<Row, Row> h1 = gate(0, 2, 1, null)) {
            decide(h0, "t#0", 1000);
            decide(h1, "t#1", 2000);
            two.add(h0.snapshot(1, 0));
            two.add(h1.snapshot(1, 0));
        }
        // 2 -> 1: one subtask has both maxima.
        OperatorSubtaskState one;
        try (OneInputStreamOperatorTestHarness<Row, Row> h = gate(0, 1, 0, rescale(two, MAX_PARALLELISM, 1, 0))) {
            assertEquals(List.of(new Watermark(1000 - BOUND - 1)), signals(h),
                    "restarts at the lowest watermark the subtasks had emitted");
            h.getOutput().clear();
            // A restored split's parts need a header after the restore.
            assertThrows(IllegalStateException.class, () -> h.processElement(part("t#1", 0, 0), 0));
            assertArrayEquals(new long[] {989, NOT_LATE}, decide(h, "t#0", 989, 990));
            assertArrayEquals(new long[] {1989, NOT_LATE}, decide(h, "t#1", 1989, 3000));
            one = h.snapshot(2, 0);
        }
        // 1 -> 2: every subtask gets every split; subtask 1 now reads t#0 and moves it on.
        List<OperatorSubtaskState> again = new ArrayList<>();
        try (OneInputStreamOperatorTestHarness<Row, Row> h0 = gate(0, 2, 0, rescale(List.of(one), MAX_PARALLELISM, 2, 0));
                OneInputStreamOperatorTestHarness<Row, Row> h1 = gate(0, 2, 1, rescale(List.of(one), MAX_PARALLELISM, 2, 1))) {
            assertArrayEquals(new long[] {2989}, decide(h0, "t#1", 2989));
            assertArrayEquals(new long[] {989}, decide(h1, "t#0", 989));
            decide(h1, "t#0", 5000);
            again.add(h0.snapshot(3, 0)); // still holds t#0 at 1000
            again.add(h1.snapshot(3, 0));
        }
        // 2 -> 1 once more: the split's reader had the highest max, and it wins over the stale copy
        // whichever comes first.
        for (List<OperatorSubtaskState> order : List.of(again, List.of(again.get(1), again.get(0)))) {
            try (OneInputStreamOperatorTestHarness<Row, Row> h = gate(0, 1, 0, rescale(order, MAX_PARALLELISM, 1, 0))) {
                assertArrayEquals(new long[] {4989, NOT_LATE}, decide(h, "t#0", 4989, 4990));
                assertArrayEquals(new long[] {2989}, decide(h, "t#1", 2989));
            }
        }
    }

    @Test
    void restoredSplitsCountForTheWatermarkOnlyOnceTheyArriveHere() throws Exception {
        OperatorSubtaskState both;
        try (OneInputStreamOperatorTestHarness<Row, Row> h = gate()) {
            decide(h, "t#0", 1000);
            decide(h, "t#1", 2000);
            both = h.snapshot(1, 0);
        }
        // After a rescale, this subtask reads only t#1: t#0 (read elsewhere) must not hold it back.
        try (OneInputStreamOperatorTestHarness<Row, Row> h = gate(0, 2, 1, rescale(List.of(both), MAX_PARALLELISM, 2, 1))) {
            assertEquals(List.of(new Watermark(989)), signals(h));
            h.getOutput().clear();
            h.processElement(header("t#1", 2500), 0);
            assertEquals(List.of(new Watermark(2489)), signals(h));
        }
    }

    @Test
    void emitsTheMinimumOverActiveSplitsAndGoesIdleOnProcessingTime() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> h = gate(100, 1, 0, null)) {
            h.setProcessingTime(0);
            decide(h, "t#0", 1000);
            assertEquals(List.of(), signals(h)); // decide() clears; check watermarks as they come
            h.processElement(header("t#1", 500), 0);
            h.processElement(header("t#0", 1100), 0);
            assertEquals(List.of(), signals(h), "t#1 holds the minimum back, never backwards");
            h.setProcessingTime(60);
            h.processElement(header("t#0", 2000), 0);
            h.setProcessingTime(100); // t#1 idle since 0: the minimum is t#0's alone
            assertEquals(List.of(new Watermark(1989)), signals(h));
            h.getOutput().clear();
            h.setProcessingTime(160); // t#0 idle too: the output is idle
            assertEquals(List.of(WatermarkStatus.IDLE), signals(h));
            h.getOutput().clear();
            h.setProcessingTime(170);
            h.processElement(header("t#1", 600), 0);
            h.processElement(part("t#1", 0, 0), 0);
            List<Object> out = new ArrayList<>(h.getOutput());
            assertEquals(WatermarkStatus.ACTIVE, out.get(0), "a record makes the output active first");
            assertTrue(out.get(1) instanceof StreamRecord, out.toString());
            assertEquals(2, out.size(), "t#1 is behind the emitted watermark: nothing moves backwards");
        }
    }

    @Test
    void theFirstWatermarkComesWithTheFirstHeader() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> h = gate()) {
            h.processElement(header("t#0", 1000, 1200), 0);
            assertEquals(List.of(new Watermark(1189)), signals(h));
            h.processElement(header("t#0"), 0); // no events: nothing changes
            assertEquals(1, signals(h).size());
        }
    }

    @Test
    void forwardsOnlyTheEndOfInputWatermark() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> h = gate()) {
            h.processWatermark(new Watermark(5));
            h.processWatermarkStatus(WatermarkStatus.IDLE);
            assertEquals(List.of(), signals(h));
            h.processWatermark(Watermark.MAX_WATERMARK);
            assertEquals(List.of(Watermark.MAX_WATERMARK), signals(h));
            h.processWatermark(Watermark.MAX_WATERMARK);
            assertEquals(1, signals(h).size());
        }
    }
}
