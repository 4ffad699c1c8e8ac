"""Synthetic French speech: generated sentences spoken by espeak-ng, 16 kHz, some with noise.

Splits own their sentences (distinct after normalisation): test also owns its voices, so it
measures generalisation to unheard voices and unseen sentences; val shares the train voices.
Every clip's voice, rate, pitch and noise are drawn in `plan` from the seed and clips are
spoken in fixed batches, each by a fresh espeak-ng instance, so the dataset is the same, byte
for byte, on every run and for any number of worker processes.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sonfolio.parallel import batched, pool_map, worker_count
from sonfolio.speech.common.audio import (
    SAMPLE_RATE,
    add_noise,
    from_pcm16,
    resample,
    to_pcm16,
    write_wav,
)
from sonfolio.speech.common.normalize import normalize, spell_numbers
from sonfolio.speech.data import augment
from sonfolio.speech.data.clips import Skip, Utterance, audio_path
from sonfolio.speech.data.espeak import Synthesizer, variants, voice_name
from sonfolio.speech.data.sentences import SPOKEN, french_sentences

if TYPE_CHECKING:
    from sonfolio.config.data import SpeechData, SpeechSynthetic

log = logging.getLogger(__name__)

# Clips per batch, one espeak-ng instance each. Fixed, not derived from the worker count: a
# batch's audio depends on what its instance spoke before, so fixed batches make the dataset
# identical for any number of workers. Small enough to balance the load on a few cores.
BATCH_CLIPS = 20


@dataclass(frozen=True)
class SynthJob:
    """One clip to speak and write."""

    audio: str  # relative to the dataset folder
    text: str
    split: str
    variant: str  # espeak-ng voice variant, e.g. m3
    rate_wpm: int
    pitch: int
    snr_db: float | None  # None: clean
    seed: int  # for the noise (and the room)
    augment: augment.ClipAugment | None = None  # train clips only


def check_voices(cfg: SpeechSynthetic) -> None:
    """Fail before any work if a configured variant is not in espeak-ng's data.

    Raises:
        ValueError: naming the key, the unknown variants and the available ones.
    """
    known = set(variants())
    for key in ("train_voices", "test_voices"):
        unknown = sorted(set(getattr(cfg, key)) - known)
        if unknown:
            raise ValueError(
                f"speech_data.synthetic.{key}: espeak-ng has no voice variant {unknown}; "
                f"available: {', '.join(sorted(known))}"
            )


def split_sizes(cfg: SpeechSynthetic) -> dict[str, int]:
    test = round(cfg.utterances * cfg.test_fraction)
    val = round(cfg.utterances * cfg.val_fraction)
    return {"train": cfg.utterances - test - val, "val": val, "test": test}


def plan(cfg: SpeechSynthetic, seed: int) -> list[SynthJob]:
    """Sentences to splits (each its own) and a draw of voice, rate, pitch and noise per clip;
    a share of train's sentences (`spoken_fraction`) then replaced by everyday talk."""
    sentences = iter(french_sentences(cfg.utterances, seed, cfg.digits_fraction))
    rng = random.Random(seed + 1)  # independent of the sentence draws
    # its own stream: augmenting train leaves val's and test's draws (and audio) as they were
    aug_rng = random.Random(seed + 2)
    aug_cfg = cfg.augment if cfg.augment.enabled else None
    jobs: list[SynthJob] = []
    for split, size in split_sizes(cfg).items():
        voices = cfg.test_voices if split == "test" else cfg.train_voices
        for index in range(size):
            noisy = rng.random() < cfg.noise_fraction
            jobs.append(
                SynthJob(
                    audio=audio_path(split, index),
                    text=next(sentences),
                    split=split,
                    variant=rng.choice(voices),
                    rate_wpm=rng.randint(*cfg.rate_wpm),
                    pitch=rng.randint(*cfg.pitch),
                    snr_db=round(rng.uniform(*cfg.snr_db), 2) if noisy else None,
                    seed=rng.getrandbits(32),
                    augment=augment.draw(aug_cfg, aug_rng)
                    if split == "train" and aug_cfg
                    else None,
                )
            )
    return _with_spoken(jobs, cfg, seed)


def _with_spoken(jobs: list[SynthJob], cfg: SpeechSynthetic, seed: int) -> list[SynthJob]:
    """Train jobs' sentences replaced by SPOKEN ones at `spoken_fraction`, drawn from their own
    stream (val's and test's sentences, voices and noise stay as without them) and kept apart
    from val's and test's sentences."""
    train = [i for i, j in enumerate(jobs) if j.split == "train"]
    rng = random.Random(seed + 3)
    chosen = [i for i in train if rng.random() < cfg.spoken_fraction]
    if not chosen:
        return jobs
    held = frozenset(normalize(j.text) for j in jobs if j.split != "train")
    talk = french_sentences(len(chosen), seed + 3, cfg.digits_fraction, SPOKEN, exclude=held)
    out = list(jobs)
    for i, text in zip(chosen, talk, strict=True):
        out[i] = replace(jobs[i], text=text)
    return out


def speak(job: SynthJob, synth: Synthesizer, out: Path, max_duration_s: float) -> float | str:
    """Synthesize, resample to 16 kHz, augment (train), add noise, write; the duration (s) or a
    skip reason."""
    pcm = synth.say(spell_numbers(job.text), job.variant, job.rate_wpm, job.pitch)
    x = resample(from_pcm16(pcm), synth.sample_rate)
    if x.size == 0:
        return "empty_audio"
    rng = np.random.default_rng(job.seed)
    if job.augment is not None:
        x = augment.apply(x, job.augment, rng)
    duration = x.size / SAMPLE_RATE
    if duration > max_duration_s:
        return "too_long"
    if job.snr_db is not None:
        color = job.augment.noise_color if job.augment is not None else "white"
        x = add_noise(x, job.snr_db, rng, color)
    write_wav(out / job.audio, to_pcm16(x))
    return duration


def _speak_batch(jobs: Sequence[SynthJob], out: Path, max_duration_s: float) -> list[float | str]:
    with Synthesizer() as synth:  # fresh espeak-ng state per batch: see sonfolio.speech.data.espeak
        return [speak(j, synth, out, max_duration_s) for j in jobs]


def build(cfg: SpeechData, out: Path) -> tuple[list[Utterance], list[Skip]]:
    """Speak every planned clip into `out`; the manifest rows and the skipped clips."""
    check_voices(cfg.synthetic)
    jobs = plan(cfg.synthetic, cfg.seed)
    workers = worker_count(cfg.workers)
    log.info("synthesizing %d clips with espeak-ng, %d worker(s)", len(jobs), workers)
    speak_all = partial(_speak_batch, out=out, max_duration_s=cfg.max_duration_s)
    outcomes = pool_map(speak_all, batched(jobs, BATCH_CLIPS), workers, "synthesizing speech")
    rows: list[Utterance] = []
    skips: list[Skip] = []
    for job, outcome in zip(jobs, (o for batch in outcomes for o in batch), strict=True):
        if isinstance(outcome, str):
            skips.append(Skip(f"{job.audio} ({job.text!r})", outcome))
        else:
            rows.append(
                Utterance(
                    job.audio,
                    job.text,
                    normalize(job.text),
                    round(outcome, 3),
                    voice_name(job.variant),
                    job.split,
                )
            )
    return rows, skips
