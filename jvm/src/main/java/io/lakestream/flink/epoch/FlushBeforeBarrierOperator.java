package io.lakestream.flink.epoch;

import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.BoundedOneInput;

/**
 * An operator that holds output back in memory and emits all of it before each checkpoint barrier
 * and at the end of input.
 *
 * <p>Why: a buffer that is empty whenever a barrier passes is never part of a checkpoint, so it
 * needs no state and a restore starts with an empty one. Subclasses implement {@link #flush()};
 * this class calls it first in {@code prepareSnapshotPreBarrier} and {@code endInput}.
 */
public abstract class FlushBeforeBarrierOperator<OUT> extends AbstractStreamOperator<OUT>
        implements BoundedOneInput {

    private static final long serialVersionUID = 1L;

    /** Emits everything held back and empties the buffer. */
    protected abstract void flush() throws Exception;

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        flush();
        super.prepareSnapshotPreBarrier(checkpointId);
    }

    @Override
    public void endInput() throws Exception {
        flush();
    }
}
