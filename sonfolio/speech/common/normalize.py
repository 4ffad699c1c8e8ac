"""The one text normalisation for French WER and CER: both reference and hypothesis go through
`normalize` before they are compared. docs/speech.md gives the rules with examples.

In order:
1. Unicode NFC (an accent typed as a combining mark becomes the accented letter), and every
   apostrophe-like mark (’ ‘ ʼ ` ´ ′) becomes the ASCII apostrophe.
2. Numbers are written out in French words with num2words, so "3" and "trois" match (the
   direction is digits -> words, because speech says the words): times ("14 h 30" ->
   "quatorze heures trente", hours feminine), ordinals ("1er" -> "premier", "2e" ->
   "deuxième"), "%" -> "pour cent", thousands grouped with spaces ("10 000"), decimal commas
   ("3,5" -> "trois virgule cinq"), leading zeros said ("007" -> "zéro zéro sept").
3. Lower case; the ligatures œ and æ become oe and ae (both spellings are in use).
4. An apostrophe between two letters is kept, so an elision stays one word ("l'homme",
   "aujourd'hui"); any other apostrophe, all punctuation (hyphens included: "peut-être" ->
   "peut être", "quatre-vingt-dix" -> "quatre vingt dix") and symbols become spaces.
5. Whitespace is collapsed. Accents are kept: "a" and "à", "ou" and "où" are different words.

Known limits: a number's gender is unknown outside times ("21 personnes" -> "vingt et un
personnes", whereas "vingt et une personnes" stays as written); Roman numerals, currencies
and units other than % are left as they are; a minus sign is dropped as punctuation.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from num2words import num2words

_APOSTROPHES = str.maketrans(dict.fromkeys("\u2019\u2018\u02bc`\u00b4\u2032\uff07", "'"))
_GROUP_SEP = "[ \u00a0\u202f\u2009]"  # space, no-break space, narrow no-break, thin space

_THOUSANDS = re.compile(rf"(?<![\d,])\d{{1,3}}(?:{_GROUP_SEP}\d{{3}})+(?!\d)")
_TIME = re.compile(r"(?<![\d,])(\d{1,2}) ?h ?(\d{2})?(?!\w)", re.IGNORECASE)
_ORDINAL = re.compile(
    r"(?<![\d,])(\d+)(ers|er|res|re|ères|ère|èmes|ème|emes|eme|es|e)(?!\w)", re.IGNORECASE
)
_PERCENT = re.compile(r"\s*%")
_DECIMAL = re.compile(r"(?<![\d,])(\d+),(\d+)(?![\d,])")
_INTEGER = re.compile(r"\d+")
_SPACES = re.compile(r"\s+")
_LONE_APOSTROPHE = re.compile(r"(?<!\w)'|'(?!\w)")


def unify(text: str) -> str:
    """NFC and one apostrophe: the form the tokenizer and the manifest also agree on."""
    return unicodedata.normalize("NFC", text).translate(_APOSTROPHES)


def cardinal(digits: str) -> str:
    """'21' -> 'vingt et un'; leading zeros are said: '05' -> 'zéro cinq'."""
    stripped = digits.lstrip("0")
    zeros = ["zéro"] * (len(digits) - len(stripped) if stripped else len(digits))
    return " ".join(zeros + ([num2words(int(stripped), lang="fr")] if stripped else []))


def feminine(words: str) -> str:
    """'vingt et un' -> 'vingt et une' (before a feminine noun)."""
    return words[:-2] + "une" if words == "un" or words.endswith((" un", "-un")) else words


def _time(m: re.Match[str]) -> str | None:
    hours, minutes = int(m.group(1)), m.group(2)
    if hours > 24 or (minutes is not None and int(minutes) > 59):
        return None
    said = f"{feminine(cardinal(str(hours)))} {'heure' if hours <= 1 else 'heures'}"
    return f"{said} {feminine(cardinal(str(int(minutes))))}" if minutes and int(minutes) else said


def _ordinal(m: re.Match[str]) -> str:
    n, suffix = int(m.group(1)), m.group(2).lower()
    plural = "s" if suffix.endswith("s") else ""
    if n == 1 and suffix.startswith(("r", "è")):  # 1re, 1ère: première
        return "première" + plural
    return num2words(n, lang="fr", to="ordinal") + plural


def _decimal(m: re.Match[str]) -> str:
    return f"{cardinal(m.group(1))} virgule {cardinal(m.group(2))}"


def _sub(pattern: re.Pattern[str], fn: Callable[[re.Match[str]], str | None], text: str) -> str:
    """Replace matches by words, with a space where the words would touch a letter or digit."""

    def repl(m: re.Match[str]) -> str:
        words = fn(m)
        if words is None:
            return m.group(0)
        before = m.string[m.start() - 1] if m.start() > 0 else " "
        after = m.string[m.end()] if m.end() < len(m.string) else " "
        return (" " if before.isalnum() else "") + words + (" " if after.isalnum() else "")

    return pattern.sub(repl, text)


def spell_numbers(text: str) -> str:
    """Write every number out in French words; case and punctuation are kept (this is also
    what the synthesizer is given to say)."""
    text = _THOUSANDS.sub(lambda m: re.sub(_GROUP_SEP, "", m.group(0)), text)
    text = _sub(_TIME, _time, text)
    text = _sub(_ORDINAL, _ordinal, text)
    text = _PERCENT.sub(" pour cent", text)
    text = _sub(_DECIMAL, _decimal, text)
    return _sub(_INTEGER, lambda m: cardinal(m.group(0)), text)


def normalize(text: str) -> str:
    """The text WER and CER are computed on (rules in the module docstring)."""
    text = spell_numbers(unify(text)).lower().replace("œ", "oe").replace("æ", "ae")
    kept = [ch if ch == "'" or unicodedata.category(ch)[0] not in "PSZC" else " " for ch in text]
    text = _LONE_APOSTROPHE.sub(" ", "".join(kept))
    return _SPACES.sub(" ", text).strip()
