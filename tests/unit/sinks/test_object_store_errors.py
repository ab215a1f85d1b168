"""A sink pointed at an object store it cannot use fails at OPEN with an error that names the fix."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import obstore
import pyarrow as pa
import pytest
from obstore.store import MemoryStore

from devtools.s3_server import LocalS3
from storage.object_store import NoConditionalWritesError, ObjectStoreError, check_conditional_writes
from tests.support.delta_tables import StoredTable, open_writer

SCHEMA = pa.schema([("id", pa.int64())])


def stored(s3: LocalS3, bucket: str, **changed: str) -> StoredTable:
    key = f"{uuid.uuid4().hex}/t"
    options = {**s3.storage_options(), **changed}
    return StoredTable.at(s3.buckets_dir / bucket / key, uri=f"s3://{bucket}/{key}", options=options)


@pytest.mark.integration
def test_a_missing_bucket_names_the_bucket_and_how_to_create_it(s3: LocalS3) -> None:
    with pytest.raises(ObjectStoreError, match=r"bucket of s3://no-such-bucket/.* does not exist") as err:
        open_writer(stored(s3, "no-such-bucket"), restored=None, schema=SCHEMA)
    assert "lakestream s3 start --bucket NAME" in str(err.value)
    assert err.value.exit_code == 2


@pytest.mark.integration
def test_wrong_credentials_are_named_without_printing_them(s3: LocalS3) -> None:
    s3.create_bucket("sink-tests")
    wrong = "wrong-secret-" + uuid.uuid4().hex
    with pytest.raises(ObjectStoreError, match="refused the credentials") as err:
        open_writer(stored(s3, "sink-tests", AWS_SECRET_ACCESS_KEY=wrong), restored=None, schema=SCHEMA)
    assert "AWS_SECRET_ACCESS_KEY" in str(err.value) and wrong not in str(err.value)
    assert s3.storage_options()["AWS_SECRET_ACCESS_KEY"] not in str(err.value)


@pytest.mark.integration
def test_an_unreachable_endpoint_names_the_setting(s3: LocalS3) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    table = stored(s3, "sink-tests", AWS_ENDPOINT_URL=f"http://127.0.0.1:{closed}")
    with pytest.raises(ObjectStoreError, match=r"cannot be reached.*storage\.endpoint"):
        open_writer(table, restored=None, schema=SCHEMA)


def test_a_store_that_ignores_if_none_match_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store whose conditional create overwrites (as S3Proxy 2.6 and older servers do)."""
    store = MemoryStore()
    real_put = obstore.put

    def put_ignoring_the_condition(*args: object, **kwargs: object) -> object:
        kwargs.pop("mode", None)
        return real_put(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(obstore, "put", put_ignoring_the_condition)
    with pytest.raises(NoConditionalWritesError, match="If-None-Match") as err:
        check_conditional_writes(store, "s3://old-server/t")
    assert "honours conditional writes" in str(err.value)
    assert list(obstore.list(store).collect()) == []  # the probe cleaned up after itself


def test_the_probe_passes_on_a_store_with_conditional_writes(tmp_path: Path) -> None:
    store = MemoryStore()
    check_conditional_writes(store, "memory")
    assert list(obstore.list(store).collect()) == []
