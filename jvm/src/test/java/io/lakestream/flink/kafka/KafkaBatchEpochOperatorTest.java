package io.lakestream.flink.kafka;

import static io.lakestream.flink.Harnesses.drain;
import static io.lakestream.flink.Harnesses.kinds;
import static io.lakestream.flink.Harnesses.payloads;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.DATA;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.END_OF_INPUT;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.OPEN;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.PRECOMMIT;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.functions.util.ListCollector;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.flink.kafka.shaded.org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.flink.kafka.shaded.org.apache.kafka.common.record.TimestampType;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.types.Row;
import org.junit.jupiter.api.Test;

import io.lakestream.flink.Harnesses;

class KafkaBatchEpochOperatorTest {

    private static OneInputStreamOperatorTestHarness<Row, Row> open(int maxRecords, long maxDelayMillis)
            throws Exception {
        OneInputStreamOperatorTestHarness<Row, Row> harness =
                Harnesses.oneInput(
                        new KafkaBatchEpochOperator(maxRecords, maxDelayMillis), new JobID(), 1, 0);
        harness.open();
        return harness;
    }

    private static Row record(String topic, int partition, long offset, String value) {
        return Row.of(
                topic, partition, offset, 1000 + offset, null,
                value == null ? null : value.getBytes(StandardCharsets.UTF_8));
    }

    private static long[] offsets(Row batch) {
        return (long[]) batch.getField(2);
    }

    @Test
    void flushesAtBatchSize() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> harness = open(3, 60_000)) {
            for (long offset = 0; offset < 7; offset++) {
                harness.processElement(record("t", 0, offset, "v" + offset), 0);
            }
            List<Row> out = drain(harness);
            assertEquals(List.of(OPEN, DATA, DATA), kinds(out));
            List<Row> batches = payloads(out);
            assertArrayEquals(new long[] {0, 1, 2}, offsets(batches.get(0)));
            assertArrayEquals(new long[] {3, 4, 5}, offsets(batches.get(1)));
            assertArrayEquals(new long[] {1003, 1004, 1005}, (long[]) batches.get(1).getField(3));
            assertArrayEquals(
                    "v3v4v5".getBytes(StandardCharsets.UTF_8), (byte[]) batches.get(1).getField(7));
            assertArrayEquals(new int[] {2, 2, 2}, (int[]) batches.get(1).getField(6));
            harness.endInput();
            assertArrayEquals(new long[] {6}, offsets(payloads(drain(harness)).get(0)));
        }
    }

    @Test
    void flushesEveryOpenBatchBeforeTheBarrier() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> harness = open(100, 60_000)) {
            harness.processElement(record("t", 0, 10, "a"), 0);
            harness.processElement(record("t", 1, 20, "b"), 0);
            harness.processElement(record("t", 0, 11, "c"), 0);
            drain(harness);
            harness.prepareSnapshotPreBarrier(5);
            List<Row> out = drain(harness);
            assertEquals(List.of(DATA, DATA, PRECOMMIT), kinds(out));
            assertEquals(5L, Harnesses.checkpointId(out.get(2)));
            List<Row> batches = payloads(out);
            assertEquals(Row.of("t", 0), Row.project(batches.get(0), new int[] {0, 1}));
            assertArrayEquals(new long[] {10, 11}, offsets(batches.get(0)));
            assertEquals(Row.of("t", 1), Row.project(batches.get(1), new int[] {0, 1}));
            assertArrayEquals(new long[] {20}, offsets(batches.get(1)));
            // Nothing is left for after the barrier.
            harness.snapshot(5, 0);
            harness.endInput();
            assertEquals(List.of(END_OF_INPUT), kinds(drain(harness)));
        }
    }

    @Test
    void flushesOnTheProcessingTimeDelay() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> harness = open(100, 50)) {
            harness.setProcessingTime(10);
            harness.processElement(record("t", 0, 0, "a"), 0);
            drain(harness);
            harness.setProcessingTime(49);
            assertEquals(List.of(), kinds(drain(harness)));
            harness.setProcessingTime(50);
            List<Row> out = drain(harness);
            assertEquals(List.of(DATA), kinds(out));
            assertArrayEquals(new long[] {0}, offsets(payloads(out).get(0)));
            // The timer re-arms: the next record goes out one delay later.
            harness.processElement(record("t", 0, 1, "b"), 0);
            harness.setProcessingTime(100);
            assertEquals(List.of(DATA), kinds(drain(harness)));
        }
    }

    @Test
    void endOfInputFlushesFirst() throws Exception {
        try (OneInputStreamOperatorTestHarness<Row, Row> harness = open(100, 60_000)) {
            harness.processElement(record("t", 0, 0, "a"), 0);
            drain(harness);
            harness.endInput();
            List<Row> out = drain(harness);
            assertEquals(List.of(DATA, END_OF_INPUT), kinds(out));
        }
    }

    @Test
    void nullKeysAndValuesRoundTripAsLengthMinusOne() throws Exception {
        KafkaRecordToRow schema = new KafkaRecordToRow();
        List<Row> rows = new ArrayList<>();
        ListCollector<Row> collector = new ListCollector<>(rows);
        schema.deserialize(kafka("t", 3, 0, null, null), collector);
        schema.deserialize(kafka("t", 3, 1, "k1", "value1"), collector);
        schema.deserialize(kafka("t", 3, 2, "", null), collector);
        schema.deserialize(kafka("t", 3, 3, null, "v3"), collector);
        assertEquals(Row.of("t", 3, 0L, 7000L, null, null), rows.get(0));
        assertEquals(4, rows.size());
        try (OneInputStreamOperatorTestHarness<Row, Row> harness = open(100, 60_000)) {
            for (Row row : rows) {
                harness.processElement(row, 0);
            }
            harness.endInput();
            Row batch = payloads(drain(harness)).get(0);
            assertEquals(KafkaBatchEpochOperator.batchType().getArity(), batch.getArity());
            assertArrayEquals(new long[] {0, 1, 2, 3}, offsets(batch));
            assertArrayEquals(new long[] {7000, 7001, 7002, 7003}, (long[]) batch.getField(3));
            assertArrayEquals(new int[] {-1, 2, 0, -1}, (int[]) batch.getField(4));
            assertArrayEquals("k1".getBytes(StandardCharsets.UTF_8), (byte[]) batch.getField(5));
            assertArrayEquals(new int[] {-1, 6, -1, 2}, (int[]) batch.getField(6));
            assertArrayEquals("value1v3".getBytes(StandardCharsets.UTF_8), (byte[]) batch.getField(7));
        }
    }

    @Test
    void rejectsNonsenseSettings() {
        assertThrows(IllegalArgumentException.class, () -> new KafkaBatchEpochOperator(0, 10));
        assertThrows(IllegalArgumentException.class, () -> new KafkaBatchEpochOperator(10, 0));
    }

    private static ConsumerRecord<byte[], byte[]> kafka(
            String topic, int partition, long offset, String key, String value) {
        byte[] k = key == null ? null : key.getBytes(StandardCharsets.UTF_8);
        byte[] v = value == null ? null : value.getBytes(StandardCharsets.UTF_8);
        return new ConsumerRecord<>(
                topic, partition, offset, 7000 + offset, TimestampType.CREATE_TIME,
                k == null ? -1 : k.length, v == null ? -1 : v.length, k, v, new RecordHeaders(),
                Optional.empty());
    }
}
