"""The grammar's one parser, as its two readers run it: is validating a whole text and decoding
piece by piece still as fast as when each had a parser of its own?

    python -m benchmarks.parsers [--systems 2000] [--runs 3]

`canonical.validate` (`canonical.Reader`: the parser over a whole text's tokens, naming the
first refusal) and the decoders' `State` (`State.start(time).feed(text).complete`, the same
parser fed piece by piece, foreseeing dead ends) on the same synthetic systems (continuations
included) and a few refused texts. Reports CPU microseconds per system for each (the best of
`--runs`), whether they agree on every text, the cost of a refusal with and without its
message (`is_canonical` against `validate` on mutated systems: the message is written only
when asked), and what each says of a refused text. Beside them `BEFORE`: the same measure
when the grammar had two parsers (canonical.Parser and State). Writes
benchmarks/results/parsers.json and prints a table.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path

from rich.table import Table

from benchmarks import console
from sonfolio.cpu import load_average, run_conditions
from sonfolio.io import write_json
from sonfolio.score.common import canonical as cn
from sonfolio.score.data.synth import synth_systems
from sonfolio.score.decode.state import State

RESULTS = Path("benchmarks/results/parsers.json")
REFUSED = [  # one text per kind of fault: what each reader tells the user of it
    ("\\clef treble \\key c \\major \\time 3/4 c'4 d'4 | e'2.", None),
    ("\\clef treble \\key h \\major c'1", None),
    ("\\clef treble \\key c \\major \\time 4/4 c'4 ~ d'4 e'2", None),
    ("\\clef treble \\key c \\major c'4 d'4 e'4 f'4 | g'1 (", None),
]
# This script at commit 29c0324 (wall clock, load 0.7: about the CPU time), on the machine of
# the figures in results/parsers.json (2-CPU AMD EPYC, AVX2): canonical.Parser, a second
# parser of its own, and State.
BEFORE = {
    "commit": "29c0324",
    "validate_us_per_system": 313.9,
    "incremental_us_per_system": 173.7,
}


def incremental(text: str, in_force: str | None) -> bool:
    state = State.start(in_force).feed(text)
    return state is not None and state.complete


def per_system_us(check: Callable[[str, str | None], object], texts: list, runs: int) -> float:
    """CPU µs per text (this process's CPU time, not the wall clock: the readers are one
    Python thread, and a shared machine's load stretches the wall clock, not the work)."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        for text, in_force in texts:
            check(text, in_force)
        best = min(best, time.process_time() - start)
    return best / len(texts) * 1e6


def message(text: str, in_force: str | None) -> str:
    try:
        cn.validate(text, in_force)
    except cn.CanonicalError as err:
        return str(err)
    return "(valid)"


def mutated(texts: list, seed: int = 0) -> list:
    """Each text with one token dropped, repeated or swapped: refused texts, mostly."""
    rng, out = random.Random(seed), []
    for text, in_force in texts:
        toks = text.split(" ")
        i, j = rng.randrange(len(toks)), rng.randrange(len(toks))
        toks[i], toks[j] = toks[j], toks[i]
        if rng.random() < 0.5:
            del toks[rng.randrange(len(toks))]
        out.append((" ".join(toks), in_force))
    return [(t, m) for t, m in out if not cn.is_canonical(t, m)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--systems", type=int, default=2000, help="synthetic systems")
    parser.add_argument("--runs", type=int, default=3, help="timed passes (best)")
    args = parser.parse_args()
    load = load_average()
    texts = [(s.text, s.time) for s in synth_systems(args.systems, 7, 4)] + REFUSED
    agree = sum(cn.is_canonical(t, m) == incremental(t, m) for t, m in texts)
    whole_us = per_system_us(cn.is_canonical, texts, args.runs)
    inc_us = per_system_us(incremental, texts, args.runs)
    refused = mutated(texts)
    refused_bool_us = per_system_us(cn.is_canonical, refused, args.runs)
    refused_msg_us = per_system_us(message, refused, args.runs)
    result = {
        "systems": len(texts),
        "agree": agree,
        "validate_us_per_system": round(whole_us, 1),
        "incremental_us_per_system": round(inc_us, 1),
        "incremental_over_validate": round(inc_us / whole_us, 3),
        "refused_systems": len(refused),
        "refused_is_canonical_us": round(refused_bool_us, 1),
        "refused_validate_with_message_us": round(refused_msg_us, 1),
        "before": {
            **BEFORE,
            "validate_now_over_before": round(whole_us / BEFORE["validate_us_per_system"], 3),
            "incremental_now_over_before": round(inc_us / BEFORE["incremental_us_per_system"], 3),
        },
        "refused": [
            {"text": t, "validate_says": message(t, m), "incremental_says": "cannot validate"}
            for t, m in REFUSED
        ],
        "conditions": run_conditions(load),
    }
    write_json(RESULTS, result)
    print_table(result, message(*REFUSED[0]))
    print(f"written: {RESULTS}")


def print_table(r: dict, says: str) -> None:
    table = Table(title=f"the grammar's one parser, two readers, on {r['systems']} systems")
    for col in ("reader", "µs / system", f"before ({BEFORE['commit']})", "agree", "says"):
        table.add_column(col)
    table.add_row(
        "canonical.validate",
        f"{r['validate_us_per_system']:.0f}",
        f"{BEFORE['validate_us_per_system']:.0f} (canonical.Parser)",
        f"{r['agree']}/{r['systems']}",
        says,
    )
    table.add_row(
        "State (piece by piece)",
        f"{r['incremental_us_per_system']:.0f}",
        f"{BEFORE['incremental_us_per_system']:.0f}",
        "",
        "cannot validate",
    )
    console(130).print(table)
    print(
        f"a refused text ({r['refused_systems']} mutated systems): is_canonical "
        f"{r['refused_is_canonical_us']:.0f} µs, validate with its message "
        f"{r['refused_validate_with_message_us']:.0f} µs"
    )


if __name__ == "__main__":
    main()
