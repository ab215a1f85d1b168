package io.lakestream.flink.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.ReaderInfo;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.mocks.MockSplitEnumeratorContext;
import org.apache.flink.connector.kafka.source.enumerator.KafkaSourceEnumState;
import org.apache.flink.connector.kafka.source.split.KafkaPartitionSplit;
import org.junit.jupiter.api.Test;

class BoundedKafkaSourceTest {

    /** A restored Kafka enumerator as the buggy connector behaves: it never signals anything. */
    private static final class Silent implements SplitEnumerator<KafkaPartitionSplit, KafkaSourceEnumState> {
        final List<String> calls = new ArrayList<>();
        final KafkaSourceEnumState state;

        Silent(KafkaSourceEnumState state) {
            this.state = state;
        }

        @Override
        public void start() {
            calls.add("start");
        }

        @Override
        public void handleSplitRequest(int subtaskId, String host) {
            calls.add("request " + subtaskId);
        }

        @Override
        public void addSplitsBack(List<KafkaPartitionSplit> splits, int subtaskId) {
            calls.add("back " + subtaskId);
        }

        @Override
        public void addReader(int subtaskId) {
            calls.add("reader " + subtaskId);
        }

        @Override
        public KafkaSourceEnumState snapshotState(long checkpointId) {
            calls.add("snapshot " + checkpointId);
            return state;
        }

        @Override
        public void close() {
            calls.add("close");
        }
    }

    private static KafkaSourceEnumState state(boolean initialDiscoveryFinished) {
        return new KafkaSourceEnumState(Collections.emptySet(), initialDiscoveryFinished);
    }

    @Test
    void aRestoredBoundedSourceTellsEachReaderThereAreNoMoreSplitsAfterItsRegistration() throws Exception {
        KafkaSourceEnumState restoredState = state(true);
        Silent kafka = new Silent(restoredState);
        try (MockSplitEnumeratorContext<KafkaPartitionSplit> context = new MockSplitEnumeratorContext<>(2)) {
            SplitEnumerator<KafkaPartitionSplit, KafkaSourceEnumState> enumerator =
                    BoundedKafkaSource.afterRestore(kafka, context, Boundedness.BOUNDED, restoredState);
            enumerator.start();
            for (int reader = 0; reader < 2; reader++) {
                context.registerReader(new ReaderInfo(reader, "localhost"));
                enumerator.addReader(reader);
                assertTrue(context.hasNoMoreSplits(reader), "reader " + reader + " would wait forever");
            }
            enumerator.addSplitsBack(List.of(), 1);
            assertSame(restoredState, enumerator.snapshotState(7), "the state is the Kafka enumerator's");
            enumerator.close();
            assertEquals(List.of("start", "reader 0", "reader 1", "back 1", "snapshot 7", "close"), kafka.calls);
        }
    }

    @Test
    void otherwiseTheKafkaEnumeratorIsUsedAsItIs() throws Exception {
        try (MockSplitEnumeratorContext<KafkaPartitionSplit> context = new MockSplitEnumeratorContext<>(1)) {
            // Restored before its first discovery ended: the Kafka enumerator finds the partitions new and
            // signals by itself once it has assigned them.
            Silent early = new Silent(state(false));
            assertSame(early, BoundedKafkaSource.afterRestore(early, context, Boundedness.BOUNDED, state(false)));
            // Unbounded: readers wait for new partitions on purpose.
            Silent unbounded = new Silent(state(true));
            assertSame(
                    unbounded,
                    BoundedKafkaSource.afterRestore(
                            unbounded, context, Boundedness.CONTINUOUS_UNBOUNDED, state(true)));
            context.registerReader(new ReaderInfo(0, "localhost"));
            unbounded.addReader(0);
            assertFalse(context.hasNoMoreSplits(0));
        }
    }
}
