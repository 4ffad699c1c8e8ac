"""The speech track's definition: what is specific to it, for the steps that take a track.

One object, `TRACK`, found by name through sonfolio.tracks.get("speech"). Each step asks it for
what only this track knows; imports are inside the methods so that loading the definition
stays cheap and a step pulls in only what it uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class SpeechTrack:
    """The speech track."""

    name = "speech"

    # --- data ---

    # --- tokenizer ---

    # --- train ---

    # --- qat ---

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
        "A small Whisper trained from scratch on French speech, exported to ONNX with its "
        "KV cache (merged decoder)."
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
        tokens the decoder has positions for (the start token takes one, CT2's prompt two)."""
        import json

        positions = json.loads((model / "config.json").read_text())["max_target_positions"]
        return min(decode_max_tokens, int(positions) // 2 - 2)

    def bench_peers(self, gate: Any) -> tuple[list[str], dict[str, str]]:
        """Other engines measured beside the variants (sonfolio.bench.peer_case), and those
        left out with why: CTranslate2's Whisper in int8, faster-whisper's engine."""
        if gate.ctranslate2:
            return ["ct2_int8"], {}
        return [], {"ct2_int8": "not measured: speech_bench.ctranslate2 is false"}

    # --- eval ---


TRACK = SpeechTrack()
