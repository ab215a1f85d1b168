"""The demo's HTML report: one self-contained file of plotly charts (plotly.js embedded, opens offline).

Sections: the tables (rows, versions, where they are); event-time lateness (how far behind its Kafka
partition's newest event each VALID event arrived, on time vs late, the late share, and how old events
were when ingested); commits over time (rows per checkpoint commit and commit latency per table); and,
when a gold table ``gold/order_metrics_5m`` exists, events and GMV per window, realtime vs batch.
Every number comes from the Delta tables: rows from bronze and late, commits from the ``_delta_log``,
read alike from a local folder or an object store (``s3://``, settings from the environment).
The numbers behind the charts are embedded as JSON (``<script id="report-data">``) next to each
chart's plotly figure, so the page can be checked without a browser.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from lakestream.table_names import BRONZE_TABLE, LATE_TABLE, TABLES
from lakestream.time import human_duration, iso_utc, iso_utc_ms
from storage.delta_log import END_OF_INPUT, CommitSummary, TableLog, is_local_uri, local_path, location

GOLD_TABLE = "gold/order_metrics_5m"
GOLD_COLUMNS = ("window_start", "events", "gmv", "layer")

#: Bins of the arrival delay (seconds): upper edges and labels; the last bin is open-ended.
DELAY_BINS: tuple[tuple[float, str], ...] = (
    (0.0, "0 (newest so far)"),
    (10.0, "≤ 10 s"),
    (60.0, "10 s – 1 min"),
    (300.0, "1 – 5 min"),
    (900.0, "5 – 15 min"),
    (3600.0, "15 min – 1 h"),
    (7200.0, "1 – 2 h"),
    (14400.0, "2 – 4 h"),
    (float("inf"), "> 4 h"),
)


# ------------------------------------------------------------------------------------ pure numbers


def arrival_delays(
    partitions: Sequence[tuple[str, int]], offsets: Sequence[int], event_times_ms: Sequence[int]
) -> list[float]:
    """Per event, seconds its event time is behind the newest earlier event of its Kafka partition.

    Events are taken in Kafka order (offset) per partition, as the event-time gate sees them; the first
    event of a partition, and any event newer than all before it, is 0 behind. An event is late when
    this exceeds ``event_time.max_out_of_orderness`` (DESIGN.md section 2). Returned in input order.
    """
    order = sorted(range(len(offsets)), key=lambda i: (partitions[i], offsets[i]))
    newest: dict[tuple[str, int], int] = {}
    delays = [0.0] * len(offsets)
    for i in order:
        p = partitions[i]
        before = newest.get(p)
        delays[i] = max(0.0, (before - event_times_ms[i]) / 1000) if before is not None else 0.0
        newest[p] = event_times_ms[i] if before is None else max(before, event_times_ms[i])
    return delays


def bin_index(delay_s: float) -> int:
    """The :data:`DELAY_BINS` bin of a delay (a bin holds delays above the previous edge up to its own)."""
    for i, (edge, _) in enumerate(DELAY_BINS):
        if delay_s <= edge:
            return i
    return len(DELAY_BINS) - 1


def delay_histogram(delays: Sequence[float], late: Sequence[bool]) -> dict[str, list[Any]]:
    """Counts per delay bin, split into on-time and late events: ``{"bins", "on_time", "late"}``."""
    on_time = [0] * len(DELAY_BINS)
    late_counts = [0] * len(DELAY_BINS)
    for d, is_late in zip(delays, late, strict=True):
        (late_counts if is_late else on_time)[bin_index(d)] += 1
    return {"bins": [label for _, label in DELAY_BINS], "on_time": on_time, "late": late_counts}


def quantiles(values: Sequence[float], qs: Sequence[float] = (0.0, 0.5, 0.99, 1.0)) -> list[float]:
    """Nearest-rank quantiles of ``values`` (empty list for no values)."""
    if not values:
        return []
    ordered = sorted(values)
    return [ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] for q in qs]


def rows_changed(commit: CommitSummary) -> int:
    """Rows a commit wrote for its checkpoint: a MERGE's inserted and updated rows, else rows added.

    A MERGE rewrites whole files, so the rows it adds include unchanged rows copied along.
    """
    if commit.operation == "MERGE":
        m = commit.metrics
        return int(m.get("num_target_rows_inserted", 0)) + int(m.get("num_target_rows_updated", 0))
    return commit.rows_added


def commit_points(commits: Sequence[CommitSummary]) -> list[dict[str, Any]]:
    """One table's checkpoint commits (those with txn actions) as chart points, one per checkpoint, in
    checkpoint order (the end of input last).

    A checkpoint can have several commits (one per writer subtask), and one subtask's commit of a
    checkpoint may follow another's end-of-input commit. Each point: ``checkpoint`` (id, or
    ``"end of input"``), ``versions``, ``time`` (its last commit, ISO UTC), ``rows`` (:func:`rows_changed`
    summed), ``latency_ms`` (commit time minus the earliest ``ingest_time`` among the rows: how long the
    oldest row waited to become visible, the largest over the commits; None without ``ingest_time``),
    and ``merge_ms`` (MERGE execution time, None for appends).
    """
    groups: dict[int, list[CommitSummary]] = {}
    for c in commits:
        if c.is_checkpoint:
            groups.setdefault(c.checkpoint or 0, []).append(c)
    points = []
    for checkpoint, group in sorted(groups.items()):
        latencies = [c.timestamp_ms - c.ingest_min_ms for c in group if c.ingest_min_ms is not None]
        merges = [int(c.metrics.get("execution_time_ms", 0)) for c in group if c.operation == "MERGE"]
        points.append(
            {
                "checkpoint": "end of input" if checkpoint == END_OF_INPUT else checkpoint,
                "versions": [c.version for c in group],
                "time": iso_utc_ms(max(c.timestamp_ms for c in group)),
                "rows": sum(rows_changed(c) for c in group),
                "latency_ms": max(latencies) if latencies else None,
                "merge_ms": sum(merges) if merges else None,
            }
        )
    return points


def gold_series(rows: Mapping[str, Sequence[Any]]) -> dict[str, dict[str, list[Any]]]:
    """Gold rows (columns window_start, events, gmv, layer) as per-layer series sorted by window.

    ``{layer: {"window_start": [ISO...], "events": [...], "gmv": [...]}}``; GMV as float (for plotting).
    """
    by_layer: dict[str, list[tuple[datetime, int, float]]] = {}
    for start, events, gmv, layer in zip(
        rows["window_start"], rows["events"], rows["gmv"], rows["layer"], strict=True
    ):
        by_layer.setdefault(str(layer), []).append((start, int(events or 0), float(gmv or 0)))
    out: dict[str, dict[str, list[Any]]] = {}
    for layer, points in sorted(by_layer.items()):
        points.sort(key=lambda p: p[0])
        out[layer] = {
            "window_start": [p[0].isoformat() for p in points],
            "events": [p[1] for p in points],
            "gmv": [p[2] for p in points],
        }
    return out


# ------------------------------------------------------------------------------------ reading tables


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table's summary line in the report."""

    name: str
    path: str
    rows: int
    version: int
    checkpoint_commits: int


def _read(uri: str, columns: Sequence[str]) -> dict[str, list[Any]]:
    from deltalake import DeltaTable

    from storage.sql_query import query

    names = ", ".join(f'"{c}"' for c in columns)
    table = query(f"SELECT {names} FROM t", t=DeltaTable(uri))
    return {name: table.column(name).to_pylist() for name in columns}


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def lateness_data(root: str, max_out_of_orderness: timedelta) -> dict[str, Any]:
    """The lateness section's numbers from bronze (VALID events) and the late table."""
    bronze = _read(
        location(root, BRONZE_TABLE), ["topic", "partition", "offset", "event_time", "ingest_time", "quality"]
    )
    late = _read(location(root, LATE_TABLE), ["topic", "partition", "offset"])
    late_keys = set(zip(late["topic"], late["partition"], late["offset"], strict=True))
    valid = [i for i, q in enumerate(bronze["quality"]) if q == "VALID"]
    parts = [(bronze["topic"][i], bronze["partition"][i]) for i in valid]
    offsets = [bronze["offset"][i] for i in valid]
    times = [_ms(bronze["event_time"][i]) for i in valid]
    delays = arrival_delays(parts, offsets, times)
    is_late = [(p[0], p[1], o) in late_keys for p, o in zip(parts, offsets, strict=True)]
    ages_s = [
        (_ms(bronze["ingest_time"][i]) - _ms(bronze["event_time"][i])) / 1000
        for i in range(len(bronze["quality"]))
    ]
    return {
        "bronze_rows": len(bronze["quality"]),
        "valid_events": len(valid),
        "late_rows": len(late["offset"]),
        "late_share": (sum(is_late) / len(valid)) if valid else 0.0,
        "max_out_of_orderness_s": max_out_of_orderness.total_seconds(),
        "histogram": delay_histogram(delays, is_late),
        "ingest_age_s": dict(zip(("min", "median", "p99", "max"), quantiles(ages_s), strict=False)),
    }


def table_infos(root: str, names: Sequence[str]) -> tuple[list[TableInfo], dict[str, list[CommitSummary]]]:
    """Rows, version and commits of each existing table among ``names``."""
    from serving.table_summary import table_summary

    infos, commits = [], {}
    for name in names:
        log = TableLog(location(root, name))
        if not log.exists:
            continue
        log.poll()
        rows = log.rows
        if rows is None:
            rows = table_summary(log.path)[0]
        marked = [c for c in log.commits if c.is_checkpoint]
        infos.append(TableInfo(name, str(log.path), rows, log.version or 0, len(marked)))
        commits[name] = log.commits
    return infos, commits


def gold_data(root: str) -> dict[str, dict[str, list[Any]]] | None:
    """Per-layer window series of the gold table, None when there is no gold table."""
    uri = location(root, GOLD_TABLE)
    if not TableLog(uri).exists:
        return None
    return gold_series(_read(uri, GOLD_COLUMNS))


# ------------------------------------------------------------------------------------ figures


def _lateness_figure(data: Mapping[str, Any]) -> Any:
    import plotly.graph_objects as go

    h = data["histogram"]
    fig = go.Figure(
        [
            go.Bar(name="on time", x=h["bins"], y=h["on_time"], marker_color="#4c78a8"),
            go.Bar(name="late (in late/order_events)", x=h["bins"], y=h["late"], marker_color="#e45756"),
        ]
    )
    limit = data["max_out_of_orderness_s"]
    # The bins on either side of the limit: categories sit at 0, 1, ..., so the edge is between two.
    edge = next((i for i, (upper, _) in enumerate(DELAY_BINS) if upper >= limit), len(DELAY_BINS) - 1)
    fig.add_vline(
        x=edge + 0.5,
        line_dash="dash",
        line_color="#888",
        annotation_text=f"max_out_of_orderness {human_duration(limit)}",
        annotation_position="top right",
    )
    fig.update_layout(
        barmode="stack",
        yaxis_type="log",
        title=(
            f"How far behind its partition's newest event each VALID event arrived "
            f"(late beyond max_out_of_orderness = {limit:g} s)"
        ),
        xaxis_title="event time behind the partition's newest earlier event",
        yaxis_title="events (log scale)",
        template="plotly_white",
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def _commits_figure(points: Mapping[str, list[dict[str, Any]]]) -> Any:
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.1,
        subplot_titles=(
            "rows committed per checkpoint (silver: orders inserted or updated)",
            "commit latency (oldest row's wait until visible)",
        ),
    )
    for index, (name, pts) in enumerate(points.items()):
        if not pts:
            continue
        color = qualitative.Plotly[index % len(qualitative.Plotly)]
        text = [f"checkpoint {p['checkpoint']}, versions {p['versions']}" for p in pts]
        fig.add_trace(
            go.Scatter(
                name=name,
                legendgroup=name,
                x=[p["time"] for p in pts],
                y=[p["rows"] for p in pts],
                text=text,
                mode="lines+markers",
                line={"color": color},
            ),
            row=1,
            col=1,
        )
        lat = [p for p in pts if p["latency_ms"] is not None]
        merges = [p for p in pts if p["merge_ms"] is not None]
        if lat:
            fig.add_trace(
                go.Scatter(
                    name=f"{name} latency",
                    legendgroup=name,
                    showlegend=False,
                    x=[p["time"] for p in lat],
                    y=[p["latency_ms"] / 1000 for p in lat],
                    mode="lines+markers",
                    line={"color": color},
                ),
                row=2,
                col=1,
            )
        if merges:
            fig.add_trace(
                go.Scatter(
                    name=f"{name} MERGE time",
                    legendgroup=name,
                    x=[p["time"] for p in merges],
                    y=[p["merge_ms"] / 1000 for p in merges],
                    mode="lines+markers",
                    line={"dash": "dot", "color": color},
                ),
                row=2,
                col=1,
            )
    fig.update_yaxes(title_text="rows", row=1, col=1)
    fig.update_yaxes(title_text="seconds", row=2, col=1)
    fig.update_layout(template="plotly_white", height=640, title="Commits over time")
    return fig


def _gold_figure(series: Mapping[str, Mapping[str, list[Any]]]) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, subplot_titles=("events per window", "GMV per window")
    )
    for layer, s in series.items():
        fig.add_trace(
            go.Scatter(name=f"{layer} events", x=s["window_start"], y=s["events"], mode="lines+markers"),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(name=f"{layer} GMV", x=s["window_start"], y=s["gmv"], mode="lines+markers"),
            row=2,
            col=1,
        )
    fig.update_layout(template="plotly_white", height=600, title="gold/order_metrics_5m: realtime vs batch")
    return fig


# ------------------------------------------------------------------------------------ the page


def _json_script(value: Any, **attrs: str) -> str:
    """A ``<script type="application/json">`` holding ``value`` (``</`` escaped, so it cannot close it)."""
    text = json.dumps(value, separators=(",", ":"), default=str).replace("</", "<\\/")
    extra = "".join(f' {k.replace("_", "-")}="{html.escape(v)}"' for k, v in attrs.items())
    return f'<script type="application/json"{extra}>{text}</script>'


def _figure_block(div_id: str, figure: Any) -> str:
    return f'<div id="{div_id}" class="chart"></div>\n' + _json_script(
        json.loads(figure.to_json()), id=f"{div_id}-figure", data_target=div_id, **{"class": "plot"}
    )


_LOADER = """
document.querySelectorAll('script.plot').forEach(function (s) {
  var f = JSON.parse(s.textContent);
  Plotly.newPlot(s.dataset.target, f.data, f.layout, {responsive: true, displaylogo: false});
});
"""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; } td, th { padding: 0.25rem 0.75rem; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; } tr:nth-child(even) { background: #f4f6f8; }
code { background: #f4f6f8; padding: 0.1rem 0.3rem; } .note { color: #555; }
"""


def build_report(
    root: str | Path, *, max_out_of_orderness: timedelta, title: str = "lakestream demo"
) -> tuple[str, dict[str, Any]]:
    """The report page for the tables under ``root`` (a folder or a URI) and the data it embeds."""
    from plotly.offline import get_plotlyjs

    base = local_path(str(root)) if is_local_uri(str(root)) else str(root).rstrip("/")
    infos, commits = table_infos(base, [*TABLES, GOLD_TABLE])
    names = {i.name for i in infos}
    missing = [t for t in (BRONZE_TABLE, LATE_TABLE) if t not in names]
    if missing:
        raise FileNotFoundError(f"no Delta table {', '.join(missing)} under {base}: run the ingest job first")
    lateness = lateness_data(base, max_out_of_orderness)
    points = {name: commit_points(c) for name, c in commits.items()}
    gold = gold_data(base)
    data: dict[str, Any] = {
        "root": base,
        "generated": iso_utc(datetime.now(timezone.utc).replace(microsecond=0)),
        "tables": {
            i.name: {
                "path": i.path,
                "rows": i.rows,
                "version": i.version,
                "checkpoint_commits": i.checkpoint_commits,
            }
            for i in infos
        },
        "lateness": lateness,
        "commits": points,
        "gold": gold,
    }
    rows = "\n".join(
        f"<tr><td><code>{html.escape(i.name)}</code></td><td class=n>{i.rows:,}</td>"
        f"<td class=n>{i.version}</td><td class=n>{i.checkpoint_commits}</td>"
        f"<td><code>{html.escape(i.path)}</code></td></tr>"
        for i in infos
    )
    age = {k: human_duration(v) for k, v in lateness["ingest_age_s"].items()}
    age_text = (
        f"ingest_time − event_time over all {lateness['bronze_rows']:,} bronze rows: "
        f"median {age['median']} (min {age['min']}, max {age['max']})."
        if age
        else "no bronze rows."
    )
    if gold is not None:
        gold_block = _figure_block("gold", _gold_figure(gold))
    else:
        gold_block = (
            f'<p class="note">No gold table: <code>{GOLD_TABLE}</code> does not exist under this lakehouse '
            "root, so there are no per-window events and GMV to compare between the realtime and batch "
            "layers. This section fills in once a job writes that table.</p>"
        )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_STYLE}</style>
<script>{get_plotlyjs()}</script>
</head><body>
<h1>{html.escape(title)}</h1>
<p class="note">Delta tables under <code>{html.escape(base)}</code>, report made {data["generated"]}.</p>
<h2>Tables</h2>
<table><tr><th>table</th><th>rows</th><th>version</th><th>checkpoint commits</th><th>path</th></tr>
{rows}</table>
<h2>Event-time lateness</h2>
<p>{lateness["late_rows"]:,} of {lateness["valid_events"]:,} VALID events arrived late
({lateness["late_share"]:.1%}): more than {lateness["max_out_of_orderness_s"]:g} s behind the newest
event before them in their Kafka partition. They are in <code>{LATE_TABLE}</code> and still reach silver
through the event-time guard.</p>
{_figure_block("lateness", _lateness_figure(lateness))}
<p class="note">{html.escape(age_text)} The demo's sample is stamped from 2024-06-01 on, so its events are
old when ingested; what decides lateness is the delay within each partition above.</p>
<h2>Commits</h2>
<p>One Delta commit per table and checkpoint (its txn action names the checkpoint); the last one is the
end-of-input commit of the bounded run.</p>
{_figure_block("commits", _commits_figure(points))}
<h2>Realtime vs batch</h2>
{gold_block}
{_json_script(data, id="report-data")}
<script>{_LOADER}</script>
</body></html>
"""
    return page, data


def write_report(
    root: str | Path, out: str | Path, *, max_out_of_orderness: timedelta, title: str = "lakestream demo"
) -> dict[str, Any]:
    """Write the report for the tables under ``root`` to ``out``; returns the data it embeds."""
    page, data = build_report(root, max_out_of_orderness=max_out_of_orderness, title=title)
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(target)
    return data
