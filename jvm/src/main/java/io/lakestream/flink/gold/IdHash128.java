package io.lakestream.flink.gold;

/**
 * MurmurHash3 x64 128 (seed 0) of a string's UTF-16 code units, little-endian: the same bits as Guava's
 * {@code Hashing.murmur3_128().hashUnencodedChars(s)}. The speed layer keeps ids it has counted as these
 * 128 bits, in its state too, so the function is part of the state format: never change it.
 */
public final class IdHash128 {

    private static final long C1 = 0x87c37b91114253d5L;
    private static final long C2 = 0x4cf5ad432745937fL;

    private IdHash128() {}

    /** The hash of {@code s} as {h1, h2}. */
    public static long[] of(String s) {
        long h1 = 0;
        long h2 = 0;
        int n = s.length();
        int i = 0;
        // 16-byte blocks: 8 chars.
        for (; i + 8 <= n; i += 8) {
            h1 ^= mixK1(chars4(s, i));
            h1 = Long.rotateLeft(h1, 27);
            h1 += h2;
            h1 = h1 * 5 + 0x52dce729;
            h2 ^= mixK2(chars4(s, i + 4));
            h2 = Long.rotateLeft(h2, 31);
            h2 += h1;
            h2 = h2 * 5 + 0x38495ab5;
        }
        int rest = n - i;
        long k1 = 0;
        long k2 = 0;
        for (int j = 0; j < rest; j++) {
            long c = s.charAt(i + j) & 0xffffL;
            if (j < 4) {
                k1 |= c << (16 * j);
            } else {
                k2 |= c << (16 * (j - 4));
            }
        }
        if (rest > 4) {
            h2 ^= mixK2(k2);
        }
        if (rest > 0) {
            h1 ^= mixK1(k1);
        }
        long len = 2L * n;
        h1 ^= len;
        h2 ^= len;
        h1 += h2;
        h2 += h1;
        h1 = fmix(h1);
        h2 = fmix(h2);
        h1 += h2;
        h2 += h1;
        return new long[] {h1, h2};
    }

    private static long chars4(String s, int i) {
        return (s.charAt(i) & 0xffffL)
                | ((s.charAt(i + 1) & 0xffffL) << 16)
                | ((s.charAt(i + 2) & 0xffffL) << 32)
                | ((s.charAt(i + 3) & 0xffffL) << 48);
    }

    /** The first lane's block mix, for a full block and for the tail alike. */
    private static long mixK1(long k1) {
        return Long.rotateLeft(k1 * C1, 31) * C2;
    }

    /** The second lane's block mix. */
    private static long mixK2(long k2) {
        return Long.rotateLeft(k2 * C2, 33) * C1;
    }

    private static long fmix(long k) {
        k ^= k >>> 33;
        k *= 0xff51afd7ed558ccdL;
        k ^= k >>> 33;
        k *= 0xc4ceb9fe1a85ec53L;
        k ^= k >>> 33;
        return k;
    }
}
