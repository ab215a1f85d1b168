"""The architecture as a test: which package may import which, no circles, one name per module.

Read from the source (every import statement, also those inside functions and under TYPE_CHECKING),
so a lazy import that points up or closes a circle counts too. A *unit* is a package, or the Flink shell
of one (``sinks.flink``, ``sources.flink``), which sits above its pure core.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Each unit and the units it may import, bottom to top: a unit imports only units listed before it.
LAYERS: dict[str, set[str]] = {
    "lakestream": set(),
    "runtime": {"lakestream"},
    "storage": {"lakestream"},
    "sinks": {"lakestream", "storage"},
    "sources": {"lakestream", "storage"},
    "maintenance": {"lakestream", "storage", "sinks"},
    "merge_on_read": {"lakestream", "storage", "sinks", "maintenance"},
    "sinks.flink": {"lakestream", "runtime", "storage", "sinks", "maintenance", "merge_on_read"},
    "sources.flink": {"lakestream", "runtime", "storage", "sources"},
    "udfs": {"lakestream", "runtime", "storage", "sinks", "sinks.flink"},
    "batch": {"lakestream", "storage", "maintenance"},
    "serving": {"lakestream", "storage", "maintenance", "merge_on_read"},
    "devtools": {"lakestream", "runtime"},
}
_BELOW_JOBS = set(LAYERS) - {"devtools"}
LAYERS["flink_jobs"] = _BELOW_JOBS | {"devtools"}
LAYERS["demo"] = LAYERS["flink_jobs"] | {"flink_jobs"}
LAYERS["cli"] = LAYERS["demo"] | {"demo"}

#: The product's only uses of the dev tools: the local broker behind ``kafka.bootstrap_servers =
#: "embedded"`` and ``lakestream kafka``, the local S3 server behind ``lakestream s3``, and the demo's
#: broker and sample events.
DEVTOOLS_USERS = {
    "flink_jobs.lifecycle",
    "cli.cmd_kafka",
    "cli.cmd_s3",
    "demo.run_demo",
    "demo.event_feed",
    "demo.job_process",
}
PACKAGES = tuple(sorted({unit.split(".")[0] for unit in LAYERS}))


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def unit_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if ".".join(parts[:2]) in LAYERS else parts[0]


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


def test_the_layers_are_ordered_bottom_to_top() -> None:
    order = list(LAYERS)
    for unit, allowed in LAYERS.items():
        later = sorted(a for a in allowed if order.index(a) >= order.index(unit))
        assert not later, f"{unit} may import {later}, which are not below it"
    assert cycle_in(LAYERS) is None


def test_every_package_has_its_layer() -> None:
    top_level = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "benchmarks"}
    assert top_level == set(PACKAGES)


def test_no_import_circle_between_project_modules() -> None:
    assert cycle_in(graph()) is None


def test_each_unit_imports_only_the_units_below_it() -> None:
    wrong = []
    for module, deps in sorted(graph().items()):
        unit = unit_of(module)
        for dep in sorted(deps):
            if unit_of(dep) != unit and unit_of(dep) not in LAYERS[unit]:
                wrong.append(f"{module} imports {dep}")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_only_the_declared_modules_use_the_dev_tools() -> None:
    users = {
        m
        for m, deps in graph().items()
        if unit_of(m) != "devtools" and any(unit_of(d) == "devtools" for d in deps)
    }
    assert users == DEVTOOLS_USERS


def test_the_layer_check_sees_an_import_that_points_up(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from cli.main import main\n    return main\n", encoding="utf-8")
    found = {dep for dep, _ in imports(probe, modules())}
    assert found == {"cli.main"} and unit_of("cli.main") not in LAYERS["storage"]


def test_no_two_product_modules_share_a_file_name() -> None:
    names = Counter(p.name for p in modules().values() if p.name not in ("__init__.py", "__main__.py"))
    assert [n for n, count in names.items() if count > 1] == []


def test_the_upper_layers_take_no_private_names_from_other_modules() -> None:
    known = modules()
    for module, path in known.items():
        if unit_of(module) not in ("flink_jobs", "cli", "demo", "devtools"):
            continue
        private = sorted(
            f"{dep}.{name}"
            for dep, name in imports(path, known)
            if name.startswith("_") and unit_of(dep) != unit_of(module)
        )
        assert not private, f"{module} imports {private}"
