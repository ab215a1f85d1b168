"""The worker's allocators: freed pages kept between checkpoints, handed back once per checkpoint.

A worker allocates and drops megabytes per batch (Beam's buffers, Arrow IPC bytes, kernel outputs); left
as they are, glibc and Arrow's jemalloc hand large blocks back at once and every batch page-faults its
memory in again. ``keep_freed_pages`` has glibc keep what it freed and Arrow allocate through glibc;
``return_free_memory`` hands it all back at a checkpoint's commit, since a worker's peaks are per
checkpoint and its resident size would otherwise settle at its largest checkpoint's. A trim walks every
arena, and the operators of a worker each commit at every checkpoint, so a worker trims at most once
per ``RETURN_EVERY_S``: with second-long checkpoints, trimming at each commit of each operator was a
cost of its own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
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


#: Least seconds between two hand-backs of one worker (``return_free_memory``).
RETURN_EVERY_S = 5.0
_returned = {"at": -RETURN_EVERY_S}
_returning = threading.Lock()


def return_free_memory(*, now: float | None = None) -> bool:
    """Release Arrow's unused pool memory and trim glibc's heap and arenas (where glibc is the libc),
    unless this process did so less than ``RETURN_EVERY_S`` ago; whether it did now."""
    at = time.monotonic() if now is None else now
    with _returning:
        if at - _returned["at"] < RETURN_EVERY_S:
            return False
        _returned["at"] = at
    pa.default_memory_pool().release_unused()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
    return True
