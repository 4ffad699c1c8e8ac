"""The speech track's definition: what is specific to it, for the steps that take a track.

One object, `TRACK`, found by name through sonfolio.tracks.get("speech"). Each step asks it for
what only this track knows; imports are inside the methods so that loading the definition
stays cheap and a step pulls in only what it uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sonfolio.config.data import SpeechData
    from sonfolio.config.tokenizer import SpeechTokenizer
    from sonfolio.tokenizer import BuiltTokenizer


class SpeechTrack:
    """The speech track."""

    name = "speech"

    # --- data ---

    data_file = "audio"  # the manifest column naming each row's file (the step hashes it)
    data_items = "utterances"  # what a manifest row is, in the metrics' `utterances_per_s`

    def build_data(
        self, cfg: SpeechData, download_cache: Path, out: Path
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The speech dataset written into `out`: its manifest rows and its stats.

        French clips (16 kHz mono WAV) spoken by espeak-ng or read from a corpus; rows (audio,
        text, text_norm, duration, speaker, split) as sonfolio.speech.dataset.build makes
        them. `download_cache` is unused: a hub corpus is cached by `datasets` itself.
        """
        from sonfolio.speech.dataset import build

        return build(cfg, out)

    # --- tokenizer ---

    text_columns = ("text", "text_norm")  # as written, and as WER reads it: both round-trip

    def build_tokenizer(
        self, cfg: SpeechTokenizer, train: list[str], rows: list[dict[str, Any]]
    ) -> BuiltTokenizer:
        """Whisper's tokenizer and feature extractor, saved together in one folder.

        A base model's as they are (not exact: a round-trip failure is only logged), or a BPE
        on the `train` transcripts and features built from `cfg`; sonfolio.speech.processor.
        """
        from sonfolio.speech.processor import build_processor

        return build_processor(cfg, train, rows)

    # --- train ---

    def training(self, params):
        """How this track trains (a sonfolio.train.setup.Training): speech_train."""
        from sonfolio.speech.track import SpeechTraining

        return SpeechTraining(params.speech_train)

    # --- qat ---

    def load_trained(self, folder):
        """The model train@speech saved in `folder`, ready to train further."""
        from transformers import WhisperForConditionalGeneration

        return WhisperForConditionalGeneration.from_pretrained(str(folder))

    # --- export ---

    # A saved model of this track as every runtime loads it: the export (sonfolio.export), a
    # variant folder (sonfolio.variants, for eval and inference) and the bench's workers.
    export_task = "automatic-speech-recognition-with-past"  # optimum-onnx's, with past keys/values
    input_name = "input_features"  # (B, mel bins, frames) log-mel features

    def torch_model_class(self) -> type:
        """The transformers class of a saved PyTorch folder (FP32 or QAT-trained)."""
        from transformers import WhisperForConditionalGeneration

        return WhisperForConditionalGeneration

    def ort_model_class(self) -> type:
        """optimum's class that loads an exported variant folder as is."""
        from optimum.onnxruntime import ORTModelForSpeechSeq2Seq

        return ORTModelForSpeechSeq2Seq

    def processor_class(self) -> type:
        """The preprocessor saved beside the model: audio to log-mel features."""
        from transformers import WhisperFeatureExtractor

        return WhisperFeatureExtractor

    def ort_encoder_inputs(self, x: Any) -> dict[str, Any]:
        """Keyword arguments of optimum's encoder run alone on a batch `x` (optimum's Whisper
        encoder takes an attention mask; the window is fixed, so there is none)."""
        return {"input_features": x, "attention_mask": None}

    def check_infer(self, processor: Any, cfg: Any) -> None:
        """Inference settings (params.yaml `infer`) that cannot work with this model.

        Raises:
            ValueError: infer.audio's cuts do not fit the model's window.
        """
        from sonfolio.infer.audio import check_settings, processor_window_s

        check_settings(processor_window_s(processor), cfg.audio)

    # the model card of every variant folder (sonfolio.modelcard)
    pipeline_tag = "automatic-speech-recognition"
    card_title = "Sonfolio French speech recognition (Whisper architecture)"
    card_summary = (
        "A Whisper for French speech (fine-tuned from a pretrained base, by default OpenAI "
        "whisper-base, or trained from scratch), exported to ONNX with its KV cache (merged "
        "decoder)."
    )
    card_data = (
        "French sentences spoken by espeak-ng voices (synthetic), or the hub corpus set in "
        "params.yaml speech_data.hub (docs/speech.md)"
    )

    # --- bench ---

    gate_metric = "wer"  # the quality key the bench's gate reads (lower is better)

    def bench_inputs(self, folder: Path, data: Path, rows: list[dict]) -> tuple[Any, list[str]]:
        """The rows' clips as (N, mel bins, frames) float32 features, the fixed window every
        runtime takes (the feature extractor in `folder`), and their normalised transcripts."""
        import numpy as np

        from sonfolio.speech.audio import SAMPLE_RATE, decode

        features = self.processor_class().from_pretrained(str(folder))
        audio = [decode(data / r["audio"]) for r in rows]
        x = features(audio, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"]
        return np.asarray(x, dtype=np.float32), [r["text_norm"] for r in rows]

    def quality(self, refs: list[str], texts: list[str]) -> dict[str, float]:
        """Decoded texts, normalised as the references were, against them: WER and CER."""
        from sonfolio.evaluation import char_error_rate, word_error_rate
        from sonfolio.speech.normalize import normalize

        hyps = [normalize(t) for t in texts]
        return {
            "wer": round(word_error_rate(refs, hyps), 4),
            "cer": round(char_error_rate(refs, hyps), 4),
        }

    def max_increase(self, gate: Any) -> float:
        """The gate's allowance (speech_bench): WER a variant may lose vs torch FP32."""
        return gate.max_wer_increase

    def quality_tokens(self, model: Path, decode_max_tokens: int) -> int:
        """The greedy quality decode's limit: speech_train.decode_max_tokens, within the new
        tokens the decoder has positions for. CTranslate2 decodes at most half its max_length
        (as OpenAI's Whisper: n_text_ctx // 2), less the prompt: Whisper's own is 4 tokens,
        CT2's prompt for the from-scratch tokenizer 2."""
        import json

        from transformers import AutoTokenizer

        positions = json.loads((model / "config.json").read_text())["max_target_positions"]
        # Whisper's own tokenizer (sonfolio.bench.peer.whisper_tokenizer; not imported here:
        # every speech stage imports this definition)
        vocab = AutoTokenizer.from_pretrained(str(model)).get_vocab()
        prompt = 4 if "<|notimestamps|>" in vocab else 2
        return min(decode_max_tokens, int(positions) // 2 - prompt)

    def bench_peers(self, gate: Any) -> tuple[list[str], dict[str, str]]:
        """Other engines measured beside the variants (sonfolio.bench.peer.peer_cases), and
        those left out with why: CTranslate2's Whisper in int8 (faster-whisper's engine),
        faster-whisper on that same folder, and faster-whisper on the untouched base."""
        keys = {  # peer: (its speech_bench key, measured, what the key says when it is off)
            "ct2_int8": ("ctranslate2", gate.ctranslate2, "false"),
            "faster_whisper_finetuned": (
                "faster_whisper_finetuned",
                gate.faster_whisper_finetuned,
                "false",
            ),
            "faster_whisper_base": ("faster_whisper_base", gate.faster_whisper_base, "null"),
        }
        peers = [name for name, (_, on, _) in keys.items() if on]
        off = {
            name: f"not measured: speech_bench.{key} is {value}"
            for name, (key, on, value) in keys.items()
            if not on
        }
        return peers, off

    def bench_peer_base(self, gate: Any) -> Path | None:
        """The CTranslate2 folder of speech_bench.faster_whisper_base (a folder, or
        package:<name>: the installed model, assembled and sha256-checked)."""
        from sonfolio.speech.bases import BaseModelError, ct2_folder

        if not gate.faster_whisper_base:
            return None
        try:
            return ct2_folder(gate.faster_whisper_base)
        except BaseModelError as err:
            raise ValueError(f"speech_bench.faster_whisper_base: {err}") from err

    # --- eval ---

    # Compared with the reference variant (delta_<key>; a positive wer delta is a loss) and
    # written to quality.csv, with eval_csv_extra, for `dvc plots`.
    eval_delta_keys = ("wer", "cer")
    eval_csv_extra = "clips_per_s"

    def eval_baselines(self, cfg, model, work):
        """Models scored beside the variants: the untouched base (speech_eval.zero_shot_base)
        with the fine-tuned model's window and prompt, as `base_zero_shot` under `work`."""
        from sonfolio.speech.evaluate import zero_shot_base

        if not cfg.zero_shot_base:
            return []
        return [zero_shot_base(cfg.zero_shot_base, model, work / "base_zero_shot")]

    def eval_tool(self, params):
        """None: WER and CER are computed in-process, with no outside tool."""
        return None

    def eval_extra(self, params, paths):
        """None: no figures beyond the variants' own."""
        return None

    def eval_inputs(self, variant, rows, data):
        """(B, mel bins, frames) log-mel features of `rows`' clips under `data`, for `variant`."""
        from sonfolio.speech.evaluate import inputs

        return inputs(variant, rows, data)

    def eval_scorer(self, cfg, data, tool, work):
        """Scores each variant's transcripts (WER and CER after normalisation, per split and
        voice) and writes the worst clips with their audio paths; no tool, no scratch folder."""
        from sonfolio.speech.evaluate import Scorer

        return Scorer(cfg, data)

    # --- report ---

    # The eval's keys per split in the report's quality table (sonfolio.report.quality); the
    # first is the headline, plotted per variant and shown for QAT vs PTQ.
    report_quality = ("wer", "cer", "delta_wer", "delta_cer", "clips_per_s", "real_time_factor")
    report_quality_label = "word error rate (WER, lower is better)"  # the headline's axis label
    # How the report shows a variant's samples (sonfolio.report.samples.VIEWS): the worst clips
    # the eval names in its metrics, with their audio.
    eval_samples = "clips"


TRACK = SpeechTrack()
