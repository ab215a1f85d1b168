"""The local Python workers' start-up (``runtime/worker/site/sitecustomize.py``) and the JVM
environment that puts it on their path (``flink_runtime.worker_environment``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from runtime.flink_env import WORKER_PANDAS_VARIABLE, WORKER_SITE, worker_environment

PROBE = textwrap.dedent(
    """
    import json, os, sys
    try:
        import pandas
        pandas_import = "ok"
    except ModuleNotFoundError as e:
        pandas_import = str(e)
    try:
        import pandas.core.frame
        submodule = "ok"
    except ModuleNotFoundError as e:
        submodule = e.name
    import numpy, pyarrow
    print(json.dumps({
        "pandas": pandas_import,
        "submodule": submodule,
        "other_site": os.environ.get("OTHER_SITE_RAN"),
    }))
    """
)


def _python(pythonpath: list[Path]) -> dict[str, str | None]:
    """``PROBE`` in a fresh interpreter with ``pythonpath`` as its ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    result: dict[str, str | None] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_a_worker_cannot_import_pandas_and_the_error_says_how_to_allow_it() -> None:
    got = _python([WORKER_SITE])
    assert got["pandas"] != "ok" and got["submodule"] == "pandas"
    assert "No module named 'pandas'" in str(got["pandas"])
    assert f"{WORKER_PANDAS_VARIABLE}=1" in str(got["pandas"])


def test_without_the_worker_site_pandas_imports() -> None:
    assert _python([])["pandas"] == "ok"


def test_the_sitecustomize_it_shadows_still_runs(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE_RAN'] = 'yes'\n")
    got = _python([WORKER_SITE, other])
    assert got["other_site"] == "yes" and got["pandas"] != "ok"


def test_the_worker_site_goes_first_on_the_jvms_pythonpath_once() -> None:
    assert worker_environment({}) == {"PYTHONPATH": str(WORKER_SITE)}
    assert worker_environment({"PYTHONPATH": f"/a{os.pathsep}{WORKER_SITE}{os.pathsep}/b"}) == {
        "PYTHONPATH": os.pathsep.join([str(WORKER_SITE), "/a", "/b"])
    }


def test_the_variable_leaves_the_pythonpath_alone() -> None:
    assert worker_environment({WORKER_PANDAS_VARIABLE: "1", "PYTHONPATH": "/a"}) == {}
    assert worker_environment({WORKER_PANDAS_VARIABLE: "0"}) == {"PYTHONPATH": str(WORKER_SITE)}
