"""Does a predicted system compile? Checked against the canonical grammar first, then by
LilyPond, many systems per process, with a timeout.

LilyPond input can run Scheme (`#(system ...)`, `$(...)`), read files (`\\include`) or loop
for hours (`\\repeat unfold 100000000`): a prediction reaches LilyPond only when it passes the
project's canonical grammar (sonfolio.score.common.canonical), which has none of these. One rule is
relaxed: bar lengths. A well-formed system whose bars do not add up is harmless LilyPond (it
compiles with a "bar check failed" warning), and counting those warnings is part of the
measure, so such a text is compiled rather than rejected. A system whose header prints no time
signature (a continuation system) is compiled in the time in force before it, set unprinted
(`lilypond_text`).

Outcome per system (docs/evaluation.md gives the strict definition):
- `rejected`: outside the grammar; LilyPond never saw it;
- `error`: LilyPond exited non-zero, reported an error for it, or wrote no PNG;
- `timeout`: LilyPond ran past the limit on it alone;
- `compiled`: exit 0, no error, one PNG; `bar_check` says whether a bar check failed, and
  `warnings` lists every LilyPond warning.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sonfolio.score.common import canonical, lexicon
from sonfolio.score.common.lilypond import Compiled, PageCountError, compile_systems
from sonfolio.score.common.refusals import Why

log = logging.getLogger(__name__)

OUTCOMES = ("compiled", "rejected", "error", "timeout")


@dataclass
class CompileResult:
    outcome: str  # one of OUTCOMES
    reason: str = ""  # why it was rejected or failed
    warnings: list[str] = field(default_factory=list)

    @property
    def bar_check(self) -> bool:
        """A bar check failed (LilyPond's warning): compiled, but counted apart."""
        return any("bar check failed" in w for w in self.warnings)


class _BarTolerantReader(canonical.Reader):
    """The canonical parser with bar lengths not enforced (every other rule kept).

    Reuses canonical's own reader so the two can never disagree on what is safe: before each
    length check runs, the bar's length is set to what the check expects. A private class of
    our own package, used on purpose; tests/score/test_eval_compile.py pins the behaviour.
    """

    def bar_check(self) -> bool | Why:
        expected = self.room()
        if self.bar_events and not self.clef_pending and expected is not None:
            self.bar = expected
        return super().bar_check()

    def finish(self) -> bool | Why:
        if self.bars == 0 and self.pickup is not None:
            self.bar = self.pickup
        elif self.measure is not None:
            self.bar = min(self.bar, self.measure)
        return super().finish()


def check_grammar(text: str, time: str | None = None) -> str | None:
    """None when `text` (read in the time in force `time`) may go to LilyPond, else why not
    (the grammar's message)."""
    if not text:
        return "empty text"
    _, error = canonical.read(text, time, _BarTolerantReader)
    return None if error is None else str(error)


def lilypond_text(text: str, time: str | None = None) -> str:
    """What LilyPond compiles for a system that passed `check_grammar`: the text itself when
    its header prints a time signature; otherwise the text after an unprinted
    `\\once \\omit Staff.TimeSignature \\time T` (T: the time in force, or, unknown, a time
    whose measure is the first full bar's), so bar checks hold and no 4/4 is drawn."""
    if canonical.header_time(text) is not None:
        return text
    if time is None:
        time = _time_of_first_bar(text)
    canonical.time_measure(time)  # raises on anything but N/D: never pass text through
    return rf"\once \omit Staff.TimeSignature \time {time} {text}"


def _time_of_first_bar(text: str) -> str:
    """N/D (N <= 32) for the measure the first full bar sets (as `validate` reads it); with
    no full bar, the shortest such measure that holds the whole text (4/4 if none does)."""
    # a text with wrong bar lengths still compiles: what was read before the error serves
    reader, _ = canonical.read(text)
    length = reader.measure if reader.measure is not None else reader.bar
    for den in lexicon.DURATION_BASES[2:] + lexicon.DURATION_BASES[:2]:  # 4, 8, ... 1, 2
        num = length * den
        if num.denominator == 1 and 1 <= num <= lexicon.MAX_TIME_NUMERATOR:
            return f"{num.numerator}/{den}"
    return "4/4"


def compile_texts(
    texts: Sequence[str],
    exe: Path,
    *,
    batch_size: int,
    timeout_s: float,
    resolution: int,
    keep: dict[int, Path] | None = None,
    on_batch: Callable[[int], None] | None = None,
    compile_fn: Callable[..., Compiled] = compile_systems,
    times: Sequence[str | None] | None = None,
) -> list[CompileResult]:
    """Check and compile `texts`; one result each, in order.

    Args:
        texts: predicted systems (anything: hostile text is rejected unseen by LilyPond).
        times: per text, the time signature in force before it (a manifest row's `time`);
            None: none known (see `lilypond_text`).
        exe: the LilyPond binary.
        batch_size: systems per LilyPond process.
        timeout_s: limit per LilyPond process; a batch that runs past it is split until the
            system that hangs is alone (then its outcome is `timeout`).
        resolution: dpi of the PNGs.
        keep: index -> path: the PNG of those systems that compile is copied there.
        on_batch: called with the number of systems done after each batch (progress).
        compile_fn: compile_systems (tests pass a spy to prove what LilyPond never sees).
    """
    times = [None] * len(texts) if times is None else list(times)
    if len(times) != len(texts):
        raise ValueError(f"{len(times)} times for {len(texts)} texts")
    results: list[CompileResult | None] = [None] * len(texts)
    todo: list[int] = []
    for i, (text, time) in enumerate(zip(texts, times, strict=True)):
        why = check_grammar(text, time)
        if why is None:
            todo.append(i)
        else:
            results[i] = CompileResult("rejected", why)
    if len(texts) - len(todo):
        log.info("%d of %d texts rejected by the grammar", len(texts) - len(todo), len(texts))
    if on_batch and len(texts) - len(todo):
        on_batch(len(texts) - len(todo))
    run = _Runner(exe, timeout_s, resolution, keep or {}, compile_fn)
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        ly = [lilypond_text(texts[i], times[i]) for i in batch]
        for i, result in zip(batch, run.batch(ly, batch), strict=True):
            results[i] = result
        if on_batch:
            on_batch(len(batch))
    return [r for r in results if r is not None]


@dataclass
class _Runner:
    exe: Path
    timeout_s: float
    resolution: int
    keep: dict[int, Path]
    compile_fn: Callable[..., Compiled]

    def batch(self, texts: list[str], indices: list[int]) -> list[CompileResult]:
        """Compile in one process; a batch that fails as a whole is halved until each bad
        system is alone (as sonfolio.score.data.render does), so one bad text costs a few extra
        processes, not its neighbours' results."""
        with tempfile.TemporaryDirectory(prefix="sonfolio-compile-") as tmp:
            try:
                out = self.compile_fn(
                    texts, Path(tmp), self.exe, resolution=self.resolution, timeout_s=self.timeout_s
                )
            except subprocess.TimeoutExpired:
                if len(texts) == 1:
                    return [CompileResult("timeout", f"LilyPond ran over {self.timeout_s} s")]
                return self._halves(texts, indices)
            except PageCountError as err:
                if len(texts) == 1:
                    return [CompileResult("error", str(err))]
                return self._halves(texts, indices)
            if out.returncode != 0:
                if len(texts) == 1:
                    msgs = [w for w in out.warnings[0] if w.startswith("error")]
                    return [CompileResult("error", "; ".join(msgs) or "LilyPond exited non-zero")]
                return self._halves(texts, indices)
            return [
                self._one(i, png, warnings)
                for i, png, warnings in zip(indices, out.pngs, out.warnings, strict=True)
            ]

    def _halves(self, texts: list[str], indices: list[int]) -> list[CompileResult]:
        half = len(texts) // 2
        return self.batch(texts[:half], indices[:half]) + self.batch(texts[half:], indices[half:])

    def _one(self, index: int, png: Path, warnings: list[str]) -> CompileResult:
        errors = [w for w in warnings if w.startswith("error")]
        if errors:  # exit 0 with an error: still not a clean compile
            return CompileResult("error", "; ".join(errors), warnings)
        if not png.is_file() or png.stat().st_size == 0:
            return CompileResult("error", "LilyPond wrote no PNG", warnings)
        if index in self.keep:
            self.keep[index].parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, self.keep[index])
        return CompileResult("compiled", "", warnings)


def summarize(results: Sequence[CompileResult]) -> dict[str, float | int]:
    """Compile rate and counts over `results` (rates are fractions of all systems)."""
    n = len(results)
    if n == 0:
        raise ValueError("no systems to summarise")
    count = {k: sum(r.outcome == k for r in results) for k in OUTCOMES}
    bar = sum(r.outcome == "compiled" and r.bar_check for r in results)
    clean = sum(r.outcome == "compiled" and not r.warnings for r in results)
    return {
        "compile_rate": count["compiled"] / n,
        "clean_compile_rate": clean / n,
        "bar_check_warning_rate": bar / n,
        "compiled": count["compiled"],
        "rejected_by_grammar": count["rejected"],
        "lilypond_errors": count["error"],
        "timeouts": count["timeout"],
        "bar_check_warnings": bar,
        "other_warnings": sum(
            r.outcome == "compiled" and any("bar check failed" not in w for w in r.warnings)
            for r in results
        ),
    }
