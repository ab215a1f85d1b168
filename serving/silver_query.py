"""``lakestream query silver``: the current state of orders, whatever the silver layout.

  silver [--order-id ID ...] [--limit N] [--format table|json|csv]
  silver --sql [--dialect ansi|spark]

Copy-on-write silver is read as it is. Merge-on-read silver is its snapshot (``silver/orders``) and the
changes not folded into it yet (``silver/orders_changes``) read as one with the table's rule, so the
answer is as fresh as the last checkpoint (DESIGN.md section 13). ``--sql`` prints the same read as one
SQL query for an engine that registers the two Delta tables as ``snapshot`` and ``changes``.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa

from lakestream.config import Config
from lakestream.silver import RESOLVED_FIELDS, SILVER_SCHEMA
from lakestream.table_names import SILVER_TABLE
from lakestream.time import iso_utc
from merge_on_read.table import silver_mor_table

#: Columns the table format shows (json and csv give every column).
SHOWN = ("order_id", *RESOLVED_FIELDS, "last_event_time")


def current_silver(cfg: Config, order_ids: list[str] | None) -> pa.Table:
    """The current silver rows (of ``order_ids``), in either layout, ordered by order id."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from merge_on_read.table import read_current, scan

    if cfg.tables.silver_layout == "merge_on_read":
        rows = read_current(silver_mor_table(cfg), keys=order_ids)
    else:
        try:
            dt = DeltaTable(cfg.lakehouse.table_uri(SILVER_TABLE))
        except TableNotFoundError:
            rows = SILVER_SCHEMA.empty_table()
        else:
            rows = scan(dt, SILVER_SCHEMA, keys=None if order_ids is None else ("order_id", order_ids))
    return rows.sort_by([("order_id", "ascending")])


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, Decimal):
        return str(value)
    return value


def render(rows: pa.Table, fmt: str, limit: int | None) -> str:
    """The rows as ``table`` text (``SHOWN`` columns), JSON lines or CSV."""
    data = rows.slice(0, limit) if limit is not None else rows
    records = [{k: _plain(v) for k, v in r.items()} for r in data.to_pylist()]
    if fmt == "json":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=rows.column_names, lineterminator="\n")
        writer.writeheader()
        for r in records:
            writer.writerow({k: "" if v is None else v for k, v in r.items()})
        return out.getvalue()
    cells = [[("" if r[c] is None else str(r[c])) for c in SHOWN] for r in records]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(SHOWN)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(SHOWN, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    more = rows.num_rows - data.num_rows
    lines.append(f"{rows.num_rows} order(s)" + (f", {more} not shown (--limit)" if more > 0 else ""))
    return "\n".join(lines) + "\n"
