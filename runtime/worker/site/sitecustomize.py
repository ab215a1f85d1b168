"""Start-up of the local MiniCluster's Python workers: they run without pandas.

``runtime.flink_env.launch_gateway`` puts this folder first on the ``PYTHONPATH`` of the JVM it starts,
so this module runs at the start of every Python worker that JVM starts, and nowhere else. Beam's type
hints import pandas whenever it is installed, for pandas UDFs lakestream has none of; here pandas is
unimportable, which Beam, PyFlink's DataStream runtime, pyarrow and delta-rs all handle, and each worker
starts smaller and sooner. Then the interpreter's own ``sitecustomize``, if any, runs.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

#: The packages a worker does without.
LEFT_OUT = ("pandas",)


class LeaveOut:
    """A ``sys.meta_path`` finder that answers an import of a ``LEFT_OUT`` package like a missing one."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> Any:
        """Raise ``ModuleNotFoundError`` for a left-out package or module in it; else no opinion."""
        top = name.partition(".")[0]
        if top in LEFT_OUT:
            raise ModuleNotFoundError(
                f"No module named {name!r}: lakestream's local Python workers run without {top} (it saves "
                f"each worker ~34 MiB); set LAKESTREAM_WORKER_PANDAS=1 in the environment of the lakestream "
                "command to let them import it",
                name=name,
            )
        return None


def run_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this module shadows (one further down ``sys.path``), if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


sys.meta_path.insert(0, LeaveOut())
run_next_sitecustomize()
