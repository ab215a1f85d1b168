package io.lakestream.flink.gold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.KeyedOneInputStreamOperatorTestHarness;
import org.apache.flink.types.Row;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import io.lakestream.flink.Harnesses;

class GoldWindowAggregateTest {

    private static final long W = 300_000;
    private static final long TTL = 60_000;
    private static final long LATENESS = 600_000;

    private static KeyedOneInputStreamOperatorTestHarness<Long, Row, Row> harness(
            String backend, OperatorSubtaskState restore, long now) throws Exception {
        KeyedOneInputStreamOperatorTestHarness<Long, Row, Row> h =
                new KeyedOneInputStreamOperatorTestHarness<>(
                        new GoldWindowAggregate(W, LATENESS, TTL, GoldLatenessGateTest.metrics()),
                        GoldWindowAggregate.BY_WINDOW_START,
                        Types.LONG,
                        Harnesses.env(new JobID(), Harnesses.MAX_PARALLELISM, 1, 0));
        h.setup(GoldWindowAggregate.outputType(GoldLatenessGateTest.metrics())
                .createSerializer(new org.apache.flink.api.common.serialization.SerializerConfigImpl()));
        h.setStateBackend(Harnesses.backend(backend));
        h.setStateTtlProcessingTime(now);
        if (restore != null) {
            h.initializeState(restore);
        }
        h.open();
        return h;
    }

    /** A partial of window {@code start}: events, payments, gmv in fen; orders created; users. */
    private static Row partial(long start, long events, long payments, long gmv, String[] orders, String[] users) {
        return Row.of(start, new long[] {events, 0, payments, gmv, 0}, new String[][] {orders, users});
    }

    private static List<Row> rows(KeyedOneInputStreamOperatorTestHarness<Long, Row, Row> h) {
        List<Row> out = new ArrayList<>();
        for (Object o : h.getOutput()) {
            if (o instanceof StreamRecord) {
                out.add((Row) ((StreamRecord<?>) o).getValue());
            }
        }
        h.getOutput().clear();
        return out;
    }

    private static String text(Row row) {
        return row.getKind().shortString() + " " + row.getField("window_start") + "-" + row.getField("window_end")
                + " events=" + row.getField("events") + " orders_created=" + row.getField("orders_created")
                + " payments=" + row.getField("payments") + " gmv=" + row.getField("gmv")
                + " active_users=" + row.getField("active_users");
    }

    @ParameterizedTest
    @ValueSource(strings = {"hashmap", "rocksdb"})
    void mergesPartialsCountingEachDistinctValueOnceAcrossPartialsAndRestores(String backend) throws Exception {
        OperatorSubtaskState state;
        try (KeyedOneInputStreamOperatorTestHarness<Long, Row, Row> h = harness(backend, null, 0)) {
            h.processElement(partial(W, 3, 1, 250, new String[] {"a"}, new String[] {"x", "y"}), 0);
            h.processElement(partial(2 * W, 1, 0, 0, new String[] {}, new String[] {"x"}), 0);
            h.processElement(partial(W, 2, 2, 1_000, new String[] {"a", "b"}, new String[] {"y", "z"}), 0);
            List<Row> out = rows(h);
            assertEquals("+I 300000-600000 events=3 orders_created=1 payments=1 gmv=250 active_users=2", text(out.get(0)));
            assertEquals("+I 600000-900000 events=1 orders_created=0 payments=0 gmv=0 active_users=1", text(out.get(1)));
            assertEquals("+U 300000-600000 events=5 orders_created=2 payments=3 gmv=1250 active_users=3", text(out.get(2)));
            assertEquals(3, out.size());
            h.prepareSnapshotPreBarrier(1);
            state = h.snapshot(1, 0);
        }
        try (KeyedOneInputStreamOperatorTestHarness<Long, Row, Row> h = harness(backend, state, 1)) {
            h.processElement(partial(W, 1, 0, 0, new String[] {"b", "c"}, new String[] {"x", "w"}), 0);
            List<Row> out = rows(h);
            assertEquals("+U 300000-600000 events=6 orders_created=3 payments=3 gmv=1250 active_users=4", text(out.get(0)));
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"hashmap", "rocksdb"})
    void aWindowWhoseStateExpiredStartsAgainFromNothing(String backend) throws Exception {
        OperatorSubtaskState state;
        try (KeyedOneInputStreamOperatorTestHarness<Long, Row, Row> h = harness(backend, null, 0)) {
            h.processElement(partial(W, 1, 0, 0, new String[] {"a"}, new String[] {"x"}), 0);
            h.setStateTtlProcessingTime(TTL / 2);
            h.processElement(partial(W, 1, 0, 0, new String[] {}, new String[] {"x", "y"}), 0);
            h.processElement(partial(2 * W, 1, 0, 0, new String[] {}, new String[] {"x"}), 0);
            h.prepareSnapshotPreBarrier(1);
            state = h.snapshot(1, TTL / 2);
            // Nothing was written since TTL / 2: at 3 * TTL both windows have expired.
            h.setStateTtlProcessingTime(3 * TTL);
            h.setProcessingTime(3 * TTL);
            h.processElement(partial(W, 1, 0, 0, new String[] {"a"}, new String[] {"y"}), 0);
            List<Row> out = rows(h);
            assertEquals("+U 300000-600000 events=2 orders_created=1 payments=0 gmv=0 active_users=2", text(out.get(1)));
            assertEquals("+I 300000-600000 events=1 orders_created=1 payments=0 gmv=0 active_users=1", text(out.get(3)));
        }
        // The same after a restore: the expired window's list is not read back.
        try (KeyedOneInputStreamOperatorTestHarness<Long, Row, Row> h = harness(backend, state, 3 * TTL)) {
            h.processElement(partial(W, 1, 0, 0, new String[] {"a"}, new String[] {"y"}), 0);
            assertEquals(
                    "+I 300000-600000 events=1 orders_created=1 payments=0 gmv=0 active_users=1", text(rows(h).get(0)));
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"hashmap", "rocksdb"})
    void restoredWindowsReadTheirIdsBackAcrossSeveralCheckpoints(String backend) throws Exception {
        OperatorSubtaskState state;
        try (KeyedOneInputStreamOperatorTestHarness<Long, Row, Row> h = harness(backend, null, 0)) {
            h.processElement(partial(W, 2, 0, 0, new String[] {"a", "b"}, new String[] {"x"}), 0);
            h.prepareSnapshotPreBarrier(1);
            h.snapshot(1, 0);
            h.processElement(partial(W, 2, 0, 0, new String[] {"b", "c"}, new String[] {"x", "y"}), 0);
            h.prepareSnapshotPreBarrier(2);
            h.snapshot(2, 0);
            // Nothing new for W: no element is appended for it; W2 gets its first.
            h.processElement(partial(W, 1, 0, 0, new String[] {"a"}, new String[] {"y"}), 0);
            h.processElement(partial(2 * W, 1, 0, 0, new String[] {"a"}, new String[] {"y"}), 0);
            h.prepareSnapshotPreBarrier(3);
            state = h.snapshot(3, 0);
            // Not in the snapshot: d and z.
            h.processElement(partial(W, 1, 0, 0, new String[] {"d"}, new String[] {"z"}), 0);
        }
        for (int round = 0; round < 2; round++) {
            try (KeyedOneInputStreamOperatorTestHarness<Long, Row, Row> h = harness(backend, state, 1)) {
                h.processElement(partial(W, 1, 0, 0, new String[] {"a", "c", "d"}, new String[] {"x", "z"}), 0);
                h.processElement(partial(2 * W, 1, 0, 0, new String[] {"a", "b"}, new String[] {"y"}), 0);
                List<Row> out = rows(h);
                assertEquals("+U 300000-600000 events=6 orders_created=4 payments=0 gmv=0 active_users=3", text(out.get(0)));
                assertEquals("+U 600000-900000 events=2 orders_created=2 payments=0 gmv=0 active_users=1", text(out.get(1)));
            }
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"hashmap", "rocksdb"})
    void aClosedWindowLeavesMemoryAtTheBarrierAndReadsItsIdsBackIfAPartialStillComes(String backend)
            throws Exception {
        try (KeyedOneInputStreamOperatorTestHarness<Long, Row, Row> h = harness(backend, null, 0)) {
            h.processElement(partial(W, 2, 0, 0, new String[] {"a", "b"}, new String[] {"x"}), 0);
            h.processElement(partial(2 * W, 1, 0, 0, new String[] {"a"}, new String[] {"x"}), 0);
            // W's lateness ends at 2W + LATENESS; the watermark one ms short of it keeps both open.
            h.processWatermark(2 * W + LATENESS - 1);
            h.prepareSnapshotPreBarrier(1);
            h.snapshot(1, 0);
            assertEquals(2, ((GoldWindowAggregate) h.getOperator()).openWindows());
            h.processElement(partial(W, 1, 0, 0, new String[] {"c"}, new String[] {"y"}), 0);
            h.processWatermark(2 * W + LATENESS);
            // Not yet: memory is given back at the barrier, after c and y went to state.
            assertEquals(2, ((GoldWindowAggregate) h.getOperator()).openWindows());
            h.prepareSnapshotPreBarrier(2);
            h.snapshot(2, 0);
            assertEquals(1, ((GoldWindowAggregate) h.getOperator()).openWindows());
            rows(h);
            h.processElement(partial(W, 1, 0, 0, new String[] {"a", "c", "d"}, new String[] {"x", "y", "z"}), 0);
            assertEquals(
                    "+U 300000-600000 events=4 orders_created=4 payments=0 gmv=0 active_users=3", text(rows(h).get(0)));
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"hashmap"})
    void aSumBeyondTheTablesDecimalFailsNamingTheMetric(String backend) throws Exception {
        try (KeyedOneInputStreamOperatorTestHarness<Long, Row, Row> h = harness(backend, null, 0)) {
            h.processElement(partial(W, 1, 1, GoldMetrics.MAX_FEN, new String[] {}, new String[] {}), 0);
            ArithmeticException e =
                    assertThrows(
                            ArithmeticException.class,
                            () -> h.processElement(partial(W, 1, 1, 1, new String[] {}, new String[] {}), 0));
            assertTrue(e.getMessage().contains("gold metric gmv"), e.getMessage());
            assertTrue(e.getMessage().contains("decimal(18, 2)"), e.getMessage());
        }
    }

    @org.junit.jupiter.api.Test
    void refusesMetricsTheSpeedLayerCannotComputeNamingThem() {
        IllegalArgumentException e =
                assertThrows(
                        IllegalArgumentException.class,
                        () -> new GoldMetrics(
                                new String[] {"big"}, new int[] {-1}, new String[] {"sum"}, new String[] {"user_id"}));
        assertTrue(e.getMessage().contains("gold metric big"), e.getMessage());
        assertThrows(
                IllegalArgumentException.class,
                () -> new GoldMetrics(
                        new String[] {"a", "a"}, new int[] {-1, -1}, new String[] {"count", "count"},
                        new String[] {null, null}));
        assertThrows(
                IllegalArgumentException.class,
                () -> new GoldWindowAggregate(0, LATENESS, TTL, GoldLatenessGateTest.metrics()));
        assertThrows(
                IllegalArgumentException.class,
                () -> new GoldWindowAggregate(W, -1, TTL, GoldLatenessGateTest.metrics()));
    }
}
