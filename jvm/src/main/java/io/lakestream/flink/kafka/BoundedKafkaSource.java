package io.lakestream.flink.kafka;

import java.util.List;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceEvent;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.java.typeutils.ResultTypeQueryable;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.KafkaSourceEnumState;
import org.apache.flink.connector.kafka.source.split.KafkaPartitionSplit;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * A {@link KafkaSource} that also finishes after a restore when it is bounded.
 *
 * <p>Why: in Flink's Kafka connector (5.0.0-2.2; FLINK-31006, FLINK-33466) a restored bounded
 * source never finishes: its enumerator finds every partition assigned and never tells the readers
 * "no more splits". A bounded enumerator whose initial discovery is done assigns nothing new, so this
 * wrapper tells each reader right after the Kafka enumerator handled its registration. Everything
 * else, state and serializers included, is the Kafka source's own: checkpoints restore across the two.
 */
public class BoundedKafkaSource<T>
        implements Source<T, KafkaPartitionSplit, KafkaSourceEnumState>, ResultTypeQueryable<T> {

    private static final long serialVersionUID = 1L;

    private final KafkaSource<T> kafka;

    public BoundedKafkaSource(KafkaSource<T> kafka) {
        this.kafka = kafka;
    }

    @Override
    public Boundedness getBoundedness() {
        return kafka.getBoundedness();
    }

    @Override
    public SourceReader<T, KafkaPartitionSplit> createReader(SourceReaderContext context) throws Exception {
        return kafka.createReader(context);
    }

    @Override
    public SplitEnumerator<KafkaPartitionSplit, KafkaSourceEnumState> createEnumerator(
            SplitEnumeratorContext<KafkaPartitionSplit> context) throws Exception {
        return kafka.createEnumerator(context);
    }

    @Override
    public SplitEnumerator<KafkaPartitionSplit, KafkaSourceEnumState> restoreEnumerator(
            SplitEnumeratorContext<KafkaPartitionSplit> context, KafkaSourceEnumState state)
            throws Exception {
        return afterRestore(
                kafka.restoreEnumerator(context, state), context, kafka.getBoundedness(), state);
    }

    /** The enumerator a restore uses: {@code restored}, wrapped when it is bounded and discovered. */
    static SplitEnumerator<KafkaPartitionSplit, KafkaSourceEnumState> afterRestore(
            SplitEnumerator<KafkaPartitionSplit, KafkaSourceEnumState> restored,
            SplitEnumeratorContext<KafkaPartitionSplit> context,
            Boundedness boundedness,
            KafkaSourceEnumState state) {
        if (boundedness == Boundedness.BOUNDED && state.initialDiscoveryFinished()) {
            return new NoMoreSplitsOnRegistration(restored, context);
        }
        return restored;
    }

    @Override
    public SimpleVersionedSerializer<KafkaPartitionSplit> getSplitSerializer() {
        return kafka.getSplitSerializer();
    }

    @Override
    public SimpleVersionedSerializer<KafkaSourceEnumState> getEnumeratorCheckpointSerializer() {
        return kafka.getEnumeratorCheckpointSerializer();
    }

    @Override
    public TypeInformation<T> getProducedType() {
        return kafka.getProducedType();
    }

    /**
     * Delegates to the restored Kafka enumerator; signals "no more splits" after each registration,
     * which is also when that reader received any split still pending for it.
     */
    static final class NoMoreSplitsOnRegistration
            implements SplitEnumerator<KafkaPartitionSplit, KafkaSourceEnumState> {

        private final SplitEnumerator<KafkaPartitionSplit, KafkaSourceEnumState> delegate;
        private final SplitEnumeratorContext<KafkaPartitionSplit> context;

        NoMoreSplitsOnRegistration(
                SplitEnumerator<KafkaPartitionSplit, KafkaSourceEnumState> delegate,
                SplitEnumeratorContext<KafkaPartitionSplit> context) {
            this.delegate = delegate;
            this.context = context;
        }

        @Override
        public void start() {
            delegate.start();
        }

        @Override
        public void handleSplitRequest(int subtaskId, String requesterHostname) {
            delegate.handleSplitRequest(subtaskId, requesterHostname);
        }

        @Override
        public void addSplitsBack(List<KafkaPartitionSplit> splits, int subtaskId) {
            // Assigned again when the reader registers again, before that registration's signal.
            delegate.addSplitsBack(splits, subtaskId);
        }

        @Override
        public void addReader(int subtaskId) {
            delegate.addReader(subtaskId);
            context.signalNoMoreSplits(subtaskId);
        }

        @Override
        public KafkaSourceEnumState snapshotState(long checkpointId) throws Exception {
            return delegate.snapshotState(checkpointId);
        }

        @Override
        public void close() throws java.io.IOException {
            delegate.close();
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) throws Exception {
            delegate.notifyCheckpointComplete(checkpointId);
        }

        @Override
        public void notifyCheckpointAborted(long checkpointId) throws Exception {
            delegate.notifyCheckpointAborted(checkpointId);
        }

        @Override
        public void handleSourceEvent(int subtaskId, SourceEvent sourceEvent) {
            delegate.handleSourceEvent(subtaskId, sourceEvent);
        }
    }
}
