"""The sink's storage-facing tests run on both back ends: a local folder and the real local S3 server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.support.delta_tables import StoredTable

BUCKET = "sink-tests"


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.integration)])
def sink_table(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where a test's table lives: a local folder, or ``s3://`` on the session's S3 server.

    On S3 the writer gets the ``s3://`` URI and its options; the checks read the server's own folder
    of the bucket (its filesystem store keeps one file per object under the object's key).
    """
    if request.param == "local":
        return tmp_path / "t"
    s3 = request.getfixturevalue("s3")
    s3.create_bucket(BUCKET)
    key = f"{uuid.uuid4().hex}/t"
    view = s3.buckets_dir / BUCKET / key
    return StoredTable.at(view, uri=f"s3://{BUCKET}/{key}", options=s3.storage_options())
