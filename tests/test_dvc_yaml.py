"""dvc.yaml agrees with tasks/ and params.yaml, and lists every module a stage imports.

DVC does not follow Python imports: a library module missing from a stage's deps means an edit
to it would not rerun the stage, and a stale output would look up to date.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("sonfolio", "tasks", "flows")
PACKAGE_INIT = ROOT / "sonfolio" / "__init__.py"
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())


@functools.cache
def dvc_stages() -> dict[str, dict]:
    """Every stage as DVC itself resolves dvc.yaml (a `foreach` stage once per track, named
    `train@score`, its ${...} filled from params.yaml): cmd, deps and params."""
    from dvc.repo import Repo

    stages = {}
    for st in Repo(str(ROOT)).index.stages:
        deps = [d.def_path for d in st.deps if not hasattr(d, "params")]
        params = [k for d in st.deps if hasattr(d, "params") for k in d.params]
        stages[st.addressing] = {"cmd": st.cmd, "deps": deps, "params": params}
    return stages


def covered(path: str, deps: set[str]) -> bool:
    """A file is in a stage's deps itself or through a folder dep (`sonfolio/score`)."""
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def is_type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


# Functions whose imports are no dep of a stage: they validate params.yaml as a whole, which can
# make a stage stop but never change what it writes (sonfolio/config/stage.py says why).
VALIDATION_ONLY = frozenset({"_validate_every_section"})


def runtime_nodes(
    tree: ast.AST, skip: frozenset[str] = frozenset(VALIDATION_ONLY)
) -> list[ast.AST]:
    """Every node of `tree` but those inside `if TYPE_CHECKING:` (its `else:` runs).

    An import there never runs: it only names a type for annotations, which
    `from __future__ import annotations` leaves unevaluated. It cannot change an output, so it
    is no dep; counting it would make every stage whose code annotates with, say, the eval
    section's schema rerun when that schema changes.
    """
    nodes, todo = [], [tree]
    while todo:
        node = todo.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and is_type_checking(node.test):
            todo.extend(node.orelse)
        elif isinstance(node, ast.FunctionDef) and node.name in skip:
            continue  # test_validation_only_functions_only_validate
        else:
            todo.extend(ast.iter_child_nodes(node))
    return nodes


def faces_loaded(node: ast.AST) -> str | None:
    """The step of a `tracks.face(name, "<step>")` call (sonfolio.tracks): that step's face of
    the track is imported at run time, by name."""
    if not isinstance(node, ast.Call) or len(node.args) != 2:
        return None
    func = node.func
    named = (isinstance(func, ast.Attribute) and func.attr == "face") or (
        isinstance(func, ast.Name) and func.id == "face"
    )
    step = node.args[1]
    if named and isinstance(step, ast.Constant) and isinstance(step.value, str):
        return step.value
    return None


def imported_modules(path: Path, tracks: tuple[str, ...] = ()) -> set[str]:
    """The project modules `path` imports when it runs, at the top or inside a function, and
    the faces of `tracks` it loads by name (`tracks.face(name, "eval")`)."""
    names: set[str] = set()
    for node in runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
        elif step := faces_loaded(node):
            names |= {f"sonfolio.{t}.steps.{step}" for t in tracks}
    return {n for n in names if n.split(".")[0] in PROJECT_PACKAGES}


def carries_code(path: Path) -> bool:
    """More than a docstring (and `from __future__` imports): a package's __init__.py that only
    says what the package is cannot change an output."""
    body = ast.parse(path.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return any(not (isinstance(n, ast.ImportFrom) and n.module == "__future__") for n in body)


def project_imports(entry: str, tracks: tuple[str, ...] = ()) -> set[Path]:
    """Files of every project module reachable by imports from `entry` (a dotted name), the
    faces of `tracks` loaded by name included."""
    seen: set[Path] = set()
    todo = [entry]
    while todo:
        name = todo.pop()
        # importing sonfolio.config.eval runs sonfolio/config/__init__.py first
        todo.extend(name.rsplit(".", n)[0] for n in range(1, name.count(".") + 1))
        path = module_file(name)
        if path is None or path in seen:
            continue
        seen.add(path)
        todo.extend(imported_modules(path, tracks))
    # sonfolio/__init__.py only filters log lines (so an edit to it cannot make an output
    # stale: test_package_init_only_filters_logs)
    return {p for p in seen if carries_code(p) and p != PACKAGE_INIT}


# Each track's `shared` item in dvc.yaml's foreach (`&tracks`): the path of its common code the
# steps from the tokenizer on list, the one code dep that differs by track.
SHARED = {
    track: item["shared"]
    for track, item in yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["data"][
        "foreach"
    ].items()
}


# The deps a stage lists for the score track only because the speech track imports their
# counterpart: DVC's `foreach` lists one set of paths per step, and a track's own item (dvc.yaml
# `&tracks`: `shared`, what of its common code the steps from the tokenizer on read) is the one
# path that differs. Speech's tokenizer reads audio with sonfolio/speech/common and builds
# Whisper's processor in speech/model; score's lists its counterparts, the system images as the
# model sees them (pixels.py) and score/model, whose edits rerun the training anyway.
FOR_ANOTHER_TRACK = {
    "tokenizer@score": {"sonfolio/score/common/pixels.py", "sonfolio/score/model"},
    "export@speech": {"sonfolio/speech/model"},  # score's export registers its conv encoder
}


@pytest.mark.parametrize("stage", sorted(dvc_stages()))
def test_stage_lists_every_module_it_imports(stage):
    spec = dvc_stages()[stage]
    match = re.fullmatch(r"python -m (tasks\.\w+)( \w+)?", spec["cmd"])
    assert match, f"{stage}: cmd must be `python -m tasks.<stage> [track]`, got {spec['cmd']!r}"
    name, _, track = stage.partition("@")
    assert match.group(1) == f"tasks.{name}", "stage name = module name"
    assert (match.group(2) or "").strip() == track, "a foreach stage runs for its own track"
    # a track's stage loads that track's faces; the report reads every track's
    runs_for = (track,) if track else tuple(PARAMS["paths"]["tracks"])
    needed = {p.relative_to(ROOT).as_posix() for p in project_imports(match.group(1), runs_for)}
    deps = set(spec["deps"])
    assert len(deps) == len(spec["deps"]), f"{stage} lists a dep twice"
    missing = {p for p in needed if not covered(p, deps)}
    assert missing == set(), f"{stage} imports modules missing from its deps"
    code = [d for d in deps if d.split("/")[0] in PROJECT_PACKAGES]  # not the outputs it reads
    assert all((ROOT / d).exists() for d in code), f"{stage} lists deps that do not exist"
    # ... and no more: every code dep is in the closure (a folder: some file of it). A shared
    # module one track alone imports is listed for both (dvc.yaml lists one set per step), and
    # so is a phase folder of a track's package: those are FOR_ANOTHER_TRACK, and nothing else.
    whole = {f"sonfolio/{t}" for t in PARAMS["paths"]["tracks"]}
    assert whole.isdisjoint(deps), f"{stage} lists a whole track package: list its phases"
    others = [t for t in PARAMS["paths"]["tracks"] if track and t != track]
    used = set(needed)
    for other in others:  # its files, and a track's phase folder as the other's counterpart
        for path in project_imports(match.group(1), (other,)):
            name = path.relative_to(ROOT).as_posix()
            used.add(name.replace(f"sonfolio/{other}/", f"sonfolio/{track}/", 1))
            if covered(name, {SHARED[other]}):  # the track's own item's counterpart
                used.add(SHARED[track])
    python = [d for d in code if d.endswith(".py") or (ROOT / d).is_dir()]
    dead = {d for d in python if not any(covered(u, {d}) for u in used)}
    # a track's own phase folder listed because another track's counterpart is imported
    borrowed = {
        d
        for d in python
        if d.startswith(f"sonfolio/{track}/") and not any(covered(u, {d}) for u in needed)
    }
    assert borrowed == FOR_ANOTHER_TRACK.get(stage, set()), (
        f"{stage}: listed for another track's sake (update FOR_ANOTHER_TRACK and "
        "docs/architecture.md, or give the track the layout it needs)"
    )
    assert dead == set(), f"{stage} lists code it never imports"


# The stage that validates the whole params.yaml before any other (tasks/check_params.py):
# it tracks the whole file, not a section, and has no view of its own.
CHECK = "check_params"


def test_the_params_check_runs_first_on_the_whole_file():
    """check_params tracks all of params.yaml (a file entry with no keys) and every other
    stage lists its output, so DVC runs it before any stage whose outputs it would remove."""
    from dvc.repo import Repo

    (check,) = [st for st in Repo(str(ROOT)).index.stages if st.addressing == CHECK]
    (params,) = [d for d in check.deps if hasattr(d, "params")]
    assert params.def_path == "params.yaml" and not params.params  # no keys: all of it
    (out,) = [o.def_path for o in check.outs]
    for stage, spec in dvc_stages().items():
        assert stage == CHECK or out in spec["deps"], f"{stage} does not wait for {CHECK}"


@pytest.mark.parametrize("stage", sorted(set(dvc_stages()) - {CHECK}))
def test_stage_has_its_params_section(stage):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    name, _, track = stage.partition("@")
    section = f"{track}_{name}" if f"{track}_{name}" in params else name  # score_train
    assert section in params, f"params.yaml has no section for stage {stage}"
    assert section in dvc_stages()[stage]["params"]


@pytest.mark.parametrize("stage", sorted(set(dvc_stages()) - {CHECK}))
def test_stage_validates_the_params_it_lists(stage):
    """Before any work a stage validates every section it reads (dvc.yaml's `params`), and
    only those: its view of params.yaml, sonfolio.config.<step>.<Step>Params, declares them,
    and tasks/<step>.py loads that view."""
    name = stage.partition("@")[0]
    view = getattr(importlib.import_module(f"sonfolio.config.{name}"), f"{name.title()}Params")
    listed = {key.split(".")[0] for key in dvc_stages()[stage]["params"]}
    assert listed - set(view.model_fields) == set(), f"{view.__name__} lacks sections"
    assert f"load_sections({view.__name__})" in (ROOT / "tasks" / f"{name}.py").read_text()


def test_only_the_data_stages_list_the_data_folders():
    """Readers of the images and clips list the manifest (which holds every file's sha256):
    a folder dep makes DVC walk thousands of files per stage on every no-op `dvc repro`."""
    for stage, spec in dvc_stages().items():
        for track in ("score", "speech"):
            folder = PARAMS["paths"]["tracks"][track]["data"]
            assert folder not in spec["deps"], f"{stage}: list {folder}/manifest.jsonl instead"


def test_every_step_runs_for_every_track():
    """dvc.yaml's foreach items (`&tracks`) name every track of params.yaml's paths.tracks and
    write where it says: a track added there and not here would silently never run."""
    tracks = set(PARAMS["paths"]["tracks"])
    steps = {name.partition("@")[0] for name in dvc_stages() if "@" in name}
    for step in steps:
        assert {n.partition("@")[2] for n in dvc_stages() if n.startswith(f"{step}@")} == tracks
    from dvc.repo import Repo

    for st in Repo(str(ROOT)).index.stages:
        step, _, track = st.addressing.partition("@")
        if step in ("data", "train") and track:
            (out,) = [o.def_path for o in st.outs if not o.metric and not o.plot]
            assert out == PARAMS["paths"]["tracks"][track][step if step == "data" else "model"]


def test_every_task_module_is_a_stage():
    modules = {p.stem for p in (ROOT / "tasks").glob("*.py") if p.stem != "__init__"}
    assert modules == {s.partition("@")[0] for s in dvc_stages()}


def test_library_never_imports_prefect():
    for path in (ROOT / "sonfolio").rglob("*.py"):
        tops = {m.split(".")[0] for m in imported_modules(path)}
        text = path.read_text()
        assert "import prefect" not in text and "from prefect" not in text, path
        assert "flows" not in tops, f"{path}: the library must not import flows"


def test_package_init_only_filters_logs():
    """sonfolio/__init__.py runs before every stage but is in no stage's deps: it may only
    install log filters (nothing that changes an output), so it imports logging alone and
    defines private names."""
    tree = ast.parse(PACKAGE_INIT.read_text())
    imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    froms = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imports == {"logging"} and froms <= {"__future__"}
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            assert node.name.startswith("_"), node.name
        if isinstance(node, ast.Assign):
            assert all(t.id.startswith("_") for t in node.targets if isinstance(t, ast.Name))


def test_validation_only_functions_only_validate():
    """The functions whose imports the dep check skips import the params schemas and return
    nothing: they can stop a stage, never shape its output."""
    tree = ast.parse((ROOT / "sonfolio" / "config" / "stage.py").read_text())
    found = [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in VALIDATION_ONLY
    ]
    assert {f.name for f in found} == VALIDATION_ONLY
    for func in found:
        imports = [n for n in ast.walk(func) if isinstance(n, ast.ImportFrom)]
        assert all(n.module.startswith("sonfolio.config.") for n in imports)
        assert not [n for n in ast.walk(func) if isinstance(n, ast.Return) and n.value]
