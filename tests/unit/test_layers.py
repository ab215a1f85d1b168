"""How the packages may import each other: no circles, the product never needs the dev tools.

Read from the source (every import statement, also those inside functions), so a lazy import that
closes a circle counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("lakestream", "sinks", "sources", "udfs", "maintenance", "flink_jobs", "devtools")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[tuple[str, str]]:
    """(project module imported, name taken from it or "") for every import in ``path``."""

    def owner(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    out: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {(m, "") for a in node.names if (m := owner(a.name))}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in known:
                    out.add((submodule, ""))
                elif module := owner(node.module):
                    out.add((module, alias.name))
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: {dep for dep, _ in imports(p, known)} - {m} for m, p in known.items()}


def cycle_in(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = "open"
        path.append(m)
        for dep in sorted(g.get(m, ())):
            if state.get(dep) == "open":
                return path[path.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[m] = "done"
        return None

    for m in sorted(g):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_between_project_modules() -> None:
    assert cycle_in(graph()) is None


def test_the_product_does_not_import_the_dev_tools_or_the_cli() -> None:
    for module, deps in graph().items():
        if module.split(".")[0] in ("lakestream", "sinks", "sources", "udfs", "maintenance"):
            wrong = sorted(d for d in deps if d.split(".")[0] in ("devtools", "flink_jobs"))
            assert not wrong, f"{module} imports {wrong}"


def test_jobs_and_dev_tools_take_no_private_names_from_other_modules() -> None:
    known = modules()
    for module, path in known.items():
        if module.split(".")[0] not in ("flink_jobs", "devtools"):
            continue
        private = sorted(f"{dep}.{name}" for dep, name in imports(path, known) if name.startswith("_"))
        assert not private, f"{module} imports {private}"
