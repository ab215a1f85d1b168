package io.lakestream.flink.kafka;

import java.io.IOException;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;

/**
 * Hands a Kafka record to Python as raw bytes plus its coordinates.
 *
 * <p>PyFlink's Kafka source only offers value-only deserializers, which lose the topic, partition
 * and offset (needed for bronze lineage and quarantine) and would reject binary garbage before an
 * adapter could quarantine it. This schema never fails: every record becomes
 * (topic, partition, offset, timestamp, key, value) with the bytes untouched. It is compiled
 * against the shaded SQL connector jar, whose kafka-clients classes are relocated.
 */
public class KafkaRecordToRow implements KafkaRecordDeserializationSchema<Row> {

    private static final long serialVersionUID = 1L;

    /** The produced row type, also what the Python side declares. */
    public static RowTypeInfo rowType() {
        return new RowTypeInfo(
                new TypeInformation<?>[] {
                    Types.STRING,
                    Types.INT,
                    Types.LONG,
                    Types.LONG,
                    Types.PRIMITIVE_ARRAY(Types.BYTE),
                    Types.PRIMITIVE_ARRAY(Types.BYTE)
                },
                new String[] {"topic", "partition", "offset", "timestamp", "key", "value"});
    }

    @Override
    public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<Row> out) throws IOException {
        out.collect(
                Row.of(
                        record.topic(),
                        record.partition(),
                        record.offset(),
                        record.timestamp(),
                        record.key(),
                        record.value()));
    }

    @Override
    public TypeInformation<Row> getProducedType() {
        return rowType();
    }
}
