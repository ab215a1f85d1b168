package io.lakestream.flink.epoch;

import static io.lakestream.flink.Harnesses.MAX_PARALLELISM;
import static io.lakestream.flink.Harnesses.assertOpen;
import static io.lakestream.flink.Harnesses.drain;
import static io.lakestream.flink.Harnesses.rescale;
import static io.lakestream.flink.Harnesses.runId;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.COMMIT;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.DATA;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.END_OF_INPUT;
import static io.lakestream.flink.epoch.CheckpointEpochOperator.PRECOMMIT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.JobID;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.operators.testutils.MockEnvironment;
import org.apache.flink.runtime.operators.testutils.MockEnvironmentBuilder;
import org.apache.flink.runtime.operators.testutils.MockInputSplitProvider;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.types.Row;
import org.apache.flink.util.ParameterTool;
import org.junit.jupiter.api.Test;

import io.lakestream.flink.Harnesses;

class CheckpointEpochOperatorTest {

    private static OneInputStreamOperatorTestHarness<String, Row> harness(
            JobID job, int parallelism, int subtask) throws Exception {
        return Harnesses.oneInput(new CheckpointEpochOperator<String>(), job, parallelism, subtask);
    }

    /** Subtask 0 of {@code parallelism} in a new job whose client set the run id parameter. */
    private static OneInputStreamOperatorTestHarness<String, Row> withRunIdParameter(
            String runId, int parallelism) throws Exception {
        ExecutionConfig config = new ExecutionConfig();
        config.setGlobalJobParameters(
                ParameterTool.fromMap(Map.of(CheckpointEpochOperator.RUN_ID_PARAMETER, runId)));
        MockEnvironment env =
                new MockEnvironmentBuilder()
                        .setTaskName("test")
                        .setJobID(new JobID())
                        .setExecutionConfig(config)
                        .setManagedMemorySize(3 * 1024 * 1024)
                        .setInputSplitProvider(new MockInputSplitProvider())
                        .setBufferSize(1024)
                        .setMaxParallelism(MAX_PARALLELISM)
                        .setParallelism(parallelism)
                        .setSubtaskIndex(0)
                        .build();
        return new OneInputStreamOperatorTestHarness<>(new CheckpointEpochOperator<String>(), env);
    }

    @Test
    void aFreshStartTakesTheClientsRunIdParameter() throws Exception {
        try (OneInputStreamOperatorTestHarness<String, Row> h = withRunIdParameter("0123abcd", 2)) {
            h.open();
            assertOpen(drain(h).get(0), -1, "0123abcd", 0, 2);
        }
    }

    @Test
    void markersComeInOrderWithTheSubtasksCoordinates() throws Exception {
        JobID job = new JobID();
        String run = job.toHexString();
        try (OneInputStreamOperatorTestHarness<String, Row> h = harness(job, 3, 2)) {
            h.open();
            h.processElement("a", 5);
            h.prepareSnapshotPreBarrier(1);
            h.snapshot(1, 10);
            h.processElement("b", 6);
            h.notifyOfCompletedCheckpoint(1);
            h.endInput();
            assertEquals(5L, h.extractOutputStreamRecords().get(1).getTimestamp());
            List<Row> out = drain(h);
            assertEquals(6, out.size());
            assertOpen(out.get(0), -1, run, 2, 3);
            assertEquals(Row.of(DATA, -1L, -1, -1, null, "a"), out.get(1));
            assertEquals(Row.of(PRECOMMIT, 1L, 2, 3, run, null), out.get(2));
            assertEquals(Row.of(DATA, -1L, -1, -1, null, "b"), out.get(3));
            assertEquals(Row.of(COMMIT, 1L, 2, 3, run, null), out.get(4));
            assertEquals(Row.of(END_OF_INPUT, -1L, 2, 3, run, null), out.get(5));
        }
    }

    @Test
    void runIdSurvivesRestoresAtOtherParallelismsAndAFreshStartGetsANewOne() throws Exception {
        JobID first = new JobID();
        String run = first.toHexString();
        List<OperatorSubtaskState> snapshots = new ArrayList<>();
        for (int subtask = 0; subtask < 2; subtask++) {
            try (OneInputStreamOperatorTestHarness<String, Row> h = harness(first, 2, subtask)) {
                h.open();
                assertOpen(drain(h).get(0), -1, run, subtask, 2);
                h.prepareSnapshotPreBarrier(3);
                snapshots.add(h.snapshot(3, 0));
            }
        }

        // 2 -> 1, in a new job (a savepoint restore): the lineage's run id, not the new job's.
        JobID second = new JobID();
        OperatorSubtaskState merged;
        try (OneInputStreamOperatorTestHarness<String, Row> h = harness(second, 1, 0)) {
            h.setRestoredCheckpointId(3);
            h.initializeState(rescale(snapshots, MAX_PARALLELISM, 1, 0));
            h.open();
            assertOpen(drain(h).get(0), 3, run, 0, 1);
            h.prepareSnapshotPreBarrier(8);
            merged = h.snapshot(8, 0);
        }

        // 1 -> 2, in a third job.
        JobID third = new JobID();
        for (int subtask = 0; subtask < 2; subtask++) {
            try (OneInputStreamOperatorTestHarness<String, Row> h = harness(third, 2, subtask)) {
                h.setRestoredCheckpointId(8);
                h.initializeState(rescale(List.of(merged), MAX_PARALLELISM, 2, subtask));
                h.open();
                assertOpen(drain(h).get(0), 8, run, subtask, 2);
            }
        }

        // The client's run id parameter names a fresh start, but never renames a restored lineage.
        try (OneInputStreamOperatorTestHarness<String, Row> h = withRunIdParameter("client-run", 1)) {
            h.setRestoredCheckpointId(8);
            h.initializeState(rescale(List.of(merged), MAX_PARALLELISM, 1, 0));
            h.open();
            assertOpen(drain(h).get(0), 8, run, 0, 1);
        }

        // A fresh start (no state) begins a new lineage.
        JobID fresh = new JobID();
        try (OneInputStreamOperatorTestHarness<String, Row> h = harness(fresh, 2, 0)) {
            h.open();
            Row open = drain(h).get(0);
            assertEquals(fresh.toHexString(), runId(open));
            assertNotEquals(run, runId(open));
        }
    }
}
