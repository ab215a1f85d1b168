package io.lakestream.flink.epoch;

import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;

/**
 * Poll ticks for Python operators that must act periodically.
 *
 * <p>PyFlink cannot run a Python source, and processing-time timers do not fire once a bounded input
 * has finished, so the Delta streaming source is driven by a low-rate stream of ticks instead: each
 * tick is one poll of the Delta log. The ticks come from Flink's own {@link DataGeneratorSource}
 * (checkpointed, rate limited); this class only maps the sequence index to itself.
 */
public class TickGenerator implements GeneratorFunction<Long, Long> {

    private static final long serialVersionUID = 1L;

    @Override
    public Long map(Long index) {
        return index;
    }

    /**
     * A source of {@code count} ticks (use {@link Long#MAX_VALUE} for an unbounded stream) at
     * {@code ticksPerSecond} per parallel source instance.
     */
    public static DataGeneratorSource<Long> source(long count, double ticksPerSecond) {
        if (count <= 0) {
            throw new IllegalArgumentException("tick count must be positive, got " + count);
        }
        if (!(ticksPerSecond > 0)) {
            throw new IllegalArgumentException("ticks per second must be positive, got " + ticksPerSecond);
        }
        return new DataGeneratorSource<>(
                new TickGenerator(), count, RateLimiterStrategy.perSecond(ticksPerSecond), Types.LONG);
    }
}
