"""devtools.pick_python: which CPython the venv is made from."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from devtools import pick_python
from devtools.pick_python import MARGIN, candidates, choose, measure, probe

SCRIPT = Path(pick_python.__file__)


def _exe(folder: Path, name: str, body: str = "exit 1") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_candidates_are_python3_first_then_versions_in_path_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _exe(a, "python3.11")
    _exe(b, "python3")
    _exe(b, "python3.12")
    (a / "python3.10").write_text("not executable")
    got = candidates(os.pathsep.join([str(a), str(b), str(a)]))
    assert got == [str(b / "python3"), str(b / "python3.12"), str(a / "python3.11")]


def test_the_default_python3_stays_unless_another_is_clearly_faster() -> None:
    default = ("/usr/bin/python3.11", "3.11.2", True, 1.0)
    close = ("/opt/py/bin/python3.12", "3.12.1", True, 1.0 * (1 - MARGIN) + 0.01)
    fast = ("/opt/py/bin/python3.10", "3.10.9", True, 0.7)
    unusable = ("/opt/old/bin/python3", "3.9.1", False, 0.1)
    assert choose([default, close]) == default
    assert choose([default, close, fast]) == fast
    assert choose([unusable, default]) == default  # the first usable one is the default
    assert choose([unusable]) is None
    assert choose([]) is None


def test_probe_reads_this_interpreter_and_skips_what_does_not_run(tmp_path: Path) -> None:
    got = probe(sys.executable)
    assert got is not None
    real, version, usable, seconds = got
    assert real == os.path.realpath(sys.executable)
    assert version == ".".join(str(part) for part in sys.version_info[:3])
    assert usable  # the test suite runs in a venv made from a supported CPython
    assert seconds > 0
    assert probe(str(_exe(tmp_path, "python3", "echo garbage"))) is None
    assert probe(str(_exe(tmp_path, "python3.12", "exit 3"))) is None


def test_measure_takes_each_interpreters_best_round_and_probes_it_under_one_name(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    # Three rounds of one interpreter under two names: 0.9, 0.5, 0.7 s; the second name is probed once.
    slow_then_fast = _exe(
        tmp_path / "a",
        "python3",
        f"echo a >> {calls}; n=$(grep -c a {calls}); "
        "case $n in 1) t=0.9;; 2) t=0.5;; *) t=0.7;; esac; echo /real/a 3.11.7 1 $t",
    )
    other_name = _exe(tmp_path / "a", "python3.11", f"echo b >> {calls}; echo /real/a 3.11.7 1 0.1")
    broken = _exe(tmp_path / "b", "python3.12", f"echo c >> {calls}; exit 1")
    fast = _exe(tmp_path / "c", "python3.10", "echo /real/c 3.10.9 1 0.2")
    got = measure([str(slow_then_fast), str(other_name), str(broken), str(fast)], rounds=3)
    assert got == [("/real/a", "3.11.7", True, 0.5), ("/real/c", "3.10.9", True, 0.2)]
    assert sorted(calls.read_text().split()) == ["a", "a", "a", "b", "c"]


def test_the_script_prints_one_usable_interpreter_or_says_what_to_install(tmp_path: Path) -> None:
    only = tmp_path / "only"
    only.mkdir()
    (only / "python3").symlink_to(sys.executable)
    run = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env={"PATH": str(only)}, check=True
    )
    assert run.stdout.strip() == os.path.realpath(sys.executable)
    assert "->" in run.stderr
    empty = tmp_path / "empty"
    _exe(empty, "python3", "exit 1")
    run = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env={"PATH": str(empty)}
    )
    assert run.returncode == 1 and run.stdout == ""
    assert "make PYTHON=" in run.stderr
