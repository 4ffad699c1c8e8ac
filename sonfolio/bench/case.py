"""What a bench worker measures: the variant (Case) and how to run it (Spec)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """One variant to measure: `runtime` torch | ort | ort_loop | ct2 | faster_whisper;
    `dtype` fp32 | bf16 (torch)."""

    name: str
    runtime: str
    folder: str
    dtype: str = "fp32"


@dataclass(frozen=True)
class Spec:
    """What a worker process measures; written as JSON for it."""

    case: Case
    track: str  # the track's name: its export face (sonfolio.tracks.face) says how a model loads
    inputs: str  # .npy file: (N, ...) float32 model inputs
    threads: int
    decoder_threads: int  # ort_loop only: intra-op threads of the decoder session
    spin_wait: bool  # idle intra-op threads spin (ORT allow_spinning, OpenMP's wait policy)
    warmup: int
    batch_size: int
    decode_tokens: int
    quality_tokens: int
    io_binding: bool
    prompt: list[int]  # the decoder prompt (CT2's: see sonfolio.bench.peer.convert_ct2)
    eos_id: int
    quality: bool  # also decode greedily to end of text (round 0 only)
    # .npz of the clips' 16 kHz float32 audio ("0", "1", ... in input order), or "": the
    # faster_whisper runtime's input; every other runtime times the feature extraction on it
    audio: str = ""
    features_from: str = ""  # the folder whose feature extractor made `inputs` (timed per clip)
    model_suppress: bool = False  # CT2: suppress as the model's config says (a real Whisper)
