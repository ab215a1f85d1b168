"""Garbage-collector settings for the Python workers that process whole batches.

Why: a standardise worker allocates tens of thousands of container objects per Kafka batch (parsed
JSON dicts, events, row tuples) and drops them all when the batch is done. With CPython's default
threshold (a collection every 700 net allocations) the collector runs every few hundred records, and
each full collection walks every object the worker holds, the PyFlink, Beam, pyarrow and deltalake
modules included. Measured with ``gc.callbacks`` in a bounded 484k-event ingest run: each standardise
worker spent 0.75-0.83 s in the collector (about an eighth of its CPU time), resolve 0.47 s; with
these settings no collection ran after ``open``.

Nothing is lost by collecting less often: the batch objects hold no reference cycles (they are freed
by reference counting the moment a batch is done); cycles that do occur are still collected once
``GEN0_THRESHOLD`` net allocations pile up, which bounds them to about 10 MB. The 10-minute memory run
of ``make bench`` stayed flat with these settings.
"""

from __future__ import annotations

import gc
from typing import Final

#: Net container allocations between two young-generation collections (CPython's default: 700). Above
#: the objects one batch keeps alive at once (about three per record, batches of 5,000 records).
GEN0_THRESHOLD: Final = 50_000


def tune_for_batches() -> None:
    """Freeze what the worker holds after ``open`` and collect the young generation less often.

    ``gc.freeze`` moves every object alive now (modules, caches, the writers) to a permanent generation
    that collections skip. Per process: each Python operator runs in its own worker process here
    (``python.fn-execution.memory.managed = false``), so this touches no other operator.
    """
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
