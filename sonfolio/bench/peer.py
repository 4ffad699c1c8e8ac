"""The peer engines measured beside a track's variants: CTranslate2's Whisper and faster-whisper.

CTranslate2 is faster-whisper's engine; the speech track asks for them (its `bench_peers`):
- `ct2_int8`: our FP32 model converted to CTranslate2 int8, fed the same features as our rows;
- `faster_whisper_finetuned`: that same converted folder through faster_whisper.WhisperModel,
  fed the clips' raw 16 kHz audio as a user would (its end-to-end time includes its own feature
  extraction; the other rows' `e2e_with_features_ms_*` add ours, so those compare like for like);
- `faster_whisper_base`: the untouched Whisper a CTranslate2 folder holds (the gate's
  `faster_whisper_base`), with its own window: the zero-shot quality of the base.
Both faster-whisper rows need the model's tokenizer to be Whisper's own (their tokens are read
with it); otherwise they are left out with the reason.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from sonfolio.bench.case import Case, Spec

log = logging.getLogger(__name__)

SAMPLE_RATE = 16_000  # Hz: Whisper's only input rate (the speech data stage writes clips at it)
LOOP_WORDS_PER_S = 5.0  # more words than this per second of audio: a looping decode
WHISPER_NAMES = ("<|startoftranscript|>", "<|notimestamps|>")  # what marks Whisper's tokenizer
# how both engines load a CTranslate2 folder, so their rows compare: int8 weights, on the CPU
CT2_LOAD = {"device": "cpu", "compute_type": "int8"}


def whisper_tokenizer(model_dir: Path) -> bool:
    """Whether the model's tokenizer is Whisper's own (it names Whisper's special tokens)."""
    from transformers import AutoTokenizer

    vocab = AutoTokenizer.from_pretrained(str(model_dir)).get_vocab()
    return all(name in vocab for name in WHISPER_NAMES)


def decoder_prompt(model_dir: Path, bos_id: int) -> list[int]:
    """The prompt every runtime decodes after: Whisper's 4 tokens for Whisper's tokenizer, else
    the from-scratch tokenizer's start token."""
    from sonfolio import prompt

    return prompt.read(model_dir).ids if whisper_tokenizer(model_dir) else [bos_id]


def convert_ct2(model_dir: Path, out: Path) -> list[int]:
    """The HF Whisper as CTranslate2 int8; returns the decoder prompt to give it.

    With Whisper's own tokenizer the vocabulary is kept as it is, tokenizer.json and
    preprocessor_config.json are copied beside model.bin (faster-whisper reads its window,
    `chunk_length`, from the latter), and the prompt is the model's own 4 tokens.

    The from-scratch BPE tokenizer (a params preset) needs a hack: CTranslate2 finds Whisper's
    start, end and no-timestamps tokens by their OpenAI names (<|startoftranscript|>,
    <|endoftext|>, <|notimestamps|>); unless <|notimestamps|> ends the prompt it applies
    timestamp rules that forbid every text token at the first step. That tokenizer names them
    <s> and </s> and has no no-timestamps token, so the converted vocabulary renames the start
    and end ids and names the last id (a rare BPE merge) <|notimestamps|>: the prompt is
    [start, last id], one token longer than HF's [start]. Checked: with that same prompt, CT2
    float32 and HF generate give identical tokens.
    """
    from ctranslate2.converters import TransformersConverter
    from transformers import AutoTokenizer

    if whisper_tokenizer(model_dir):
        files = ["tokenizer.json", "preprocessor_config.json"]
        TransformersConverter(str(model_dir), copy_files=files).convert(
            str(out), quantization="int8", force=True
        )
        from sonfolio import prompt

        return prompt.read(model_dir).ids
    TransformersConverter(str(model_dir)).convert(str(out), quantization="int8", force=True)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    vocab_path = out / "vocabulary.json"
    vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
    vocab[tok.bos_token_id] = "<|startoftranscript|>"
    vocab[tok.eos_token_id] = "<|endoftext|>"
    vocab[-1] = "<|notimestamps|>"
    vocab_path.write_text(json.dumps(vocab), encoding="utf-8")
    return [tok.bos_token_id, len(vocab) - 1]


# the engines a track's bench face may ask for (its bench_peers)
PEERS = ("ct2_int8", "faster_whisper_finetuned", "faster_whisper_base")


def peer_cases(
    names: list[str], model_dir: Path, workdir: Path, base: Path | None
) -> tuple[list[Case], list[int] | None, dict[str, str]]:
    """The peer engines `names` (of PEERS), made from the FP32 model under `workdir`; the decoder
    prompt of the conversion (None without one: every runtime then gets that prompt, so outputs
    compare); and the peers left out, with why. `base`: faster_whisper_base's CTranslate2 folder.

    Raises:
        ValueError: a name is not one of PEERS.
    """
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise ValueError(f"bench peers {unknown} (a track's bench_peers): known peers are {PEERS}")
    fw = [n for n in names if n.startswith("faster_whisper")]
    absent: dict[str, str] = {}
    if fw and not whisper_tokenizer(model_dir):
        why = "not measured: the model's tokenizer is not Whisper's (faster-whisper reads its "
        absent = {n: why + "tokens with Whisper's vocabulary and prompt)" for n in fw}
        names = [n for n in names if n not in fw]
    if "faster_whisper_base" in names and not (base and (base / "model.bin").is_file()):
        absent["faster_whisper_base"] = f"not measured: no CTranslate2 model.bin in {base}"
        names = [n for n in names if n != "faster_whisper_base"]
    cases, prompt, folder = [], None, workdir / "ct2"
    if {"ct2_int8", "faster_whisper_finetuned"} & set(names):
        prompt = convert_ct2(model_dir, folder)
    for name in names:
        runtime = "ct2" if name == "ct2_int8" else "faster_whisper"
        where = base if name == "faster_whisper_base" else folder
        cases.append(Case(name, runtime, str(where)))
    return cases, prompt, absent


def clip_audio(data: Path, rows: list[dict]) -> list[np.ndarray]:
    """The rows' clips (16 kHz wav files the speech data stage wrote) as float32 mono.

    Raises:
        ValueError: a clip is not at 16 kHz (rerun the speech data stage).
    """
    import soundfile

    clips = []
    for r in rows:
        x, rate = soundfile.read(data / r["audio"], dtype="float32", always_2d=True)
        if rate != SAMPLE_RATE:
            raise ValueError(f"{data / r['audio']}: {rate} Hz, not {SAMPLE_RATE}: rerun data")
        clips.append(x.mean(axis=1))
    return clips


def count_loops(texts: list[str], seconds: list[float]) -> int:
    """Outputs far longer than their audio allows (more than LOOP_WORDS_PER_S words a second):
    a greedy decode repeating itself up to the token cap."""
    return sum(len(t.split()) > LOOP_WORDS_PER_S * s for t, s in zip(texts, seconds, strict=True))


class Ct2Runtime:
    """CTranslate2's Whisper (faster-whisper's engine); prompt from convert_ct2."""

    def __init__(self, spec: Spec) -> None:
        import ctranslate2

        self.ct2 = ctranslate2
        self.model = ctranslate2.models.Whisper(
            spec.case.folder, intra_threads=spec.threads, inter_threads=1, **CT2_LOAD
        )
        self.prompt = spec.prompt
        self.eos = spec.eos_id
        # a real Whisper: the model's suppressed tokens (-1: config.json's suppress_ids) and
        # blank / end at the first step, as faster-whisper and HF generate do
        self.model_suppress = spec.model_suppress

    def encode(self, x: np.ndarray) -> None:
        self.model.encode(self.ct2.StorageView.from_array(np.ascontiguousarray(x)))

    def generate(self, x: np.ndarray, new: int, forced: bool) -> list[list[int]]:
        # CT2 decodes min(max_length // 2, max_length - prompt) new tokens at most.
        suppress = ([-1] if self.model_suppress else []) + ([self.eos] if forced else [])
        out = self.model.generate(
            self.ct2.StorageView.from_array(np.ascontiguousarray(x)),
            [self.prompt] * len(x),
            max_length=2 * new,
            beam_size=1,
            suppress_blank=self.model_suppress,
            suppress_tokens=suppress,
        )
        return [r.sequences_ids[0] for r in out]


class FasterWhisperRuntime:
    """faster_whisper.WhisperModel on a CTranslate2 folder, fed raw 16 kHz audio (`takes_audio`):
    greedy, one temperature (no fallback), no VAD, no timestamps, no previous-text prompt."""

    takes_audio = True
    PROMPT = 4  # faster-whisper's prompt: <|startoftranscript|><|fr|><|transcribe|><|notimestamps|>

    def __init__(self, spec: Spec) -> None:
        from faster_whisper import WhisperModel

        self.model = WhisperModel(
            spec.case.folder, cpu_threads=spec.threads, num_workers=1, **CT2_LOAD
        )
        self.eos = spec.eos_id
        self.frames = self.model.feature_extractor.nb_max_frames  # its window: 3000 at 30 s
        self.notes = {
            "window_frames": self.frames,
            "pad_or_trim_patched": _pad_to_window(self.frames),
            "max_new_tokens_passed": "2 * new - 4 (faster-whisper's prompt: 4 tokens)",
        }

    def features(self, x: list[np.ndarray]) -> np.ndarray:
        """(1, mel bins, window frames): its own features of one clip, as transcribe pads them."""
        from faster_whisper.audio import pad_or_trim

        return pad_or_trim(self.model.feature_extractor(x[0]), self.frames)[None]

    def encode(self, features: np.ndarray) -> None:
        self.model.encode(features)

    def generate(self, x: list[np.ndarray], new: int, forced: bool) -> list[list[int]]:
        # faster-whisper hands CT2 max_length = prompt + max_new_tokens, and CT2 then decodes
        # min(max_length // 2, max_length - prompt) tokens: 2 * new - prompt gives `new`
        kw: dict[str, Any] = {"suppress_tokens": [-1, self.eos]} if forced else {}
        outputs = []
        for audio in x:  # transcribe takes one clip: a batch runs clip after clip
            segments, _ = self.model.transcribe(
                audio,
                language="fr",
                task="transcribe",
                beam_size=1,
                best_of=1,
                temperature=0.0,
                without_timestamps=True,
                vad_filter=False,
                condition_on_previous_text=False,
                no_speech_threshold=None,  # keep every decode (greedy like the other rows)
                max_new_tokens=2 * new - self.PROMPT,
                **kw,
            )
            outputs.append([t for s in segments for t in s.tokens])
        return outputs


def _pad_to_window(frames: int) -> bool:
    """faster-whisper 1.2.1 pads every segment's features to 3000 frames (audio.pad_or_trim's
    default) whatever its feature extractor's chunk_length: a model with a shorter window (ours:
    8 s, 800 frames) then fails on the encoder's shape. Pad to the model's window instead
    (in this worker process only); returns whether it patched. Logged once."""
    import functools

    from faster_whisper import audio, transcribe

    if frames == 3000:
        return False
    log.warning(
        "faster-whisper pads features to 3000 frames; this model's window is %d: patched "
        "faster_whisper.transcribe.pad_or_trim to pad to %d in this worker",
        frames,
        frames,
    )
    transcribe.pad_or_trim = functools.partial(audio.pad_or_trim, length=frames)
    return True
