"""Helpers for the Delta source tests: real tables written with deltalake, streams drained poll by poll."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from sources.batch_plan import BatchPlan
from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.reader import table_rows
from sources.stream_reader import DeltaStreamReader

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def batch(
    ids: Sequence[int], *, tag: str = "", schema: pa.Schema = SCHEMA, **extra: Sequence[Any]
) -> pa.Table:
    cols: dict[str, Any] = {"id": pa.array(list(ids), pa.int64()), "v": [f"{tag}{i}" for i in ids]}
    cols.update(extra)
    return pa.table(cols) if extra else pa.table(cols, schema=schema)


def append(uri: str | Path, data: pa.Table, **kwargs: Any) -> int:
    write_deltalake(str(uri), data, mode="append", **kwargs)
    return DeltaTable(str(uri)).version()


def create(uri: str | Path, data: pa.Table, *, cdf: bool = False, **kwargs: Any) -> int:
    config = dict(kwargs.pop("configuration", {}) or {})
    if cdf:
        config["delta.enableChangeDataFeed"] = "true"
    write_deltalake(str(uri), data, configuration=config or None, **kwargs)
    return DeltaTable(str(uri)).version()


@dataclass
class Drained:
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    plans: list[BatchPlan] = field(default_factory=list)
    rows_per_plan: list[int] = field(default_factory=list)
    end: SourceOffset | None = None

    def dicts(self, reader: DeltaStreamReader) -> list[dict[str, Any]]:
        names = reader.output_schema.names
        return [dict(zip(names, r, strict=True)) for r in self.rows]


def poll(reader: DeltaStreamReader, offset: SourceOffset | None) -> tuple[BatchPlan, list[tuple[Any, ...]]]:
    plan = reader.plan(reader.start(offset))
    rows = [r for t in reader.read(plan) for r in table_rows(t)]
    return plan, rows


def drain(reader: DeltaStreamReader, offset: SourceOffset | None = None, *, max_polls: int = 200) -> Drained:
    """Poll until a poll neither emits nor moves the offset (caught up)."""
    out = Drained()
    for _ in range(max_polls):
        plan, rows = poll(reader, offset)
        out.plans.append(plan)
        out.rows.extend(rows)
        out.rows_per_plan.append(len(rows))
        offset = plan.end
        if not plan.has_data and plan.end == plan.start and not plan.skipped_versions:
            break
    else:  # pragma: no cover - a stream that never catches up is a bug
        raise AssertionError(f"stream did not catch up in {max_polls} polls")
    out.end = offset
    return out


def data_cols(rows: Sequence[tuple[Any, ...]], n: int = 2) -> list[tuple[Any, ...]]:
    """The first n (table) columns of each row."""
    return [tuple(r[:n]) for r in rows]


def reader_for(uri: str | Path, **options: Any) -> DeltaStreamReader:
    return DeltaStreamReader(str(uri), DeltaSourceOptions(**options))
