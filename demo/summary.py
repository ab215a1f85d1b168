"""What the demo prints when it is done: each table's path, rows and version, the event counts, where
the report is, and how to query the tables (on an object store: after the ``export`` of its settings)."""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from demo.live_view import Snapshot
from lakestream.table_names import LATE_TABLE, QUARANTINE_TABLE, REVIEW_TABLE, SILVER_TABLE
from storage.delta_log import is_local_uri, local_path, location


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


def shown(root: str, name: str = "") -> str:
    """Where ``name`` under ``root`` is, as the summary shows it: a local path relative to the working
    directory when it is under it, a URI as it is."""
    if not is_local_uri(root):
        return location(root, name) if name else root.rstrip("/")
    return _relative(Path(local_path(root)) / name)


def query_hints(root: str, *, table: str = SILVER_TABLE) -> list[str]:
    """Commands that show the tables: the CLI, a deltalake one-liner and (for a local folder) a DuckDB one.

    On an object store they read its settings from the environment (the ``export`` line before them).
    """
    where = shown(root)
    silver = shown(root, table)
    python = shlex.quote(_relative(Path(sys.executable)))
    hints = [
        f"{_cli()} tables --lakehouse {shlex.quote(where)}",
        f"{python} -c \"from deltalake import DeltaTable; print(DeltaTable('{silver}').to_pandas().head())\"",
    ]
    if is_local_uri(root):
        hints.append(
            f'duckdb -c "INSTALL delta; LOAD delta; '
            f"SELECT status, count(*) FROM delta_scan('{silver}') GROUP BY 1\"   (if you have DuckDB)"
        )
    return hints


def render_summary(
    snap: Snapshot,
    *,
    root: str,
    report: Path | None,
    report_error: str | None,
    elapsed_s: float,
    setup: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> Sequence[Any]:
    """The end summary as ``rich`` renderables (printed one after the other).

    ``setup``: commands to run before the query commands (the object store's ``export`` line);
    ``notes``: lines after them (what keeps running).
    """
    from rich.table import Table
    from rich.text import Text

    produced = sum(snap.produced.values())
    where = local_path(root) if is_local_uri(root) else shown(root)
    table = Table(title=f"Delta tables under {where}", title_justify="left", header_style="bold")
    table.add_column("table")
    table.add_column("rows", justify="right")
    table.add_column("version", justify="right")
    table.add_column("path", overflow="fold")
    for t in snap.tables:
        table.add_row(
            t.name,
            "-" if t.rows is None else f"{t.rows:,}",
            "-" if t.version is None else str(t.version),
            shown(root, t.name),
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
    out.extend(Text(f"  {hint}") for hint in [*setup, *query_hints(root)])
    out.extend(Text(note) for note in notes)
    return out
