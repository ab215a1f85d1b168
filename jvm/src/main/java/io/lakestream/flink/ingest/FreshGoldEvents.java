package io.lakestream.flink.ingest;

import org.apache.flink.types.Row;

/**
 * The {@link KeyedDedupEpochOperator#GOLD_EVENTS} row of a part: the gold columns of its fresh events
 * only, column-wise ({@link KeyedDedupEpochOperator#goldEventsType()}).
 *
 * <p>Why fresh only: the speed layer counts first sightings, so re-deliveries never reach the gold
 * metrics.
 */
final class FreshGoldEvents {

    private FreshGoldEvents() {}

    /** The row of {@code part}'s events whose {@code fresh} entry is set ({@code freshCount} of them). */
    static Row of(PartRow part, boolean[] fresh, int freshCount) {
        int n = fresh.length;
        long[] times = part.field(EventTimeGate.EVENT_TIMES, "event_times", long[].class);
        byte[] kinds = part.field(EventTimeGate.GOLD_KINDS, "gold_kinds", byte[].class);
        long[] amounts = part.field(EventTimeGate.GOLD_AMOUNTS, "gold_amounts", long[].class);
        String[] orders = part.field(EventTimeGate.GOLD_ORDER_IDS, "gold_order_ids", String[].class);
        String[] users = part.field(EventTimeGate.GOLD_USER_IDS, "gold_user_ids", String[].class);
        long[] arrival =
                part.field(EventTimeGate.ARRIVAL_WATERMARKS, "arrival_watermarks", long[].class);
        part.checkLength(times.length, "event_times", EventTimeGate.EVENT_TIMES);
        part.checkLength(kinds.length, "gold_kinds", EventTimeGate.GOLD_KINDS);
        part.checkLength(amounts.length, "gold_amounts", EventTimeGate.GOLD_AMOUNTS);
        part.checkLength(orders.length, "gold_order_ids", EventTimeGate.GOLD_ORDER_IDS);
        part.checkLength(users.length, "gold_user_ids", EventTimeGate.GOLD_USER_IDS);
        part.checkLength(arrival.length, "arrival_watermarks", EventTimeGate.ARRIVAL_WATERMARKS);
        long[] outTimes = new long[freshCount];
        byte[] outKinds = new byte[freshCount];
        long[] outAmounts = new long[freshCount];
        String[] outOrders = new String[freshCount];
        String[] outUsers = new String[freshCount];
        long[] outArrival = new long[freshCount];
        int at = 0;
        for (int k = 0; k < n; k++) {
            if (fresh[k]) {
                outTimes[at] = times[k];
                outKinds[at] = kinds[k];
                outAmounts[at] = amounts[k];
                outOrders[at] = orders[k];
                outUsers[at] = users[k];
                outArrival[at] = arrival[k];
                at++;
            }
        }
        // In the order of KeyedDedupEpochOperator.GOLD_EVENT_TIMES .. GOLD_EVENT_ARRIVAL_WATERMARKS.
        return Row.of(outTimes, outKinds, outAmounts, outOrders, outUsers, outArrival);
    }
}
