package io.lakestream.flink.kafka;

import java.io.ByteArrayOutputStream;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;

import io.lakestream.flink.epoch.CheckpointEpochOperator;

/**
 * Packs Kafka records into one DATA row per source partition and batch ({@link #batchType()}), with
 * the checkpoint markers of {@link CheckpointEpochOperator}.
 *
 * <p>Why: every record that crosses into a Python worker pays a fixed cost (framing, coders, a Python
 * call); a batch crosses once. A batch holds one split's records in offset order, so per-partition
 * order survives, and it is flushed before PRECOMMIT(n), so it never straddles a checkpoint barrier.
 */
public class KafkaBatchEpochOperator extends CheckpointEpochOperator<Row>
        implements ProcessingTimeCallback {

    private static final long serialVersionUID = 1L;

    /** Records that fill a batch (it is flushed then). */
    private final int maxRecords;
    /** Processing time between flushes of every open batch, so a slow stream still moves. */
    private final long maxDelayMillis;

    private transient Map<String, Batch> open;

    /** Growable columns of one split's pending records. */
    private static final class Batch {
        final String topic;
        final int partition;
        int size;
        long[] offsets = new long[64];
        long[] timestamps = new long[64];
        int[] keyLengths = new int[64];
        int[] valueLengths = new int[64];
        final ByteArrayOutputStream keys = new ByteArrayOutputStream();
        final ByteArrayOutputStream values = new ByteArrayOutputStream(1 << 16);

        Batch(String topic, int partition) {
            this.topic = topic;
            this.partition = partition;
        }

        void add(long offset, long timestamp, byte[] key, byte[] value) {
            if (size == offsets.length) {
                int n = size * 2;
                offsets = Arrays.copyOf(offsets, n);
                timestamps = Arrays.copyOf(timestamps, n);
                keyLengths = Arrays.copyOf(keyLengths, n);
                valueLengths = Arrays.copyOf(valueLengths, n);
            }
            offsets[size] = offset;
            timestamps[size] = timestamp;
            keyLengths[size] = key == null ? -1 : key.length;
            valueLengths[size] = value == null ? -1 : value.length;
            if (key != null) {
                keys.write(key, 0, key.length);
            }
            if (value != null) {
                values.write(value, 0, value.length);
            }
            size++;
        }

        Row toRow() {
            return Row.of(
                    topic,
                    partition,
                    Arrays.copyOf(offsets, size),
                    Arrays.copyOf(timestamps, size),
                    Arrays.copyOf(keyLengths, size),
                    keys.toByteArray(),
                    Arrays.copyOf(valueLengths, size),
                    values.toByteArray());
        }

        void clear() {
            size = 0;
            keys.reset();
            values.reset();
        }
    }

    public KafkaBatchEpochOperator(int maxRecords, long maxDelayMillis) {
        if (maxRecords < 1) {
            throw new IllegalArgumentException(
                    "flink.batch_size must be at least 1 record, got " + maxRecords);
        }
        if (maxDelayMillis < 1) {
            throw new IllegalArgumentException(
                    "flink.batch_time must be at least 1 ms, got " + maxDelayMillis + " ms");
        }
        this.maxRecords = maxRecords;
        this.maxDelayMillis = maxDelayMillis;
    }

    /**
     * The DATA payload type, one batch of one split: {@code (topic, partition, offsets[],
     * timestamps[], key_lengths[], keys, value_lengths[], values)}, keys and values concatenated, a
     * length of -1 for null. Input rows are those of {@link KafkaRecordToRow}.
     */
    public static RowTypeInfo batchType() {
        return new RowTypeInfo(
                new TypeInformation<?>[] {
                    Types.STRING,
                    Types.INT,
                    Types.PRIMITIVE_ARRAY(Types.LONG),
                    Types.PRIMITIVE_ARRAY(Types.LONG),
                    Types.PRIMITIVE_ARRAY(Types.INT),
                    Types.PRIMITIVE_ARRAY(Types.BYTE),
                    Types.PRIMITIVE_ARRAY(Types.INT),
                    Types.PRIMITIVE_ARRAY(Types.BYTE)
                },
                new String[] {
                    "topic",
                    "partition",
                    "offsets",
                    "timestamps",
                    "key_lengths",
                    "keys",
                    "value_lengths",
                    "values"
                });
    }

    /** The operator's output type: markers carrying {@link #batchType()} payloads. */
    public static RowTypeInfo markedBatchType() {
        return outputType(batchType());
    }

    @Override
    public void open() throws Exception {
        super.open();
        open = new LinkedHashMap<>();
        long now = getProcessingTimeService().getCurrentProcessingTime();
        getProcessingTimeService().registerTimer(now + maxDelayMillis, this);
    }

    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        emitOpen();
        Row r = element.getValue();
        String topic = (String) r.getField(0);
        int partition = (Integer) r.getField(1);
        String split = topic + "#" + partition;
        Batch batch = open.get(split);
        if (batch == null) {
            batch = new Batch(topic, partition);
            open.put(split, batch);
        }
        batch.add(
                (Long) r.getField(2),
                (Long) r.getField(3),
                (byte[]) r.getField(4),
                (byte[]) r.getField(5));
        if (batch.size >= maxRecords) {
            flush(batch);
        }
    }

    private void flush(Batch batch) {
        if (batch.size == 0) {
            return;
        }
        emit(DATA, -1L, batch.toRow());
        batch.clear();
    }

    /** Emits every open batch. */
    @Override
    protected void flush() {
        if (open == null) {
            return;
        }
        for (Batch batch : open.values()) {
            flush(batch);
        }
    }

    @Override
    public void onProcessingTime(long time) throws Exception {
        flush();
        long now = getProcessingTimeService().getCurrentProcessingTime();
        getProcessingTimeService().registerTimer(now + maxDelayMillis, this);
    }
}
