"""The compile check: hostile LilyPond is rejected before LilyPond runs; good systems compile
with a PNG; a failed bar check compiles but is counted apart; a hang is cut by the timeout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sonfolio.score.common.lilypond import compile_systems
from sonfolio.score.eval import compile_check
from sonfolio.score.eval.compile_check import check_grammar, compile_texts, summarize

H = r"\clef treble \key c \major \time 4/4 "
GOOD = H + "c'4 d'4 e'4 f'4 | g'1"
SHORT_BAR = H + "c'4 d'4 e'4 | g'1"  # bar 1 lasts 3/4: LilyPond warns "bar check failed"

HOSTILE = [
    '#(system "touch /tmp/pwned")',
    H + '#(system "touch /tmp/pwned") c\'4',
    H + "c'4 $(system) d'4",
    H + '\\include "x.ly" c\'4',
    H + "\\repeat unfold 100000000 { c'4 }",
    H + "c'4 \\score { c'4 }",  # a score inside a score
    "\\score { \\new Staff { c'4 } }",
    H + "c'4 % comment",
    H + "c'4\nd'4",
    H + "\\relative c' { c4 }",
    H + "C'4",
    "",
]


class Spy:
    """compile_systems that records every text LilyPond was asked to compile."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, texts, *args, **kwargs):
        self.seen += list(texts)
        return compile_systems(texts, *args, **kwargs)


def run(texts, lilypond, spy=None, **kw):
    opts = {"batch_size": 8, "timeout_s": 60.0, "resolution": 72}
    return compile_texts(texts, lilypond, **{**opts, **kw}, compile_fn=spy or compile_systems)


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_is_rejected_by_the_grammar(text):
    assert check_grammar(text) is not None


def test_hostile_text_never_reaches_lilypond(lilypond, monkeypatch, tmp_path):
    def never(*args, **kwargs):
        raise AssertionError("LilyPond was invoked")

    monkeypatch.setattr(subprocess, "run", never)
    results = run(HOSTILE, lilypond, spy=never)
    assert [r.outcome for r in results] == ["rejected"] * len(HOSTILE)
    assert summarize(results)["compile_rate"] == 0.0
    assert not Path("/tmp/pwned").exists()


def test_good_text_compiles_with_a_png(lilypond, tmp_path):
    keep = tmp_path / "good.png"
    results = run([GOOD], lilypond, keep={0: keep})
    assert results[0].outcome == "compiled" and not results[0].warnings
    assert keep.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bar_check_failure_compiles_and_is_counted_apart(lilypond):
    assert check_grammar(SHORT_BAR) is None  # bar lengths are not a safety matter
    results = run([GOOD, SHORT_BAR], lilypond)
    assert [r.outcome for r in results] == ["compiled", "compiled"]
    assert [r.bar_check for r in results] == [False, True]
    m = summarize(results)
    assert m["compile_rate"] == 1.0 and m["clean_compile_rate"] == 0.5
    assert m["bar_check_warnings"] == 1 and m["bar_check_warning_rate"] == 0.5


def test_grammar_other_than_bar_lengths_still_applies():
    assert "ascending" in check_grammar(H + "<e' c'>4 d'4 e'2")
    assert "shares no pitch" in check_grammar(H + "c'4~ d'4 e'2")


def test_mixed_batch_keeps_every_result_in_order(lilypond):
    spy = Spy()
    texts = [GOOD, HOSTILE[0], SHORT_BAR, HOSTILE[3], GOOD]
    results = run(texts, lilypond, spy=spy, batch_size=2)
    assert [r.outcome for r in results] == [
        "compiled",
        "rejected",
        "compiled",
        "rejected",
        "compiled",
    ]
    assert spy.seen == [GOOD, SHORT_BAR, GOOD]  # only the grammatical texts, in batches


def test_a_lilypond_error_is_isolated_to_its_system(lilypond, monkeypatch):
    """A batch LilyPond rejects is split until the failing system is alone; its neighbours
    still compile. (A canonical text hardly fails in LilyPond, so the spy breaks one.)"""

    def breaking(texts, *args, **kwargs):
        texts = [t.replace("e'4", "e'4 \\nosuchcommand") for t in texts]
        return compile_systems(texts, *args, **kwargs)

    other = H + "g'1 | c'1"
    results = run([other, GOOD, other, other], lilypond, spy=breaking, batch_size=4)
    assert [r.outcome for r in results] == ["compiled", "error", "compiled", "compiled"]
    assert "error" in results[1].reason


def test_a_hang_is_cut_by_the_timeout(lilypond, tmp_path):
    """A system that hangs LilyPond (here: a fake one) ends as `timeout`, alone."""

    def hangs(texts, workdir, exe, **kwargs):
        if any("d'4" in t for t in texts):
            raise subprocess.TimeoutExpired("lilypond", kwargs["timeout_s"])
        return compile_systems(texts, workdir, exe, **kwargs)

    other = H + "g'1 | c'1"
    results = run([other, GOOD, other], lilypond, spy=hangs, timeout_s=5.0)
    assert [r.outcome for r in results] == ["compiled", "timeout", "compiled"]
    assert summarize(results)["timeouts"] == 1


def test_bar_tolerant_reader_is_canonicals_own():
    """The compile check reuses canonical's parser (the grammar's one reader): if it is renamed
    or its length checks move, this fails instead of the check silently accepting more."""
    from sonfolio.score.common import canonical

    assert issubclass(compile_check._BarTolerantReader, canonical.Reader)
    with pytest.raises(canonical.CanonicalError, match="lasts"):
        canonical.validate(SHORT_BAR)
    with pytest.raises(canonical.CanonicalError, match="longer than the measure"):
        canonical.validate(H + "c'1 | d'1 e'4")
    assert check_grammar(H + "c'1 | d'1 e'4") is None  # a long last bar: compiled, counted


def test_a_text_another_variant_wrote_is_not_compiled_again(lilypond, monkeypatch, tmp_path):
    """eval@score's variants mostly write the same texts: each (text, time) goes to LilyPond
    once per run, again only where its render is kept, and every row still gets its result."""
    from types import SimpleNamespace

    from sonfolio.score.eval.evaluate import compile_all

    spy = Spy()
    real = compile_check.compile_texts
    monkeypatch.setattr(
        compile_check, "compile_texts", lambda *a, **kw: real(*a, **kw, compile_fn=spy)
    )
    cfg = SimpleNamespace(compile_batch=8, compile_timeout_s=60.0, render_dpi=72)
    other = H + "g'1 | c''1"
    known: dict = {}
    first = compile_all([GOOD, SHORT_BAR, GOOD], cfg, lilypond, {}, "a", None, known)
    assert spy.seen == [GOOD, SHORT_BAR]
    keep = {0: tmp_path / "kept.png"}
    second = compile_all([SHORT_BAR, GOOD, other], cfg, lilypond, keep, "b", None, known)
    assert spy.seen == [GOOD, SHORT_BAR, SHORT_BAR, other]  # the kept render, the new text
    assert keep[0].is_file()
    assert [r.outcome for r in first] == ["compiled"] * 3 and first[1].bar_check
    assert second[0].bar_check and not second[1].bar_check and second[2].outcome == "compiled"
    # another time in force is another text to LilyPond
    compile_all([GOOD], cfg, lilypond, {}, "c", ["3/4"], known)
    assert spy.seen[-1] == GOOD and len(spy.seen) == 5
