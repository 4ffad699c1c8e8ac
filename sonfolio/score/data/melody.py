"""Where a synthetic melody goes (sonfolio.score.data.synth): a walk on and off the staff of a
clef, now and then leaping onto ledger lines, runs by step, chords on it, each pitch spelled in
the piece's key (its signature, a raised leading tone in minor, some chromatic notes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sonfolio.score.common.lexicon import (
    MAJOR_TONICS,
    MAX_DOWN_OCTAVES,
    MAX_UP_OCTAVES,
    MINOR_TONICS,
    STEPS,
    pitch_name,
)

if TYPE_CHECKING:
    from sonfolio.score.data.synth import Piece

# Diatonic index (octave * 7 + step, c' = 28) of each clef's bottom staff line.
BOTTOM_LINE = {
    "treble": 30,
    "french": 32,
    '"treble_8"': 23,
    '"treble^8"': 37,
    "bass": 18,
    "varbaritone": 20,
    "subbass": 16,
    '"bass_8"': 11,
    '"bass^8"': 25,
    "soprano": 28,
    "mezzosoprano": 26,
    "alto": 24,
    "tenor": 22,
    "baritone": 20,
}
_LEDGER_STEPS = 8  # up to four ledger lines below the bottom line or above the top line
_RUN_LEDGER_STEPS = 11  # a run climbs up to five ledger lines (and a space) off the staff
# the pitches a text can spell, diatonically: c,,,, (4 octave marks down) to b''''' (5 up)
LOWEST, HIGHEST = (3 - MAX_DOWN_OCTAVES) * 7, (3 + MAX_UP_OCTAVES) * 7 + 6
_SHARP_ORDER = "fcgdaeb"


def next_pitches(piece: Piece, chord: bool, run: bool = False) -> list[str]:
    """The melody's next pitch (a walk that sometimes leaps onto ledger lines; a run goes by
    step, up to five ledger lines off the staff), or a chord on it."""
    rng = piece.rng
    bottom = BOTTOM_LINE[piece.clef]
    if run:
        low = max(LOWEST, bottom - _RUN_LEDGER_STEPS)
        high = min(HIGHEST - 9, bottom + 8 + _RUN_LEDGER_STEPS)
        step = piece.run * rng.choice((1, 1, 1, 2))
        if not low <= piece.height + step <= high or rng.random() < 0.08:
            piece.run, step = -piece.run, -step  # turn back (and at the range's ends)
        piece.height += step
    else:
        low, high = bottom - _LEDGER_STEPS, bottom + 8 + _LEDGER_STEPS
        if rng.random() < 0.07:
            piece.height = rng.choice(
                [rng.randint(low, bottom - 2), rng.randint(bottom + 10, high)]
            )
        else:
            toward_staff = 1 if piece.height < bottom else -1 if piece.height > bottom + 8 else 0
            piece.height += rng.choice((-2, -1, -1, 0, 1, 1, 2, 3, -3)) + toward_staff
    piece.height = max(low, min(high, piece.height))
    heights = [piece.height]
    if chord:
        extra = rng.sample((2, 4, 5, 7), rng.randint(1, 3))
        heights += [piece.height + e for e in sorted(extra) if piece.height + e <= high + 2]
    return [spell(piece, h) for h in heights]


def spell(piece: Piece, height: int) -> str:
    """Pitch name in the key: its signature, a raised leading tone in minor, some chromatics."""
    rng = piece.rng
    step = STEPS[height % 7]
    in_key = key_alterations(piece.key).get(step, 0)
    alter = in_key
    tonic, mode = piece.key
    if mode == "minor" and step == STEPS[(STEPS.index(tonic[0]) + 6) % 7] and rng.random() < 0.5:
        alter += 1  # harmonic minor's leading tone
    elif rng.random() < 0.08:
        # A chromatic note spelled on its own step: mostly a natural against the signature or
        # a sharp/flat on an unaltered step, sometimes a double accidental.
        if in_key and rng.random() < 0.7:
            alter = 0
        else:
            alter += in_key if in_key else rng.choice((-1, 1))
    alter = max(-2, min(2, alter))
    return pitch_name(step, alter, height // 7)


def key_alterations(key: tuple[str, str]) -> dict[str, int]:
    tonics = MAJOR_TONICS if key[1] == "major" else MINOR_TONICS
    sharps = tonics.index(key[0]) - 7
    if sharps >= 0:
        return dict.fromkeys(_SHARP_ORDER[:sharps], 1)
    return dict.fromkeys(_SHARP_ORDER[::-1][:-sharps], -1)
