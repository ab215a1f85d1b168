"""Latency of ``lakestream serve``'s JSON endpoint over a year of gold windows (``--only serve``).

The table: ``days`` UTC days of 5-minute windows (365 days: 105,120 rows), written as the layers write
it: one batch commit per day (``replaceWhere`` of the day), the last day instead as realtime rows in
small commits (12 windows each), plus a few realtime updates. The server runs in its own process
(``python -m flink_jobs serve``); one keep-alive client asks for a day, a week and the whole year
(random ranges, seeded), ``requests`` times each, after one cold request that builds the version's
snapshot. Then a small commit, and the first request after it: the cost of a new version. Each run is
a fresh server; figures are medians over ``repeat`` runs of each run's percentiles.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from lakestream import paths
from lakestream.gold import GOLD_SCHEMA

UTC = timezone.utc
WINDOW = timedelta(minutes=5)
PER_DAY = 288
START = "<!-- bench-serve:start -->"
END = "<!-- bench-serve:end -->"


def _rows(first: datetime, count: int, layer: str, seed: int, source_version: int | None) -> pa.Table:
    rng = random.Random(seed)
    starts = [first + i * WINDOW for i in range(count)]
    events = [rng.randint(200, 4000) for _ in starts]
    data = {
        "window_start": starts,
        "window_end": [s + WINDOW for s in starts],
        "events": events,
        "orders_created": [e // 9 for e in events],
        "payments": [e // 11 for e in events],
        "gmv": [Decimal(rng.randint(10_000, 9_000_000)) / 100 for _ in starts],
        "active_users": [e // 3 for e in events],
        "layer": [layer] * count,
        "data_time": [s + WINDOW + timedelta(seconds=30) for s in starts],
        "source_version": [source_version] * count,
        "updated_at": [s + WINDOW + timedelta(seconds=31) for s in starts],
    }
    return pa.Table.from_pydict(data, schema=GOLD_SCHEMA)


def _literal(t: datetime) -> str:
    return f"'{t.strftime('%Y-%m-%dT%H:%M:%S')}Z'"


def build_table(table: Path, *, days: int, first_day: datetime) -> dict[str, Any]:
    """The gold table of ``days`` days; how many commits and rows, and how long writing took."""
    shutil.rmtree(table, ignore_errors=True)
    t0 = time.monotonic()
    commits = 0
    for d in range(days - 1):
        day = first_day + timedelta(days=d)
        data = _rows(day, PER_DAY, "batch", d, source_version=d)
        if d == 0:
            write_deltalake(str(table), data, mode="append")
        else:
            where = f"window_start >= {_literal(day)} AND window_start < {_literal(day + timedelta(days=1))}"
            write_deltalake(str(table), data, mode="overwrite", predicate=where)
        commits += 1
    last = first_day + timedelta(days=days - 1)
    for i in range(0, PER_DAY, 12):
        write_deltalake(str(table), _rows(last + i * WINDOW, 12, "realtime", 10_000 + i, None), mode="append")
        commits += 1
    for i in (280, 284):  # realtime updates of windows it wrote already (late events)
        dt = DeltaTable(str(table))
        source = _rows(last + i * WINDOW, 4, "realtime", 20_000 + i, None)
        (
            dt.merge(source, "t.window_start = s.window_start", source_alias="s", target_alias="t")
            .when_matched_update_all(predicate="t.layer = 'realtime'")
            .when_not_matched_insert_all()
            .execute()
        )
        commits += 1
    dt = DeltaTable(str(table))
    rows = sum(int(n) for n in pa.table(dt.get_add_actions(flatten=True))["num_records"].to_pylist())
    return {
        "rows": rows,
        "commits": commits,
        "version": dt.version(),
        "write_s": round(time.monotonic() - t0, 1),
    }


class _Client:
    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def get(self, path: str) -> tuple[float, int, int]:
        """(milliseconds, status, body bytes) of one request, body read whole."""
        t0 = time.perf_counter()
        self.conn.request("GET", path)
        resp = self.conn.getresponse()
        body = resp.read()
        return (time.perf_counter() - t0) * 1000, resp.status, len(body)


def _pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


#: The current tree's server answers the year in one request (``serve.max_range`` is 31 days).
YEAR_RANGE_ENV = {"LAKESTREAM__SERVE__MAX_RANGE": "366d"}


def _server(root: Path, log: Path, tree: Path | None = None) -> tuple[subprocess.Popen[str], int]:
    """``lakestream serve`` of this source tree, or of ``tree`` (another checkout: the baseline)."""
    env = dict(os.environ)
    if tree is None:
        env.update(YEAR_RANGE_ENV)
    else:
        env["PYTHONPATH"] = str(tree)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", "--lakehouse", str(root), "--port", "0", "--quiet"],
        cwd=tree or paths.PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("serving "):
        proc.kill()
        raise RuntimeError(f"lakestream serve did not start: {line!r}; see {log}")
    return proc, int(line.rsplit(":", 1)[1].split("/")[0])


def one_run(root: Path, first_day: datetime, days: int, requests: int, seed: int) -> dict[str, Any]:
    """A fresh server: the cold request, then each kind of range ``requests`` times, then a new version."""
    proc, port = _server(root, root.parent / f"serve-{seed}.log")
    rng = random.Random(seed)
    try:
        client = _Client(port)
        year = f"/api/metrics?from={first_day:%Y-%m-%d}&to={first_day + timedelta(days=days):%Y-%m-%d}"
        cold_ms, status, size = client.get(year)
        assert status == 200, status
        out: dict[str, Any] = {"cold_ms": round(cold_ms, 1), "year_bytes": size, "kinds": {}}
        for kind, span in (("day", 1), ("week", 7), ("year", days)):
            times: list[float] = []
            for _ in range(requests):
                d = first_day + timedelta(days=rng.randrange(0, days - span + 1))
                ms, status, _ = client.get(
                    f"/api/metrics?from={d:%Y-%m-%d}&to={d + timedelta(days=span):%Y-%m-%d}"
                )
                assert status == 200, status
                times.append(ms)
            out["kinds"][kind] = {
                "p50_ms": round(_pct(times, 0.5), 2),
                "p99_ms": round(_pct(times, 0.99), 2),
                "max_ms": round(max(times), 2),
                "n": len(times),
            }
        times = []
        for _ in range(requests):
            d = first_day + timedelta(days=rng.randrange(0, days))
            ms, status, _ = client.get(f"/api/today?day={d:%Y-%m-%d}")
            assert status == 200, status
            times.append(ms)
        out["kinds"]["today (page)"] = {
            "p50_ms": round(_pct(times, 0.5), 2),
            "p99_ms": round(_pct(times, 0.99), 2),
            "max_ms": round(max(times), 2),
            "n": len(times),
        }
        # A new version (a realtime update of the newest window): the first request after it rebuilds.
        last = first_day + timedelta(days=days - 1, minutes=5 * (PER_DAY - 1))
        write_deltalake(
            str(root / "gold/order_metrics_5m"),
            _rows(last, 1, "realtime", seed, None),
            mode="overwrite",
            predicate=f"window_start = {_literal(last)}",
        )
        ms, status, _ = client.get(year)
        out["new_version_ms"] = round(ms, 1)
        ms, status, _ = client.get(
            f"/api/metrics?from={last:%Y-%m-%d}&to={last + timedelta(days=1):%Y-%m-%d}"
        )
        out["after_new_version_day_ms"] = round(ms, 2)
        out["server_rss_mib"] = _rss_mib(proc.pid)
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def load_run(
    root: Path,
    first_day: datetime,
    days: int,
    *,
    clients: int,
    per_client: int,
    time_limit_s: float,
    seed: int,
    tree: Path | None = None,
) -> dict[str, Any]:
    """``clients`` keep-alive clients at once on a fresh, warmed server, each alternating ``/api/today``
    and a week of windows until ``per_client`` requests or ``time_limit_s``: p50/p99 per kind."""
    proc, port = _server(root, root.parent / f"serve-load-{seed}-{'base' if tree else 'new'}.log", tree)
    try:
        _Client(port).get(f"/api/today?day={first_day:%Y-%m-%d}")  # builds the version's snapshot
        times: dict[str, list[float]] = {"today (page)": [], "week": []}
        errors: list[str] = []
        lock = threading.Lock()
        deadline = time.monotonic() + time_limit_s
        start = threading.Barrier(clients + 1)

        def client(i: int) -> None:
            rng = random.Random(seed * 1000 + i)
            c = _Client(port)
            mine: dict[str, list[float]] = {k: [] for k in times}
            start.wait()
            for n in range(per_client):
                if time.monotonic() > deadline:
                    break
                d = first_day + timedelta(days=rng.randrange(0, days - 7))
                kind, path = (
                    ("today (page)", f"/api/today?day={d:%Y-%m-%d}")
                    if n % 2 == 0
                    else ("week", f"/api/metrics?from={d:%Y-%m-%d}&to={d + timedelta(days=7):%Y-%m-%d}")
                )
                try:
                    ms, status, _ = c.get(path)
                except OSError as exc:
                    errors.append(f"{kind}: {exc}")
                    c = _Client(port)
                    continue
                if status != 200:
                    errors.append(f"{kind}: HTTP {status}")
                mine[kind].append(ms)
            with lock:
                for k, xs in mine.items():
                    times[k].extend(xs)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        total = sum(len(xs) for xs in times.values())
        return {
            "server": "baseline" if tree else "current",
            "requests": total,
            "requests_per_s": round(total / wall, 1),
            "errors": len(errors),
            "first_errors": errors[:3],
            "kinds": {
                k: {"p50_ms": round(_pct(xs, 0.5), 2), "p99_ms": round(_pct(xs, 0.99), 2), "n": len(xs)}
                for k, xs in times.items()
                if xs
            },
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _rss_mib(pid: int) -> float | None:
    """Resident memory of the server process (Linux ``/proc``), None elsewhere."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 2)


def run(
    out_dir: Path,
    *,
    days: int,
    requests: int,
    repeat: int,
    load_clients: int = 32,
    load_requests: int = 100,
    load_seconds: float = 60.0,
    baseline_tree: Path | None = None,
) -> dict[str, Any]:
    """Build the table once, then ``repeat`` fresh-server runs; results with medians over the runs.

    Then the load run ``repeat`` times, alternating the baseline server (``baseline_tree``: another
    checkout, e.g. ``git worktree add /tmp/before REV``) and this tree's when a baseline is given.
    """
    work = out_dir / "work" / "serve"
    root = work / "lakehouse"
    first_day = datetime(2025, 1, 1, tzinfo=UTC)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    print(f"serve: writing {days} days of gold windows ...", flush=True)
    table = build_table(root / "gold/order_metrics_5m", days=days, first_day=first_day)
    print(f"serve: {table}", flush=True)
    runs = []
    for rep in range(repeat):
        r = one_run(root, first_day, days, requests, seed=rep)
        runs.append(r)
        print(f"serve: run {rep}: {json.dumps(r)}", flush=True)
    loads: list[dict[str, Any]] = []
    for rep in range(repeat):
        for tree in ([baseline_tree] if baseline_tree is not None else []) + [None]:
            r = load_run(
                root,
                first_day,
                days,
                clients=load_clients,
                per_client=load_requests,
                time_limit_s=load_seconds,
                seed=rep,
                tree=tree,
            )
            loads.append(r)
            print(f"serve: load {rep} ({r['server']}): {json.dumps(r)}", flush=True)
    kinds = list(runs[0]["kinds"])
    summary = {
        kind: {
            "p50_ms": _median([r["kinds"][kind]["p50_ms"] for r in runs]),
            "p99_ms": _median([r["kinds"][kind]["p99_ms"] for r in runs]),
            "p99_range_ms": [
                min(r["kinds"][kind]["p99_ms"] for r in runs),
                max(r["kinds"][kind]["p99_ms"] for r in runs),
            ],
        }
        for kind in kinds
    }
    return {
        "started": started,
        "table": table,
        "days": days,
        "requests_per_kind": requests,
        "repeat": repeat,
        "runs": runs,
        "summary": summary,
        "cold_ms": _median([r["cold_ms"] for r in runs]),
        "new_version_ms": _median([r["new_version_ms"] for r in runs]),
        "year_bytes": runs[0]["year_bytes"],
        "server_rss_mib": _median([r["server_rss_mib"] or 0 for r in runs]),
        "load": {
            "clients": load_clients,
            "requests_per_client": load_requests,
            "seconds_limit": load_seconds,
            "baseline_tree": str(baseline_tree) if baseline_tree else None,
            "runs": loads,
            "summary": _load_summary(loads),
        },
    }


def _load_summary(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """Per server and kind: medians over the runs of p50, p99 and requests/s; errors summed."""
    out: dict[str, Any] = {}
    for server in ("baseline", "current"):
        mine = [r for r in loads if r["server"] == server]
        if not mine:
            continue
        out[server] = {
            "requests_per_s": _median([r["requests_per_s"] for r in mine]),
            "errors": sum(r["errors"] for r in mine),
            "kinds": {
                k: {
                    "p50_ms": _median([r["kinds"][k]["p50_ms"] for r in mine if k in r["kinds"]]),
                    "p99_ms": _median([r["kinds"][k]["p99_ms"] for r in mine if k in r["kinds"]]),
                }
                for k in ("today (page)", "week")
            },
        }
    return out


def markdown(res: dict[str, Any]) -> str:
    """The README block: one table row per kind of range, then the cold and new-version costs."""
    t = res["table"]
    lines = [
        f"**Serving** (`lakestream serve`, run {res['started']}): `GET /api/metrics` over {t['rows']:,} "
        f"gold rows ({res['days']} days of 5-minute windows, {t['commits']} commits), one keep-alive "
        f"client, {res['requests_per_kind']} requests per kind and run, medians of {res['repeat']} runs "
        "(fresh server each).",
        "",
        "Run alone with `make bench BENCH_ARGS='--only serve'` (`--serve-days 365`, `--serve-requests 200`, "
        "`--serve-repeat 3`, `--serve-clients 32`, `--serve-baseline-tree DIR`); a full `make bench` runs "
        "it last. The year is one request here (`serve.max_range` raised to 366 days for the bench; the "
        "default, 31 days, refuses it). Results: `.lakestream/bench/serve.json`.",
        "",
        "| request | rows | p50 ms | p99 ms (min–max over runs) |",
        "| --- | --- | --- | --- |",
    ]
    rows = {"day": "288", "week": "2,016", "year": f"{t['rows']:,}", "today (page)": "288"}
    for kind, s in res["summary"].items():
        lo, hi = s["p99_range_ms"]
        lines.append(f"| {kind} | {rows.get(kind, '?')} | {s['p50_ms']} | {s['p99_ms']} ({lo}–{hi}) |")
    lines += [
        "",
        "First request of a version (reads the table, builds every window's JSON once): "
        f"{res['cold_ms']} ms at start, {res['new_version_ms']} ms after a new commit (the whole year's "
        "response included); "
        f"the year's JSON is {res['year_bytes'] / 1e6:.1f} MB; the server's resident memory "
        f"{res.get('server_rss_mib')} MiB.",
        "",
    ]
    load = res.get("load")
    if load and load.get("summary"):
        lines += [
            f"Under load: {load['clients']} keep-alive clients at once, each alternating `/api/today` and a "
            f"week of windows, {load['requests_per_client']} requests or {load['seconds_limit']:.0f} s per "
            "client, medians over the runs"
            + (
                " (baseline: the server of the checkout before it, in the same run)"
                if load["baseline_tree"]
                else ""
            )
            + ":",
            "",
            "| server | today p50 ms | today p99 ms | week p50 ms | week p99 ms | requests/s | errors |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for server, s in load["summary"].items():
            t, w = s["kinds"]["today (page)"], s["kinds"]["week"]
            lines.append(
                f"| {server} | {t['p50_ms']} | {t['p99_ms']} | {w['p50_ms']} | {w['p99_ms']} | "
                f"{s['requests_per_s']} | {s['errors']} |"
            )
        lines.append("")
    return "\n".join(lines)


def update_readme(readme: Path, md: str) -> None:
    """Replace the serving block (after the bench section's end marker when absent)."""
    text = readme.read_text(encoding="utf-8")
    block = f"{START}\n{md}{END}\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1].lstrip("\n")
    elif "<!-- bench:end -->" in text:
        head, tail = text.split("<!-- bench:end -->", 1)
        text = head + "<!-- bench:end -->\n\n" + block + tail.lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    readme.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.serve_latency [serve.json]``: re-render the README block from a result."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m benchmarks.serve_latency")
    p.add_argument("result", nargs="?", default=str(paths.STATE_DIR / "bench" / "serve.json"))
    a = p.parse_args(argv)
    md = markdown(json.loads(Path(a.result).read_text(encoding="utf-8")))
    update_readme(paths.PROJECT_ROOT / "benchmarks" / "RESULTS.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
