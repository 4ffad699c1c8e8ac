"""Quality of predicted LilyPond systems: symbol and character error rates, exact matches,
and what kind each symbol error is.

Symbols are canonical LilyPond symbols (`sonfolio.score.common.canonical.symbols`: `\\clef treble`,
`g'4.`, `|`, a chord split at its spaces), not BPE pieces, so one wrong pitch costs one symbol
whatever the tokenizer. Alignment is jiwer's edit-distance alignment (Levenshtein, as WER).

Error kinds (docs/evaluation.md): each aligned substitution is compared field by field, so one
symbol can carry several kinds (`c'4` -> `d''8` is pitch and duration):

- pitch: a different letter (step), octave marks aside;
- octave: same letter and alteration, other octave;
- accidental: same letter, other alteration (is/es...);
- duration: another length (dots included), on notes, rests and chord ends;
- tie: a tie added or lost;
- rest: a note written where a rest is, or the reverse;
- barline: a bar check `|` substituted, inserted or deleted;
- command: a header or command symbol (`\\clef`, `\\key`, `\\time`, `\\partial`, tuplets,
  braces) wrong, inserted or deleted;
- note: a whole note, rest or chord part inserted or deleted (missing or extra event);
- other: text that is no symbol of the grammar.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import jiwer

from sonfolio.score.common.lexicon import ALTER_RE, BASE_RE, DOTS_RE, OCTAVE_RE, STEP_RE, symbols

KINDS = (
    "pitch",
    "octave",
    "accidental",
    "duration",
    "tie",
    "rest",
    "barline",
    "command",
    "note",
    "other",
)
# A symbol joins with NBSP inside, so jiwer (which splits on spaces) keeps it one word.
_JOIN = "\u00a0"
# a note or a chord's part, and a rest, by the lexicon's spellings, each field a named group
_DURATION = rf"(?:{BASE_RE}){DOTS_RE}"
_NOTE = re.compile(
    rf"(?P<open><)?(?P<step>{STEP_RE})(?P<alter>{ALTER_RE})?(?P<octave>{OCTAVE_RE})?"
    rf"(?P<close>>)?(?P<dur>{_DURATION})?(?P<tie>~)?"
)
_REST = re.compile(rf"r(?P<dur>{_DURATION})")


@dataclass(frozen=True)
class Parsed:
    """One symbol's fields; `kind` is note, rest, barline, command or other."""

    kind: str
    step: str = ""
    alter: str = ""
    octave: str = ""
    dur: str = ""
    tie: bool = False


def parse(symbol: str) -> Parsed:
    if symbol == "|":
        return Parsed("barline")
    if symbol.startswith("\\") or symbol in ("{", "}"):
        return Parsed("command")
    if (m := _REST.fullmatch(symbol)) is not None:
        return Parsed("rest", dur=m["dur"])
    m = _NOTE.fullmatch(symbol)
    if m is None or (m["open"] and m["close"]):
        return Parsed("other")
    return Parsed(
        "note", m["step"], m["alter"] or "", m["octave"] or "", m["dur"] or "", bool(m["tie"])
    )


def substitution_kinds(ref: str, hyp: str) -> list[str]:
    """The kinds of error of `ref` written as `hyp` (at least one)."""
    a, b = parse(ref), parse(hyp)
    kinds = {a.kind, b.kind}
    if "barline" in kinds:
        return ["barline"]
    if "command" in kinds:
        return ["command"]
    if "other" in kinds:
        return ["other"]
    if a.kind != b.kind:  # a note for a rest or a rest for a note
        return ["rest"]
    out: list[str] = []
    if a.kind == "note":
        if a.step != b.step:
            out.append("pitch")
        else:
            if a.alter != b.alter:
                out.append("accidental")
            if a.octave != b.octave:
                out.append("octave")
        if a.tie != b.tie:
            out.append("tie")
    if a.dur != b.dur:
        out.append("duration")
    # Same fields in another spelling: a chord opening `<c'` for a plain `c'`.
    return out or ["other"]


def extra_kind(symbol: str) -> str:
    """The kind of a symbol inserted or deleted as a whole."""
    kind = parse(symbol).kind
    return {"rest": "note"}.get(kind, kind)


@dataclass(frozen=True)
class SystemScore:
    """One system's comparison."""

    ref_symbols: int
    errors: int  # substitutions + deletions + insertions
    substitutions: int
    deletions: int
    insertions: int
    kinds: Counter[str]

    @property
    def ser(self) -> float:
        """This system's symbol error rate (errors / reference symbols; inf for an empty
        reference with insertions, 0 for two empty texts)."""
        if self.ref_symbols == 0:
            return 0.0 if self.errors == 0 else float("inf")
        return self.errors / self.ref_symbols


def compare(ref: str, hyp: str) -> SystemScore:
    """Align the symbols of `ref` and `hyp` and classify every edit."""
    r = [s.replace(" ", _JOIN) for s in symbols(ref)]
    h = [s.replace(" ", _JOIN) for s in symbols(hyp)]
    kinds: Counter[str] = Counter()
    if not r or not h:  # jiwer needs one word on each side to align; the edits are plain
        kinds.update(extra_kind(s.replace(_JOIN, " ")) for s in r + h)
        return SystemScore(len(r), len(r) + len(h), 0, len(r), len(h), kinds)
    out = jiwer.process_words(" ".join(r), " ".join(h))
    for chunk in out.alignments[0]:
        refs = [s.replace(_JOIN, " ") for s in r[chunk.ref_start_idx : chunk.ref_end_idx]]
        hyps = [s.replace(_JOIN, " ") for s in h[chunk.hyp_start_idx : chunk.hyp_end_idx]]
        if chunk.type == "substitute":
            for a, b in zip(refs, hyps, strict=True):
                kinds.update(substitution_kinds(a, b))
        elif chunk.type in ("delete", "insert"):
            kinds.update(extra_kind(s) for s in refs + hyps)
    return SystemScore(
        len(r),
        out.substitutions + out.deletions + out.insertions,
        out.substitutions,
        out.deletions,
        out.insertions,
        kinds,
    )


def char_error_rate(refs: list[str], hyps: list[str]) -> float:
    """Corpus character error rate (jiwer.cer); an empty hypothesis costs its whole reference."""
    if not any(refs):
        raise ValueError("every reference is empty: the character error rate is undefined")
    return float(jiwer.cer(refs, hyps))


def summarize(refs: list[str], hyps: list[str]) -> tuple[dict, list[SystemScore]]:
    """Corpus metrics of predictions `hyps` against `refs`, and each system's comparison.

    Returns:
        ({ser, cer, exact_match, systems, symbols, substitutions, deletions, insertions,
          errors_by_kind}, per-system scores)

    Raises:
        ValueError: no systems, or every reference empty (the rates are undefined).
    """
    if len(refs) != len(hyps) or not refs:
        raise ValueError(f"{len(hyps)} predictions for {len(refs)} references")
    scores = [compare(r, h) for r, h in zip(refs, hyps, strict=True)]
    n_symbols = sum(s.ref_symbols for s in scores)
    if n_symbols == 0:
        raise ValueError("every reference is empty: the symbol error rate is undefined")
    kinds: Counter[str] = Counter()
    for s in scores:
        kinds.update(s.kinds)
    metrics = {
        "ser": sum(s.errors for s in scores) / n_symbols,
        "cer": char_error_rate(refs, hyps),
        "exact_match": sum(r == h for r, h in zip(refs, hyps, strict=True)) / len(refs),
        "systems": len(refs),
        "symbols": n_symbols,
        "substitutions": sum(s.substitutions for s in scores),
        "deletions": sum(s.deletions for s in scores),
        "insertions": sum(s.insertions for s in scores),
        "errors_by_kind": {k: kinds.get(k, 0) for k in KINDS},
    }
    return metrics, scores
