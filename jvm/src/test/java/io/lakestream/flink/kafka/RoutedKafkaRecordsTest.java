package io.lakestream.flink.kafka;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;

import org.apache.flink.kafka.shaded.org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.flink.types.Row;
import org.junit.jupiter.api.Test;

class RoutedKafkaRecordsTest {

    @Test
    void eachRowNamesItsTopicAndKey() {
        RoutedKafkaRecords schema = new RoutedKafkaRecords();
        ProducerRecord<byte[], byte[]> change = schema.serialize(Row.of("out", null, "{\"id\":1}"), null, 7L);
        assertEquals("out", change.topic());
        assertNull(change.key());
        assertNull(change.partition());
        assertEquals(7L, change.timestamp());
        assertArrayEquals("{\"id\":1}".getBytes(StandardCharsets.UTF_8), change.value());
        ProducerRecord<byte[], byte[]> position = schema.serialize(Row.of("pos", "feed/t", "é"), null, null);
        assertEquals("pos", position.topic());
        assertArrayEquals("feed/t".getBytes(StandardCharsets.UTF_8), position.key());
        assertArrayEquals("é".getBytes(StandardCharsets.UTF_8), position.value());
        assertEquals(3, RoutedKafkaRecords.rowType().getArity());
    }

    @Test
    void aRowWithoutTopicFails() {
        RoutedKafkaRecords schema = new RoutedKafkaRecords();
        IllegalArgumentException e =
                assertThrows(IllegalArgumentException.class, () -> schema.serialize(Row.of("", "k", "v"), null, null));
        assertEquals(true, e.getMessage().contains("needs its topic"));
    }
}
