"""Whole pages engraved by LilyPond with its default page layout are cut into their systems
(sonfolio.score.common.page): titles, fingerings, lyrics, dynamics, notes on many ledger lines,
staff
sizes 16 to 23 pt.

The truth comes from LilyPond itself: a page-post-process hook prints how many systems each
page holds, and the engraving colours what must be inside a box (notes, stems, beams, ledger
lines: dark red; fingerings, string numbers, text, dynamics, lyrics: dark magenta) and what
must not (title, composer, tagline: dark green). The cutter reads the page in grey, where these
colours are near black. Colours are told apart so that LilyPond's cairo backend, which writes
red and blue swapped, reads the same.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sonfolio.score.common.page import split_page

HOOK = r"""#(define (count-systems layout pages)
  (let loop ((ps pages) (k 1))
    (if (pair? ps)
      (begin
        (ly:message "PAGE ~a ~a" k
          (length (filter (lambda (l) (ly:grob? (ly:prob-property l 'system-grob #f)))
                          (ly:prob-property (car ps) 'lines '()))))
        (loop (cdr ps) (+ k 1))))))
\paper { page-post-process = #count-systems }
"""
NOTE, TEXT, TITLE = "(rgb-color 0.4 0 0)", "(rgb-color 0.4 0 0.4)", "(rgb-color 0 0.4 0)"
VOICE = ["NoteHead", "Stem", "Beam", "Flag", "Accidental", "Dots", "Rest"]
VOICE_TEXT = ["Fingering", "StringNumber", "TextScript", "DynamicText"]
COLOURS = (
    "\\layout {\n  \\context { \\Voice "
    + " ".join(f"\\override {g}.color = #{NOTE}" for g in VOICE)
    + " ".join(f" \\override {g}.color = #{TEXT}" for g in VOICE_TEXT)
    + f" }}\n  \\context {{ \\Staff \\override LedgerLineSpanner.color = #{NOTE} }}\n"
    + f"  \\context {{ \\Lyrics \\override LyricText.color = #{TEXT} }}\n}}\n"
)
END = ' \\bar "|." } }\n'
GUITAR = (  # fingerings above, string numbers in circles, chords
    r"e'8-0 fis'-1\2 g'-2 a'-3\3 b'-4 a'-1 g'-3 fis'-2 | "
    r"<e' g' b'>4-1 <d' fis' a'>4-2 b8-0\5 c'-1 d'-3\4 e'-0 | "
)
VIOLIN = (  # six ledger lines above the treble staff, four below, chords below the staff
    r"c''''4 b''' a'''8 g''' f''' e''' | <c e g>2 <a, c e>4 g,4 | "
    r"e'8 c' a g <f a> d b, g, | d''''2 r2 | "
)
BASS = r"c4 e,, d,, c,, | g,,2 c'4 e'4 | <c,, e,, g,,>2 b,,4 a,,4 | e'4 f' g'2 | "
SONG = r"g'4\p a'8 b' c''4 d'' | e''2\f^\markup{\italic espressivo} d''4 c'' | "


def document(title: str, size: int, music: str) -> str:
    """A .ly in LilyPond's default a4 layout with a title, a composer and the tagline."""

    def paint(text: str) -> str:
        return f'\\markup \\with-color #{TITLE} "{text}"'

    fields = {"title": title, "composer": "A. Composer", "tagline": "Music engraved by LilyPond"}
    return (
        f'\\version "2.24.3"\n#(set-default-paper-size "a4")\n#(set-global-staff-size {size})\n'
        + HOOK
        + COLOURS
        + "\\header { "
        + " ".join(f"{k} = {paint(v)}" for k, v in fields.items())
        + " }\n"
        + music
    )


def staff(music: str, systems: int, clef: str = "treble") -> str:
    return (
        f"\\score {{ \\new Staff {{ \\clef {clef} \\time 4/4 "
        + " \\break ".join([music] * systems)
        + END
    )


PIECES = {
    "guitar": document("Romanza", 20, staff(GUITAR * 2, 8, "treble_8")),
    "plain_guitar": document(
        "Romanza", 20, staff(re.sub(r"-\d|\\\d", "", GUITAR) * 2, 8, "treble_8")
    ),
    "air": document(
        "A Short Air",
        20,
        r"\score { \new Staff { \time 3/4 g'4\p-1 a'-2 b'-3 | "
        r"c''2.^\markup{dolce} | d''4 e''8 f'' g''4 | c''2." + END,
    ),  # fmt: skip
    "violin": document("Violin Study", 20, staff(VIOLIN, 6)),
    "bass": document("Bass Line", 20, staff(BASS, 6, "bass")),
    "song": document(
        "A Song",
        16,
        r"\score { << \new Staff { \tempo Andante \time 4/4 "
        r"\new Voice = mel { " + " \\break ".join([SONG * 2] * 10) + r' \bar "|." } } '
        r"\new Lyrics \lyricsto mel { " + "la " * 160 + "} >> }\n",
    ),  # fmt: skip
    "large": document("Big Staff Etude", 23, staff(GUITAR + VIOLIN, 14).replace(" \\break ", " ")),
}


def engrave(name: str, workdir: Path, exe: Path) -> list[tuple[Path, int]]:
    """The pages of a piece at 200 dpi, each with how many systems LilyPond put on it."""
    (workdir / f"{name}.ly").write_text(PIECES[name], encoding="utf-8")
    proc = subprocess.run(
        [str(exe), "-dbackend=cairo", "--png", "-dresolution=200", "-o", name, f"{name}.ly"],
        capture_output=True, text=True, timeout=120, cwd=workdir,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-1000:]
    counts = [int(n) for n in re.findall(r"^PAGE \d+ (\d+)$", proc.stderr, re.MULTILINE)]
    pngs = sorted(workdir.glob(f"{name}*.png"), key=lambda p: (len(p.name), p.name))
    assert len(pngs) == len(counts) > 0
    return list(zip(pngs, counts, strict=True))


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory, lilypond: Path) -> dict[str, list]:
    """Per piece: each page's (grey image, true systems, colour masks, boxes found)."""
    workdir = tmp_path_factory.mktemp("layouts")
    out: dict[str, list] = {}
    for name in PIECES:
        out[name] = []
        for png, systems in engrave(name, workdir, lilypond):
            with Image.open(png) as img:
                rgb = np.asarray(img.convert("RGB")).astype(np.int16)
                gray = np.asarray(img.convert("L"))
            r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
            masks = {
                "note": (np.maximum(r, b) - g > 40) & (np.abs(r - b) > 40),  # red or blue
                "text": (r - g > 40) & (b - g > 40) & (np.abs(r - b) < 30),
                "title": g - np.maximum(r, b) > 40,
            }
            out[name].append((gray, systems, masks))
    return out


def boxed(shape: tuple[int, int], boxes: list) -> np.ndarray:
    inside = np.zeros(shape, dtype=bool)
    for box in boxes:
        inside[box.top : box.bottom, box.left : box.right] = True
    return inside


@pytest.fixture(scope="module")
def cut(pages, params) -> dict[str, list]:
    return {
        name: [(gray, n, masks, split_page(gray, params.infer.score.page)) for gray, n, masks in ps]
        for name, ps in pages.items()
    }


ALL = list(PIECES)


@pytest.mark.parametrize("name", ALL)
def test_each_page_gives_one_box_per_system_lilypond_engraved(cut, name):
    for _, systems, _, boxes in cut[name]:
        assert len(boxes) == systems
        assert [b.top for b in boxes] == sorted(b.top for b in boxes)  # top to bottom


@pytest.mark.parametrize("name", ALL)
def test_every_note_stem_and_ledger_line_is_inside_a_box(cut, name):
    for gray, _, masks, boxes in cut[name]:
        assert masks["note"].sum() > 1000  # the truth is there to be checked
        assert not (masks["note"] & ~boxed(gray.shape, boxes)).any()


@pytest.mark.parametrize("name", ["guitar", "air", "song", "large"])
def test_fingerings_text_dynamics_and_lyrics_are_inside_a_box(cut, name):
    for gray, _, masks, boxes in cut[name]:
        assert not (masks["text"] & ~boxed(gray.shape, boxes)).any()


@pytest.mark.parametrize("name", ALL)
def test_title_composer_and_footer_are_outside_every_box(cut, name):
    first_page = cut[name][0]
    gray, _, masks, boxes = first_page
    assert masks["title"].sum() > 1000
    assert not (masks["title"] & boxed(gray.shape, boxes)).any()


def test_a_one_system_page_gives_one_tight_box_without_the_title(cut):
    [(gray, systems, masks, boxes)] = cut["air"]
    assert systems == 1 and len(boxes) == 1
    ys, xs = np.nonzero(masks["note"] | masks["text"])
    box = boxes[0]
    title_rows = np.flatnonzero(masks["title"].any(axis=1))
    assert box.top > title_rows[title_rows < ys.min()].max()  # below the title and composer
    assert box.bottom - box.top < 0.1 * gray.shape[0]  # the system, not the page


def test_a_ledger_note_far_below_the_last_staff_is_inside_its_box(cut):
    gray, _, masks, boxes = cut["bass"][0]
    lowest = np.flatnonzero(masks["note"].any(axis=1)).max()  # c,, of the last system
    assert boxes[-1].top < lowest < boxes[-1].bottom


def test_fingerings_between_staves_neither_add_nor_remove_a_system(cut):
    with_fingers = [len(boxes) for _, _, _, boxes in cut["guitar"]]
    without = [len(boxes) for _, _, _, boxes in cut["plain_guitar"]]
    assert with_fingers == without == [8]


def test_larger_and_smaller_staves_keep_the_count(cut):
    assert [len(boxes) for *_, boxes in cut["large"]] == [n for _, n, *_ in cut["large"]]
    assert len(cut["large"]) > 1 and [n for _, n, *_ in cut["song"]] == [10]
