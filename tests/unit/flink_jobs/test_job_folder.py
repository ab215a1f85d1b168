"""A job's local checkpoint folder is probed where it is opened, as one on an object store is listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from flink_jobs.lifecycle import job_folder
from flink_jobs.resume import JobFolder
from lakestream.config import Config
from storage.local_files import UnwritableFolderError


def config(checkpoint_dir: Path) -> Config:
    return Config().replace("flink", checkpoint_dir=str(checkpoint_dir))


def test_an_unwritable_checkpoint_folder_stops_the_run_naming_the_setting(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    with pytest.raises(UnwritableFolderError) as caught:
        job_folder(config(tmp_path / "afile" / "checkpoints"), "ingest")
    assert str(caught.value).startswith(
        f"flink.checkpoint_dir (LAKESTREAM__FLINK__CHECKPOINT_DIR): cannot write to "
        f"{tmp_path}/afile/checkpoints/ingest: Not a directory"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]

    # A writable one opens, and the probe leaves it as it was (the job creates it when it begins).
    folder = job_folder(config(tmp_path / "checkpoints"), "land/raw/t")
    assert isinstance(folder, JobFolder)
    assert folder.root == tmp_path / "checkpoints" / "land-raw-t"
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]
