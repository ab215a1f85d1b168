"""Is memory flat over a long run at steady input? Unbounded ingest, paced producer, RSS of the whole tree.

The question production asks: with order ids that never repeat (the key count only grows) and state
TTLs doing their job, does the pipeline's RSS (client + JVM + Beam Python workers) level off, or does
it keep climbing? By default the run keeps the configured state TTLs (``event_time.dedup_ttl``, 30 min),
so it has to last longer than one TTL; ``ttl`` (``--memory-ttl 2m``) sets every ``event_time.*_ttl`` key
short through the config's environment overrides, so expiry happens inside a run of minutes.

Input: the seeded messy generator (all four sources, duplicates, late and malformed events) in chunks of
``chunk_orders`` orders, each chunk with its own seed, its order ids (seven digits) shifted past the
previous chunk's and its event times continuing where the previous chunk's started orders ended, so
event time moves forward and every chunk brings new keys. A background thread generates the next chunk
while this one is sent.

Measured: RSS and PSS per process kind (``benchmarks.procs``: client, Flink JVM, standardise / resolve /
other Python workers) every few seconds; from Flink's REST API the JVM's heap (used, committed), the
de-dup operator's RocksDB native metrics (entries, live data, SST files, memtables, block cache) and
the latest checkpoint's size; each vertex's busy and back-pressured share per minute (which stage
bounds the job, and from when); the
RocksDB local directory (``state.backend.rocksdb.localdir``, a folder of the run) on disk. Without
RocksDB state for the de-dup operator (the job keeps it elsewhere) those are reported as n/a.

Verdict rules (explicit in the result): fit a least-squares line to total RSS after the first
``dedup_ttl`` of steady input when the run is longer than that, else over the second half of the
window; ``flat`` when its slope is below ``threshold_pct_per_min`` percent of that part's mean RSS per
minute, else ``growing``. The part before is left out on purpose: it holds the JVM heap's warm-up and
the state filling up to its TTL. Separately: peak total RSS under 3 GB (3 * 10**9 bytes), and the same
check on the PSS total (RSS counts the libraries every Python worker maps once per worker).
"""

from __future__ import annotations

import os
import queue
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.latency import Message
from devtools.sample_events import SampleSettings, SourceEvent

MIB = 1024 * 1024
#: "Total under 3 GB": 3 * 10**9 bytes of RSS, in MiB.
LIMIT_MIB = 3e9 / MIB
T = TypeVar("T")
#: ``sample_events.generate`` starts order ``i`` at ``start + i * 3 s`` and names it ``100000 + i``.
ORDER_SPACING = timedelta(seconds=3)
FIRST_ORDER_ID = 100_000
#: Chunk ids start at 1,000,000 so that every id has seven digits: as strings (silver's key) they then
#: sort in the order the orders were created, like any fixed-width sequence. Ids that grow a digit mid-run
#: (999999 -> 1000000) do not, which changes what silver's key-range file pruning can skip mid-run.
ID_OFFSET = 1_000_000 - FIRST_ORDER_ID
#: The last seven-digit id: 9M orders, about 90 minutes at 10,000 events/s.
LAST_ORDER_ID = 9_999_999
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
    offset = ID_OFFSET + k * chunk_orders
    if FIRST_ORDER_ID + offset + chunk_orders - 1 > LAST_ORDER_ID:
        raise ValueError(
            f"chunk {k} of {chunk_orders} orders would need ids past {LAST_ORDER_ID:,} (eight digits): "
            "run shorter or at a lower rate"
        )
    for ev in generate(chunk_settings(k, chunk_orders)):
        key, value, oid = shifted(ev, offset)
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
    samples: list[tuple[float, float]],
    duration_s: float,
    *,
    ttl_s: float | None = None,
    threshold_pct_per_min: float = 2.0,
    limit_mib: float = LIMIT_MIB,
) -> dict[str, Any]:
    """Peak, RSS at 25/50/75/100 % of the window, the fitted slope, the flat/growing verdict, the limit.

    ``samples`` are (seconds since steady input started, total RSS MiB). The slope is fitted after the
    first ``ttl_s`` when the run is longer than that (the state has filled up to its TTL and expires as
    fast as it grows from there on), else over the second half of the run.
    """
    after_ttl = ttl_s is not None and 0 < ttl_s < duration_s
    fit_from = float(ttl_s) if after_ttl and ttl_s is not None else duration_s / 2
    part = (
        f"after the first dedup_ttl ({_minutes(fit_from)})"
        if after_ttl
        else "over the second half of the run"
    )
    rule = (
        f"flat if the least-squares slope of total RSS {part} is below {threshold_pct_per_min}% of that "
        f"part's mean RSS per minute"
    )
    peak = max((v for _, v in samples), default=None)
    out: dict[str, Any] = {
        "peak_mib": None if peak is None else round(peak, 1),
        "rss_mib_at": {
            f"{int(q * 100)}%": (None if (v := at_fraction(samples, q, duration_s)) is None else round(v, 1))
            for q in (0.25, 0.5, 0.75, 1.0)
        },
        "rule": rule,
        "fit": "after first TTL" if after_ttl else "second half",
        "fit_from_s": round(fit_from, 1),
        "threshold_pct_per_min": threshold_pct_per_min,
        "limit_mib": round(limit_mib, 1),
        "under_limit": None if peak is None else peak < limit_mib,
    }
    part_samples = [(t / 60.0, v) for t, v in samples if t >= fit_from]
    if len(part_samples) < 3:
        out.update(slope_mib_per_min=None, growth_pct_per_min=None)
        out["verdict"] = f"unknown (fewer than 3 samples {part})"
        return out
    mean = sum(v for _, v in part_samples) / len(part_samples)
    per_min = slope(part_samples)
    pct = 100.0 * per_min / mean if mean else 0.0
    out["fit_mean_mib"] = round(mean, 1)
    out["slope_mib_per_min"] = round(per_min, 2)
    out["growth_pct_per_min"] = round(pct, 3)
    out["verdict"] = "flat" if pct < threshold_pct_per_min else "growing"
    return out


def pss_summary(
    series: Sequence[tuple[float, Mapping[str, int]]], duration_s: float, *, limit_mib: float = LIMIT_MIB
) -> dict[str, Any] | None:
    """Peak PSS MiB per kind and of the total, the total at 25/50/75/100 %, and the 3 GB check on it."""
    if not series:
        return None
    totals = [(t, sum(v.values()) / MIB) for t, v in series]
    peak_total = max(v for _, v in totals)
    kinds: dict[str, float] = {}
    for _, per_kind in series:
        for k, b in per_kind.items():
            kinds[k] = max(kinds.get(k, 0.0), b / MIB)
    return {
        "peak_mib": round(peak_total, 1),
        "peak_mib_by_kind": {k: round(b, 1) for k, b in sorted(kinds.items())},
        "pss_mib_at": {
            f"{int(q * 100)}%": (None if (v := at_fraction(totals, q, duration_s)) is None else round(v, 1))
            for q in (0.25, 0.5, 0.75, 1.0)
        },
        "under_limit": peak_total < limit_mib,
    }


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min"


def nearest(
    samples: Sequence[tuple[float, T]], t: float, *, within: float | None = None
) -> tuple[float, T] | None:
    """The sample closest to ``t`` (None if there is none, or none ``within`` seconds of it)."""
    if not samples:
        return None
    best = min(samples, key=lambda s: abs(s[0] - t))
    if within is not None and abs(best[0] - t) > within:
        return None
    return best


# --- RocksDB state of the de-dup operator (REST metrics, pure) ------------------------------------------

#: ``<subtask>.<operator>.<column family>.rocksdb_<property>`` (the family left out when it is a variable;
#: ``rocksdb.<property>`` as some reporters spell it).
_ROCKSDB = re.compile(r"^(\d+)\.([^.]+)\.(?:(.+)\.)?rocksdb[._]([a-z0-9-]+)$")
#: Column families of Flink's timers (RocksDB timer service): not de-dup entries.
TIMER_FAMILY_PREFIX = "_timer_state"


def is_dedup_operator(operator: str) -> bool:
    """The de-dup operator (``ingest-dedup``, named "de-dup by event id ..."), as metric ids spell it."""
    return "dedup" in operator.lower().replace("-", "").replace("_", "")


def rocksdb_state(vertices: Mapping[str, Mapping[str, float | None]]) -> dict[str, dict[str, float]]:
    """Per operator with RocksDB keyed state: entries and sizes in bytes, summed over its subtasks.

    ``entries`` is ``estimate-num-keys`` over the operator's state column families (timer families
    left out): one RocksDB key per ``MapState`` entry, i.e. per remembered event id; expired entries
    count until compaction drops them. ``block_cache`` is taken once per subtask (the cache is shared
    by its column families). ``memory`` = the block cache (Flink's managed memory charges the memtables
    to it) or the memtables if larger, plus the table readers' index and filter memory.
    """
    sums: dict[str, dict[str, float]] = {}
    cache: dict[tuple[str, str], float] = {}
    for metrics in vertices.values():
        for mid, value in metrics.items():
            m = _ROCKSDB.match(mid)
            if m is None or value is None:
                continue
            subtask, op, family, prop = m.groups()
            if prop == "block-cache-usage":
                cache[(op, subtask)] = max(cache.get((op, subtask), 0.0), value)
                continue
            acc = sums.setdefault(op, {})
            if prop == "estimate-num-keys" and (family or "").startswith(TIMER_FAMILY_PREFIX):
                acc["timer_keys"] = acc.get("timer_keys", 0.0) + value
                continue
            acc[prop] = acc.get(prop, 0.0) + value
    out: dict[str, dict[str, float]] = {}
    for op, acc in sums.items():
        block_cache = sum(v for (o, _), v in cache.items() if o == op)
        memtables = acc.get("size-all-mem-tables", 0.0)
        readers = acc.get("estimate-table-readers-mem", 0.0)
        out[op] = {
            "entries": acc.get("estimate-num-keys", 0.0),
            "timer_keys": acc.get("timer_keys", 0.0),
            "live_data": acc.get("estimate-live-data-size", 0.0),
            "sst_files": acc.get("total-sst-files-size", 0.0),
            "live_sst_files": acc.get("live-sst-files-size", 0.0),
            "memtables": memtables,
            "table_readers": readers,
            "block_cache": block_cache,
            "memory": max(block_cache, memtables) + readers,
        }
    return out


def dedup_state(
    vertices: Mapping[str, Mapping[str, float | None]], *, local_dir_bytes: float | None = None
) -> dict[str, Any] | None:
    """The de-dup operator's entries, sizes and bytes per entry; None when it has no RocksDB metrics."""
    ops = {op: v for op, v in rocksdb_state(vertices).items() if is_dedup_operator(op)}
    if not ops:
        return None
    total = {k: sum(v[k] for v in ops.values()) for k in next(iter(ops.values()))}
    entries = total["entries"]

    def per_entry(x: float | None) -> float | None:
        return None if x is None or entries <= 0 else round(x / entries, 1)

    return {
        "operators": sorted(ops),
        "entries": int(entries),
        "bytes": {k: int(v) for k, v in total.items() if k not in ("entries", "timer_keys")},
        "local_dir_bytes": None if local_dir_bytes is None else int(local_dir_bytes),
        "bytes_per_entry": {
            "memory": per_entry(total["memory"]),
            "live_data": per_entry(total["live_data"]),
            "sst_files": per_entry(total["sst_files"]),
            "local_dir": per_entry(local_dir_bytes),
        },
    }


def dir_bytes(root: Path) -> int | None:
    """Disk usage of the files under ``root`` (allocated blocks, as ``du``); None when it does not exist."""
    if not root.exists():
        return None
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue  # RocksDB deletes files while we walk
    return total


def timeline(
    series: Sequence[tuple[float, Mapping[str, int]]],
    window_s: float,
    *,
    dedup: Sequence[tuple[float, dict[str, Any] | None]] = (),
    local_dir: Sequence[tuple[float, int | None]] = (),
    pss: Sequence[tuple[float, Mapping[str, int]]] = (),
    jvm: Sequence[tuple[float, Mapping[str, float | None] | None]] = (),
    steps: int = 10,
    within_s: float = 60.0,
) -> list[dict[str, Any]]:
    """Rows at 0, 1/steps, ..., 100 % of the window: RSS MiB per kind and total, PSS total, JVM heap,
    de-dup state, local dir (None where no sample of that kind lies within ``within_s``)."""
    rows = []
    for i in range(steps + 1):
        target = window_s * i / steps
        rss = nearest(series, target)
        if rss is None:
            continue
        t, kinds = rss
        row: dict[str, Any] = {
            "pct": round(100 * i / steps),
            "t_s": t,
            "rss_mib": {k: round(b / MIB, 1) for k, b in sorted(kinds.items())},
            "total_mib": round(sum(kinds.values()) / MIB, 1),
        }
        p = nearest(pss, target, within=within_s)
        row["pss_total_mib"] = round(sum(p[1].values()) / MIB, 1) if p else None
        j = nearest(jvm, target, within=within_s)
        row["jvm_heap"] = dict(j[1]) if j and j[1] else None
        d = nearest(dedup, target, within=within_s)
        row["dedup"] = d[1] if d else None
        ld = nearest(local_dir, target, within=within_s)
        row["local_dir_bytes"] = ld[1] if ld else None
        rows.append(row)
    return rows


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
    ttl: str | None = None,
    env: Mapping[str, str] | None = None,
    checkpoint_interval: str,
    sets: list[str],
    tree: Path,
    chunk_orders: int = 20_000,
    sample_every_s: float = 5.0,
    rest_every_s: float = 15.0,
    threshold_pct_per_min: float = 2.0,
    drain_s: float = 60.0,
) -> dict[str, Any]:
    """Unbounded ingest at ``rate`` events/s for ``minutes``; RSS per kind, de-dup state, RocksDB on disk.

    ``ttl``: every state TTL of the job (``--memory-ttl``); None keeps the configured ones. ``env``:
    more configuration overrides of the job (``--memory-env``), recorded in the result.
    """
    from benchmarks import busy, latency
    from benchmarks.flink_rest import RestSampler, free_port, rest_settings, rocksdb_settings
    from benchmarks.procs import SLOT_WORKERS, WORKER, RssSampler, expected_workers, one_worker_per_operator
    from benchmarks.unbounded import unbounded_ingest
    from lakestream.config import load_config
    from lakestream.time import parse_duration

    seconds = minutes * 60
    ttls = ttl_overrides(ttl) if ttl else {}
    dedup_ttl = (
        parse_duration(ttl, key="--memory-ttl") if ttl else load_config(None, environ={}).event_time.dedup_ttl
    )
    label = f"memory-{mode}-{rate}"
    localdir = work / label / "rocksdb"
    port = free_port()
    out: dict[str, Any] = {
        "mode": mode,
        "minutes": minutes,
        "rate_target": rate,
        "ttl": {k.rsplit("__", 1)[1].lower(): v for k, v in ttls.items()}
        or {"dedup_ttl": f"{_minutes(dedup_ttl.total_seconds())} (configured)"},
        "dedup_ttl_s": dedup_ttl.total_seconds(),
        "checkpoint_interval": checkpoint_interval,
        "chunk_orders": chunk_orders,
        "sample_every_s": sample_every_s,
        "rest_every_s": rest_every_s,
        "rocksdb_localdir": str(localdir),
        "env": dict(env or {}),
    }
    env_over = {"LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": checkpoint_interval, **ttls, **(env or {})}
    run_sets = [*sets, *rest_settings(port), *rocksdb_settings(localdir)]
    # Workers are told apart by operator only when each runs one (``benchmarks.procs``).
    python_workers = load_config(None, environ={**os.environ, **env_over}).flink.python_workers
    per_operator = one_worker_per_operator(python_workers, run_sets)
    with unbounded_ingest(
        work,
        bootstrap,
        label=label,
        topic_prefix="mem",
        mode=mode,
        env_over=env_over,
        sets=run_sets,
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

        t0 = time.monotonic()
        rest = RestSampler(
            port,
            select=lambda m: ".rocksdb" in m or busy.selects(m),
            interval=rest_every_s,
            checkpoints=True,
            jvm=True,
            t0=t0,
        ).start()
        sampler = RssSampler(
            run.proc.pid,
            interval=sample_every_s,
            classify_workers=per_operator,
            workers_kind=WORKER if per_operator else SLOT_WORKERS,
            expected=lambda: expected_workers(rest.vertices),
            t0=t0,
            pss=True,
        ).start()
        local_dir: list[tuple[float, int | None]] = []
        prod = threading.Thread(target=produce, name="memory-producer", daemon=True)
        prod.start()
        next_report, next_du = 60.0, 0.0
        while prod.is_alive():
            prod.join(timeout=1.0)
            now_s = time.monotonic() - t0
            if now_s >= next_du:
                local_dir.append((round(now_s, 1), dir_bytes(localdir)))
                next_du += rest_every_s
            if run.proc.poll() is not None:
                out["error"] = "pipeline exited during the run:\n" + run.log_tail()
                break
            if now_s >= next_report and sampler.series:
                kinds = sampler.series[-1][1]
                last = rest.latest()
                state = dedup_state(last["vertices"]) if last else None
                print(
                    f"    memory {next_report / 60:.0f}/{minutes:g} min: "
                    f"{sum(kinds.values()) / MIB:,.0f} MiB ("
                    + ", ".join(f"{k} {b / MIB:,.0f}" for k, b in sorted(kinds.items()))
                    + f"), {len(order_ids):,} order keys, de-dup entries "
                    + ("n/a" if state is None else f"{state['entries']:,}"),
                    flush=True,
                )
                if minute := busy_between(rest.samples, rest.vertices, now_s - 60.0, now_s):
                    print(f"      busy (last minute): {busy_line(minute)}", flush=True)
                next_report += 60.0
        stop.set()
        prod.join(timeout=70)
        source.close()
        window = time.monotonic() - t0
        sampler.stop()
        local_dir.append((round(window, 1), dir_bytes(localdir)))
        rest.stop()
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
    out["peak_mib_by_kind"] = sampler.summary()["peak_mib"]
    out["python_workers"] = "operator" if per_operator else "slot"
    out["workers_classified"] = sampler.summary()["workers_classified"]
    out["rest"] = rest.summary()
    out["busy_per_minute"] = busy_per_minute(rest.samples, rest.vertices, window)
    dedup_series = [
        (float(smp["t"]), dedup_state(smp["vertices"], local_dir_bytes=_at(local_dir, float(smp["t"]))))
        for smp in rest.samples
    ]
    jvm_series = [(float(smp["t"]), smp.get("jvm")) for smp in rest.samples]
    out["timeline"] = timeline(
        series, window, dedup=dedup_series, local_dir=local_dir, pss=sampler.pss_series, jvm=jvm_series
    )
    out["pss"] = pss_summary(sampler.pss_series, window)
    out["jvm_heap_peak"] = {
        k: max((v[k] or 0 for _, v in jvm_series if v and v.get(k) is not None), default=None)
        for k in ("heap_used", "heap_committed", "nonheap_used", "direct_used")
    }
    final = next((d for _, d in reversed(dedup_series) if d is not None), None)
    out["dedup"] = final  # None: no RocksDB metrics of a de-dup operator (reported as n/a)
    out["checkpoint"] = next(
        (smp["checkpoint"] for smp in reversed(rest.samples) if smp.get("checkpoint")), None
    )
    out["local_dir_bytes"] = local_dir[-1][1] if local_dir else None
    out.update(
        analyse(samples, window, ttl_s=dedup_ttl.total_seconds(), threshold_pct_per_min=threshold_pct_per_min)
    )
    return out


def busy_between(
    samples: Sequence[Mapping[str, Any]], vertices: Mapping[str, Mapping[str, Any]], lo: float, hi: float
) -> dict[str, dict[str, float]]:
    """Per vertex name, between the polls at ``lo`` .. ``hi`` s: the busiest subtask's busy share and
    the mean back-pressured share (``busy.vertex_busy``); empty with fewer than two polls there.

    A stage that bounds the job shows busy near 1 with the stages before it back-pressured.
    """
    from benchmarks.busy import vertex_busy

    inside = [i for i, s in enumerate(samples) if lo <= float(s["t"]) <= hi]
    if len(inside) < 2:
        return {}
    return {
        r["name"]: {"busy_max": r["busy_max"], "backpressured_mean": r["backpressured_mean"]}
        for r in vertex_busy(samples, vertices, (inside[0], inside[-1]))
        if "busy_max" in r
    }


def busy_per_minute(
    samples: Sequence[Mapping[str, Any]], vertices: Mapping[str, Mapping[str, Any]], window: float
) -> list[dict[str, Any]]:
    """``busy_between`` for every whole wall-clock minute of the run: when a stage starts to bound it."""
    minutes = (
        (m + 1, busy_between(samples, vertices, m * 60.0, (m + 1) * 60.0)) for m in range(int(window // 60))
    )
    return [{"minute": m, "vertices": rows} for m, rows in minutes if rows]


def busy_line(rows: Mapping[str, Mapping[str, float]]) -> str:
    """``busy_between`` as one line, each vertex named by its first operator."""
    from benchmarks.busy import operators

    return "; ".join(
        f"{operators(name)[0][:36]} busy {r['busy_max']:.2f} bp {r['backpressured_mean']:.2f}"
        for name, r in rows.items()
    )


def _at(samples: Sequence[tuple[float, int | None]], t: float) -> int | None:
    hit = nearest(samples, t, within=60.0)
    return hit[1] if hit else None
