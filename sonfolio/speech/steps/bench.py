"""bench@speech: the speed bench's inputs, quality, gate and peers (CTranslate2 and
faster-whisper on the same weights; sonfolio.faces.BenchFace)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sonfolio.speech.steps.keys import GATE_METRIC


class SpeechBenchFace:
    name = "speech"
    gate_metric = GATE_METRIC  # the quality key the bench's gate reads (lower is better)

    def bench_inputs(self, folder: Path, data: Path, rows: list[dict]) -> tuple[Any, list[str]]:
        """The rows' clips as (N, mel bins, frames) float32 features, the fixed window every
        runtime takes (the feature extractor in `folder`), and their normalised transcripts."""
        import numpy as np
        from transformers import WhisperFeatureExtractor

        from sonfolio.speech.common.audio import SAMPLE_RATE, decode

        features = WhisperFeatureExtractor.from_pretrained(str(folder))
        audio = [decode(data / r["audio"]) for r in rows]
        x = features(audio, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"]
        return np.asarray(x, dtype=np.float32), [r["text_norm"] for r in rows]

    def quality(self, refs: list[str], texts: list[str]) -> dict[str, float]:
        """Decoded texts, normalised as the references were, against them: WER and CER."""
        from sonfolio.evaluation import char_error_rate, word_error_rate
        from sonfolio.speech.common.normalize import normalize

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
        # it would make this face's closure the whole peer bench)
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
        from sonfolio.speech.model.bases import BaseModelError, ct2_folder

        if not gate.faster_whisper_base:
            return None
        try:
            return ct2_folder(gate.faster_whisper_base)
        except BaseModelError as err:
            raise ValueError(f"speech_bench.faster_whisper_base: {err}") from err


FACE = SpeechBenchFace()
