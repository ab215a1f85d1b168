"""The user docs stay in step with the code: every configuration key is documented (and nothing else),
the README stays short and its map of ``docs/`` matches the pages there."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import tomllib

from lakestream import config

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CONFIG_PAGE = DOCS / "configuration.md"
#: The header of the key tables on the configuration page; only rows of such tables are read.
KEY_TABLE_HEADER = "| key | default | meaning |"
README_MAX_LINES = 300
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key_part(name: str) -> str:
    """A TOML key as written in a dotted path: bare when it can be, else quoted (``"max.poll.records"``)."""
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name)


def toml_keys(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every key of the file as ``section.key`` (nested: ``kafka.topics.orders_db``) -> its value.

    A nested table (``kafka.topics``, an empty ``maintenance.zorder``) is a key too; a top-level section
    (``kafka``) is not.
    """
    keys: dict[str, Any] = {}
    for name, value in table.items():
        path = f"{prefix}.{_key_part(name)}" if prefix else _key_part(name)
        if isinstance(value, dict):
            if prefix:
                keys[path] = value
            keys.update(toml_keys(value, path))
        else:
            keys[path] = value
    return keys


def code_keys() -> set[str]:
    """Every key ``lakestream.config`` knows, including those only defaulted in code."""
    return {
        f"{section}.{f.name}" for section, cls in config._SECTIONS.items() for f in dataclasses.fields(cls)
    }


def documented_keys() -> dict[str, str]:
    """Key -> its default cell, from the rows of the key tables of the configuration page."""
    rows: dict[str, str] = {}
    in_table = False
    for line in CONFIG_PAGE.read_text(encoding="utf-8").splitlines():
        if line.strip() == KEY_TABLE_HEADER:
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table or line.startswith("| ---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        match = re.fullmatch(r"`([^`]+)`", cells[0])
        assert match, f"a key table row must start with one `key`: {line}"
        assert match.group(1) not in rows, f"{match.group(1)} is documented twice"
        rows[match.group(1)] = cells[1]
    return rows


def toml_spelling(value: Any) -> str | None:
    """How a default is spelled in TOML (and on the page); None for a table with keys (its keys are
    checked one by one)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{}" if not value else None
    return json.dumps(value)


def test_every_configuration_key_is_documented_and_no_other() -> None:
    defaults = toml_keys(tomllib.loads((ROOT / "config" / "lakestream.toml").read_text(encoding="utf-8")))
    known = set(defaults) | code_keys()
    docs = documented_keys()
    assert {"flink.parallelism", "kafka.topics.orders_db", "maintenance.zorder"} <= set(defaults)
    assert sorted(known - set(docs)) == [], "keys missing from docs/configuration.md"
    assert sorted(set(docs) - known) == [], "docs/configuration.md documents keys the configuration has not"


def test_documented_defaults_are_the_files() -> None:
    defaults = toml_keys(tomllib.loads((ROOT / "config" / "lakestream.toml").read_text(encoding="utf-8")))
    docs = documented_keys()
    wrong = {
        key: (docs[key], spelled)
        for key, value in defaults.items()
        if key in docs and (spelled := toml_spelling(value)) is not None and f"`{spelled}`" not in docs[key]
    }
    assert wrong == {}, "docs/configuration.md's default cells that differ from config/lakestream.toml"


def readme_doc_links() -> set[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"\]\((docs/[^)#\s]+)(?:#[^)\s]*)?\)", text)}


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_readme_links_every_docs_page_and_only_existing_ones() -> None:
    linked = readme_doc_links()
    pages = {p.relative_to(ROOT).as_posix() for p in DOCS.glob("*.md")}
    assert pages, "docs/ has no pages"
    missing = sorted(p for p in linked if not (ROOT / p).is_file())
    assert missing == [], "README links docs pages that do not exist"
    assert sorted(pages - linked) == [], "docs pages the README does not link"


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (outside code blocks)."""
    found: set[str] = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#+ (.+)", line)):
            found.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return found


def test_links_between_pages_and_their_anchors_resolve() -> None:
    broken = []
    for page in [ROOT / "README.md", ROOT / "DESIGN.md", *DOCS.glob("*.md")]:
        for m in re.finditer(r"\]\(([^)#\s:]*)(?:#([^)\s]+))?\)", page.read_text(encoding="utf-8")):
            target = (page.parent / m.group(1)).resolve() if m.group(1) else page
            if not target.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {m.group(0)}")
            elif m.group(2) and target.suffix == ".md" and m.group(2) not in anchors(target):
                broken.append(f"{page.relative_to(ROOT)} -> {m.group(0)} (no such heading)")
    assert broken == []


def cluster_block(path: Path) -> str:
    blocks = re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)
    # The object-storage block (lakestream s3 start) is a cluster block of its own, run by its own test.
    found = [b for b in blocks if "start-cluster.sh" in b and "flink run" in b and "s3 start" not in b]
    assert len(found) == 1, f"{path.name}: one bash block with start-cluster.sh and flink run"
    return str(found[0])


def test_the_cluster_commands_are_the_same_in_readme_and_cluster_page() -> None:
    # tests/cluster/test_readme_cluster.py runs the README's block; the cluster page shows the same one.
    assert cluster_block(ROOT / "README.md") == cluster_block(DOCS / "cluster.md")
