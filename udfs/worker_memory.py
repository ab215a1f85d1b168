"""Hand memory the worker no longer uses back to the operating system, once per checkpoint.

Why: a worker's peaks are per checkpoint (a batch of Parquet files staged, a silver MERGE in delta-rs'
Rust engine); afterwards the allocators keep the freed pages. glibc keeps them in per-thread arenas (the
Rust engine's and gRPC's threads each get one) and Arrow's jemalloc pool keeps them until its decay, so
a worker's resident size settled at its largest checkpoint's rather than its usual one. Measurements:
benchmarks/RESULTS.md (memory at the default TTL).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

import pyarrow as pa


@cache
def _malloc_trim() -> ctypes._NamedFuncPointer | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim  # glibc only; musl and macOS have none
    except (OSError, AttributeError):
        return None


def return_free_memory() -> None:
    """Release Arrow's unused pool memory and trim glibc's heap and arenas (where glibc is the libc)."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
