package io.lakestream.flink.ingest;

import java.util.Arrays;

/**
 * Which state key holds an event id, and the order a part's ids are looked up in: ascending by where
 * RocksDB keeps them (key group, key within it, then the id's high half as unsigned).
 *
 * <p>Why: lookups that walk RocksDB's memtable in key order find most of their path in the CPU
 * caches, and the write after a miss starts from the previous one; in arrival order every lookup
 * starts from the top. Copies of one id keep their arrival order, so the answers are those of
 * arrival order. {@link #spread} is part of the de-dup state layout: never change it.
 */
final class LookupOrder {

    /**
     * Where an entry keeps the state key's rank over all key groups' keys ({@link KeyGroupKeys#ofRank}):
     * its top bits, enough for {@link KeyGroupKeys#TOTAL_KEYS} ranks.
     */
    static final int RANK_SHIFT = 63 - Integer.numberOfTrailingZeros(KeyGroupKeys.TOTAL_KEYS);

    private LookupOrder() {}

    /**
     * The lookup order of a part's ids: one sort key per event, ascending, with the state key's rank in
     * its top bits ({@link #rank}) and the event's position in its low {@link #positionBits} bits
     * ({@link #positionMask}).
     */
    static long[] of(int[] buckets, long[] idHi, long[] idLo, int keysPerKeyGroup) {
        int n = buckets.length;
        int positionBits = positionBits(n);
        int hiBits = RANK_SHIFT - positionBits;
        long[] order = new long[n];
        for (int k = 0; k < n; k++) {
            long rank = (long) buckets[k] * keysPerKeyGroup + spread(idHi[k], idLo[k], keysPerKeyGroup);
            order[k] = rank << RANK_SHIFT | (idHi[k] >>> (64 - hiBits)) << positionBits | k;
        }
        Arrays.sort(order);
        return order;
    }

    /** The state key's rank of an entry of {@link #of}. */
    static int rank(long entry) {
        return (int) (entry >>> RANK_SHIFT);
    }

    /** The mask that takes an event's position out of an entry of {@link #of} for a part of {@code n}. */
    static int positionMask(int n) {
        return (1 << positionBits(n)) - 1;
    }

    /** Bits that hold a position in a part of {@code n} events (at least 1, at most 31). */
    static int positionBits(int n) {
        return Math.max(1, 32 - Integer.numberOfLeadingZeros(Math.max(1, n - 1)));
    }

    /** Which of a key group's keys holds an id: a mix of all its bits, the same in every run. */
    static int spread(long idHi, long idLo, int keysPerKeyGroup) {
        long h = (idHi ^ Long.rotateLeft(idLo, 29)) * 0x9E3779B97F4A7C15L;
        return (int) (((h >>> 32) * keysPerKeyGroup) >>> 32);
    }
}
