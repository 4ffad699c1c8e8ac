"""Model variants: one trained model in any of its saved forms, ready to decode greedily (or,
for the score track, constrained by the canonical grammar: sonfolio.score.decode.grammar).

A variant is a folder. Either a PyTorch folder (`save_pretrained`: config.json,
model.safetensors, tokenizer, processor) or an ONNX folder in optimum's layout
(encoder_model.onnx, decoder_model_merged.onnx or decoder_model.onnx +
decoder_with_past_model.onnx, config.json, generation_config.json, tokenizer, processor), as
written by the export stage under ${paths.tracks.<track>.export}/<variant>/. The track comes
from config.json: a vision-encoder-decoder model reads scores, a whisper model hears speech;
the track's export face (sonfolio.tracks.face) names the classes that load it.

ONNX folders load with optimum's ORTModel of the track (ORTModelForVision2Seq, ...), on
CUDAExecutionProvider when onnxruntime has it and device allows, else on CPU; PyTorch ones on
CUDA when torch sees a GPU. Every choice is logged with its reason. A model whose config says
`ctc_decoding: true` is read by its CTC head (sonfolio.train.ctc; in ONNX, the encoder's
`ctc_logits` output), not by its decoder.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerBase

from sonfolio import ctc_head as ctc
from sonfolio import tracks
from sonfolio.export.layout import DECODER, ENCODER, UNMERGED
from sonfolio.infer.ortloop import OrtGreedy

if TYPE_CHECKING:
    from sonfolio.score.decode.vocab import Carry

log = logging.getLogger(__name__)

# config.json's model_type -> the track whose export face (sonfolio.tracks) says how it loads
TRACKS = {"vision-encoder-decoder": "score", "whisper": "speech"}
TORCH_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
# optimum's layouts: a merged decoder, or a decoder + one with past
DECODERS = ((DECODER,), UNMERGED)


class VariantError(ValueError):
    """A variant folder that cannot be loaded; the message names the file and the fix."""


@dataclass
class Variant:
    """One model ready to decode.

    Attributes:
        name: the folder's name, e.g. "score_fp32", "fp32", "int8_ptq".
        kind: "torch" or "onnx".
        track: the track's name ("score", "speech"), from config.json's model_type.
        tokenizer: the folder's tokenizer.
        processor: the track's processor_class (score: ViTImageProcessor, speech:
            WhisperFeatureExtractor).
        folder: where it was loaded from.
        device: where it runs: "cpu", "cuda" (torch) or the ORT provider's name.
    """

    name: str
    kind: str
    track: str
    tokenizer: PreTrainedTokenizerBase
    processor: Any
    folder: Path
    device: str
    config: Any = field(repr=False)  # the model's transformers config
    # loads optimum's model on first use of `model`, so a variant decoded by `loop` never pays
    # optimum's start-up (its sessions are separate); None: the model was loaded with the variant
    load_model: Callable[[], Any] | None = field(repr=False)
    # sonfolio.infer.ortloop.OrtGreedy over the same files where it decodes as HF generate would
    # (see _greedy_loop); None: optimum's generate
    loop: Any = field(default=None, repr=False)
    # the model itself where it was loaded with the variant (torch, or ONNX that optimum decodes)
    _model: Any = field(default=None, repr=False)
    # constrained decoding's outcomes so far (see `generate`)
    decode_stats: Counter = field(default_factory=Counter, repr=False)
    _vocab: Any = field(default=None, repr=False)  # the tokenizer's pieces, made on first use
    # processes the constrained CTC searches of a batch are spread over (1: this one)
    search_workers: int = 1

    @property
    def model(self) -> Any:
        """The transformers model (PyTorch) or optimum's ORTModel (ONNX), loaded on first use."""
        if self._model is None:
            self._model = self.load_model()
        return self._model

    @property
    def input_name(self) -> str:
        """The model's input, as its track names it: "pixel_values" (score), ..."""
        return tracks.face(self.track, "export").input_name

    @torch.no_grad()
    def generate(
        self,
        inputs: torch.Tensor,
        max_new_tokens: int,
        times: Sequence[str | None] | Carry | None = None,
        constrained: bool = False,
    ) -> list[str]:
        """Greedy decoding (one beam, no sampling) of a batch, or decoding constrained by the
        track's grammar (sonfolio.score.decode.grammar: every text validates, or is empty where
        nothing valid was found).

        Args:
            inputs: score: (B, 1, H, W) float pixels in [0, 1], ink = 1
                (sonfolio.score.model.batches); speech: (B, mel bins, frames) log-mel features
                (sonfolio.speech.model.batches).
            max_new_tokens: decoding limit per sample.
            times: score, constrained: per sample the time signature in force before it (None:
                unknown), or a `Carry` (each sample in the time the one before leaves).
            constrained: decode under the grammar (score track only); counted in
                `decode_stats`: CTC greedy_valid (returned as
                is) or searched; attention complete; either cut_back or empty.

        Returns:
            B texts, special tokens removed.

        Raises:
            VariantError: `constrained` for a track with no grammar.
        """
        if constrained:
            return self._constrained(inputs, max_new_tokens, times)
        if ctc.decodes_with_ctc(self.config) and self.kind == "torch":
            ids = ctc.greedy(self.model, inputs, max_new_tokens)
            return self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        if self.loop is not None:
            ids = self.loop.generate(inputs.numpy(), min(max_new_tokens, self._limit()), False)
            return self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        if self.kind == "torch":
            inputs = inputs.to(self.model.device)
        ids = self.model.generate(
            inputs, max_new_tokens=min(max_new_tokens, self._limit()), num_beams=1, do_sample=False
        )
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def _limit(self) -> int:
        limit = decoder_positions(self.config) - 1  # the start token takes a position
        if isinstance(self.loop, OrtGreedy):  # so does the rest of a Whisper's prompt
            limit = decoder_positions(self.config) - len(self.loop.prompt.ids)
        return limit

    def _constrained(
        self, inputs: torch.Tensor, new: int, times: Sequence[str | None] | Carry | None
    ) -> list[str]:
        # the track's infer face names the module that decodes under its grammar
        cs = tracks.face(self.track, "infer").grammar()
        if cs is None:
            raise VariantError(
                f"{self.name}: constrained decoding needs a grammar; the {self.track} track has "
                "none (set constrained: false)"
            )
        if self._vocab is None:
            self._vocab = cs.Vocab(self.tokenizer)
        vocab, stats = self._vocab, self.decode_stats
        if ctc.decodes_with_ctc(self.config):
            blank = self.config.pad_token_id
            decode = partial(
                cs.ctc_decode,
                vocab=vocab,
                blank=blank,
                times=times,
                stats=stats,
                workers=self.search_workers,
            )
            if self.kind == "torch":
                logits = ctc.logits(self.model, inputs).float().cpu().numpy()
                ids = decode(logits, limit=new)
            else:
                ids = self.loop.generate(
                    inputs.numpy(), new, decode=lambda x, n: decode(x, limit=n)
                )
            return [vocab.text(row) for row in ids]
        if isinstance(times, cs.Carry):
            # an attention decoder reads a batch's samples side by side, but a carried time is
            # known only once the sample before has ended: one sample at a time
            texts, time = [], times.start
            for row in range(len(inputs)):
                texts += self._attend(cs, inputs[row : row + 1], new, [time])
                time = cs.next_time(texts[-1], time)
            return texts
        return self._attend(cs, inputs, new, times)

    def _attend(
        self, cs: Any, inputs: torch.Tensor, new: int, times: Sequence[str | None] | None
    ) -> list[str]:
        """Constrained greedy decoding by the attention decoder (ORT loop or HF generate)."""
        new = min(new, self._limit())
        constraint = cs.GreedyConstraint(self._vocab, times, len(inputs), self.decode_stats)
        if self.loop is not None:
            ids = self.loop.generate(inputs.numpy(), new, False, constraint)
        else:
            if self.kind == "torch":
                inputs = inputs.to(self.model.device)
            out = self.model.generate(
                inputs,
                max_new_tokens=new,
                num_beams=1,
                do_sample=False,
                logits_processor=[cs.logits_processor(constraint)],
            )
            ids = constraint.finish([row[1:] for row in out.tolist()])  # [1:]: the start token
        return [self._vocab.text(row) for row in ids]


def decoder_positions(config: Any) -> int:
    """How many tokens the decoder can see (start token included)."""
    if getattr(config, "model_type", "") == "whisper":
        return config.max_target_positions
    dec = config.decoder
    for key in ("n_positions", "max_position_embeddings"):  # GPT-2, TrOCR/BERT
        if getattr(dec, key, None):
            return getattr(dec, key)
    raise VariantError(f"the decoder config ({dec.model_type}) states no maximum length")


def load(folder: Path, threads: int | None = None, device: str = "auto") -> Variant:
    """Load a PyTorch or ONNX variant folder.

    Args:
        folder: the variant's folder.
        threads: CPU threads for inference (torch intra-op / ORT intra_op_num_threads);
            None: the library's default (all cores).
        device: "auto" (a GPU when present), "cpu" or "cuda".

    Raises:
        VariantError: the folder, its config, tokenizer, processor or a model file is missing
            or unreadable (the message names the file).
    """
    folder = Path(folder)
    if device not in ("auto", "cpu", "cuda"):
        raise VariantError(f"device = {device!r}: use auto, cpu or cuda")
    if not folder.is_dir():
        raise VariantError(f"{folder} is not a folder: train or export the model first")
    track = _track(folder)
    tracks.face(track, "export").register_classes()  # a track's own model classes, if any
    tokenizer, processor = _preprocessing(folder, track)
    config = _config(folder)
    loop, model = None, None
    reads_ctc = ctc.decodes_with_ctc(config)
    if any(folder.glob("*.onnx")):
        kind, where = "onnx", _provider(device)
        if reads_ctc:
            loop = _ctc_loop(folder, where, threads, config.pad_token_id)
        else:
            loop = _greedy_loop(folder, where, threads)
        load_model = partial(_load_onnx, folder, track, threads, where)
        if loop is None:  # optimum decodes: load it now, so a bad file fails here
            model = load_model()
    elif any((folder / w).is_file() for w in TORCH_WEIGHTS):
        model, where = _load_torch(folder, track, threads, device)
        kind, load_model = "torch", None
    else:
        raise VariantError(
            f"{folder} holds neither {TORCH_WEIGHTS[0]} (a PyTorch model) nor {ENCODER} "
            "(an ONNX export): rerun the stage that writes it"
        )
    log.info(
        "variant %s: %s %s model on %s, decoded by %s",
        folder.name,
        kind,
        track,
        where,
        _decoded_by(reads_ctc, loop),
    )
    return Variant(
        folder.name,
        kind,
        track,
        tokenizer,
        processor,
        folder,
        where,
        config,
        load_model,
        loop,
        model,
    )


def _decoded_by(reads_ctc: bool, loop: Any) -> str:
    if reads_ctc:
        return "its CTC head, greedily"
    if loop is None:
        return "HF generate"
    return f"the plain ORT greedy loop from a {len(loop.prompt.ids)}-token prompt"


def _config(folder: Path) -> Any:
    try:
        return AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError) as err:
        raise VariantError(
            f"{folder / 'config.json'} is unreadable ({err}): re-save the model"
        ) from err


def _greedy_loop(folder: Path, provider: str, threads: int | None) -> Any:
    """sonfolio.infer.ortloop.OrtGreedy over the folder's files (2.7-4x faster than optimum's
    generate on the CPU defaults: docs/export.md), decoding from the prompt and suppressed
    tokens that sonfolio.prompt.read finds in generation_config.json (one start token, or a
    hub Whisper's language / task prompt), as HF generate would. None where the loop would
    not decode as generate does, for which optimum's generate stays (the reason is logged):
    not on the CPU, no merged decoder, or a generation config asking for more (timestamps,
    language detection, a repetition penalty, ...).

    Raises:
        VariantError: a config or ONNX file is unreadable, or the generation config names
            an invalid prompt (e.g. a language not in lang_to_id).
    """
    from sonfolio import prompt
    from sonfolio.export.layout import OnnxFileError
    from sonfolio.infer.ortloop import OrtGreedy

    if provider != "CPUExecutionProvider" or not (folder / DECODERS[0][0]).is_file():
        return None
    try:
        decoder_prompt = prompt.read(folder)
    except prompt.UnsupportedDecoding as err:
        log.info("variant %s: optimum's generate, not the ORT loop: %s", folder.name, err)
        return None
    except prompt.PromptError as err:
        raise VariantError(str(err)) from err
    _onnx_files(folder)  # names a missing file as optimum would
    try:
        return OrtGreedy(folder, threads or torch.get_num_threads(), 1, True, decoder_prompt)
    except (OnnxFileError, ValueError) as err:
        raise VariantError(str(err)) from err


def _ctc_loop(folder: Path, provider: str, threads: int | None, blank: int) -> Any:
    """sonfolio.infer.ortloop.OrtCtc over the folder's encoder (which carries the CTC head)."""
    from sonfolio.export.layout import OnnxFileError
    from sonfolio.infer.ortloop import OrtCtc

    _onnx_files(folder)  # names a missing file as optimum would
    try:
        return OrtCtc.open(folder, threads or torch.get_num_threads(), True, blank, provider)
    except OnnxFileError as err:
        raise VariantError(str(err)) from err


def discover(fp32_dir: Path, export_dir: Path | None) -> list[Path]:
    """The FP32 PyTorch folder, then every exported variant folder present (sorted by name).

    A subfolder of `export_dir` counts as a variant when it holds an ONNX file or PyTorch
    weights; `export_dir` may be None or absent (nothing exported yet).
    """
    found = [Path(fp32_dir)]
    if export_dir is None or not Path(export_dir).is_dir():
        return found
    for sub in sorted(p for p in Path(export_dir).iterdir() if p.is_dir()):
        if any(sub.glob("*.onnx")) or any((sub / w).is_file() for w in TORCH_WEIGHTS):
            found.append(sub)
        else:
            log.info("%s holds no model file: not a variant, skipped", sub)
    return found


def _track(folder: Path) -> str:
    path = folder / "config.json"
    try:
        model_type = json.loads(path.read_text(encoding="utf-8"))["model_type"]
    except FileNotFoundError as err:
        raise VariantError(f"{path} is missing: not a saved model folder") from err
    except (json.JSONDecodeError, KeyError, UnicodeDecodeError) as err:
        raise VariantError(f"{path} is not a model config ({err}): re-save the model") from err
    if model_type not in TRACKS:
        raise VariantError(
            f"{path}: model_type {model_type!r} is neither a score model "
            "(vision-encoder-decoder) nor a speech model (whisper)"
        )
    return TRACKS[model_type]


def _preprocessing(folder: Path, track: str) -> tuple[PreTrainedTokenizerBase, Any]:
    for name in ("tokenizer.json", "preprocessor_config.json"):
        if not (folder / name).is_file():
            raise VariantError(
                f"{folder / name} is missing: a variant folder needs the tokenizer and the "
                "processor saved beside the model (copy them from the FP32 model folder)"
            )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        processor = tracks.face(track, "export").processor_class().from_pretrained(str(folder))
    except (OSError, ValueError) as err:
        raise VariantError(f"{folder}: tokenizer or processor unreadable: {err}") from err
    return tokenizer, processor


def _torch_device(device: str) -> str:
    if device == "cuda" and not torch.cuda.is_available():
        raise VariantError("device = cuda but torch sees no GPU: use device auto or cpu")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _load_torch(folder: Path, track: str, threads: int | None, device: str) -> tuple[Any, str]:
    if threads:
        torch.set_num_threads(threads)
    cls = tracks.face(track, "export").torch_model_class()
    from safetensors import SafetensorError

    from sonfolio.io import damaged_safetensors

    try:
        model = ctc.load_head(cls.from_pretrained(str(folder)), folder)
    except SafetensorError as err:  # not an OSError: transformers lets it through as it is
        names = ", ".join(str(p) for p in damaged_safetensors(folder)) or str(folder)
        raise VariantError(
            f"{names}: not a readable safetensors file ({err}): the file is damaged or cut "
            "short; copy the model folder again or rerun the stage that wrote it"
        ) from None
    except (OSError, ValueError, RuntimeError) as err:
        raise VariantError(
            f"{folder}: the PyTorch weights could not be loaded ({err}): re-save the model"
        ) from err
    where = _torch_device(device)
    return model.to(where).eval(), where


def _provider(device: str) -> str:
    import onnxruntime as ort

    available = ort.get_available_providers()
    has_cuda = "CUDAExecutionProvider" in available
    if device == "cuda" and not has_cuda:
        raise VariantError(
            "device = cuda but onnxruntime has no CUDAExecutionProvider "
            f"(available: {available}): install onnxruntime-gpu, or use device auto or cpu"
        )
    if device in ("auto", "cuda") and has_cuda and torch.cuda.is_available():
        return "CUDAExecutionProvider"
    if device == "auto":
        log.info("ONNX Runtime on CPU: CUDAExecutionProvider not available (%s)", available)
    return "CPUExecutionProvider"


def _onnx_files(folder: Path) -> list[Path]:
    """The standard files that optimum will load, or an error naming the missing one."""
    if not (folder / ENCODER).is_file():
        raise VariantError(f"{folder / ENCODER} is missing: rerun the export stage")
    for names in DECODERS:
        if all((folder / n).is_file() for n in names):
            return [folder / ENCODER, *(folder / n for n in names)]
    raise VariantError(
        f"{folder / DECODERS[0][0]} is missing (nor {' + '.join(DECODERS[1])}): rerun the "
        "export stage; optimum expects its standard file names"
    )


def _load_onnx(folder: Path, track: str, threads: int | None, provider: str) -> Any:
    import onnxruntime as ort

    files = _onnx_files(folder)
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    cls = tracks.face(track, "export").ort_model_class()
    try:
        model = cls.from_pretrained(str(folder), provider=provider, session_options=options)
    except Exception as err:  # onnxruntime raises its own pybind exception types
        bad = _unreadable(files)
        if bad is not None:
            raise VariantError(
                f"{bad} is not a readable ONNX model ({err}): rerun the export stage"
            ) from err
        raise VariantError(f"{folder}: ONNX Runtime could not load the model: {err}") from err
    return model


def _unreadable(files: list[Path]) -> Path | None:
    """The first file that does not parse as an ONNX model (a protobuf parse, no weights)."""
    import onnx

    for path in files:
        try:
            onnx.load(str(path), load_external_data=False)
        except Exception:  # protobuf's DecodeError and onnx's own errors: any means unreadable
            return path
    return None
