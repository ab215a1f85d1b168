"""The worker's allocators: freed pages kept between checkpoints, handed back once per checkpoint.

Why: a worker allocates and drops megabytes per batch (Beam's buffers of a batch, Arrow IPC bytes, the
compute kernels' outputs). Left as they come, glibc serves blocks above its mmap threshold with fresh
``mmap`` calls and Arrow's bundled jemalloc unmaps freed extents at once, so every batch page-faulted
its memory back in and the kernel zeroed it: about 0.8 page faults per event. ``keep_freed_pages``
has glibc keep what it freed and Arrow allocate through glibc (Arrow's mimalloc pool reused its pages
too, but the job ran no faster with it); ``return_free_memory`` then hands it all back
once per checkpoint, since a worker's peaks are per checkpoint (a batch of Parquet files staged, a
silver MERGE in delta-rs' Rust engine) and its resident size would otherwise settle at its largest
checkpoint's rather than its usual one. Measurements: benchmarks/RESULTS.md (memory at the default TTL,
and the worker allocators).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

import pyarrow as pa

#: glibc ``mallopt`` parameters (malloc.h) and their values here, each unless its environment variable
#: is set: blocks up to 32 MiB from the heap rather than ``mmap``, and up to 256 MiB free at the top
#: of the heap kept (with 64 MiB of padding per growth) until ``return_free_memory``.
MALLOPT: tuple[tuple[str, int, int], ...] = (
    ("MALLOC_MMAP_THRESHOLD_", -3, 32 * 1024 * 1024),
    ("MALLOC_TRIM_THRESHOLD_", -1, 256 * 1024 * 1024),
    ("MALLOC_TOP_PAD_", -2, 64 * 1024 * 1024),
)


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim, libc.mallopt  # noqa: B018 - glibc only; musl and macOS have neither
    except (OSError, AttributeError):
        return None
    return libc


@cache
def keep_freed_pages() -> None:
    """Have glibc reuse the memory it freed and Arrow allocate through it (once per process; what the
    environment sets wins: ``MALLOC_*_`` variables, ``ARROW_DEFAULT_MEMORY_POOL``). Without glibc
    (musl, macOS) only Arrow's pool changes."""
    libc = _libc()
    if libc is not None:
        for variable, parameter, value in MALLOPT:
            if variable not in os.environ:
                libc.mallopt(parameter, value)
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        pa.set_memory_pool(pa.system_memory_pool())


def return_free_memory() -> None:
    """Release Arrow's unused pool memory and trim glibc's heap and arenas (where glibc is the libc)."""
    pa.default_memory_pool().release_unused()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
