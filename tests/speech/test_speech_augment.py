"""Train clips made more like what people say and record: everyday talk among the templates'
sentences, rooms, phone lines, speeds and coloured noise; val and test left as they were, and
bad augmentation settings refused up front."""

from __future__ import annotations

import random

import numpy as np
import pytest
from pydantic import ValidationError

from sonfolio.config.data import SpeechAugment
from sonfolio.speech.common.audio import SAMPLE_RATE, add_noise, colored_noise
from sonfolio.speech.common.normalize import normalize
from sonfolio.speech.data import augment
from sonfolio.speech.data.espeak import Synthesizer
from sonfolio.speech.data.sentences import SPOKEN
from sonfolio.speech.data.synthetic import plan, speak


def _synthetic(params, utterances: int):
    """The real speech_data.synthetic section with both train-only additions on (the defaults
    leave them off: docs/training.md), augmenting at 0.4 rooms and 0.3 lines, talk at 0.5."""
    cfg = params.speech_data.synthetic
    aug = cfg.augment.model_copy(
        update={"enabled": True, "reverb_fraction": 0.4, "band_fraction": 0.3}
    )
    return cfg.model_copy(update={"utterances": utterances, "augment": aug, "spoken_fraction": 0.5})


def _tone(hz: float, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _power_at(x: np.ndarray, hz: float) -> float:
    spec = np.abs(np.fft.rfft(x)) ** 2
    f = np.fft.rfftfreq(x.size, 1.0 / SAMPLE_RATE)
    return float(spec[np.argmin(np.abs(f - hz))])


def test_augmenting_train_leaves_val_and_test_as_they_were(params) -> None:
    cfg = _synthetic(params, 60)
    off = cfg.model_copy(update={"augment": cfg.augment.model_copy(update={"enabled": False})})
    on_jobs, off_jobs = plan(cfg, 0), plan(off, 0)
    held = [j for j in on_jobs if j.split != "train"]
    assert held and held == [j for j in off_jobs if j.split != "train"]
    assert all(j.augment is None for j in held)
    train = [j for j in on_jobs if j.split == "train"]
    assert all(j.augment is not None for j in train)
    assert all(j.augment is None for j in off_jobs)
    # with the fractions at 0.4 and 0.3, some clips get a room or a line and some do not
    rooms = {j.augment.rt60_s is not None for j in train}
    lines = {j.augment.band_hz is not None for j in train}
    assert rooms == {True, False} and lines == {True, False}
    # apart from the augmentation, train clips are planned as without it
    strip = lambda jobs: [j.__class__(**{**j.__dict__, "augment": None}) for j in jobs]  # noqa: E731
    assert strip(train) == [j for j in off_jobs if j.split == "train"]


def test_everyday_talk_replaces_a_share_of_train_sentences_only(params) -> None:
    cfg = _synthetic(params, 400)
    none = cfg.model_copy(update={"spoken_fraction": 0.0})
    talk, plain = plan(cfg, 0), plan(none, 0)
    assert [j for j in talk if j.split != "train"] == [j for j in plain if j.split != "train"]
    changed = [a for a, b in zip(talk, plain, strict=True) if a.text != b.text]
    assert all(j.split == "train" for j in changed)
    train = sum(j.split == "train" for j in talk)
    assert 0.35 * train < len(changed) < 0.65 * train  # spoken_fraction 0.5
    # they come from SPOKEN (a template's fixed words in each), not from the other splits
    cores = [t.split("{")[0].rstrip(" ,?!.") for t in SPOKEN if not t.startswith("{")]
    assert sum(any(c.lower() in j.text.lower() for c in cores if c) for j in changed) > (
        0.8 * len(changed)
    )
    held = {normalize(j.text) for j in talk if j.split != "train"}
    train_texts = [normalize(j.text) for j in talk if j.split == "train"]
    assert not held & set(train_texts)
    assert len(set(train_texts)) == len(train_texts)
    # everyday talk holds fewer numbers than the templates
    digits = lambda jobs: sum(any(c.isdigit() for c in j.text) for j in jobs)  # noqa: E731
    assert digits(changed) < 0.1 * len(changed)


def test_a_fraction_change_does_not_reshuffle_the_other_draws(params) -> None:
    cfg = _synthetic(params, 40).augment
    more = cfg.model_copy(update={"reverb_fraction": 1.0})
    a = [augment.draw(cfg, random.Random(5)) for _ in range(20)]
    b = [augment.draw(more, random.Random(5)) for _ in range(20)]
    assert [(x.speed, x.band_hz, x.noise_color) for x in a] == [
        (x.speed, x.band_hz, x.noise_color) for x in b
    ]
    assert all(x.rt60_s is not None for x in b)


def test_speed_changes_the_length_by_its_factor() -> None:
    x = _tone(440.0, 2.0)
    assert augment.change_speed(x, 1.1).size == pytest.approx(x.size / 1.1, rel=0.01)
    assert augment.change_speed(x, 0.9).size == pytest.approx(x.size / 0.9, rel=0.01)
    faster = augment.change_speed(x, 1.1)
    assert _power_at(faster, 484.0) > 10 * _power_at(faster, 440.0)  # pitch up with tempo


def test_a_room_adds_a_decaying_tail_and_keeps_the_loudness() -> None:
    x = np.zeros(SAMPLE_RATE, np.float32)
    x[: SAMPLE_RATE // 2] = _tone(300.0, 0.5)
    y = augment.reverberate(x, 0.6, np.random.default_rng(0))
    assert y.size == x.size + int(augment.REVERB_TAIL_S * SAMPLE_RATE)
    rms = lambda v: float(np.sqrt(np.mean(np.square(v[: x.size]))))  # noqa: E731
    assert rms(y) == pytest.approx(rms(x), rel=0.25)
    after = y[SAMPLE_RATE // 2 : SAMPLE_RATE // 2 + 1600]  # 0.1 s after the sound stopped
    later = y[SAMPLE_RATE // 2 + 6400 : SAMPLE_RATE // 2 + 8000]  # 0.4 s after
    assert np.sqrt(np.mean(after**2)) > 0.01  # the room still rings
    assert np.sqrt(np.mean(after**2)) > 3 * np.sqrt(np.mean(later**2))  # and dies away
    assert np.max(np.abs(y)) <= 0.99


def test_a_phone_line_cuts_what_lies_outside_its_band() -> None:
    x = _tone(100.0) + _tone(1000.0) + _tone(6000.0)
    y = augment.band_limit(x, (300, 3400))
    for hz in (100.0, 6000.0):
        assert _power_at(y, hz) < 0.01 * _power_at(y, 1000.0)
    wide = augment.band_limit(x, (100, 7000))
    assert _power_at(wide, 6000.0) > 0.3 * _power_at(wide, 1000.0)


@pytest.mark.parametrize("color", ["pink", "brown"])
def test_coloured_noise_falls_with_frequency(color: str) -> None:
    noise = colored_noise(SAMPLE_RATE * 2, color, np.random.default_rng(1))
    spec = np.abs(np.fft.rfft(noise)) ** 2
    f = np.fft.rfftfreq(noise.size, 1.0 / SAMPLE_RATE)
    low, high = spec[(f > 100) & (f < 500)].mean(), spec[(f > 4000) & (f < 6000)].mean()
    assert low > 8 * high
    assert np.sqrt(np.mean(noise**2)) == pytest.approx(1.0, rel=1e-6)
    signal = _tone(440.0)
    noisy = add_noise(signal, 10.0, np.random.default_rng(1), color)
    snr = 10 * np.log10(np.mean(signal**2) / np.mean((noisy - signal) ** 2))
    assert snr == pytest.approx(10.0, abs=0.01)


def test_an_augmented_train_clip_is_written_changed_and_as_long_as_its_speed(
    params, tmp_path
) -> None:
    cfg = params.speech_data.synthetic.model_copy(update={"utterances": 40})
    job = next(j for j in plan(cfg, 0) if j.split == "train")
    every = augment.ClipAugment(speed=1.1, rt60_s=0.5, band_hz=(300, 3400), noise_color="pink")
    plain = job.__class__(**{**job.__dict__, "augment": None, "audio": "plain.wav"})
    done = job.__class__(**{**job.__dict__, "augment": every, "audio": "aug.wav"})
    with Synthesizer() as synth:
        d_plain = speak(plain, synth, tmp_path, 8.0)
    with Synthesizer() as synth:
        d_aug = speak(done, synth, tmp_path, 8.0)
    assert isinstance(d_plain, float) and isinstance(d_aug, float)
    assert d_aug == pytest.approx(d_plain / 1.1 + augment.REVERB_TAIL_S, abs=0.02)
    assert (tmp_path / "aug.wav").read_bytes() != (tmp_path / "plain.wav").read_bytes()


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"bands_hz": [[3400, 300]]}, "low < high < 8000"),
        ({"bands_hz": [[300, 9000]]}, "low < high < 8000"),
        ({"speed": [1.1, 0.9]}, "augment.speed = [1.1, 0.9]: write [minimum, maximum]"),
        ({"noise_colors": ["violet"]}, "noise_colors"),
        ({"rt60_s": [0.0, 0.5]}, "rt60_s"),
    ],
)
def test_bad_augmentation_settings_name_the_key(params, update, message: str) -> None:
    raw = params.speech_data.synthetic.augment.model_dump() | update
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        SpeechAugment.model_validate(raw)
