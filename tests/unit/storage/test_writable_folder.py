"""The start check of a folder a setting names: created and written, or one line naming setting, path,
the system's reason and the fix; the disk is left as it was found either way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lakestream.errors import exit_status
from storage.local_files import PROBE_PREFIX, UnwritableFolderError, check_writable_folder


def tree(root: Path) -> list[str]:
    """Every path under ``root``, relative, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_missing_folders_are_created_and_written_then_removed_again(tmp_path: Path) -> None:
    check_writable_folder(tmp_path / "a" / "b" / "lakehouse", setting="lakehouse.root")
    assert tree(tmp_path) == []


def test_an_existing_folder_keeps_its_content_and_no_probe(tmp_path: Path) -> None:
    (tmp_path / "lakehouse" / "silver").mkdir(parents=True)
    (tmp_path / "lakehouse" / "note.txt").write_text("kept")
    check_writable_folder(tmp_path / "lakehouse", setting="lakehouse.root")
    assert tree(tmp_path) == ["lakehouse", "lakehouse/note.txt", "lakehouse/silver"]
    assert (tmp_path / "lakehouse" / "note.txt").read_text() == "kept"
    assert not list(tmp_path.rglob(f"{PROBE_PREFIX}*"))


@pytest.mark.parametrize("below", ["afile", "afile/checkpoints", "afile/checkpoints/ingest"])
def test_a_file_in_the_way_is_named_with_the_setting_and_the_fix(tmp_path: Path, below: str) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    folder = tmp_path / below
    with pytest.raises(UnwritableFolderError) as caught:
        check_writable_folder(folder, setting="flink.checkpoint_dir")
    ended = exit_status(caught.value, "ingest")
    assert ended is not None
    code, line = ended
    assert code == 2
    assert line == (
        f"lakestream ingest: flink.checkpoint_dir (LAKESTREAM__FLINK__CHECKPOINT_DIR): cannot write to "
        f"{folder}: Not a directory ({afile} is a file, not a folder). Fix: set flink.checkpoint_dir to a "
        f"folder this user can create and write, or remove or move the file {afile}"
    )
    assert tree(tmp_path) == ["afile"]
    assert afile.read_text() == "not a folder"


def test_a_relative_folder_is_named_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "afile").write_text("")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnwritableFolderError, match=f"cannot write to {tmp_path}/afile/lakehouse: "):
        check_writable_folder(Path("afile/lakehouse"), setting="lakehouse.root")


@pytest.mark.skipif(not os.path.isdir("/sys/fs"), reason="needs sysfs, which refuses new files even to root")
def test_a_folder_the_system_refuses_names_its_reason() -> None:
    # sysfs takes no new files or folders from anyone (root included): an existing folder that cannot
    # be written, as a read-only mount or a folder of another user is.
    with pytest.raises(UnwritableFolderError) as caught:
        check_writable_folder(Path("/sys/fs/lakestream-probe/lakehouse"), setting="lakehouse.root")
    message = str(caught.value)
    assert message.startswith(
        "lakehouse.root (LAKESTREAM__LAKEHOUSE__ROOT): cannot write to /sys/fs/lakestream-probe/lakehouse: "
    )
    assert any(reason in message for reason in ("Operation not permitted", "Permission denied", "Read-only"))
    assert "Fix: set lakehouse.root to a folder this user can create and write, or " in message
    assert "/sys/fs" in message.partition("Fix:")[2]
    assert not os.path.lexists("/sys/fs/lakestream-probe")
