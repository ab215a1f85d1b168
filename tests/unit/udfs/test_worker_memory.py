import sys

import pyarrow as pa
import pytest

from udfs.worker_memory import _malloc_trim, return_free_memory


def test_return_free_memory_keeps_live_arrow_data() -> None:
    table = pa.table({"x": list(range(100_000))})
    return_free_memory()
    assert table.column("x")[99_999].as_py() == 99_999


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc_trim: Linux only")
def test_glibc_trim_is_found_on_linux() -> None:
    assert _malloc_trim() is not None
