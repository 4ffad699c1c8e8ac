"""An edit to one stage's params schema, or to one step's code, reruns that stage and what
follows it, and no more.

Each stage validates only the params sections it reads (sonfolio.config.<stage>), and
dvc.yaml lists the schema modules it imports; so DVC, not a convention, decides what an edit
reruns. Checked with real DVC in a throwaway copy of the project whose every stage is recorded
as up to date: its outputs are placeholders committed with `dvc commit` (running the pipeline
takes minutes, and which stages an edit invalidates depends on the recorded deps alone, not on
what the outputs hold).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from project_repo import copy_project, dvc, git, ran

pytestmark = pytest.mark.slow

BOTH = ("score", "speech")

# A schema module, the stages that import it, and the stages that follow them. Only the
# modules read by their own stage alone: data.py is read by every stage after data (train
# reads score_data.image_long_side, eval score_data.lilypond), tokenizer.py by data (speech
# clips must fit the model's window before synthesis), train.py by estimate (it times the
# training steps) and export.py by qat (export.int8_weight_bits); those reruns are wanted.
EDITS = {
    "qat": (
        {f"qat@{t}" for t in BOTH},
        {f"{s}@{t}" for s in ("export", "bench", "eval") for t in BOTH} | {"report"},
    ),
    "bench": ({f"bench@{t}" for t in BOTH}, {"report"}),
    "eval": ({f"eval@{t}" for t in BOTH}, {"report"}),
    "estimate": ({f"estimate@{t}" for t in BOTH}, {"report"}),
    "report": ({"report"}, set()),
    # the inference settings are read by the eval alone (read / transcribe as it runs them);
    # the page cutter's, which the score data stage uses too, live in config/page.py (an
    # added audio setting once reran data, training and everything after in a fresh clone)
    "infer": ({f"eval@{t}" for t in BOTH}, {"report"}),
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A copy of the project whose dvc.lock records every stage as run: placeholder outputs
    (a folder where another stage reads a file inside it), committed."""
    from dvc.repo import Repo

    repo = copy_project(tmp_path_factory.mktemp("recorded"))
    stages = Repo(str(repo)).index.stages
    outs = {o.def_path for st in stages for o in st.outs}
    read = {d.def_path for st in stages for d in st.deps if not hasattr(d, "params")}
    for out in outs:
        inside = [d for d in read if d.startswith(out.rstrip("/") + "/")]
        for path in inside or [out]:
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text("placeholder\n")
    dvc(repo, "commit", "--force")
    return repo


def status(repo: Path) -> set[str]:
    """The stages `dvc status` reports changed."""
    return set(json.loads(dvc(repo, "status", "--json").stdout))


def check_edit(repo: Path, module: str, edited: set[str], downstream: set[str]) -> None:
    """An edit to `module` (a path in `repo`) marks `edited` in `dvc status`, and `dvc repro`
    would run those and then `downstream`; the file is restored after."""
    assert status(repo) == set(), "the copy starts with every stage up to date"
    path = repo / module
    path.write_text(path.read_text() + "# an edit\n")
    try:
        assert status(repo) == edited
        # what `dvc repro` would run: the edited stages, then all that depends on their outputs
        dry = dvc(repo, "repro", "--dry", "--force-downstream", "--no-run-cache")
        assert set(ran(dry)) == edited | downstream
    finally:
        git(repo, "checkout", "--", module)


@pytest.mark.parametrize("module", sorted(EDITS))
def test_editing_a_stage_schema_reruns_it_and_what_follows(recorded, module):
    check_edit(recorded, f"sonfolio/config/{module}.py", *EDITS[module])


SCORE_CHAIN = {
    f"{s}@score"
    for s in ("data", "tokenizer", "train", "qat", "export", "bench", "eval", "estimate")
}

# A code module, the stages `dvc status` marks when it changes, and what `dvc repro` then runs
# after them: each stage's code deps are its step's import closure (tests/test_dvc_yaml.py), so
# an edit to decoding or evaluation never reruns data, training or export, and an edit to one
# track's data never touches the other track.
CODE_EDITS = {
    # the grammar's CTC search: only the stage that decodes under the grammar
    "sonfolio/score/decode/search.py": ({"eval@score"}, {"report"}),
    # the ORT greedy loop: the stages that run exported models
    "sonfolio/infer/ortloop.py": (
        {f"{s}@{t}" for s in ("bench", "eval") for t in BOTH},
        {"report"},
    ),
    # the score eval's metrics: the score eval alone
    "sonfolio/score/eval/metrics.py": ({"eval@score"}, {"report"}),
    # the page cutter: the score data (which cuts its train pages with it) and the eval (which
    # reads pages with it), not the training, whose inputs are the data's manifest: an
    # inference-only edit to the cutter that leaves the data's files as they were retrains
    # nothing (dvc.yaml, `&tracks`)
    "sonfolio/score/common/page.py": (
        {"data@score", "eval@score"},
        SCORE_CHAIN - {"data@score", "eval@score"} | {"report"},
    ),
    # the score data's converter: the score chain, no speech stage
    "sonfolio/score/data/convert.py": ({"data@score"}, SCORE_CHAIN - {"data@score"} | {"report"}),
    # the speech model: speech's stages that list its model folder (bench reads the base
    # models with speech/model/bases.py; export lists it because score's export registers
    # score's conv encoder from its own), no score stage
    "sonfolio/speech/model/model.py": (
        {
            f"{s}@speech"
            for s in ("tokenizer", "train", "qat", "estimate", "bench", "eval", "export")
        },
        {"report"},
    ),
}


@pytest.mark.parametrize("module", sorted(CODE_EDITS))
def test_editing_a_step_module_reruns_only_the_stages_that_import_it(recorded, module):
    check_edit(recorded, module, *CODE_EDITS[module])


# A setting of params.yaml `infer` (or one the evals read) and the stages `dvc status` marks when it changes (with
# check_params, which validates the whole file and whose output stays the same): each track's
# reading settings are their own section, so tuning how pages are cut or read costs eval@score
# alone and never the minutes of eval@speech, and the other way round.
PARAM_EDITS = {
    ("infer", "score", "page", "strips"): {"eval@score"},
    ("infer", "score", "max_tokens"): {"eval@score"},
    ("infer", "speech", "audio", "pause_s"): {"eval@speech"},
    ("infer", "speech", "decode_workers"): {"eval@speech"},
    ("infer", "batch_size"): {"eval@score", "eval@speech"},
    # the scan-like kinds make the score data's train pages and eval@score's held-out pages;
    # the speech eval reads none of them
    ("score_data", "scan", "skew_deg"): {"data@score", "eval@score"},
}


@pytest.mark.parametrize("keys", sorted(PARAM_EDITS), ids=".".join)
def test_a_reading_setting_reruns_only_its_tracks_eval(recorded, keys):
    assert status(recorded) == set(), "the copy starts with every stage up to date"
    path = recorded / "params.yaml"
    text = path.read_text()
    raw = yaml.safe_load(text)
    section = raw
    for key in keys[:-1]:
        section = section[key]
    section[keys[-1]] += 1
    try:
        path.write_text(yaml.safe_dump(raw))
        assert status(recorded) == {"check_params"} | PARAM_EDITS[keys]
    finally:
        path.write_text(text)


def test_a_data_rerun_that_changed_only_its_time_marks_nothing_after_it(recorded):
    """A forced data@score rerun writes the same data and stats and a new time: recorded as
    such (`dvc commit`), nothing after it is marked (eval reads the stats, no stage the time)."""
    assert status(recorded) == set()
    time_file = recorded / "metrics" / "score_data_time.json"
    try:
        time_file.write_text('{"seconds": 406.1, "systems_per_s": 25.3}\n')
        assert status(recorded) == {"data@score"}  # the time is the data stage's own output
        dvc(recorded, "commit", "--force", "data@score")
        assert status(recorded) == set()
        # the stats are read on: a changed count marks the eval that reads them
        stats = recorded / "metrics" / "score_data.json"
        stats.write_text('{"systems": {"train": 1}}\n')
        dvc(recorded, "commit", "--force", "data@score")
        assert status(recorded) == {"eval@score"}
    finally:
        for path in (time_file, recorded / "metrics" / "score_data.json"):
            path.write_text("placeholder\n")
        dvc(recorded, "commit", "--force")
