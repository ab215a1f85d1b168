"""The table format stays one line per window however wide the numbers get; csv and json agree."""

from __future__ import annotations

import csv
import io
import json

from serving.metrics_format import COLUMNS, csv_text, json_text, table_text
from serving.metrics_view import running_totals, select_windows
from tests.support.gold_tables import WINDOW, at, row

T0 = at("2024-06-01T00:00")


def test_one_line_per_window_with_wide_numbers() -> None:
    rows = [row(T0 + i * WINDOW, events=10**9, gmv="9999999999999.99") for i in range(4)]
    served = running_totals(select_windows(rows))
    text = table_text(served, T0, T0 + 5 * WINDOW, WINDOW, title="t")
    lines = [line for line in text.splitlines() if line.startswith(" 2024-06-01 ")]
    assert [line.split()[1] for line in lines] == [
        "00:00-00:05",
        "00:05-00:10",
        "00:10-00:15",
        "00:15-00:20",
        "00:20-00:25",
    ]
    assert lines[3].split()[-1] == "39,999,999,999,999.96"
    assert lines[4].split()[2] == "-"  # the empty window


def test_csv_and_json_carry_the_same_values() -> None:
    served = running_totals(select_windows([row(T0, layer="batch", source_version=3), row(T0 + WINDOW)]))
    records = json.loads(json_text(served))
    header, *lines = list(csv.reader(io.StringIO(csv_text(served))))
    assert tuple(header) == COLUMNS and [list(r) for r in records] == [list(COLUMNS)] * 2
    assert lines == [["" if v is None else str(v) for v in r.values()] for r in records]
    assert records[1]["source_version"] is None and lines[1][COLUMNS.index("source_version")] == ""
