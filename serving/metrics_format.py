"""The three output formats of ``lakestream query metrics``: json, csv and a table for people.

json and csv carry one record per gold row of the range (the gold columns, then the day's running
totals); windows without a row are left out. The table lists every window of the range, an empty one
as zeros with layer ``-``, so gaps are visible.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import datetime, timedelta

from rich import box
from rich.console import Console
from rich.table import Table

from lakestream.time import iso_utc
from serving.gold_read import row_json
from serving.metrics_view import EmptyWindow, ServedWindow, with_empty_windows

FORMATS = ("table", "json", "csv")

#: Columns of json and csv, in order: the gold columns, then the running totals.
COLUMNS = (
    "window_start",
    "window_end",
    "events",
    "orders_created",
    "payments",
    "gmv",
    "active_users",
    "layer",
    "data_time",
    "source_version",
    "updated_at",
    "day_events",
    "day_orders_created",
    "day_payments",
    "day_gmv",
)


def json_text(served: Sequence[ServedWindow]) -> str:
    """One JSON array of the rows (see :func:`serving.gold_read.row_json`)."""
    return json.dumps([row_json(s) for s in served], indent=1)


def csv_text(served: Sequence[ServedWindow]) -> str:
    """CSV with a header of :data:`COLUMNS`; an absent value (realtime ``source_version``) is empty."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for s in served:
        writer.writerow({k: ("" if v is None else v) for k, v in row_json(s).items()})
    return out.getvalue()


def _hhmm(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M")


def _clock(when: datetime | None) -> str:
    return "-" if when is None else when.strftime("%m-%d %H:%M:%S")


def table_text(
    served: Sequence[ServedWindow],
    start: datetime,
    end: datetime,
    window: timedelta,
    *,
    title: str,
    width: int = 400,
) -> str:
    """Every window of ``[start, end)``, with the day's running totals (``served`` may begin at the
    midnight before ``start``, so that empty windows carry the right totals)."""
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", show_edge=False)
    for name, justify in (
        ("window (UTC)", "left"),
        ("layer", "left"),
        ("events", "right"),
        ("orders", "right"),
        ("payments", "right"),
        ("GMV", "right"),
        ("active users\n(per window)", "right"),
        ("data as of", "left"),
        ("day events", "right"),
        ("day orders", "right"),
        ("day payments", "right"),
        ("day GMV", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    items = with_empty_windows(served, start, end, window)
    for item in items:
        if isinstance(item, EmptyWindow):
            label = f"{_hhmm(item.window_start)}-{item.window_end.strftime('%H:%M')}"
            cells = [label, "-", "0", "0", "0", "0.00", "0", "-"]
        else:
            r = item.row
            label = f"{_hhmm(r.window_start)}-{r.window_end.strftime('%H:%M')}"
            cells = [
                label,
                r.layer,
                f"{r.events:,}",
                f"{r.orders_created:,}",
                f"{r.payments:,}",
                f"{r.gmv:,.2f}",
                f"{r.active_users:,}",
                _clock(r.data_time),
            ]
        d = item.day
        table.add_row(*cells, f"{d.events:,}", f"{d.orders_created:,}", f"{d.payments:,}", f"{d.gmv:,.2f}")
    out = io.StringIO()
    Console(file=out, width=width, no_color=True, highlight=False, soft_wrap=False).print(table)
    rows = sum(1 for i in items if isinstance(i, ServedWindow))
    out.write(
        f"{rows} of {len(items)} windows of [{iso_utc(start)}, {iso_utc(end)}) have a gold row; the others "
        "have no gold row (no events reached either layer) and show zeros.\n"
    )
    return out.getvalue()
