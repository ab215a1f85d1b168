"""Garbage-collector settings for the Python workers that process whole batches.

Why: each Kafka batch allocates and drops tens of thousands of container objects, so CPython's default
threshold (700) runs the collector every few hundred records, and each full collection walks every object
the worker holds (PyFlink, Beam, pyarrow and deltalake included). The batch objects hold no reference
cycles, so collecting less often keeps nothing longer.
"""

from __future__ import annotations

import gc
from typing import Final

#: Net container allocations between two young-generation collections (CPython's default: 700). Above
#: the objects one batch keeps alive at once (about three per record, batches of 5,000 records); cycles
#: that do occur are still collected once this many pile up, which bounds them to about 10 MB.
GEN0_THRESHOLD: Final = 50_000


def tune_for_batches() -> None:
    """Freeze what the worker holds after ``open`` and collect the young generation less often.

    ``gc.freeze`` moves every object alive now (modules, caches, the writers) to a permanent generation
    that collections skip. Per process: with ``flink.python_workers = "slot"`` the slot's other Python
    operators share the worker and get the same settings; they too handle whole batches, and what their
    ``open`` built is frozen with it (long-lived objects: writers, caches, metrics).
    """
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
