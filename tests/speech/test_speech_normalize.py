"""The WER/CER normalisation: what must match does, what must differ stays different."""

from __future__ import annotations

import pytest

from sonfolio.speech.common.normalize import normalize, spell_numbers


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # apostrophes: typographic and ASCII, an elision stays one word
        ("L’hôpital d’Arras", "l'hôpital d'Arras"),
        ("Qu‘il vienne", "qu'il vienne"),
        # case, punctuation, guillemets, whitespace (no-break spaces included)
        ("  Bonjour,   le MONDE !  ", "bonjour le monde"),
        ("« Oui », dit-il\u00a0; puis\u202f: non.", "oui dit il puis non"),
        # hyphens are word breaks on both sides
        ("Peut-être à Saint-Étienne", "peut être à saint étienne"),
        # numbers: digits and words match
        ("Il a 3 ans.", "il a trois ans"),
        ("90 euros", "quatre-vingt-dix euros"),
        ("En 1998", "en mille neuf cent quatre-vingt-dix-huit"),
        ("21 jours", "vingt et un jours"),
        ("10 000 habitants", "dix mille habitants"),
        ("10\u202f000 habitants", "dix mille habitants"),
        ("3,5 km", "trois virgule cinq km"),
        ("25 %", "vingt-cinq pour cent"),
        # dates, ordinals and times as said
        ("le 1er mai", "le premier mai"),
        ("la 1re fois, le 2e étage", "la première fois le deuxième étage"),
        ("le XIXe siècle", "le xixe siècle"),
        ("à 14h30", "à quatorze heures trente"),
        ("à 21 h 05", "à vingt et une heures cinq"),
        ("à 1 h", "à une heure"),
        # ligatures and composed accents
        ("Œuvre", "oeuvre"),
        ("e\u0301te\u0301", "été"),
    ],
)
def test_equivalent_forms_normalise_alike(a: str, b: str) -> None:
    assert normalize(a) == normalize(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("il a", "il à"),  # accents carry meaning
        ("ou", "où"),
        ("l'homme", "l homme"),  # the elision is part of the word
        ("vingt et un", "vingt et une"),  # gender is not guessed
    ],
)
def test_meaningful_differences_are_kept(a: str, b: str) -> None:
    assert normalize(a) != normalize(b)


def test_exact_output_of_a_full_sentence() -> None:
    text = "L’hôpital ouvrira le 12 mars 2024, à 14 h 30 : c'est « officiel » !"
    assert normalize(text) == (
        "l'hôpital ouvrira le douze mars deux mille vingt quatre à quatorze heures trente "
        "c'est officiel"
    )


def test_is_idempotent() -> None:
    text = "« Aujourd’hui », 3 élèves—dont Zoé—ont lu 2,5 pages à 9h."
    once = normalize(text)
    assert normalize(once) == once
    assert "'" in once and not any(ch.isdigit() for ch in once)


def test_lone_quotes_go_but_elisions_stay() -> None:
    assert normalize("'bonjour' jusqu'à aujourd'hui") == "bonjour jusqu'à aujourd'hui"


def test_spell_numbers_keeps_case_and_punctuation_for_synthesis() -> None:
    assert (
        spell_numbers("Le 3e, à 7h, A380.")
        == "Le troisième, à sept heures, A trois cent quatre-vingts."
    )
    assert spell_numbers("007") == "zéro zéro sept"
