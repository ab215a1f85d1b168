"""Is memory flat over a long run at steady input? Unbounded ingest, paced producer, RSS of the whole tree.

The question production asks: with order ids that never repeat (the key count only grows) and state
TTLs doing their job, does the pipeline's RSS (client + JVM + Beam Python workers) level off, or does
it keep climbing? Short TTLs (every ``event_time.*_ttl`` key, today ``dedup_ttl``, through the config's
environment overrides) make expiry happen inside a run of minutes instead of hours.

Input: the seeded messy generator (all four sources, duplicates, late and malformed events) in chunks of
``chunk_orders`` orders, each chunk with its own seed, its order ids shifted past the previous chunk's and
its event times continuing where the previous chunk's started orders ended, so event time moves forward
and every chunk brings new keys. A background thread generates the next chunk while this one is sent.

Verdict rule (explicit in the result): fit a least-squares line to total RSS over the second half of the
steady-input window; ``flat`` when its slope is below ``threshold_pct_per_min`` percent of the
second half's mean RSS per minute, else ``growing``. The first half is left out on purpose: it holds
the JVM heap's warm-up and the state filling up to its TTL.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.latency import Message
from devtools.sample_events import SampleSettings, SourceEvent

MIB = 1024 * 1024
#: ``sample_events.generate`` starts order ``i`` at ``start + i * 3 s`` and names it ``100000 + i``.
ORDER_SPACING = timedelta(seconds=3)
FIRST_ORDER_ID = 100_000
#: A generated order id, optionally prefixed as in ``payId`` (P) and ``trackingNo`` (T), as a JSON string.
_ID = re.compile(rb'"([PT]?)(1\d{5})"')


# --- the input: chunks of the seeded generator with fresh keys ------------------------------------------


def chunk_settings(k: int, chunk_orders: int, *, seed: int = 7) -> SampleSettings:
    """Settings of chunk ``k``: own seed, event times after chunk ``k - 1``'s order starts."""
    if not 0 < chunk_orders <= 100_000:
        raise ValueError(f"chunk_orders must be in 1..100000 (ids stay 1xxxxx), got {chunk_orders}")
    base = SampleSettings()
    return SampleSettings(
        orders=chunk_orders, seed=seed + k, start=base.start + ORDER_SPACING * chunk_orders * k
    )


def shifted(ev: SourceEvent, offset: int) -> tuple[bytes | None, bytes, str | None]:
    """(key, value, order id) of ``ev`` with its order id moved up by ``offset`` wherever it appears."""
    if offset == 0:
        return ev.key, ev.value, ev.order_id

    def repl(m: re.Match[bytes]) -> bytes:
        return b'"' + m.group(1) + str(int(m.group(2)) + offset).encode() + b'"'

    value = _ID.sub(repl, ev.value) if not ev.malformed else ev.value
    oid = str(int(ev.order_id) + offset) if ev.order_id is not None else None
    key = ev.key
    if oid is not None and ev.order_id is not None and ev.key == ev.order_id.encode():
        key = oid.encode()
    return key, value, oid


def chunk_messages(k: int, chunk_orders: int, topics: dict[str, str]) -> list[tuple[Message, str | None]]:
    """Chunk ``k`` as ready-to-send messages (partitioned by key), each with its order id."""
    from devtools.sample_events import generate

    out: list[tuple[Message, str | None]] = []
    for ev in generate(chunk_settings(k, chunk_orders)):
        key, value, oid = shifted(ev, k * chunk_orders)
        out.append(((topics[ev.source], key, value, None), oid))
    return out


class SteadyInput:
    """Endless messages, chunk after chunk, the next chunk generated in the background while one is sent.

    Records the order id of every message handed out (``paced_send`` sends each one it takes).
    """

    def __init__(self, topics: dict[str, str], chunk_orders: int) -> None:
        self.order_ids: set[str] = set()
        self._topics = topics
        self._chunk_orders = chunk_orders
        self._ready: queue.Queue[list[tuple[Message, str | None]]] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        threading.Thread(target=self._fill, name="memory-input", daemon=True).start()

    def _fill(self) -> None:
        k = 0
        while not self._stop.is_set():
            chunk = chunk_messages(k, self._chunk_orders, self._topics)
            while not self._stop.is_set():
                try:
                    self._ready.put(chunk, timeout=0.5)
                    break
                except queue.Full:
                    continue
            k += 1

    def wait_ready(self, timeout: float = 120) -> None:
        """Block until the first chunk exists, so sending starts at the target rate right away."""
        deadline = time.monotonic() + timeout
        while not self._ready.full() and time.monotonic() < deadline:
            time.sleep(0.1)

    def close(self) -> None:
        self._stop.set()

    def __iter__(self) -> Iterator[Message]:
        while not self._stop.is_set():
            for msg, oid in self._ready.get():
                if oid is not None:
                    self.order_ids.add(oid)
                yield msg


# --- the analysis (pure) ---------------------------------------------------------------------------------


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (0 for fewer than two distinct x)."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def at_fraction(samples: list[tuple[float, float]], frac: float, duration: float) -> float | None:
    """The sample closest to ``frac * duration`` (seconds into the window)."""
    if not samples:
        return None
    target = frac * duration
    return min(samples, key=lambda s: abs(s[0] - target))[1]


def analyse(
    samples: list[tuple[float, float]], duration_s: float, *, threshold_pct_per_min: float = 2.0
) -> dict[str, Any]:
    """Peak, RSS at 25/50/75/100 % of the window, second-half slope and the flat/growing verdict.

    ``samples`` are (seconds since steady input started, total RSS MiB).
    """
    rule = (
        f"flat if the least-squares slope of total RSS over the second half of the run is below "
        f"{threshold_pct_per_min}% of that half's mean RSS per minute"
    )
    out: dict[str, Any] = {
        "peak_mib": round(max((v for _, v in samples), default=0.0), 1),
        "rss_mib_at": {
            f"{int(q * 100)}%": (None if (v := at_fraction(samples, q, duration_s)) is None else round(v, 1))
            for q in (0.25, 0.5, 0.75, 1.0)
        },
        "rule": rule,
        "threshold_pct_per_min": threshold_pct_per_min,
    }
    half = [(t / 60.0, v) for t, v in samples if t >= duration_s / 2]
    if len(half) < 3:
        out.update(second_half_slope_mib_per_min=None, second_half_growth_pct_per_min=None)
        out["verdict"] = "unknown (fewer than 3 samples in the second half)"
        return out
    mean = sum(v for _, v in half) / len(half)
    per_min = slope(half)
    pct = 100.0 * per_min / mean if mean else 0.0
    out["second_half_mean_mib"] = round(mean, 1)
    out["second_half_slope_mib_per_min"] = round(per_min, 2)
    out["second_half_growth_pct_per_min"] = round(pct, 3)
    out["verdict"] = "flat" if pct < threshold_pct_per_min else "growing"
    return out


# --- the run ---------------------------------------------------------------------------------------------


def ttl_overrides(ttl: str) -> dict[str, str]:
    """Environment overrides setting every ``event_time.*_ttl`` key the config has now to ``ttl``.

    Read from the config class rather than listed, so the run follows the state TTLs the job has
    (an unknown key would make the job refuse its configuration).
    """
    import dataclasses

    from lakestream.config import EventTimeConfig

    names = [f.name for f in dataclasses.fields(EventTimeConfig) if f.name.endswith("_ttl")]
    return {f"LAKESTREAM__EVENT_TIME__{n.upper()}": ttl for n in names}


def _ingested(lakehouse: Path) -> int:
    from benchmarks.workload import table_rows

    return table_rows(lakehouse, "bronze/order_events") + table_rows(lakehouse, "quarantine/order_events")


def run_memory(
    work: Path,
    bootstrap: str,
    *,
    mode: str,
    minutes: float = 10,
    rate: int = 2000,
    ttl: str = "2m",
    checkpoint_interval: str,
    sets: list[str],
    tree: Path,
    chunk_orders: int = 20_000,
    sample_every_s: float = 5.0,
    threshold_pct_per_min: float = 2.0,
    drain_s: float = 60.0,
) -> dict[str, Any]:
    """Unbounded ingest at ``rate`` events/s for ``minutes``; RSS of its process tree every few seconds."""
    from benchmarks import latency
    from benchmarks.procs import RssSampler
    from benchmarks.unbounded import unbounded_ingest

    seconds = minutes * 60
    ttls = ttl_overrides(ttl)
    out: dict[str, Any] = {
        "mode": mode,
        "minutes": minutes,
        "rate_target": rate,
        "ttl": {k.rsplit("__", 1)[1].lower(): v for k, v in ttls.items()},
        "checkpoint_interval": checkpoint_interval,
        "chunk_orders": chunk_orders,
        "sample_every_s": sample_every_s,
    }
    env_over = {"LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": checkpoint_interval, **ttls}
    with unbounded_ingest(
        work,
        bootstrap,
        label=f"memory-{mode}-{rate}",
        topic_prefix="mem",
        mode=mode,
        env_over=env_over,
        sets=sets,
        tree=tree,
    ) as run:
        if not run.wait_first_checkpoint():
            out["error"] = run.log_tail()
            return out
        source = SteadyInput(run.topics, chunk_orders)
        source.wait_ready()
        order_ids = source.order_ids
        stop = threading.Event()
        sent_n: list[int] = []

        def produce() -> None:
            sent_n.append(latency.paced_send(bootstrap, iter(source), rate=rate, seconds=seconds, stop=stop))

        sampler = RssSampler(run.proc.pid, interval=sample_every_s).start()
        t0 = time.monotonic()
        prod = threading.Thread(target=produce, name="memory-producer", daemon=True)
        prod.start()
        next_report = 60.0
        while prod.is_alive():
            prod.join(timeout=1.0)
            if run.proc.poll() is not None:
                out["error"] = "pipeline exited during the run:\n" + run.log_tail()
                break
            if time.monotonic() - t0 >= next_report and sampler.series:
                now = sampler.series[-1][1]
                print(
                    f"    memory {next_report / 60:.0f}/{minutes:g} min: "
                    f"{sum(now.values()) / MIB:,.0f} MiB, {len(order_ids):,} order keys",
                    flush=True,
                )
                next_report += 60.0
        stop.set()
        prod.join(timeout=70)
        source.close()
        window = time.monotonic() - t0
        sampler.stop()
        sent = sent_n[0] if sent_n else None
        out["sent"] = sent
        out["achieved_send_rate"] = round(sent / window) if sent else 0
        out["window_s"] = round(window, 1)
        out["distinct_order_keys"] = len(order_ids)
        # Did the pipeline keep up? Rows in bronze + quarantine (one per message) after a short drain.
        lakehouse = run.run_dir / "lakehouse"
        t_drain = time.monotonic()
        ingested = _ingested(lakehouse)
        while sent is not None and ingested < sent and time.monotonic() - t_drain < drain_s:
            time.sleep(2.0)
            ingested = _ingested(lakehouse)
        out["ingested_after_drain"] = ingested
        out["drain_s"] = round(time.monotonic() - t_drain, 1)

    series = sampler.series
    samples = [(t, sum(v.values()) / MIB) for t, v in series]
    out["samples"] = [(t, round(v, 1)) for t, v in samples]
    out["by_kind_mib_at"] = {}
    for q in (0.25, 0.5, 0.75, 1.0) if series else ():
        kinds = min(series, key=lambda smp: abs(smp[0] - q * window))[1]
        out["by_kind_mib_at"][f"{int(q * 100)}%"] = {k: round(b / MIB, 1) for k, b in kinds.items()}
    out.update(analyse(samples, window, threshold_pct_per_min=threshold_pct_per_min))
    return out
