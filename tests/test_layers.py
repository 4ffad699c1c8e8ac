"""Imports follow the layer table of docs/architecture.md: a module imports its own layer and
the layers below, never one above; a track never imports another track; no module imports
another's private names; no import circle.

The table is read from the document itself, so the two cannot drift apart: each row's first
cell names its modules and folders in backticks, top to bottom; `<track>` stands for any track.
The imports against the table that the project accepts are the document's list under
"Imports against the table", each with its reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from test_dvc_yaml import PROJECT_PACKAGES, module_file, runtime_nodes

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
TRACKS = tuple(yaml.safe_load((ROOT / "params.yaml").read_text())["paths"]["tracks"])


def layer_table() -> list[list[str]]:
    """The table's rows, top to bottom: the paths each names (with <track> expanded)."""
    text = DOC.read_text()
    table = text[text.index("| layer | what it is | may import |") :].split("\n\n")[0]
    rows = []
    for line in table.splitlines()[2:]:
        cell = line.split("|")[1]
        paths = re.findall(r"`([^`]+)`", cell)
        rows.append([p.replace("<track>", t) for p in paths for t in TRACKS] if paths else [])
    return [sorted(set(r)) for r in rows]


def accepted() -> set[tuple[str, str]]:
    """(file, module) pairs the document accepts against the table."""
    text = DOC.read_text()
    part = text[text.index("**Imports against the table**") :].split("\n\n")[1]
    return set(re.findall(r"^- `([^`]+)` imports `([^`]+)`", part, flags=re.M))


def layer_of(path: str, rows: list[list[str]]) -> int | None:
    """The row naming `path` most closely (longest prefix), or None."""
    best, found = -1, None
    for i, names in enumerate(rows):
        for name in names:
            if (path == name or (name.endswith("/") and path.startswith(name))) and len(
                name
            ) > best:
                best, found = len(name), i
    return found


def project_files() -> list[Path]:
    return sorted(
        p
        for pkg in PROJECT_PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if "__pycache__" not in p.parts
    )


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each project import that runs (TYPE_CHECKING ones never do)."""
    out = []
    for node in runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found = [f"{node.module}.{a.name}" for a in node.names]
            mods = [m for m in found if module_file(m) is not None]  # `from pkg import module`
            out += [(node.lineno, m) for m in mods] or [(node.lineno, node.module)]
    return [(n, m) for n, m in out if m.split(".")[0] in PROJECT_PACKAGES]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_every_module_has_a_layer():
    rows = layer_table()
    assert len(rows) >= 8, "the layer table of docs/architecture.md was not found"
    homeless = [rel(p) for p in project_files() if layer_of(rel(p), rows) is None]
    assert homeless == [], "modules in no row of docs/architecture.md's layer table"


def test_imports_follow_the_layer_table():
    rows = layer_table()
    against = set()
    for path in project_files():
        here = layer_of(rel(path), rows)
        for line, module in imports_of(path):
            target = module_file(module)
            if target is None:
                continue
            there = layer_of(rel(target), rows)
            if there is not None and here is not None and there < here:
                against.add((rel(path), module, line))
    found = {(f, m) for f, m, _ in against}
    assert found <= accepted(), "imports that go up the layer table: " + ", ".join(
        f"{f}:{n} imports {m}" for f, m, n in sorted(against) if (f, m) not in accepted()
    )
    assert len(accepted()) <= 2, "at most two imports against the table, each justified"
    assert accepted() <= found, "an accepted import that no longer exists: drop it from the doc"


@pytest.mark.parametrize("track", TRACKS)
def test_a_track_never_imports_another(track):
    others = [t for t in TRACKS if t != track]
    crossing = [
        f"{rel(p)}:{n} imports {m}"
        for p in (ROOT / "sonfolio" / track).rglob("*.py")
        for n, m in imports_of(p)
        if any(m.startswith(f"sonfolio.{o}.") or m == f"sonfolio.{o}" for o in others)
    ]
    assert crossing == []


def test_no_module_imports_another_modules_private_names():
    private = []
    for path in project_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.split(".")[0] not in PROJECT_PACKAGES:
                    continue
                names = [a.name for a in node.names if a.name.startswith("_")]
                private += [f"{rel(path)}:{node.lineno} {node.module}.{n}" for n in names]
    assert private == []


def test_no_import_circle():
    """No module reaches itself through the imports that run, deferred ones (inside a
    function) included: a circle means neither side can change alone. The one function whose
    imports the deps test skips (it validates the whole params.yaml) counts here too; an
    import under `if TYPE_CHECKING:` (annotations only) does not."""
    graph: dict[str, set[str]] = {}
    for path in project_files():
        mods = set()
        for node in runtime_nodes(ast.parse(path.read_text()), skip=frozenset()):
            if isinstance(node, ast.Import):
                mods |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found = {f"{node.module}.{a.name}" for a in node.names}
                mods |= {m for m in found if module_file(m) is not None} or {node.module}
        graph[rel(path)] = {
            rel(f)
            for m in mods
            if m.split(".")[0] in PROJECT_PACKAGES and (f := module_file(m)) is not None
        } - {rel(path)}
    seen: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def visit(node: str, trail: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if seen.get(nxt) == 1:
                cycle = trail[trail.index(nxt) :] + [nxt]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if nxt not in seen:
                visit(nxt, [*trail, nxt])
        seen[node] = 2

    for start in sorted(graph):
        if start not in seen:
            visit(start, [start])
