"""The page's ink as pieces, and the staff each piece goes with (`owners`): the half of the
page cutter (sonfolio.score.common.page) that works on ink, not lines.

Written here with numpy for the reason page.py gives: no installed library labels ink and
assigns it to staves (no OpenCV, scikit-image or scipy in the environment).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    from sonfolio.score.common.page import Staff

# Ink this close (in staff spaces) is one piece: a notehead and the ledger line through it,
# a fingering on its note. Kept under half a space: LilyPond leaves only 1 space between two
# systems' ink (system-system-spacing padding) and 0.5 between the title block and the first
# system (markup-system-spacing), so a wider join could tie staves together, or a composer's
# name to the notes under it.
JOIN_DOWN = 0.45
JOIN_RIGHT = 0.5  # the letters of a word, a digit and its circle
# A piece this close (spaces) to a staff's ink in its columns goes with that staff: ledger
# lines 1 space apart (gaps under 0.9) follow one another, a bar number (1.1 above) its staff;
# a page number (LilyPond: 1 space padding, 4 above the staff) stays out over the clef.
ATTACH = 1.25
HEADER_WORD_GAP = 2.0  # spaces between the words of one header line (a composer's name)
# With `strict` ownership, a piece the first staff takes above its lines leads on to the next
# (a stack, link by link) only when it is this thin (staff spaces): a ledger line, so a whole
# note on many ledger lines is taken; a word of the title taken over a high note is not, so
# the next word is not taken through it, nor a scan's specks that lead up to the title
LINE_LIKE = 0.5
# A piece over the first staff at least this tall and wide (staff spaces) and this densely
# inked is a word of a title (LilyPond's are 2.4-3.4 spaces tall, a third to a half ink): no
# slur, ledger line, articulation or fingering is, and a title word can lie within ATTACH of
# the first line's high notes
TITLE_WORD = (2.0, 2.0, 0.25)
# A letter of a title line that one piece joins to a stem under it (within JOIN_DOWN): its own
# stroke, unjoined, at least this tall (spaces; LilyPond's title x-height is ~1.3, a notehead
# with the ledger line it sits on at most ~1.1), lying within the line's rows give or take
# LINE_ROWS spaces (a capital over a word of small letters, a "p" or a "g" under it). A shorter
# stroke there (an "i"'s dot, an apostrophe) is a letter's when within JOIN_RIGHT of a letter
LETTER_TALL = 1.2
LINE_ROWS = 1.0
BASELINE = 0.35  # a letter's bottom this near its neighbour's (spaces): on one baseline
# How far (spaces) a piece that crosses a staff's lines is kept above and below them: a note on
# eight ledger lines, its stem reaching to the staff, reaches ~9; a page edge running down the
# page from a staff is cut here
CROSSING_REACH = 10.0


def runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(H, W) bool -> each horizontal run of True as (row, first column, column after it),
    ordered by row, then column."""
    padded = np.pad(mask.astype(np.int8), ((0, 0), (1, 1)))
    edges = np.diff(padded, axis=1)  # +1 where a run starts, -1 just after it ends
    rows, starts = np.nonzero(edges == 1)
    _, ends = np.nonzero(edges == -1)  # row-major order: pairs with the starts
    return rows, starts, ends


def shift_or(mask: np.ndarray, by: int, axis: int) -> np.ndarray:
    """`mask` with each True also set on the `by` pixels after it along `axis` (down or right):
    ink closer than `by` pixels that way is joined."""
    out = mask.copy()
    for step in range(1, min(by, mask.shape[axis] - 1) + 1):
        if axis == 0:
            out[step:] |= mask[:-step]
        else:
            out[:, step:] |= mask[:, :-step]
    return out


def _label_runs(rows: np.ndarray, starts: np.ndarray, ends: np.ndarray, width: int) -> np.ndarray:
    """Runs (ordered by row, then column) -> a label per run, shared by runs that touch from
    one row to the next (4-connected components, by label propagation with pointer jumping:
    a few vectorised passes instead of a flood fill per pixel)."""
    stride = width + 1
    key_start, key_end = rows * stride + starts, rows * stride + ends
    # The runs of the next row that overlap a run end after its start and start before its end.
    lo = np.searchsorted(key_end, (rows + 1) * stride + starts, side="right")
    hi = np.searchsorted(key_start, (rows + 1) * stride + ends, side="left")
    count = np.maximum(hi - lo, 0)
    a = np.repeat(np.arange(rows.size), count)
    b = np.repeat(lo - np.cumsum(count) + count, count) + np.arange(count.sum())
    labels = np.arange(rows.size)
    while a.size:
        low = np.minimum(labels[a], labels[b])
        np.minimum.at(labels, labels[a], low)
        np.minimum.at(labels, labels[b], low)
        while not np.array_equal(nxt := labels[labels], labels):
            labels = nxt
        if np.array_equal(labels[a], labels[b]):
            break
    return labels


def _components(area: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, tuple]:
    """The 4-connected components of `area` (H, W) bool: the component of each pixel (`ys`,
    `xs`, each True in `area`: the last run starting before it) and each component's top,
    bottom (included), left and right (the column after) over those pixels."""
    rows, starts, ends = runs(area)
    _, of_run = np.unique(_label_runs(rows, starts, ends, area.shape[1]), return_inverse=True)
    stride = area.shape[1] + 1
    of = of_run[np.searchsorted(rows * stride + starts, ys * stride + xs, "right") - 1]
    n = int(of.max(initial=-1)) + 1
    top, bottom = np.full(n, area.shape[0]), np.full(n, -1)
    left, right = np.full(n, area.shape[1]), np.full(n, -1)
    np.minimum.at(top, of, ys)
    np.maximum.at(bottom, of, ys)
    np.minimum.at(left, of, xs)
    np.maximum.at(right, of, xs + 1)
    return of, (top, bottom, left, right)


@dataclass(frozen=True)
class Piece:
    """The box of a connected piece of ink (ink this close together counts as touching)."""

    FIELDS: ClassVar[tuple[str, ...]] = ("top", "bottom", "left", "right")
    top: int
    bottom: int  # the last row, included
    left: int
    right: int  # the column after the last


def ink_pieces(mask: np.ndarray, space: float) -> tuple[list[Piece], np.ndarray]:
    """The page's ink as pieces: ink joined across gaps up to JOIN_DOWN staff spaces high
    and JOIN_RIGHT wide, so that a note on ledger lines, the fingering on it and the letters
    of a word each make one piece with what they belong to. Each piece's box is that of its
    ink, not of the gaps joined. Returns the pieces and each ink pixel's piece (an index into
    them, in np.nonzero(mask) order)."""
    joined = shift_or(mask, max(1, round(JOIN_RIGHT * space)), axis=1)
    joined = shift_or(joined, max(1, round(JOIN_DOWN * space)), axis=0)
    ys, xs = np.nonzero(mask)  # each ink pixel lies in one joined run (joining only adds ink)
    piece, (top, bottom, left, right) = _components(joined, ys, xs)
    return [Piece(*map(int, t)) for t in zip(top, bottom, left, right, strict=True)], piece


def _header(piece: Piece, staff: Piece, space: float) -> bool:
    """A piece above the first staff that starts left of it (a poet's name at the margin, the
    first staff being indented) or ends at its right end (a composer's or arranger's name,
    right-aligned to the line): header text, however close LilyPond put it (0.5 space)."""
    return piece.left < staff.left - space or piece.right > staff.right - space / 2


def _drop_header(
    free: list[Piece], staff_box: Piece, staff: Staff
) -> tuple[list[Piece], list[Piece]]:
    """`free` without the header text above the first staff (`_header`) and the words on the
    same line as it (rows overlapping, under HEADER_WORD_GAP spaces apart): "J." of "J. Bach";
    and that header text."""
    above = [p for p in free if p.bottom < staff.top]
    header = [p for p in above if _header(p, staff_box, staff.space)]
    gap = HEADER_WORD_GAP * staff.space
    grown = True
    while grown:
        grown = False
        for p in above:
            if p not in header and any(
                p.top <= q.bottom
                and q.top <= p.bottom
                and max(q.left - p.right, p.left - q.right) <= gap
                for q in header
            ):
                header.append(p)
                grown = True
    return [p for p in free if p not in header], header


def _line_like(piece: Piece, staff: Staff) -> bool:
    """A piece no taller than LINE_LIKE staff spaces: a ledger line (a note on it is one piece
    with it, taller)."""
    return piece.bottom - piece.top <= LINE_LIKE * staff.space


def _title_words(
    pieces: list[Piece], taken_by: np.ndarray, staff: Staff, left: list[Piece], ink: np.ndarray
) -> list[int]:
    """The pieces the first staff took above its lines that are words of a title: as tall,
    wide and dense as TITLE_WORD (`ink`: each piece's ink pixels), or on a text line with one
    of those or with words that went with none (`left`): a title LilyPond set close over the
    high notes, a word within ATTACH of them. A word of the line: rows overlapping, top or
    bottom within half a space of the other's (letters of one size on one baseline), under
    HEADER_WORD_GAP spaces apart; grown word by word. Their indices into `pieces`."""
    gap, align = HEADER_WORD_GAP * staff.space, staff.space / 2
    ks = np.array(
        [k for k, p in enumerate(pieces) if taken_by[k] == 0 and p.bottom < staff.top], dtype=int
    )
    if not len(ks):
        return []
    top, bottom, lft, rgt = (np.array([getattr(pieces[k], a) for k in ks]) for a in Piece.FIELDS)
    tall, wide, dense = TITLE_WORD
    height, width = bottom - top + 1, rgt - lft
    word = (height >= tall * staff.space) & (width >= wide * staff.space)
    word &= ink[ks] >= dense * height * width
    line = [*left, *(pieces[k] for k in ks[word])]  # grown word by word: each new word's
    while line:  # neighbours on its line, over the candidates at once (no quadratic loop)
        q = line.pop()
        near = ~word & (top <= q.bottom) & (q.top <= bottom)
        near &= (np.abs(top - q.top) <= align) | (np.abs(bottom - q.bottom) <= align)
        near &= np.maximum(q.left - rgt, lft - q.right) <= gap
        word |= near
        line.extend(pieces[k] for k in ks[near])
    return ks[word].tolist()


def _title_letters(
    ys: np.ndarray, xs: np.ndarray, staff_of: np.ndarray, line: list[Piece], staff: Staff
) -> np.ndarray:
    """The first staff's ink pixels (indices into `ys`, `xs`) over its lines that are letters
    of the title line `line` (the words left out, `_title_words` included) though one piece
    with the notes: LilyPond may set a word within JOIN_DOWN of a stem, and that word and the
    beam group under it are then one piece. Each stroke of ink (unjoined, 4-connected) at least
    LETTER_TALL spaces tall and as densely inked as a TITLE_WORD (a slur over the notes is not),
    within the line's rows (LINE_ROWS either side), its bottom on the baseline of a word or
    letter within HEADER_WORD_GAP spaces (BASELINE: a scan's broken slur is not), is a letter;
    grown letter by letter; then the short strokes there within JOIN_RIGHT of one (dots,
    apostrophes). A stem, however near, runs down out of the line's rows; a notehead is
    shorter than a letter."""
    over = np.nonzero((staff_of == 0) & (ys < staff.top))[0]
    if not line or not over.size:
        return over[:0]
    top = int(ys[over].min())
    sub = np.zeros((staff.top - top, int(xs[over].max()) + 1), dtype=bool)
    sub[ys[over] - top, xs[over]] = True
    stroke, (s_top, s_bottom, s_left, s_right) = _components(sub, ys[over] - top, xs[over])
    s_top, s_bottom, n = s_top + top, s_bottom + top, len(s_top)
    height, width = s_bottom - s_top + 1, s_right - s_left
    tall = height >= LETTER_TALL * staff.space  # and as dense as a word: no slur or bracket
    tall &= np.bincount(stroke, minlength=n) >= TITLE_WORD[2] * height * width
    rows_ok = s_top >= min(q.top for q in line) - LINE_ROWS * staff.space
    rows_ok &= s_bottom <= max(q.bottom for q in line) + LINE_ROWS * staff.space
    letter = np.zeros(n, dtype=bool)
    todo, found = list(line), list(line)
    while todo:  # grown letter by letter along the line, on its baseline
        q = todo.pop()
        near = tall & rows_ok & ~letter & (np.abs(s_bottom - q.bottom) <= BASELINE * staff.space)
        near &= np.maximum(q.left - s_right, s_left - q.right) <= HEADER_WORD_GAP * staff.space
        letter |= near
        new = [
            Piece(int(s_top[k]), int(s_bottom[k]), int(s_left[k]), int(s_right[k]))
            for k in np.nonzero(near)[0]
        ]
        todo.extend(new)
        found.extend(new)
    if letter.any():  # the dots and apostrophes beside them
        marks = ~tall & rows_ok & ~letter
        for q in found:
            near = np.maximum(q.left - s_right, s_left - q.right) <= JOIN_RIGHT * staff.space
            letter |= marks & near
    return over[letter[stroke]]


def span(pieces: list[Piece]) -> Piece:
    """The box around pieces."""
    return Piece(
        min(p.top for p in pieces),
        max(p.bottom for p in pieces),
        min(p.left for p in pieces),
        max(p.right for p in pieces),
    )


def _within(piece: Piece, staff: Staff, spaces: float) -> tuple[int, int]:
    """The rows of `piece` that lie within `spaces` staff spaces of `staff`'s lines (top >
    bottom: none)."""
    reach = round(spaces * staff.space)
    return max(piece.top, staff.top - reach), min(piece.bottom, staff.bottom + reach)


def _gap(
    piece: Piece, staff: int, sky_top: np.ndarray, sky_bottom: np.ndarray, space: float
) -> int:
    """Rows between a piece and the ink `staff` holds in the piece's columns (a space either
    side): to that ink's top when the piece is above it, from its bottom when below."""
    cols = slice(max(0, piece.left - round(space)), piece.right + round(space))
    above = int(sky_top[staff, cols].min()) - piece.bottom
    below = piece.top - int(sky_bottom[staff, cols].max())
    return max(above, below)


def owners(
    pieces: list[Piece],
    mask: np.ndarray,
    piece_of: np.ndarray,
    staves: list[Staff],
    *,
    reach: float,
    strict: bool = False,
    columns: list[tuple[int, int]] | None = None,
) -> tuple[list[list[Piece]], np.ndarray]:
    """Each staff's pieces, and each ink pixel's staff (an index into `staves`, -1 for none; in
    np.nonzero(mask) order, as `piece_of`). A piece crosses a staff when it lies in the staff's
    rows and, given `columns` (each staff's first and after-last column), within its columns
    too; one in a staff's rows beside its columns (a scan's bleed-through beside a short last
    line) then goes with none, neither that staff nor, link by link, its neighbour. A piece
    that crosses staves is split between them at the middle of each gap; a piece that crosses a
    staff's lines is kept within CROSSING_REACH spaces of them, one taken in the rounds below
    within `reach` (PageSplit.reach_spaces: a whole note on the fifth ledger line reaches 5.5,
    lyrics and dynamics ~4; a scan's bleed-through taken link by link under a line, or a page
    edge running down from near it, is cut there). The others are taken in rounds: a piece
    within ATTACH spaces of the ink a staff holds in its columns goes with that staff (the
    nearer of two), so a ledger-line stack or a fingering over a note follows it link by link;
    what is left between two staves then goes with the staff whose ink is nearer (`strict`:
    with none, as the bleed-through and specks a scan leaves there); what is left above the
    first staff or below the last (a title, a footer, a page number) with none; `strict`, so do
    the first staff's pieces above it that are words of a text line left with none
    (`_title_words`), and over the first staff only a ledger line leads on to the next piece
    (`LINE_LIKE`), and the letters of that text line joined to the notes go with none
    (`_title_letters`; the first staff's box is then its ink's). Header text above the first
    staff (`_header`) goes with none however near."""
    h, w = mask.shape
    held: list[list[Piece]] = [[] for _ in staves]
    edges = [-1, *[(a.bottom + b.top) // 2 for a, b in zip(staves, staves[1:], strict=False)], h]
    ys, xs = np.nonzero(mask)
    sky_top = np.full((len(staves), w), h)  # per staff and column: its ink's top row
    sky_bottom = np.full((len(staves), w), -1)  # and bottom row
    staff_of = np.full(len(ys), -1, dtype=np.int32)
    # a piece taken whole (not crossing a staff): its staff, and (`kept`) as its staff holds it
    taken_by = np.full(len(pieces), -1, dtype=np.int32)
    index = {id(piece): k for k, piece in enumerate(pieces)}
    kept: dict[int, Piece] = {}  # a taken piece's index: the piece as its staff holds it
    free = []
    for k, piece in enumerate(pieces):
        rows = [i for i, s in enumerate(staves) if piece.top <= s.bottom and piece.bottom >= s.top]
        crossed = [
            i
            for i in rows
            if columns is None or (piece.left < columns[i][1] and piece.right > columns[i][0])
        ]
        if not rows:
            free.append(piece)
        for i in crossed:
            top, bottom = _within(piece, staves[i], CROSSING_REACH)
            if len(crossed) > 1:  # joined across a gap: each staff keeps its side
                top, bottom = max(top, edges[i] + 1), min(bottom, edges[i + 1])
            held[i].append(Piece(top, bottom, piece.left, piece.right))
            mine = (piece_of == k) & (ys >= top) & (ys <= bottom)
            staff_of[mine] = i
            np.minimum.at(sky_top[i], xs[mine], ys[mine])
            np.maximum.at(sky_bottom[i], xs[mine], ys[mine])
    free, header = _drop_header(free, span(held[0]), staves[0])

    def neighbours(piece: Piece) -> list[int]:
        below = [i for i, s in enumerate(staves) if s.bottom < piece.top]
        return [
            i
            for i in (below[-1] if below else None, len(below))
            if i is not None and i < len(staves)
        ]

    def take(piece: Piece, i: int) -> None:
        # a line down the page that starts near the staff's ink is cut too
        top, bottom = _within(piece, staves[i], reach)
        if top > bottom:
            return
        k = index[id(piece)]
        taken_by[k] = i
        piece = kept[k] = Piece(top, bottom, piece.left, piece.right)
        held[i].append(piece)
        if strict and i == 0 and piece.bottom < staves[0].top and not _line_like(piece, staves[0]):
            return  # over the first staff, only a ledger line leads on to what lies above it
        cols = slice(piece.left, piece.right)
        sky_top[i, cols] = np.minimum(sky_top[i, cols], piece.top)
        sky_bottom[i, cols] = np.maximum(sky_bottom[i, cols], piece.bottom)

    while free:
        near = []
        for piece in free:
            gaps = {
                i: _gap(piece, i, sky_top, sky_bottom, staves[i].space) for i in neighbours(piece)
            }
            best = min(gaps, key=gaps.__getitem__)
            if gaps[best] <= ATTACH * staves[best].space:
                near.append((gaps[best], id(piece), piece, best))
        if not near:
            break
        for _, _, piece, i in sorted(near):
            take(piece, i)
        taken = {id(p) for _, _, p, _ in near}
        free = [p for p in free if id(p) not in taken]
    for piece in [] if strict else free:  # far from any staff's ink: the nearer one's
        sides = neighbours(piece)
        if len(sides) == 2:
            gaps = [_gap(piece, i, sky_top, sky_bottom, staves[i].space) for i in sides]
            take(piece, sides[int(np.argmin(gaps))])
    left_above = [*header, *(p for p in free if p.bottom < staves[0].top)]
    ink = np.bincount(piece_of, minlength=len(pieces))
    title = _title_words(pieces, taken_by, staves[0], left_above, ink) if strict else []
    if title:
        taken_by[title] = -1
        gone = {id(kept[k]) for k in title}
        held[0] = [p for p in held[0] if id(p) not in gone]
    by = taken_by[piece_of]
    kept_top, kept_bottom = (
        np.zeros(len(pieces), dtype=np.int64),
        np.zeros(len(pieces), dtype=np.int64),
    )
    for k, piece in kept.items():  # the rows each taken piece is kept within
        kept_top[k], kept_bottom[k] = piece.top, piece.bottom
    mine = (by >= 0) & (ys >= kept_top[piece_of]) & (ys <= kept_bottom[piece_of])
    staff_of[mine] = by[mine]
    if strict:  # the text line: the title words taken, and the words left out (not specks)
        tall, wide, dense = TITLE_WORD
        line = [pieces[k] for k in title] + [
            p
            for p in left_above
            if (p.bottom - p.top + 1) >= tall * staves[0].space
            and p.right - p.left >= wide * staves[0].space
            and ink[index[id(p)]] >= dense * (p.bottom - p.top + 1) * (p.right - p.left)
        ]
        letters = _title_letters(ys, xs, staff_of, line, staves[0])
        if letters.size:  # the first staff's box: the ink it keeps
            staff_of[letters] = -1
            kept_ys, kept_xs = ys[staff_of == 0], xs[staff_of == 0]
            held[0] = [
                Piece(
                    int(kept_ys.min()),
                    int(kept_ys.max()),
                    int(kept_xs.min()),
                    int(kept_xs.max()) + 1,
                )
            ]
    return held, staff_of
