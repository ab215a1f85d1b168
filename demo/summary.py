"""What the demo prints when it is done: each table's path, rows and version, the event counts, where
the report is, and how to query the tables."""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from demo.live_view import Snapshot
from lakestream.table_names import LATE_TABLE, QUARANTINE_TABLE, REVIEW_TABLE, SILVER_TABLE


def _cli() -> str:
    """How to call the ``lakestream`` CLI of this installation."""
    script = Path(sys.executable).parent / "lakestream"
    if script.is_file():
        return shlex.quote(_relative(script))
    found = shutil.which("lakestream")
    return "lakestream" if found else f"{shlex.quote(sys.executable)} -m flink_jobs"


def _relative(path: Path) -> str:
    """``path`` relative to the working directory when it is under it (shorter to copy), else absolute."""
    absolute = path.absolute()
    try:
        return str(absolute.relative_to(Path.cwd().absolute()))
    except ValueError:
        return str(absolute)


def query_hints(root: Path, *, table: str = SILVER_TABLE) -> list[str]:
    """Commands that show the tables: the CLI, a deltalake one-liner and a DuckDB one."""
    where = _relative(root)
    silver = _relative(root / table)
    python = shlex.quote(_relative(Path(sys.executable)))
    return [
        f"{_cli()} tables --lakehouse {shlex.quote(where)}",
        f"{python} -c \"from deltalake import DeltaTable; print(DeltaTable('{silver}').to_pandas().head())\"",
        f'duckdb -c "INSTALL delta; LOAD delta; '
        f"SELECT status, count(*) FROM delta_scan('{silver}') GROUP BY 1\"   (if you have DuckDB)",
    ]


def render_summary(
    snap: Snapshot, *, root: Path, report: Path | None, report_error: str | None, elapsed_s: float
) -> Sequence[Any]:
    """The end summary as ``rich`` renderables (printed one after the other)."""
    from rich.table import Table
    from rich.text import Text

    produced = sum(snap.produced.values())
    table = Table(title=f"Delta tables under {root.resolve()}", title_justify="left", header_style="bold")
    table.add_column("table")
    table.add_column("rows", justify="right")
    table.add_column("version", justify="right")
    table.add_column("path", overflow="fold")
    for t in snap.tables:
        table.add_row(
            t.name,
            "-" if t.rows is None else f"{t.rows:,}",
            "-" if t.version is None else str(t.version),
            _relative(root / t.name),
        )
    counts = Text(
        f"{produced:,} events produced; {snap.rows(LATE_TABLE):,} late (still applied to silver), "
        f"{snap.counters.get('events_duplicate', 0):,} duplicates kept out of silver, "
        f"{snap.rows(QUARANTINE_TABLE):,} quarantined, {snap.rows(REVIEW_TABLE):,} for review; "
        f"{snap.checkpoints} checkpoint(s) committed before the end-of-input commit."
    )
    out: list[Any] = [Text(f"Done in {elapsed_s:.0f}s.", style="bold green"), table, counts]
    if report is not None:
        out.append(Text.assemble(("Report: ", "bold"), f"{_relative(report)}  (open it in a browser)"))
    elif report_error:
        out.append(Text(f"No report: {report_error}", style="yellow"))
    out.append(Text("Query them:", style="bold"))
    out.extend(Text(f"  {hint}") for hint in query_hints(root))
    return out
