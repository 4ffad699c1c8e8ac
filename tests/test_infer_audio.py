"""Long audio is cut into chunks that fit the model's window (sonfolio.speech.decode.chunks)."""

from __future__ import annotations

import numpy as np
import pytest

from sonfolio.config.infer import AudioChunks
from sonfolio.speech.decode.chunks import join_texts, plan_chunks, trim_repeats

SR = 16_000
CFG = AudioChunks(search_s=0.6, silence_db=-35.0, overlap_s=0.25, max_repeats=3, pause_s=0.0)


def voice(seconds: float, seed: int = 0) -> np.ndarray:
    """Loud noise with a syllable-like envelope (4 Hz): never silent."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    return (0.3 * rng.standard_normal(t.size) * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t))).astype(
        np.float32
    )


def with_pauses(seconds: float, pauses: list[tuple[float, float]]) -> np.ndarray:
    x = voice(seconds)
    for a, b in pauses:
        x[int(a * SR) : int(b * SR)] = 0.0
    return x


def test_audio_within_the_window_is_one_chunk():
    chunks = plan_chunks(voice(1.9), SR, 2.0, CFG)
    assert [(c.start, c.end, c.overlaps) for c in chunks] == [(0, int(1.9 * SR), False)]


def test_two_and_a_half_windows_are_cut_at_the_pauses_into_three_chunks():
    x = with_pauses(5.0, [(1.6, 1.8), (3.3, 3.5)])  # a pause before each 2 s limit
    chunks = plan_chunks(x, SR, 2.0, CFG)
    assert len(chunks) == 3
    assert [c.overlaps for c in chunks] == [False, False, False]
    assert chunks[0].start == 0 and chunks[-1].end == x.size
    assert 1.6 * SR <= chunks[0].end <= 1.8 * SR  # inside the first pause
    assert 3.3 * SR <= chunks[1].end <= 3.5 * SR
    assert all(b.start == a.end for a, b in zip(chunks, chunks[1:], strict=False))


def test_a_long_pause_ends_a_chunk_so_each_utterance_is_read_alone():
    """Three utterances of 1.5 s with 0.7 s pauses (5.9 s, a 4 s window): with pause_s 0.5
    each is its own chunk, cut inside the pauses; without, the first window packs two."""
    x = with_pauses(5.9, [(1.5, 2.2), (3.7, 4.4)])
    by_pause = plan_chunks(x, SR, 4.0, CFG.model_copy(update={"pause_s": 0.5}))
    assert len(by_pause) == 3 and not any(c.overlaps for c in by_pause)
    assert 1.5 * SR <= by_pause[0].end <= 2.2 * SR and 3.7 * SR <= by_pause[1].end <= 4.4 * SR
    assert by_pause[0].start == 0 and by_pause[-1].end == x.size
    assert all(b.start == a.end for a, b in zip(by_pause, by_pause[1:], strict=False))
    packed = plan_chunks(x, SR, 4.0, CFG)
    assert len(packed) == 2 and packed[0].end > 2.2 * SR  # the first two utterances together
    # a pause shorter than pause_s leaves the window packed
    assert len(plan_chunks(x, SR, 4.0, CFG.model_copy(update={"pause_s": 0.8}))) == 2


def test_audio_within_the_window_stays_one_chunk_whatever_its_pauses():
    x = with_pauses(3.5, [(1.5, 2.2)])
    assert len(plan_chunks(x, SR, 4.0, CFG.model_copy(update={"pause_s": 0.5}))) == 1


def test_without_a_pause_chunks_overlap_and_still_fit_the_window():
    x = voice(5.0, seed=1)
    chunks = plan_chunks(x, SR, 2.0, CFG)
    assert chunks[0].start == 0 and chunks[-1].end == x.size
    assert all(c.end - c.start <= 2.0 * SR for c in chunks)
    assert all(c.end - c.start >= (2.0 - CFG.search_s) * SR for c in chunks[:-1])
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.overlaps and a.end - b.start == int(CFG.overlap_s * SR)


def test_settings_that_cannot_progress_are_refused_by_name():
    cfg = CFG.model_copy(update={"search_s": 1.5, "overlap_s": 0.6})
    with pytest.raises(ValueError, match=r"infer\.speech\.audio\.search_s \+ overlap_s"):
        plan_chunks(voice(5.0), SR, 2.0, cfg)


def test_words_heard_twice_in_an_overlap_are_kept_once():
    texts = ["Il fait beau à", "à Paris, ce matin", "Ce matin."]
    assert join_texts(texts, [False, True, False]) == "Il fait beau à Paris, ce matin Ce matin."
    assert join_texts(["le chat dort", "Dort bien."], [False, True]) == "le chat dort bien."
    assert join_texts(["un", "deux"], [False, True]) == "un deux"


@pytest.mark.parametrize(
    ("text", "want"),
    [  # a loop on the word a cut left unfinished, kept once
        ("le huit septembre mille neuf cent cent cent cent cent cent cent. Le neuf",
         "le huit septembre mille neuf cent Le neuf"),
        ("a b a b a b a b a b c", "a b c"),  # a group of two words
        ("Oui, oui, oui, oui. Non", "Oui, Non"),  # case and punctuation ignored
        ("cent cent cent", "cent cent cent"),  # max_repeats times: said, not a loop
        ("il a dit non non non, puis il est parti", "il a dit non non non, puis il est parti"),
        ("Il pleut.Elle part à Lyon.", "Il pleut. Elle part à Lyon."),  # glued: parted
        ("Une maison pour Paul et Anne." * 3 + " Fin", "Une maison pour Paul et Anne. Fin"),
        ("il dit: trop, trop, trop, trop", "il dit: trop,"),
    ],
)  # fmt: skip
def test_a_decoding_loop_is_kept_once_and_a_short_repeat_stays(text, want):
    assert trim_repeats(text, 3) == want
    assert trim_repeats(text, 0) == text  # off


def test_a_pause_anywhere_in_the_last_half_of_the_window_is_where_the_chunk_ends(params):
    """The default search span (infer.speech.audio.search_s, half the 8-s window) finds the pause
    after a sentence of 4.5 s: the chunk ends there, not in the next sentence's words (a span
    of 2 s, the old default, cut the next sentence)."""
    sentence = np.sin(np.arange(int(4.5 * SR)) * 0.05).astype(np.float32) * 0.5
    pause = np.zeros(int(0.7 * SR), np.float32)
    audio = np.concatenate([sentence, pause, sentence, pause, sentence])
    no_pause_rule = params.infer.speech.audio.model_copy(update={"pause_s": 0.0})
    # the pause rule finds it first, or search
    for cfg in (params.infer.speech.audio, no_pause_rule):
        chunks = plan_chunks(audio, SR, 8.0, cfg)
        assert 4.5 * SR <= chunks[0].end <= 5.2 * SR and not chunks[1].overlaps, chunks
    old = no_pause_rule.model_copy(update={"search_s": 2.0})
    assert plan_chunks(audio, SR, 8.0, old)[1].overlaps  # cut inside a sentence
