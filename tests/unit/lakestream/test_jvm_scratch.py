"""The local JVM's scratch folder: named after its process, orphans removed, none under a spaced path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runtime import jvm_scratch


def dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_folder_is_named_after_this_process_and_left_alone_while_it_runs(tmp_path: Path) -> None:
    folder = jvm_scratch.create(tmp_path)
    assert folder is not None and folder.parent == tmp_path and folder.is_dir()
    assert jvm_scratch.owner(folder) == os.getpid()
    (folder / "minicluster_x").mkdir()
    assert jvm_scratch.prune(tmp_path) == []
    second = jvm_scratch.create(tmp_path)
    assert second is not None and second != folder and folder.is_dir(), "one process may start two"


def test_the_folders_of_ended_processes_are_removed_and_nothing_else(tmp_path: Path) -> None:
    orphan = tmp_path / f"{jvm_scratch.PREFIX}{dead_pid()}-abc"
    (orphan / "minicluster_1" / "tm_0").mkdir(parents=True)
    (orphan / "flink-rpc.jar").write_bytes(b"jar")
    running = tmp_path / f"{jvm_scratch.PREFIX}{os.getppid()}-def"
    running.mkdir()
    other = tmp_path / "minicluster_2"  # not ours to remove
    other.mkdir()
    stray = tmp_path / f"{jvm_scratch.PREFIX}{dead_pid()}-file"
    stray.write_text("a file of that name is not a folder of ours")

    assert jvm_scratch.prune(tmp_path) == [orphan]
    assert not orphan.exists()
    assert running.is_dir() and other.is_dir() and stray.is_file()

    created = jvm_scratch.create(tmp_path)  # prunes too
    assert created is not None
    assert {p.name for p in tmp_path.iterdir()} == {running.name, other.name, stray.name, created.name}


def test_no_folder_under_a_path_with_white_space(tmp_path: Path) -> None:
    spaced = tmp_path / "with space"
    spaced.mkdir()
    assert jvm_scratch.create(spaced) is None
    assert list(spaced.iterdir()) == []


def test_remove_takes_the_whole_folder_and_a_missing_one_is_no_error(tmp_path: Path) -> None:
    folder = jvm_scratch.create(tmp_path)
    assert folder is not None
    (folder / "a" / "b").mkdir(parents=True)
    (folder / "a" / "b" / "c.sst").write_bytes(b"x")
    jvm_scratch.remove(folder)
    assert not folder.exists()
    jvm_scratch.remove(folder)
