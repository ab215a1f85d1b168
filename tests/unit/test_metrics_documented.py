"""Every metric the code registers is in the metrics table of docs/serving.md, and it names no other."""

from __future__ import annotations

import re
from pathlib import Path

from sinks.flink.delta_sink import COMMIT_GAUGES, STAGER_GAUGES
from sinks.flink.global_commit import fold_gauges
from sources.flink.delta_source import SOURCE_GAUGES

ROOT = Path(__file__).resolve().parents[2]
REGISTERS = re.compile(r"""\.(?:counter|gauge|distribution|meter)\(\s*["']([A-Za-z_]+)["']""")


def registered() -> set[str]:
    names = set(COMMIT_GAUGES) | set(STAGER_GAUGES) | set(SOURCE_GAUGES) | set(fold_gauges(lambda: None))
    packages = ("udfs", "sinks", "sources", "runtime")
    files = [p for pkg in packages for p in ROOT.glob(f"{pkg}/**/*.py")]
    files += ROOT.glob("jvm/src/main/java/**/*.java")
    for path in files:
        names |= set(REGISTERS.findall(path.read_text(encoding="utf-8")))
    return names


def documented() -> set[str]:
    text = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    names: set[str] = set()
    for row in rows:
        first_cell = row.split("|")[1]
        names |= {n for n in re.findall(r"`([A-Za-z_]+)`", first_cell.split("(")[0])}
    return names


def test_every_registered_metric_is_documented_and_nothing_else() -> None:
    code, docs = registered(), documented()
    assert {"numInputRows", "events_unique", "rowsCommitted"} <= code  # the scan sees all three layers
    assert code - docs == set(), f"metrics missing from the docs table: {sorted(code - docs)}"
    assert docs - code == set(), f"the docs name metrics the code has not: {sorted(docs - code)}"
