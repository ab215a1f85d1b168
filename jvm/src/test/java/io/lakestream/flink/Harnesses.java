package io.lakestream.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.operators.testutils.MockEnvironment;
import org.apache.flink.runtime.operators.testutils.MockEnvironmentBuilder;
import org.apache.flink.runtime.operators.testutils.MockInputSplitProvider;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.state.rocksdb.EmbeddedRocksDBStateBackend;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.AbstractStreamOperatorTestHarness;
import org.apache.flink.streaming.util.KeyedOneInputStreamOperatorTestHarness;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.types.Row;

import io.lakestream.flink.epoch.CheckpointEpochOperator;
import io.lakestream.flink.ingest.BucketKeySelector;
import io.lakestream.flink.ingest.EventTimeGate;

/** Harness construction, rescaling and row builders shared by the operator tests. */
public final class Harnesses {

    public static final int MAX_PARALLELISM = 128;

    private Harnesses() {}

    /** A task environment of one subtask of job {@code job}. */
    public static MockEnvironment env(JobID job, int maxParallelism, int parallelism, int subtask) {
        return new MockEnvironmentBuilder()
                .setTaskName("test")
                .setJobID(job)
                .setManagedMemorySize(3 * 1024 * 1024)
                .setInputSplitProvider(new MockInputSplitProvider())
                .setBufferSize(1024)
                .setMaxParallelism(maxParallelism)
                .setParallelism(parallelism)
                .setSubtaskIndex(subtask)
                .build();
    }

    public static <IN> OneInputStreamOperatorTestHarness<IN, Row> oneInput(
            OneInputStreamOperator<IN, Row> operator, JobID job, int parallelism, int subtask)
            throws Exception {
        return new OneInputStreamOperatorTestHarness<>(
                operator, env(job, MAX_PARALLELISM, parallelism, subtask));
    }

    public static KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> keyed(
            OneInputStreamOperator<Row, Row> operator,
            JobID job,
            int maxParallelism,
            int parallelism,
            int subtask,
            String backend)
            throws Exception {
        KeyedOneInputStreamOperatorTestHarness<Integer, Row, Row> harness =
                new KeyedOneInputStreamOperatorTestHarness<>(
                        operator,
                        new BucketKeySelector(maxParallelism),
                        Types.INT,
                        env(job, maxParallelism, parallelism, subtask));
        harness.setStateBackend(backend(backend));
        return harness;
    }

    public static StateBackend backend(String name) {
        switch (name) {
            case "hashmap":
                return new HashMapStateBackend();
            case "rocksdb":
                return new EmbeddedRocksDBStateBackend();
            default:
                throw new IllegalArgumentException(name);
        }
    }

    /** The state subtask {@code subtask} of {@code newParallelism} gets from these snapshots. */
    public static OperatorSubtaskState rescale(
            List<OperatorSubtaskState> snapshots, int maxParallelism, int newParallelism, int subtask)
            throws Exception {
        OperatorSubtaskState merged =
                AbstractStreamOperatorTestHarness.repackageState(
                        snapshots.toArray(new OperatorSubtaskState[0]));
        return AbstractStreamOperatorTestHarness.repartitionOperatorState(
                merged, maxParallelism, snapshots.size(), newParallelism, subtask);
    }

    // ---- marker rows (CheckpointEpochOperator.outputType)

    public static int kind(Row marker) {
        return (Integer) marker.getField(0);
    }

    public static long checkpointId(Row marker) {
        return (Long) marker.getField(1);
    }

    public static String runId(Row marker) {
        return (String) marker.getField(4);
    }

    public static Row payload(Row marker) {
        return (Row) marker.getField(5);
    }

    /** The marker rows emitted so far, and clears the output. */
    public static List<Row> drain(AbstractStreamOperatorTestHarness<Row> harness) {
        List<Row> rows = new ArrayList<>(harness.extractOutputValues());
        harness.getOutput().clear();
        return rows;
    }

    /** The records emitted so far, in order, without watermarks and statuses (the output is kept). */
    public static List<StreamRecord<Row>> records(AbstractStreamOperatorTestHarness<Row> harness) {
        List<StreamRecord<Row>> out = new ArrayList<>();
        for (Object o : harness.getOutput()) {
            if (o instanceof StreamRecord) {
                @SuppressWarnings("unchecked")
                StreamRecord<Row> r = (StreamRecord<Row>) o;
                out.add(r);
            }
        }
        return out;
    }

    /** The kinds of the marker rows, in order. */
    public static List<Integer> kinds(List<Row> markers) {
        List<Integer> kinds = new ArrayList<>();
        for (Row m : markers) {
            kinds.add(kind(m));
        }
        return kinds;
    }

    /** The DATA payloads among the marker rows, in order. */
    public static List<Row> payloads(List<Row> markers) {
        List<Row> out = new ArrayList<>();
        for (Row m : markers) {
            if (kind(m) == CheckpointEpochOperator.DATA) {
                out.add(payload(m));
            }
        }
        return out;
    }

    public static void assertOpen(Row marker, long restored, String runId, int subtask, int parallelism) {
        assertEquals(
                Row.of(CheckpointEpochOperator.OPEN, restored, subtask, parallelism, runId, null), marker);
    }

    // ---- gate rows (standardise's BATCH_TYPE)

    public static Row header(String split, long... eventTimes) {
        return Row.of(split, EventTimeGate.HEADER, eventTimes, new int[0], new int[0], new long[0],
                new long[0], null, null);
    }

    /** A part row; ids are {@code (hi, lo)} pairs, buckets per event. */
    public static Row part(
            String split, int part, long[] eventTimes, int[] positions, int[] buckets, long[] idHi,
            long[] idLo, byte[] events) {
        return Row.of(split, part, eventTimes, positions, buckets, idHi, idLo, null, events);
    }

    /**
     * A part row with the speed layer's columns: per event its kind, amount in fen (or {@link
     * EventTimeGate#NO_AMOUNT}), order and user ids; arrival watermarks left for the gate.
     */
    public static Row goldPart(
            String split, int part, long[] eventTimes, int[] positions, int[] buckets, long[] idHi,
            long[] idLo, byte[] kinds, long[] amounts, String[] orders, String[] users) {
        Row row = new Row(EventTimeGate.GOLD_ARITY);
        Row base = part(split, part, eventTimes, positions, buckets, idHi, idLo, new byte[] {1});
        for (int i = 0; i < base.getArity(); i++) {
            row.setField(i, base.getField(i));
        }
        row.setField(EventTimeGate.GOLD_KINDS, kinds);
        row.setField(EventTimeGate.GOLD_AMOUNTS, amounts);
        row.setField(EventTimeGate.GOLD_ORDER_IDS, orders);
        row.setField(EventTimeGate.GOLD_USER_IDS, users);
        return row;
    }

    public static StreamRecord<Row> record(Row row) {
        return new StreamRecord<>(row);
    }
}
