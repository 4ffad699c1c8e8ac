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

An ONNX folder decoded by the ORT loops loads with neither torch nor transformers (config,
tokenizer and preprocessing: sonfolio.model_folder and the track's infer face): ~300 MB less
resident memory and seconds less start-up for `sonfolio transcribe` / `read` and the service.
torch is imported for a PyTorch folder, and transformers with optimum where optimum decodes.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sonfolio import tracks
from sonfolio import variant_backends as backends
from sonfolio.ctc_format import decodes_with_ctc
from sonfolio.export.layout import ENCODER
from sonfolio.infer.ortloop import OrtGreedy
from sonfolio.model_folder import FolderError, FolderTokenizer, read_config
from sonfolio.parallel import worker_count
from sonfolio.variant_backends import DECODERS, TORCH_WEIGHTS, VariantError

__all__ = ["TORCH_WEIGHTS", "Variant", "VariantError", "decoder_positions", "discover", "load"]

if TYPE_CHECKING:
    from sonfolio.score.decode.vocab import Carry

log = logging.getLogger(__name__)

# config.json's model_type -> the track whose export face (sonfolio.tracks) says how it loads
TRACKS = {"vision-encoder-decoder": "score", "whisper": "speech"}


@dataclass
class Variant:
    """One model ready to decode.

    Attributes:
        name: the folder's name, e.g. "score_fp32", "fp32", "int8_ptq".
        kind: "torch" or "onnx".
        track: the track's name ("score", "speech"), from config.json's model_type.
        tokenizer: the folder's tokenizer (sonfolio.model_folder.FolderTokenizer: no
            transformers).
        processor: the track's preprocessing in numpy (its infer face's `processor`: score, the
            canvas size; speech, sonfolio.speech.common.logmel.LogMel).
        folder: where it was loaded from.
        device: where it runs: "cpu", "cuda" (torch) or the ORT provider's name.
    """

    name: str
    kind: str
    track: str
    tokenizer: FolderTokenizer
    processor: Any
    folder: Path
    device: str
    config: Any = field(repr=False)  # config.json as attributes (sonfolio.model_folder)
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

    def generate(
        self,
        inputs: Any,
        max_new_tokens: int,
        times: Sequence[str | None] | Carry | None = None,
        constrained: bool = False,
    ) -> list[str]:
        """Greedy decoding (one beam, no sampling) of a batch, or decoding constrained by the
        track's grammar (sonfolio.score.decode.grammar: every text validates, or is empty where
        nothing valid was found).

        Args:
            inputs: a numpy array (or a torch tensor): score, (B, 1, H, W) float pixels in
                [0, 1], ink = 1 (sonfolio.score.common.pixels); speech, (B, mel bins, frames)
                log-mel features (the variant's `processor`).
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
        if self.loop is not None:
            ids = self.loop.generate(_numpy(inputs), self._limit(max_new_tokens), False)
            return self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        import torch  # a PyTorch folder, or an ONNX one that optimum decodes

        with torch.no_grad():
            if decodes_with_ctc(self.config):  # torch: an ONNX CTC model has its loop
                from sonfolio import ctc_head

                ids = ctc_head.greedy(self.model, self._tensor(inputs), max_new_tokens)
            else:
                ids = self.model.generate(
                    self._tensor(inputs),
                    max_new_tokens=self._limit(max_new_tokens),
                    num_beams=1,
                    do_sample=False,
                )
        return self.tokenizer.batch_decode(ids.tolist() if hasattr(ids, "tolist") else ids, True)

    @property
    def decodes_apart(self) -> bool:
        """Whether `encode` and `decode` run (an ORT loop with a decoder: they split
        `generate`, so batches can be encoded on every core and decoded side by side)."""
        return isinstance(self.loop, OrtGreedy)

    def encode(self, inputs: Any) -> Any:
        """The encoder states of a batch, for `decode` (`decodes_apart` variants only)."""
        return self.loop.encode(_numpy(inputs))

    def decode(self, encoded: Any, batch: int, max_new_tokens: int) -> list[list[int]]:
        """Greedy token ids of `batch` samples from `encode`'s states: `generate`'s, without
        the text (`tokenizer.batch_decode` makes it). Thread-safe (OrtGreedy.decode)."""
        return self.loop.decode(encoded, batch, self._limit(max_new_tokens))

    def generate_batches(
        self, batches: Iterable[Any], max_new_tokens: int, workers: int = 1
    ) -> Iterator[list[str]]:
        """`generate` over `batches` (taken lazily), each batch's texts in turn.

        Where the variant decodes apart (`decodes_apart`) and `workers` > 1, `workers` batches
        at a time (at most the loop's threads) are encoded one after the other, on every
        thread, then decoded side by side, one thread each: a decoder step at batch 8-16 is
        too small to split over cores (2 threads slowed the speech eval's batch 16 down:
        docs/inference.md), so one batch at a time left a core idle while it decoded."""
        if self.decodes_apart:
            workers = min(workers, self.loop.threads)
        if not self.decodes_apart or workers <= 1:
            for x in batches:
                yield self.generate(x, max_new_tokens)
            return
        pending = iter(batches)
        taken = list(islice(pending, workers))
        if len(taken) < 2:  # one batch in all (a short recording): no pool to start
            for x in taken:
                yield self.generate(x, max_new_tokens)
            return
        with ThreadPoolExecutor(workers, thread_name_prefix="decode") as pool:
            while group := [(self.encode(x), len(x)) for x in taken]:
                for ids in pool.map(lambda job: self.decode(*job, max_new_tokens), group):
                    yield self.tokenizer.batch_decode(ids, skip_special_tokens=True)
                taken = list(islice(pending, workers))

    def _tensor(self, inputs: Any) -> Any:
        """`inputs` as a torch tensor where the model runs (torch's device; optimum: CPU)."""
        import torch

        x = torch.as_tensor(np.asarray(inputs, dtype=np.float32))
        return x.to(self.model.device) if self.kind == "torch" else x

    def _limit(self, new: int) -> int:
        """`new` tokens, or fewer where the decoder's positions end first."""
        limit = decoder_positions(self.config) - 1  # the start token takes a position
        if isinstance(self.loop, OrtGreedy):  # so does the rest of a Whisper's prompt
            limit = decoder_positions(self.config) - len(self.loop.prompt.ids)
        return min(new, limit)

    def _constrained(
        self, inputs: Any, new: int, times: Sequence[str | None] | Carry | None
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
        if decodes_with_ctc(self.config):
            blank = self.config.pad_token_id
            decode = partial(
                cs.ctc_decode,
                vocab=vocab,
                blank=blank,
                times=times,
                stats=stats,
                workers=self.search_workers,
            )
            if self.loop is None:
                import torch

                from sonfolio import ctc_head

                with torch.no_grad():
                    logits = ctc_head.logits(self.model, self._tensor(inputs))
                ids = decode(logits.float().cpu().numpy(), limit=new)
            else:
                ids = self.loop.generate(
                    _numpy(inputs), new, decode=lambda x, n: decode(x, limit=n)
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
        self, cs: Any, inputs: Any, new: int, times: Sequence[str | None] | None
    ) -> list[str]:
        """Constrained greedy decoding by the attention decoder (ORT loop or HF generate)."""
        new = self._limit(new)
        constraint = cs.GreedyConstraint(self._vocab, times, len(inputs), self.decode_stats)
        if self.loop is not None:
            ids = self.loop.generate(_numpy(inputs), new, False, constraint)
        else:
            import torch

            with torch.no_grad():
                out = self.model.generate(
                    self._tensor(inputs),
                    max_new_tokens=new,
                    num_beams=1,
                    do_sample=False,
                    logits_processor=[cs.logits_processor(constraint)],
                )
            ids = constraint.finish([row[1:] for row in out.tolist()])  # [1:]: the start token
        return [self._vocab.text(row) for row in ids]


def _numpy(inputs: Any) -> np.ndarray:
    """A batch as the ORT loops take it: float32 numpy (a CPU torch tensor converts too)."""
    return np.ascontiguousarray(np.asarray(inputs, dtype=np.float32))


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
    tokenizer, processor = _preprocessing(folder, track)
    config = _config(folder)
    loop, model = None, None
    reads_ctc = decodes_with_ctc(config)
    if any(folder.glob("*.onnx")):
        kind, where = "onnx", backends.provider(device)
        if reads_ctc:
            loop = _ctc_loop(folder, where, threads, config.pad_token_id)
        else:
            loop = _greedy_loop(folder, where, threads)
        load_model = partial(backends.load_onnx, folder, track, threads, where)
        if loop is None:  # optimum decodes: load it now, so a bad file fails here
            model = load_model()
    elif any((folder / w).is_file() for w in TORCH_WEIGHTS):
        model, where = backends.load_torch(folder, track, threads, device)
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
        return read_config(folder)
    except FolderError as err:
        raise VariantError(str(err)) from err


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
    backends.onnx_files(folder)  # names a missing file as optimum would
    try:
        return OrtGreedy(folder, threads or worker_count(0), 1, True, decoder_prompt)
    except (OnnxFileError, ValueError) as err:
        raise VariantError(str(err)) from err


def _ctc_loop(folder: Path, provider: str, threads: int | None, blank: int) -> Any:
    """sonfolio.infer.ortloop.OrtCtc over the folder's encoder (which carries the CTC head)."""
    from sonfolio.export.layout import OnnxFileError
    from sonfolio.infer.ortloop import OrtCtc

    backends.onnx_files(folder)  # names a missing file as optimum would
    try:
        return OrtCtc.open(folder, threads or worker_count(0), True, blank, provider)
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


def _preprocessing(folder: Path, track: str) -> tuple[FolderTokenizer, Any]:
    """The folder's tokenizer and the track's numpy preprocessing (no transformers)."""
    for name in ("tokenizer.json", "preprocessor_config.json"):
        if not (folder / name).is_file():
            raise VariantError(
                f"{folder / name} is missing: a variant folder needs the tokenizer and the "
                "processor saved beside the model (copy them from the FP32 model folder)"
            )
    try:
        tokenizer = FolderTokenizer(folder)
        processor = tracks.face(track, "export").processor(folder)
    except ValueError as err:  # FolderError, and the processor's own config errors
        raise VariantError(f"{folder}: tokenizer or processor unreadable: {err}") from err
    return tokenizer, processor
