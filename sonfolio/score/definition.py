"""The score track's definition: what is specific to it, for the steps that take a track.

One object, `TRACK`, found by name through sonfolio.tracks.get("score"). Each step asks it for
what only this track knows; imports are inside the methods so that loading the definition
stays cheap and a step pulls in only what it uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sonfolio.config.data import ScoreData
    from sonfolio.config.tokenizer import ScoreTokenizer
    from sonfolio.tokenizer import BuiltTokenizer


class ScoreTrack:
    """The score track."""

    name = "score"

    # --- data ---

    data_file = "image"  # the manifest column naming each row's file (the step hashes it)
    data_items = "systems"  # what a manifest row is, in the metrics' `systems_per_s`

    def build_data(
        self, cfg: ScoreData, download_cache: Path, out: Path
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The score dataset rendered into `out`: its manifest rows and its stats.

        Real and synthetic music, one image per staff system; rows (image, text, piece,
        collection, split) as sonfolio.score.dataset.build makes them. Archive sources are
        fetched into `download_cache`.
        """
        from sonfolio.score.dataset import build

        return build(cfg, download_cache, out)

    # --- tokenizer ---

    text_columns = ("text",)  # the manifest's texts, each checked to survive a round trip

    def build_tokenizer(
        self, cfg: ScoreTokenizer, train: list[str], rows: list[dict[str, Any]]
    ) -> BuiltTokenizer:
        """A BPE over canonical LilyPond, trained on the `train` texts.

        Exact: a text it does not give back is an error (the model could never write it).
        """
        from sonfolio.tokenizer import BuiltTokenizer, train_bpe

        tok = train_bpe(train, cfg.vocab_size, cfg.min_frequency, cfg.model_max_length)
        return BuiltTokenizer(tok, (tok,), exact=True, stats={"vocab_size": tok.vocab_size})

    # --- train ---

    def training(self, params):
        """How this track trains (a sonfolio.train.setup.Training): score_train, with the
        width the data step renders every system at (score_data.image_long_side), which is
        the model's input width."""
        from sonfolio.score.track import ScoreTraining

        return ScoreTraining(params.score_train, params.score_data.image_long_side)

    # --- qat ---

    def load_trained(self, folder):
        """The model train@score saved in `folder`, ready to train further (its CTC head
        attached where it reads with one)."""
        from sonfolio.score.model import load_trained

        return load_trained(folder)

    # --- export ---

    # A saved model of this track as every runtime loads it: the export (sonfolio.export), a
    # variant folder (sonfolio.variants, for eval and inference) and the bench's workers.
    export_task = "image-to-text-with-past"  # optimum-onnx's task, with past key/values
    input_name = "pixel_values"  # (B, 1, H, W) float pixels in [0, 1], ink = 1

    def torch_model_class(self) -> type:
        """The transformers class of a saved PyTorch folder (FP32 or QAT-trained)."""
        from transformers import VisionEncoderDecoderModel

        return VisionEncoderDecoderModel

    def ort_model_class(self) -> type:
        """optimum's class that loads an exported variant folder as is."""
        from optimum.onnxruntime import ORTModelForVision2Seq

        return ORTModelForVision2Seq

    def processor_class(self) -> type:
        """The preprocessor saved beside the model (its size is the image canvas)."""
        from transformers import ViTImageProcessor

        return ViTImageProcessor

    def ort_encoder_inputs(self, x: Any) -> dict[str, Any]:
        """Keyword arguments of optimum's encoder run alone on a batch `x`."""
        return {"pixel_values": x}

    def check_infer(self, processor: Any, cfg: Any) -> None:
        """Inference settings (params.yaml `infer`) that cannot work with this model: none, a
        page is cut into systems whatever the model's canvas."""

    # the model card of every variant folder (sonfolio.modelcard)
    pipeline_tag = "image-to-text"
    card_title = "Sonfolio score reader: staff system image to LilyPond"
    card_summary = (
        "A ViT encoder and a GPT-2 decoder that write one staff system as canonical "
        "LilyPond text, exported to ONNX with its KV cache (merged decoder)."
    )
    card_data = (
        "staff systems of music21 corpus pieces (the collections of score_data.sources), "
        "engraved alone and cut from whole pages, plus synthetic systems; canonical LilyPond "
        "text with markings (docs/canonical-lilypond.md)"
    )

    # --- bench ---

    gate_metric = "ter"  # the quality key the bench's gate reads (lower is better)

    def bench_inputs(self, folder: Path, data: Path, rows: list[dict]) -> tuple[Any, list[str]]:
        """The rows' system images as (N, 1, H, W) float32 pixels at the canvas of the model
        in `folder`, and their reference texts."""
        import json

        import numpy as np

        from sonfolio.score.batches import load_image, to_pixel_values

        shape = json.loads((folder / "config.json").read_text())["encoder"]["image_size"]
        images = np.stack([load_image(data / r["image"], *shape) for r in rows])
        return to_pixel_values(images).numpy(), [r["text"] for r in rows]

    def quality(self, refs: list[str], texts: list[str]) -> dict[str, float]:
        """Decoded texts against the references: the symbol error rate (TER), lower is better."""
        from sonfolio.evaluation import token_error_rate

        return {"ter": round(token_error_rate(refs, texts), 4)}

    def max_increase(self, gate: Any) -> float:
        """The gate's allowance (score_bench): TER a variant may lose vs torch FP32."""
        return gate.max_ter_increase

    def quality_tokens(self, model: Path, decode_max_tokens: int) -> int:
        """The greedy quality decode's limit: score_train.decode_max_tokens as it is."""
        return decode_max_tokens

    def bench_peers(self, gate: Any) -> tuple[list[str], dict[str, str]]:
        """Other engines measured beside the variants (sonfolio.bench.peer.peer_case), and those
        left out with why: none reads scores."""
        return [], {}

    def bench_peer_base(self, gate: Any) -> None:
        """The untouched base a peer runs as is: none."""
        return None

    # --- constrained decoding ---

    def grammar(self):
        """The module that decodes under this track's grammar, so every output is valid
        canonical LilyPond (sonfolio.score.constrained; read by sonfolio.variants)."""
        from sonfolio.score import constrained

        return constrained

    # --- eval ---

    # Compared with the reference variant (delta_<key>; a positive ser delta is a loss) and
    # written to quality.csv, with eval_csv_extra, for `dvc plots`.
    eval_delta_keys = ("ser", "cer", "exact_match", "compile_rate")
    eval_csv_extra = "clean_compile_rate"

    def eval_baselines(self, cfg, model, work):
        """Models scored beside the variants: none."""
        return []

    def eval_tool(self, params):
        """The LilyPond binary (a Path) every prediction is compiled with: score_data.lilypond,
        the one the data stage renders with."""
        from sonfolio.score.lilypond import find_lilypond

        return find_lilypond(params.score_data.lilypond)

    def eval_extra(self, params, paths):
        """Whole pages read end to end (score_eval.pages): parts the data stage cut from pages,
        engraved again whole in LilyPond's default layout and read as `read --page` reads
        them, by score_eval.pages.variant; None when pages.parts is 0 or the variant is
        absent (the figures would not be the read command's)."""
        cfg = params.score_eval.pages
        folder = paths.export / cfg.variant
        if not cfg.parts or not folder.is_dir():
            return None

        def pages(work):
            from sonfolio import variants
            from sonfolio.io import read_jsonl
            from sonfolio.score.lilypond import find_lilypond
            from sonfolio.score.page_eval import evaluate_pages, heldout_parts

            rows = read_jsonl(paths.data / "manifest.jsonl")
            parts = heldout_parts(rows, cfg.split, cfg.parts, params.score_eval.seed)
            variant = variants.load(folder, threads=params.score_eval.threads)
            exe = find_lilypond(params.score_data.lilypond)
            figures = evaluate_pages(variant, parts, params.infer, exe, cfg.dpi, work)
            return {"pages": {"variant": cfg.variant, "split": cfg.split, **figures}}

        return pages

    def eval_inputs(self, variant, rows, data):
        """(B, 1, H, W) pixels of `rows`' images under `data`, ink = 1, for `variant`."""
        from sonfolio.score.evaluate import inputs

        return inputs(variant, rows, data)

    def eval_scorer(self, cfg, data, tool, work):
        """Scores each variant's systems (SER, CER, errors by kind, compile rate) and writes
        side-by-side images (input, prediction render, truth render); `tool` is eval_tool's
        LilyPond, `work` a scratch folder for renders."""
        from sonfolio.score.evaluate import Scorer

        return Scorer(cfg, data, tool, work)

    # --- report ---

    # The eval's keys per split in the report's quality table (sonfolio.report.quality); the
    # first is the headline, plotted per variant and shown for QAT vs PTQ.
    report_quality = (
        "ser",
        "cer",
        "note_error_rate",
        "exact_match",
        "compile_rate",
        "clean_compile_rate",
        "delta_ser",
    )
    report_quality_label = "symbol error rate (SER, lower is better)"  # the headline's axis label
    # How the report shows a variant's samples (sonfolio.report.samples.VIEWS): the side-by-side
    # images the eval writes.
    eval_samples = "images"


TRACK = ScoreTrack()
