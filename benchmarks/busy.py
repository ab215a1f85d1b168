"""Each job vertex's busy ratio during a bounded ingest run, its ceiling rate, and a projection to more cores.

Input: ``flink_rest.RestSampler`` samples of every vertex's task metrics per subtask, polled about once a
second. Flink keeps, per subtask, the milliseconds it was busy, back-pressured and idle since the task
started (``accumulateBusyTimeMs``, ``accumulateBackPressuredTimeMs``, ``accumulateIdleTimeMs``), so the
busy ratio over a window is

    busy = d(busy ms) / (d(busy ms) + d(back-pressured ms) + d(idle ms))

between the window's first and last poll: exact for the window whatever the poll's timing, unlike the
``*TimeMsPerSecond`` gauges, which are averages over the last 60 s (kept as a fallback and reported).
A vertex is a chain of operators in one task; for a Python operator the task counts as busy while it
waits for the Python worker's results.

The window is the run's steady part as the data saw it: from when the standardise operator stamped
the ``lo`` quantile of bronze's ``ingest_time`` to when it stamped the ``hi`` quantile (10 % and 90 %),
so start-up and the end of input stay out; the busy ratios are taken between the first and the last
poll inside it, and the rate in the window is ``(hi - lo) * input events / (t_hi - t_lo)``. (The Kafka
source's own output is no measure of progress: it reads far ahead of the Python operators into their
bundles.) A run too short for two polls in there falls back to its sustained span, first record read
-> everything committed, at the sustained rate.

Ceiling: a vertex whose busiest subtask is busy ``b`` at rate ``R`` saturates near ``R / b``; the
vertex with the lowest ceiling bounds the job.

Projection to parallelism ``P`` (every vertex that follows the job's parallelism runs ``P`` subtasks,
one core each, at the per-subtask speed measured here):

* a vertex holding an operator whose parallelism did not follow the job's in some run (fixed in the
  graph; chains differ between runs, so this is decided per operator) keeps its ceiling;
* a vertex with the Kafka source in its chain scales with the share of the input its busiest reader
  gets: Kafka partitions are assigned to source readers by Flink's ``KafkaSourceEnumerator`` rule
  (``(topic.hashCode() * 31 & 0x7FFFFFFF) % readers + partition) % readers``), so with ``N``
  partitions no more than ``N`` readers ever get work, and uneven topics or two partitions on one
  reader cap the gain below ``P / p``;
* any other vertex (keyed or rebalanced input, spread evenly) scales linearly: ``ceiling * P / p``.

The projected rate is the lowest projected ceiling.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

TIME_GAUGES = ("busyTimeMsPerSecond", "backPressuredTimeMsPerSecond", "idleTimeMsPerSecond")
ACCUMULATED = ("accumulateBusyTimeMs", "accumulateBackPressuredTimeMs", "accumulateIdleTimeMs")
_TASK_METRIC = re.compile(r"^\d+\.(" + "|".join(TIME_GAUGES + ACCUMULATED) + r")$")
#: A vertex busy less than this in its busiest subtask is not taken as a bound (its ceiling is noise).
MIN_BUSY = 0.05


def selects(metric_id: str) -> bool:
    """The metrics the busy-ratio sampler polls: the task time metrics of every subtask."""
    return bool(_TASK_METRIC.match(metric_id))


def poll_window(samples: Sequence[Mapping[str, Any]], start: float, end: float) -> tuple[int, int] | None:
    """Indices of the first and the last poll whose wall clock (``epoch``) is inside ``[start, end]``."""
    inside = [i for i, s in enumerate(samples) if start <= float(s.get("epoch", -1.0)) <= end]
    return (inside[0], inside[-1]) if len(inside) >= 2 else None


def _subtask_ratios(
    first: Mapping[str, float | None],
    last: Mapping[str, float | None],
    gauges: Sequence[Mapping[str, float | None]],
    k: int,
) -> tuple[dict[str, float], str] | None:
    """Busy / back-pressured / idle shares of subtask ``k``: accumulated deltas, else gauge means."""
    deltas = []
    for name in ACCUMULATED:
        a, b = first.get(f"{k}.{name}"), last.get(f"{k}.{name}")
        deltas.append(None if a is None or b is None else b - a)
    if all(d is not None for d in deltas):
        busy, bp, idle = (max(0.0, d or 0.0) for d in deltas)
        total = busy + bp + idle
        if total > 0:
            return {"busy": busy / total, "backpressured": bp / total, "idle": idle / total}, "accumulated"
    means = []
    for name in TIME_GAUGES:
        xs = [v for g in gauges if (v := g.get(f"{k}.{name}")) is not None]
        means.append(sum(xs) / len(xs) / 1000.0 if xs else None)
    if means[0] is None:
        return None
    busy_g, bp_g, idle_g = (m or 0.0 for m in means)
    return {"busy": busy_g, "backpressured": bp_g, "idle": idle_g}, "gauge (60 s average)"


def vertex_busy(
    samples: Sequence[Mapping[str, Any]],
    vertices: Mapping[str, Mapping[str, Any]],
    window: tuple[int, int],
) -> list[dict[str, Any]]:
    """Per vertex (graph order): name, parallelism, per-subtask busy ratios, mean and max."""
    i0, i1 = window
    out = []
    for vid, meta in vertices.items():
        first = samples[i0]["vertices"].get(vid, {})
        last = samples[i1]["vertices"].get(vid, {})
        gauges = [s["vertices"].get(vid, {}) for s in samples[i0 : i1 + 1]]
        per: list[dict[str, float]] = []
        bases = set()
        for k in range(int(meta["parallelism"])):
            r = _subtask_ratios(first, last, gauges, k)
            if r is not None:
                per.append(r[0])
                bases.add(r[1])
        row: dict[str, Any] = {"id": vid, "name": meta["name"], "parallelism": int(meta["parallelism"])}
        if per:
            busy = [p["busy"] for p in per]
            row.update(
                subtask_busy=[round(b, 3) for b in busy],
                busy_mean=round(sum(busy) / len(busy), 3),
                busy_max=round(max(busy), 3),
                backpressured_mean=round(sum(p["backpressured"] for p in per) / len(per), 3),
                idle_mean=round(sum(p["idle"] for p in per) / len(per), 3),
                basis=", ".join(sorted(bases)),
            )
        out.append(row)
    return out


def summarize(
    samples: Sequence[Mapping[str, Any]],
    vertices: Mapping[str, Mapping[str, Any]],
    *,
    steady: tuple[float, float, float] | None,
    sustained: tuple[float, float, float] | None = None,
    rule: str = "bronze ingest_time 10 % -> 90 %",
) -> dict[str, Any]:
    """Every vertex's busy ratios over the steady window, with its ceiling rate.

    ``steady`` and ``sustained``: (start epoch s, end epoch s, events/s in between); the sustained span
    is the fallback when fewer than two polls fall in the steady window.
    """
    out: dict[str, Any] = {"polls": len(samples)}
    window, rate = None, None
    for name, span in ((rule, steady), ("sustained span (fallback: short run)", sustained)):
        if span is not None and (window := poll_window(samples, span[0], span[1])) is not None:
            out["window_rule"], rate = name, span[2]
            break
    if window is None or not vertices:
        out["error"] = "no busy window: fewer than two REST polls while the job processed its input"
        return out
    rows = vertex_busy(samples, vertices, window)
    for row in rows:
        b = row.get("busy_max")
        row["ceiling_events_per_s"] = round(rate / b) if rate and b and b >= MIN_BUSY else None
    bounded = [r for r in rows if r.get("ceiling_events_per_s")]
    out.update(
        window_s=[samples[window[0]]["t"], samples[window[1]]["t"]],
        window_polls=window[1] - window[0] + 1,
        window_events_per_s=None if rate is None else round(rate),
        vertices=rows,
        busiest=max(bounded, key=lambda r: r["busy_max"])["name"] if bounded else None,
    )
    return out


# --- the projection --------------------------------------------------------------------------------------


def java_string_hash(s: str) -> int:
    """``java.lang.String.hashCode`` (UTF-16 code units, 32-bit signed overflow)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def split_owner(topic: str, partition: int, readers: int) -> int:
    """The source reader Flink's ``KafkaSourceEnumerator.getSplitOwner`` gives ``topic``/``partition``."""
    start = ((java_string_hash(topic) * 31) & 0x7FFFFFFF) % readers
    return (start + partition) % readers


def reader_shares(partition_events: Mapping[tuple[str, int], int], readers: int) -> list[float]:
    """Share of all events each of ``readers`` source readers gets (sums to 1; empty readers 0)."""
    total = sum(partition_events.values())
    shares = [0.0] * readers
    if total <= 0:
        return shares
    for (topic, partition), n in partition_events.items():
        shares[split_owner(topic, partition, readers)] += n / total
    return shares


def _is_source(name: str) -> bool:
    return name.startswith("Source:")


def project(
    run: Mapping[str, Any],
    *,
    job_parallelism: int,
    target: int,
    partition_events: Mapping[tuple[str, int], int],
    fixed: set[str],
) -> dict[str, Any]:
    """Projected ceilings at parallelism ``target`` from one run's ``summarize`` result.

    ``fixed``: operators whose parallelism does not follow the job's (``fixed_operators``).
    """
    partitions = len(partition_events)
    rows = []
    for v in run.get("vertices", []):
        ceiling = v.get("ceiling_events_per_s")
        if not ceiling:
            continue
        p = int(v["parallelism"])
        if fixed & set(operators(v["name"])):
            factor, how = 1.0, f"fixed at parallelism {p}"
        elif _is_source(v["name"]) and partition_events:
            now, then = max(reader_shares(partition_events, p)), max(reader_shares(partition_events, target))
            factor = now / then if then else 0.0
            how = (
                f"Kafka source: busiest of {target} readers gets {then:.1%} of the events "
                f"({partitions} partitions), of {p}: {now:.1%}"
            )
        elif _is_source(v["name"]):
            factor, how = target / p, "Kafka source, partition counts unknown: linear"
        else:
            factor, how = target / p, f"linear, {target}/{p} subtasks"
        rows.append(
            {"name": v["name"], "ceiling_now": ceiling, "projected": round(ceiling * factor), "how": how}
        )
    out: dict[str, Any] = {"from_parallelism": job_parallelism, "target": target, "vertices": rows}
    if rows:
        bound = min(rows, key=lambda r: r["projected"])
        out.update(projected_events_per_s=bound["projected"], bound_by=bound["name"])
    if partition_events:
        shares = reader_shares(partition_events, target)
        out["kafka"] = {
            "partitions": partitions,
            "readers_with_work": sum(1 for s in shares if s > 0),
            "busiest_reader_share": round(max(shares), 4),
        }
    return out


def operators(vertex_name: str) -> list[str]:
    """The operators chained in a vertex, from its name (``a -> b -> c``)."""
    return [op.strip() for op in vertex_name.split(" -> ")]


def fixed_operators(runs: Sequence[tuple[int, Mapping[str, Any]]]) -> set[str]:
    """Operators that ran at another parallelism than their run's job parallelism (``(p, summary)``)."""
    return {
        op
        for p, run in runs
        for v in run.get("vertices", [])
        if int(v["parallelism"]) != p
        for op in operators(v["name"])
    }
