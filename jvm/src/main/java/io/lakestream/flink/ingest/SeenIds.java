package io.lakestream.flink.ingest;

import java.time.Duration;

import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.streaming.api.operators.KeyContext;

/**
 * The de-dup state of {@link KeyedDedupEpochOperator}: the event ids ({@code id_hi}, {@code id_lo})
 * seen within the TTL, in keyed {@link MapState} under one of their bucket's key group's keys.
 *
 * <p>Why keyed, with Flink state TTL: the ids are checkpointed with the source offsets, move with their
 * key group on a rescale and expire without a sweep of our own. Spreading a key group's ids over
 * {@link KeyGroupKeys#keysPerKeyGroup()} keys keeps each map small (the heap backend's TTL cleanup
 * copies one key's whole map per access). An id is fresh when absent or expired, then written: the
 * answers of {@code lakestream.dedup.DedupCache.first_seen}. Name, types and TTL are checkpoint format.
 */
public final class SeenIds {

    /** The state's name in checkpoints. */
    static final String STATE_NAME = "lakestream-dedup-ids";

    private final MapState<Tuple2<Long, Long>, Boolean> seen;
    private final KeyGroupKeys keys;
    private final KeyContext keyContext;

    /**
     * @param seen the state of {@link #descriptor}
     * @param keyContext the operator whose current key the lookups set
     */
    SeenIds(MapState<Tuple2<Long, Long>, Boolean> seen, KeyGroupKeys keys, KeyContext keyContext) {
        this.seen = seen;
        this.keys = keys;
        this.keyContext = keyContext;
    }

    /** The state's descriptor, with {@link #ttlConfig}. */
    static MapStateDescriptor<Tuple2<Long, Long>, Boolean> descriptor(long ttlMillis) {
        MapStateDescriptor<Tuple2<Long, Long>, Boolean> descriptor =
                new MapStateDescriptor<>(STATE_NAME, Types.TUPLE(Types.LONG, Types.LONG), Types.BOOLEAN);
        descriptor.enableTimeToLive(ttlConfig(ttlMillis));
        return descriptor;
    }

    /**
     * Processing-time TTL of {@code ttlMillis} from the first write, never returning expired entries;
     * expired ones are dropped by the RocksDB compaction filter or, on the heap backend, incrementally
     * on access. The gold aggregate's state uses it too.
     */
    public static StateTtlConfig ttlConfig(long ttlMillis) {
        return StateTtlConfig.newBuilder(Duration.ofMillis(ttlMillis))
                .setTtlTimeCharacteristic(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)
                .setUpdateType(StateTtlConfig.UpdateType.OnCreateAndWrite)
                .setStateVisibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
                .cleanupInRocksdbCompactFilter(1000)
                .cleanupIncrementally(1, false)
                .build();
    }

    /**
     * Looks a part's ids up in {@link LookupOrder} and records the fresh ones: sets {@code fresh[k]}
     * for each event seen here first (of copies within the part, the earliest) and returns how many.
     */
    int markFirstSightings(int[] buckets, long[] idHi, long[] idLo, boolean[] fresh) throws Exception {
        long[] order = LookupOrder.of(buckets, idHi, idLo, keys.keysPerKeyGroup());
        int positionMask = LookupOrder.positionMask(buckets.length);
        int freshCount = 0;
        for (long entry : order) {
            int k = (int) (entry & positionMask);
            keyContext.setCurrentKey(keys.ofRank(LookupOrder.rank(entry)));
            Tuple2<Long, Long> id = Tuple2.of(idHi[k], idLo[k]);
            if (!seen.contains(id)) {
                seen.put(id, Boolean.TRUE);
                fresh[k] = true;
                freshCount++;
            }
        }
        return freshCount;
    }
}
