package io.lakestream.flink.kafka;

import java.nio.charset.StandardCharsets;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.flink.types.Row;

/**
 * Kafka records whose topic and key travel with each element: rows {@code (topic, key, value)}.
 *
 * <p>The change feed writes its change events to the output topic and, in the same Kafka
 * transaction, its source position to a positions topic: one writer and one transaction per
 * checkpoint, so a read_committed consumer sees a position exactly when it sees every change before
 * it. Key and value are UTF-8 text; a null key leaves the partition to the producer.
 */
public class RoutedKafkaRecords implements KafkaRecordSerializationSchema<Row> {

    private static final long serialVersionUID = 1L;

    public static final int TOPIC = 0;
    public static final int KEY = 1;
    public static final int VALUE = 2;

    /** The element type: (topic STRING, key STRING, value STRING). */
    public static RowTypeInfo rowType() {
        return new RowTypeInfo(
                new TypeInformation<?>[] {Types.STRING, Types.STRING, Types.STRING},
                new String[] {"topic", "key", "value"});
    }

    @Override
    public ProducerRecord<byte[], byte[]> serialize(Row row, KafkaSinkContext context, Long timestamp) {
        Object topic = row.getField(TOPIC);
        if (!(topic instanceof String) || ((String) topic).isEmpty()) {
            throw new IllegalArgumentException(
                    "RoutedKafkaRecords: a record needs its topic (non-empty STRING) at " + TOPIC
                            + ", got " + topic);
        }
        return new ProducerRecord<>((String) topic, null, timestamp, bytes(row.getField(KEY)),
                bytes(row.getField(VALUE)));
    }

    private static byte[] bytes(Object text) {
        return text == null ? null : text.toString().getBytes(StandardCharsets.UTF_8);
    }
}
