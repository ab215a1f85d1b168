package io.lakestream.flink.gold;

import java.io.Serializable;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;

import io.lakestream.flink.ingest.EventTimeGate;

/**
 * The gold metrics as {@code lakestream.gold.METRICS} defines them, interpreted for the speed layer:
 * what one event adds to a window's partial aggregate ({@link #add}) and how partials merge into a
 * window's values ({@link GoldWindowAggregate}).
 *
 * <p>Why a class of its own: the Python side passes its one definition in, so the speed layer's
 * operators and the batch layer count the same metrics.
 */
public final class GoldMetrics implements Serializable {

    private static final long serialVersionUID = 1L;

    /** The kind of a metric that takes every event. */
    public static final int ANY_KIND = -1;

    /** Largest sum in fen: {@code decimal(18, 2)}'s 9999999999999999.99 yuan. */
    public static final long MAX_FEN = 999_999_999_999_999_999L;

    enum Aggregate { COUNT, COUNT_DISTINCT, SUM }

    enum Column { NONE, ORDER_ID, USER_ID, AMOUNT }

    private final String[] names;
    private final int[] kinds;
    private final Aggregate[] aggregates;
    private final Column[] columns;
    /** Per metric its index among the distinct counts, -1 for the others. */
    private final int[] slots;
    private final int distinct;

    /**
     * Per metric: a name, the gold kind it takes ({@link #ANY_KIND} for every event), the aggregate
     * ({@code count} of the events, {@code count_distinct} of the non-null values of {@code order_id}
     * or {@code user_id}, {@code sum} of the non-null {@code amount}s, zero when there are none) and
     * its column. Amounts are unscaled fen ({@link EventTimeGate#NO_AMOUNT} for none).
     *
     * @param names metric names, in the table's column order
     * @param kinds per metric the gold kind it takes, {@link #ANY_KIND} for all
     * @param aggregates per metric {@code count}, {@code count_distinct} or {@code sum}
     * @param columns per metric its column ({@code order_id}, {@code user_id}, {@code amount}; null
     *     for {@code count})
     */
    public GoldMetrics(String[] names, int[] kinds, String[] aggregates, String[] columns) {
        int n = names.length;
        if (n == 0 || kinds.length != n || aggregates.length != n || columns.length != n) {
            throw new IllegalArgumentException(
                    "gold metrics: names, kinds, aggregates and columns must be non-empty and of one length, got "
                            + n + ", " + kinds.length + ", " + aggregates.length + ", " + columns.length);
        }
        this.names = names.clone();
        this.kinds = kinds.clone();
        this.aggregates = new Aggregate[n];
        this.columns = new Column[n];
        this.slots = new int[n];
        int d = 0;
        Set<String> seen = new HashSet<>(Arrays.asList("window_start", "window_end"));
        for (int i = 0; i < n; i++) {
            String name = names[i];
            if (name == null || !seen.add(name)) {
                throw new IllegalArgumentException(
                        "gold metrics: metric " + i + " needs a name of its own, got " + name);
            }
            if (kinds[i] < ANY_KIND || kinds[i] > Byte.MAX_VALUE) {
                throw new IllegalArgumentException(
                        "gold metric " + name + ": kind must be a gold kind or " + ANY_KIND + ", got " + kinds[i]);
            }
            String aggregate = aggregates[i];
            String column = columns[i];
            if ("count".equals(aggregate)) {
                this.aggregates[i] = Aggregate.COUNT;
                this.columns[i] = Column.NONE;
            } else if ("count_distinct".equals(aggregate)
                    && ("order_id".equals(column) || "user_id".equals(column))) {
                this.aggregates[i] = Aggregate.COUNT_DISTINCT;
                this.columns[i] = "order_id".equals(column) ? Column.ORDER_ID : Column.USER_ID;
            } else if ("sum".equals(aggregate) && "amount".equals(column)) {
                this.aggregates[i] = Aggregate.SUM;
                this.columns[i] = Column.AMOUNT;
            } else {
                throw new IllegalArgumentException(
                        "gold metric " + name + ": the speed layer takes count, count_distinct of order_id or"
                                + " user_id, and sum of amount; got " + aggregate + " of " + column);
            }
            slots[i] = this.aggregates[i] == Aggregate.COUNT_DISTINCT ? d++ : -1;
        }
        this.distinct = d;
    }

    public int size() {
        return names.length;
    }

    public String name(int metric) {
        return names[metric];
    }

    /** The number of distinct counts: the length of a partial's value sets. */
    public int distinctCount() {
        return distinct;
    }

    Aggregate aggregate(int metric) {
        return aggregates[metric];
    }

    /** Index of a distinct count among {@link #distinctCount()}, -1 for other metrics. */
    int slot(int metric) {
        return slots[metric];
    }

    /** Empty value sets of one partial. */
    @SuppressWarnings("unchecked")
    Set<String>[] newSets() {
        Set<String>[] sets = new Set[distinct];
        for (int d = 0; d < distinct; d++) {
            sets[d] = new HashSet<>();
        }
        return sets;
    }

    /**
     * Adds one event to a partial: {@code values} per metric (counts, sums in fen; unused for the
     * distinct counts), {@code sets} per distinct count.
     */
    void add(long[] values, Set<String>[] sets, byte kind, long amount, String orderId, String userId) {
        for (int i = 0; i < names.length; i++) {
            if (kinds[i] != ANY_KIND && kinds[i] != kind) {
                continue;
            }
            switch (aggregates[i]) {
                case COUNT:
                    values[i]++;
                    break;
                case SUM:
                    if (amount != EventTimeGate.NO_AMOUNT) {
                        values[i] = Math.addExact(values[i], amount);
                    }
                    break;
                default:
                    String value = columns[i] == Column.ORDER_ID ? orderId : userId;
                    if (value != null) {
                        sets[slots[i]].add(value);
                    }
            }
        }
    }

    /** A window's sum in fen, checked against {@code decimal(18, 2)}, as in the gold table. */
    long checkedSum(int metric, long windowStart, long fen) {
        if (fen > MAX_FEN || fen < -MAX_FEN) {
            throw new ArithmeticException(
                    "gold metric " + names[metric] + ": the window starting at " + java.time.Instant.ofEpochMilli(windowStart)
                            + " sums to " + java.math.BigDecimal.valueOf(fen, 2) + ", beyond decimal(18, 2)"
                            + " (at most 9999999999999999.99), which the gold table cannot hold");
        }
        return fen;
    }
}
