"""Run the ``lakestream`` CLI the way a user does: ``python -m cli ...`` in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m cli ARGS`` and fail with its output unless it exits 0 (``check=False``: return
    whatever it exits with, when the exit code is the answer).

    Each job gets its own process (its own JVM), so a failing job cannot leave a half-dead gateway
    behind for the next test; the timeout turns a hang into a failure with the output attached.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"lakestream {' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-5000:]}"
            f"\n--- stderr\n{proc.stderr[-8000:]}"
        )
    return proc
