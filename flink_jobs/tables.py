"""Find and summarise the Delta tables under a lakehouse root (for the CLI, the demo and tests)."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable


def find_tables(root: str | Path) -> list[Path]:
    """Every folder under ``root`` that holds a ``_delta_log``, sorted by name."""
    base = Path(root)
    if not base.exists():
        return []
    return sorted(p.parent for p in base.rglob("_delta_log") if p.is_dir())


def table_summary(path: Path) -> tuple[int, int]:
    """(row count, current version) of one table, counting rows from file statistics when present."""
    dt = DeltaTable(str(path))
    rows = dt.to_pyarrow_dataset().count_rows()
    return rows, dt.version()


def print_tables(root: str | Path) -> None:
    """Print ``name  rows  version`` for each table, names relative to the root."""
    base = Path(root).resolve()
    tables = find_tables(base)
    if not tables:
        print(f"no Delta tables under {base}")
        return
    print(f"Delta tables under {base}:")
    for path in tables:
        rows, version = table_summary(path)
        print(f"  {str(path.relative_to(base)):<32} {rows:>10} rows   version {version}")
