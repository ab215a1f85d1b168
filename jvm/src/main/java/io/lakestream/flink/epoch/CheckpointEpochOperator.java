package io.lakestream.flink.epoch;

import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;

/**
 * Turns Flink's checkpoint lifecycle into in-band marker records for a Python sink: OPEN, DATA,
 * PRECOMMIT(n) before barrier n leaves the task, COMMIT(n) once checkpoint n completed, END_OF_INPUT.
 *
 * <p>Why: PyFlink gives Python functions no checkpoint hooks, so a two-phase-commit sink written in
 * Python cannot know when to stage or commit. This operator runs directly before it (forward, same
 * parallelism); subclasses that batch their DATA rows flush them before PRECOMMIT and END_OF_INPUT.
 */
public class CheckpointEpochOperator<T> extends FlushBeforeBarrierOperator<Row>
        implements OneInputStreamOperator<T, Row> {

    private static final long serialVersionUID = 1L;

    /** A payload: the input record, or a batch of a subclass. */
    public static final int DATA = 0;
    /** First of a subtask: the restored checkpoint id (-1 on a fresh start), run id, subtask, parallelism. */
    public static final int OPEN = 1;
    /** PRECOMMIT(n), from {@code prepareSnapshotPreBarrier(n)}: the sink flushes for checkpoint n. */
    public static final int PRECOMMIT = 2;
    /**
     * COMMIT(n), from {@code notifyCheckpointComplete(n)}: everything up to n is durable (Flink may
     * skip subsumed checkpoints).
     */
    public static final int COMMIT = 3;
    /** The end of a bounded input. */
    public static final int END_OF_INPUT = 4;

    /**
     * Global job parameter with the run id of a fresh start (absent or empty: the job id). The run id
     * names the lineage of runs since that fresh start; the Python side uses it in the Delta txn app
     * id, so that checkpoint ids, which restart at 1 on a fresh start, never collide with versions a
     * previous run recorded.
     */
    public static final String RUN_ID_PARAMETER = "lakestream.run-id";

    private transient ListState<String> runIdState;
    private transient String runId;
    private transient long restoredCheckpointId;
    private transient boolean openEmitted;

    /** The marker row type: (kind, checkpoint_id, subtask, parallelism, run_id, payload). */
    public static RowTypeInfo outputType(TypeInformation<?> payloadType) {
        return new RowTypeInfo(
                new TypeInformation<?>[] {
                    Types.INT, Types.LONG, Types.INT, Types.INT, Types.STRING, payloadType
                },
                new String[] {"kind", "checkpoint_id", "subtask", "parallelism", "run_id", "payload"});
    }

    /**
     * Restores the run id from union operator state, so every subtask of a restored job (at any
     * parallelism, also from a savepoint in a new submission) agrees on it whatever the parameter
     * says; a fresh start takes a new one.
     */
    @Override
    public void initializeState(StateInitializationContext context) throws Exception {
        super.initializeState(context);
        runIdState =
                context.getOperatorStateStore()
                        .getUnionListState(new ListStateDescriptor<>("lakestream-run-id", Types.STRING));
        String restoredRunId = null;
        for (String id : runIdState.get()) {
            restoredRunId = id;
            break;
        }
        restoredCheckpointId =
                context.isRestored() ? context.getRestoredCheckpointId().orElse(-1L) : -1L;
        runId = restoredRunId != null ? restoredRunId : freshRunId();
        // Each subtask contributes one copy; a union restore hands every subtask all copies, and
        // they are all equal, so reset to a single entry instead of growing with every restore.
        List<String> one = new ArrayList<>();
        one.add(runId);
        runIdState.update(one);
    }

    /** The run id of a fresh start: the client's {@link #RUN_ID_PARAMETER}, else this job's id. */
    private String freshRunId() {
        String given = getRuntimeContext().getGlobalJobParameters().get(RUN_ID_PARAMETER);
        if (given != null && !given.isEmpty()) {
            return given;
        }
        return getRuntimeContext().getJobInfo().getJobId().toHexString();
    }

    @Override
    public void open() throws Exception {
        super.open();
        emitOpen();
    }

    /** Emits OPEN once, before anything else this subtask emits. */
    protected final void emitOpen() {
        if (openEmitted) {
            return;
        }
        openEmitted = true;
        emit(OPEN, restoredCheckpointId, null);
    }

    /** Emits one marker (or, with kind DATA, one payload) with this subtask's coordinates. */
    protected final void emit(int kind, long checkpointId, Object payload) {
        int subtask = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
        int parallelism = getRuntimeContext().getTaskInfo().getNumberOfParallelSubtasks();
        output.collect(
                new StreamRecord<>(Row.of(kind, checkpointId, subtask, parallelism, runId, payload)));
    }

    @Override
    public void processElement(StreamRecord<T> element) throws Exception {
        emitOpen();
        output.collect(
                element.replace(Row.of(DATA, -1L, -1, -1, null, element.getValue())));
    }

    /** Nothing is held back here; subclasses that batch DATA rows override this. */
    @Override
    protected void flush() throws Exception {}

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        super.prepareSnapshotPreBarrier(checkpointId); // flush() first
        emitOpen();
        emit(PRECOMMIT, checkpointId, null);
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) throws Exception {
        super.notifyCheckpointComplete(checkpointId);
        emit(COMMIT, checkpointId, null);
    }

    @Override
    public void endInput() throws Exception {
        super.endInput(); // flush()
        emitOpen();
        emit(END_OF_INPUT, -1L, null);
    }
}
