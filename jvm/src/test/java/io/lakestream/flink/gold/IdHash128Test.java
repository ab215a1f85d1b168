package io.lakestream.flink.gold;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Random;

import org.apache.flink.shaded.guava33.com.google.common.hash.Hashing;
import org.junit.jupiter.api.Test;

class IdHash128Test {

    @Test
    void equalsGuavasMurmur3OfTheUnencodedChars() {
        Random random = new Random(7);
        for (int n = 0; n < 2_000; n++) {
            int length = n < 40 ? n : random.nextInt(60);
            StringBuilder sb = new StringBuilder();
            for (int i = 0; i < length; i++) {
                sb.append((char) (random.nextBoolean() ? 'a' + random.nextInt(26) : random.nextInt(0x10000)));
            }
            String s = sb.toString();
            ByteBuffer guava = ByteBuffer.wrap(Hashing.murmur3_128().hashUnencodedChars(s).asBytes())
                    .order(ByteOrder.LITTLE_ENDIAN);
            long[] ours = IdHash128.of(s);
            assertEquals(guava.getLong(0), ours[0], s);
            assertEquals(guava.getLong(8), ours[1], s);
        }
    }

    /** The hashes are in the speed layer's state: these values must never change. */
    @Test
    void isPinned() {
        assertEquals(1886991997115694956L, IdHash128.of("O-000001")[0]);
        assertEquals(-9007938835195313218L, IdHash128.of("O-000001")[1]);
        assertEquals(7192099603879045819L, IdHash128.of("U42")[0]);
        assertEquals(-1311335334847385745L, IdHash128.of("U42")[1]);
    }
}
