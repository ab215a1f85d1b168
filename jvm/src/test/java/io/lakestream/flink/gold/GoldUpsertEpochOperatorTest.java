package io.lakestream.flink.gold;

import static io.lakestream.flink.Harnesses.drain;
import static io.lakestream.flink.Harnesses.kinds;
import static io.lakestream.flink.Harnesses.payloads;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.DATA;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.END_OF_INPUT;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.OPEN;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.PRECOMMIT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.math.BigDecimal;
import java.time.LocalDateTime;
import java.util.List;

import org.apache.flink.api.common.JobID;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.types.Row;
import org.apache.flink.types.RowKind;
import org.junit.jupiter.api.Test;

import io.lakestream.flink.Harnesses;

class GoldUpsertEpochOperatorTest {

    private static final String[] FIELDS = {"window_start", "window_end", "events", "gmv"};

    private static OneInputStreamOperatorTestHarness<Row, Row> harness() throws Exception {
        OneInputStreamOperatorTestHarness<Row, Row> h =
                Harnesses.oneInput(new GoldUpsertEpochOperator("window_start", "window_end", FIELDS, 2), new JobID(), 1, 0);
        h.open();
        return h;
    }

    /** A changelog row as to_changelog_stream makes it: named positions. */
    private static Row change(RowKind kind, int minute, long events, String gmv) {
        Row row = Row.withNames(kind);
        row.setField("window_start", LocalDateTime.of(2026, 1, 1, 0, minute));
        row.setField("window_end", LocalDateTime.of(2026, 1, 1, 0, minute + 5));
        row.setField("events", events);
        row.setField("gmv", new BigDecimal(gmv));
        return row;
    }

    private static long ms(int minute) {
        return LocalDateTime.of(2026, 1, 1, 0, minute).toInstant(java.time.ZoneOffset.UTC).toEpochMilli();
    }

    @Test
    void keepsTheNewestUpdatePerWindowAndEmitsItStampedRightBeforePrecommit() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> h = harness()) {
            drain(h); // OPEN
            h.setProcessingTime(5_000);
            h.processElement(change(RowKind.INSERT, 0, 1, "1.50"), 0);
            h.processElement(change(RowKind.INSERT, 5, 1, "0.00"), 0);
            h.processElement(change(RowKind.UPDATE_BEFORE, 0, 1, "1.50"), 0);
            h.processElement(change(RowKind.UPDATE_AFTER, 0, 2, "3.00"), 0);
            h.processWatermark(new Watermark(ms(4)));
            assertEquals(List.of(), payloads(drain(h)).subList(0, 0));
            h.prepareSnapshotPreBarrier(1);
            List<Row> out = drain(h);
            assertEquals(List.of(DATA, DATA, PRECOMMIT), kinds(out));
            List<Row> rows = payloads(out);
            // In the order of their latest update; data_time = the watermark, updated_at = now.
            assertEquals(Row.of(ms(5), ms(10), 1L, 0L, ms(4), 5_000L), rows.get(0));
            assertEquals(Row.of(ms(0), ms(5), 2L, 300L, ms(4), 5_000L), rows.get(1));
            // Nothing new: nothing again.
            h.prepareSnapshotPreBarrier(2);
            assertEquals(List.of(PRECOMMIT), kinds(drain(h)));
        }
    }

    @Test
    void theEndOfInputFlushesStampedWithTheLatestWindowEnd() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> h = harness()) {
            h.processElement(change(RowKind.INSERT, 10, 1, "2.00"), 0);
            h.processWatermark(new Watermark(ms(3)));
            h.prepareSnapshotPreBarrier(1);
            h.processElement(change(RowKind.INSERT, 0, 1, "1.00"), 0);
            h.processWatermark(Watermark.MAX_WATERMARK);
            h.setProcessingTime(9);
            h.endInput();
            List<Row> out = drain(h);
            assertEquals(List.of(OPEN, DATA, PRECOMMIT, DATA, END_OF_INPUT), kinds(out));
            assertEquals(Row.of(ms(10), ms(15), 1L, 200L, ms(3), 0L), payloads(out).get(0));
            // After the final watermark every window is complete: up to the latest end seen.
            assertEquals(Row.of(ms(0), ms(5), 1L, 100L, ms(15), 9L), payloads(out).get(1));
        }
        try (OneInputStreamOperatorTestHarness<Row, Row> h = harness()) {
            h.processElement(change(RowKind.INSERT, 0, 1, "1.00"), 0);
            h.endInput();
            // END_OF_INPUT completes every window, also without the final watermark before it.
            assertEquals(Row.of(ms(0), ms(5), 1L, 100L, ms(5), 0L), payloads(drain(h)).get(0));
        }
    }

    @Test
    void asATwoInputOperatorTheStampIsTheWatermarkOfTheSecondInput() throws Exception {
        GoldUpsertEpochOperator op = new GoldUpsertEpochOperator("window_start", "window_end", FIELDS, 2, 2);
        try (org.apache.flink.streaming.util.TwoInputStreamOperatorTestHarness<Row, Row, Row> h =
                new org.apache.flink.streaming.util.TwoInputStreamOperatorTestHarness<>(op)) {
            h.open();
            h.setProcessingTime(7);
            h.processElement1(change(RowKind.INSERT, 0, 1, "1.00"), 0);
            // Processing-time marks of the SQL's mini-batch on input 1 do not count.
            h.processWatermark1(new Watermark(ms(50)));
            h.processWatermark2(new Watermark(ms(2)));
            h.prepareSnapshotPreBarrier(1);
            List<Row> out = Harnesses.drain(h);
            assertEquals(List.of(OPEN, DATA, PRECOMMIT), kinds(out));
            assertEquals(Row.of(ms(0), ms(5), 1L, 100L, ms(2), 7L), payloads(out).get(0));
            // Flink calls BoundedOneInput.endInput() once per ended input; the watermark input may end
            // first: the end of input is the end of both.
            op.endInput();
            h.processElement1(change(RowKind.UPDATE_AFTER, 0, 2, "1.00"), 0);
            assertEquals(List.of(), kinds(Harnesses.drain(h)));
            op.endInput();
            assertEquals(List.of(DATA, END_OF_INPUT), kinds(Harnesses.drain(h)));
        }
    }

    @Test
    void refusesAKeyOutsideTheFieldsAndValuesItCannotExport() throws Exception {
        assertThrows(IllegalArgumentException.class,
                () -> new GoldUpsertEpochOperator("nope", "window_end", FIELDS, 2));
        try (OneInputStreamOperatorTestHarness<Row, Row> h = harness()) {
            Row row = change(RowKind.INSERT, 0, 1, "1.005");
            h.processElement(row, 0);
            assertThrows(ArithmeticException.class, () -> h.prepareSnapshotPreBarrier(1));
        }
    }
}
