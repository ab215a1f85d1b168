"""The workers' allocators: freed pages reused between checkpoints, live data kept by the hand-back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from runtime.worker import memory as worker_memory
from runtime.worker.memory import MALLOPT, _libc, return_free_memory

ROOT = Path(__file__).resolve().parents[3]
#: A worker's pattern in miniature: fresh multi-megabyte bytes (a batch crossing from the JVM) and Arrow
#: kernel outputs, dropped before the next round. Prints the page faults per round and Arrow's pool.
ROUNDS = """
import json, resource, sys
import numpy as np, pyarrow as pa
from runtime.worker.memory import keep_freed_pages
if sys.argv[1] == "keep":
    keep_freed_pages()
x = pa.array(np.arange(1_000_000))
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
start = faults()
for i in range(30):
    blobs = [bytes(bytearray(3_000_000 + 1000 * i)) for _ in range(3)]
    del blobs
    y = pa.compute.add(x, i)
    del y
print(json.dumps({"faults": (faults() - start) / 30, "pool": pa.default_memory_pool().backend_name}))
"""


def rounds(mode: str) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "ARROW_DEFAULT"))}
    out = subprocess.run(
        [sys.executable, "-c", ROUNDS, mode],
        cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_return_free_memory_keeps_live_arrow_data() -> None:
    table = pa.table({"x": list(range(100_000))})
    return_free_memory(now=1e12)
    assert table.column("x")[99_999].as_py() == 99_999


def test_a_worker_hands_memory_back_at_most_once_per_interval() -> None:
    t = 2e12  # later than any other test's calls
    assert return_free_memory(now=t)
    assert not return_free_memory(now=t + worker_memory.RETURN_EVERY_S / 2)
    assert return_free_memory(now=t + worker_memory.RETURN_EVERY_S)


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's mallopt and malloc_trim: Linux only")
def test_glibc_is_found_on_linux() -> None:
    assert _libc() is not None


@pytest.mark.skipif(sys.platform != "linux", reason="page faults of glibc's malloc: Linux only")
def test_freed_pages_are_reused_instead_of_faulted_in_again() -> None:
    before, after = rounds("as-is"), rounds("keep")
    assert before["pool"] == "jemalloc" and after["pool"] == "system"
    assert after["faults"] < before["faults"] / 5, (before, after)


def test_the_environment_wins_over_the_workers_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []

    class FakeLibc:
        def mallopt(self, parameter: int, value: int) -> int:
            calls.append((parameter, value))
            return 1

    monkeypatch.setattr(worker_memory, "_libc", lambda: FakeLibc())
    monkeypatch.setattr(worker_memory.pa, "set_memory_pool", lambda pool: calls.append((0, 0)))
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1")
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
    worker_memory.keep_freed_pages.__wrapped__()  # past the once-per-process cache
    assert calls == [(p, v) for name, p, v in MALLOPT if name != "MALLOC_TRIM_THRESHOLD_"]
