"""Micro benchmark of the pure per-record standardise path, against ``json.loads`` of the same payloads.

The path is what the standardise operator runs per Kafka record, without Flink: adapter
(``get_adapter(source)(payload, ...)``) -> ``quality.classify`` -> ``udfs.ingest_rows.bronze_row``
(rejects stop after the adapter). The baseline is ``json.loads`` alone over the same payloads: every
record has to be parsed at least once, so the ratio says how many JSON parses the whole path costs, and
it holds across machines and load better than events/s do. Both loops run interleaved, best of
``--rounds`` each, timed in process CPU time (other processes on the machine do not count).

    python -m benchmarks.micro_standardise --events 100000
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import datetime, timezone

from benchmarks.workload import make_events
from lakestream.adapters import AdapterSettings, get_adapter
from lakestream.config import Config
from lakestream.quality import QualityRules, classify
from lakestream.standard import Rejected
from udfs.ingest_rows import bronze_row

UTC = timezone.utc

#: One record as the operator sees it: source name, topic, value bytes.
Record = tuple[str, str, bytes]


def standardise_loop(records: list[Record], cfg: Config) -> Callable[[], int]:
    """The per-record path over ``records``; the returned function runs it once and returns bronze rows."""
    adapters = {source: get_adapter(source) for source in cfg.kafka.topics}
    settings = AdapterSettings(source_zone="Asia/Shanghai")
    rules = QualityRules(
        max_future=cfg.quality.max_future,
        amount_ceiling=cfg.quality.amount_ceiling,
        known_statuses=frozenset(cfg.quality.known_statuses),
        min_event_time=datetime(2000, 1, 1, tzinfo=UTC),
    )

    def run() -> int:
        now = datetime.now(UTC)
        rows = []
        for offset, (source, topic, value) in enumerate(records):
            result = adapters[source](value, topic=topic, partition=0, offset=offset, settings=settings)
            if isinstance(result, Rejected):
                continue
            rows.append(bronze_row(classify(result, now=now, rules=rules), now))
        return len(rows)

    return run


def json_loop(records: list[Record]) -> Callable[[], int]:
    """``json.loads`` over the same payloads (undecodable ones count, as they do in the path)."""

    def run() -> int:
        parsed = 0
        for _source, _topic, value in records:
            try:
                json.loads(value)
            except ValueError:  # also UnicodeDecodeError
                continue
            parsed += 1
        return parsed

    return run


def timed(run: Callable[[], int], n: int, timings: list[float]) -> int:
    """Run once, record the events/s, return what ``run`` returned."""
    t0 = time.process_time()
    out = run()
    elapsed = max(time.process_time() - t0, 1e-9)
    timings.append(n / elapsed)
    return out


def main(argv: list[str] | None = None) -> int:
    """Print events/s of both loops and their ratio."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.micro_standardise", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--events", type=int, default=100_000, help="seeded messy events (default 100000)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the best of each loop counts")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)

    cfg = Config()
    topics = dict(cfg.kafka.topics)
    records = [(e.source, topics[e.source], e.value) for e in make_events(args.events, seed=args.seed)]
    n = len(records)
    standardise, baseline = standardise_loop(records, cfg), json_loop(records)
    std_rates: list[float] = []
    json_rates: list[float] = []
    rows = parsed = 0
    for _ in range(max(1, args.rounds)):
        parsed = timed(baseline, n, json_rates)
        rows = timed(standardise, n, std_rates)
    std, base = max(std_rates), max(json_rates)
    print(f"records:      {n:,} ({rows:,} bronze rows, {n - rows:,} rejected; json.loads parsed {parsed:,})")
    print(f"json.loads:   {base:,.0f} events/s ({1e6 / base:.2f} us/event)")
    print(f"standardise:  {std:,.0f} events/s ({1e6 / std:.2f} us/event)")
    print(f"ratio:        standardise/json.loads = {std / base:.3f} (the path costs {base / std:.2f} parses)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
