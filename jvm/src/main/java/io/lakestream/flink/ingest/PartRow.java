package io.lakestream.flink.ingest;

import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.types.Row;

/**
 * A part row of {@link EventTimeGate} as {@link KeyedDedupEpochOperator} reads it: its per-event
 * columns, checked for type and length and that every bucket belongs to this subtask.
 *
 * <p>Why its own class: a malformed row fails with a message that names the split, the part and the
 * field, and that checking would otherwise bury what the operator does.
 */
final class PartRow {

    final Row row;
    final String split;
    final Object partIndex;
    final int[] buckets;
    final long[] idHi;
    final long[] idLo;
    final long[] lateWatermarks;
    final byte[] events;

    /** Reads and checks {@code row}, a part for {@code subtask}, which owns {@code keyGroups}. */
    PartRow(Row row, int subtask, KeyGroupRange keyGroups, int maxParallelism) {
        this.row = row;
        split = String.valueOf(row.getField(EventTimeGate.SPLIT));
        partIndex = row.getField(EventTimeGate.PART);
        if (!(partIndex instanceof Integer) || (Integer) partIndex != subtask) {
            throw new IllegalStateException(
                    where() + "field 'part' (" + EventTimeGate.PART + ") must be this"
                            + " subtask's index " + subtask + " (header rows stop at the gate), got "
                            + partIndex);
        }
        buckets = field(EventTimeGate.BUCKETS, "buckets", int[].class);
        int n = buckets.length;
        if (n == 0) {
            throw new IllegalStateException(
                    where() + "field 'buckets' (" + EventTimeGate.BUCKETS
                            + ") is empty: a part row has at least one event");
        }
        idHi = field(EventTimeGate.ID_HI, "id_hi", long[].class);
        idLo = field(EventTimeGate.ID_LO, "id_lo", long[].class);
        lateWatermarks = field(EventTimeGate.LATE_WATERMARKS, "late_watermarks", long[].class);
        events = field(EventTimeGate.EVENTS, "events", byte[].class);
        checkLength(idHi.length, "id_hi", EventTimeGate.ID_HI);
        checkLength(idLo.length, "id_lo", EventTimeGate.ID_LO);
        checkLength(lateWatermarks.length, "late_watermarks", EventTimeGate.LATE_WATERMARKS);
        for (int k = 0; k < n; k++) {
            if (!keyGroups.contains(buckets[k])) {
                throw new IllegalStateException(
                        where() + "buckets[" + k + "] = " + buckets[k]
                                + " is not a key group of this subtask (" + keyGroups + " of "
                                + maxParallelism + "): all buckets of a part belong to its subtask");
            }
        }
    }

    /** Events in the part. */
    int size() {
        return buckets.length;
    }

    /** Whether the part carries the speed layer's columns ({@link EventTimeGate#GOLD_KINDS} not null). */
    boolean hasGoldColumns() {
        return row.getArity() >= EventTimeGate.GOLD_ARITY && row.getField(EventTimeGate.GOLD_KINDS) != null;
    }

    private String where() {
        return "KeyedDedupEpochOperator: split " + split + ", part " + partIndex + ": ";
    }

    /** The field at {@code position}, which must be a {@code type}. */
    <T> T field(int position, String name, Class<T> type) {
        Object value = row.getField(position);
        if (!type.isInstance(value)) {
            throw new IllegalStateException(
                    where() + "field '" + name + "' (" + position + ") must be "
                            + type.getSimpleName() + ", got " + EventTimeGate.describe(value));
        }
        return type.cast(value);
    }

    /** Checks that the field at {@code position} has {@code length} entries: one per event. */
    void checkLength(int length, String name, int position) {
        if (length != buckets.length) {
            throw new IllegalStateException(
                    where() + "field '" + name + "' (" + position + ") has " + length
                            + " entries, 'buckets' has " + buckets.length + ": one per event");
        }
    }
}
