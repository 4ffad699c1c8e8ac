"""What every step asks a track: one typed face per step, the track interface in one place.

A track (score, speech) implements each face in its own module,
`sonfolio/<track>/steps/<step>.py`, as one object `FACE`; `sonfolio.tracks.face(name, step)`
loads it. A stage imports the face of its own step only, so its code deps (dvc.yaml, checked
by tests/test_dvc_yaml.py) are that module's import closure: an edit to a track's evaluation
reruns its eval, never its training. Faces import what they use inside their methods, so
loading one stays cheap. docs/architecture.md has the layer table and the step graph.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from sonfolio.evaluation import Decoded
    from sonfolio.tokenizer import BuiltTokenizer
    from sonfolio.train.setup import Training

Step = Literal["data", "tokenizer", "train", "qat", "export", "bench", "eval", "report", "infer"]
STEPS: tuple[Step, ...] = (
    "data",
    "tokenizer",
    "train",
    "qat",
    "export",
    "bench",
    "eval",
    "report",
    "infer",
)

# What a track's data build returns: the manifest's rows (one per file) and the data's stats.
BuiltData = tuple[list[dict[str, Any]], dict[str, Any]]


class DataFace(Protocol):
    """data@<track>: the dataset, its files and manifest rows."""

    name: str
    data_file: str  # the manifest column naming each row's file (the step hashes it)
    data_items: str  # what a row is (systems, utterances), for the metrics' `<items>_per_s`

    def build_data(self, cfg: Any, download_cache: Path, out: Path) -> BuiltData: ...


class TokenizerFace(Protocol):
    """tokenizer@<track>: the tokenizer (and processor) the model reads and writes with."""

    name: str
    text_columns: tuple[str, ...]  # the manifest's texts that must survive a round trip

    def build_tokenizer(
        self, cfg: Any, train: list[str], rows: list[dict[str, Any]]
    ) -> BuiltTokenizer: ...


class TrainFace(Protocol):
    """train@<track> (and qat and estimate, which time or reuse the same training)."""

    name: str

    def training(self, params: Any) -> Training: ...


class QatFace(Protocol):
    """qat@<track>: the trained model reloaded to train further under fake quantization."""

    name: str

    def load_trained(self, folder: Path) -> Any: ...


class ExportFace(Protocol):
    """export@<track>, and every runtime that loads a saved model back (sonfolio.variants,
    the bench's workers, the model card): optimum's task and the classes of a model folder."""

    name: str
    export_task: str  # optimum-onnx's task, with past key/values
    input_name: str  # the encoder's input
    pipeline_tag: str
    card_title: str
    card_summary: str
    card_data: str

    def register_classes(self, onnx: bool = False) -> None: ...

    def processor(self, folder: Path) -> Any:
        """The model folder's preprocessing in numpy, read from its preprocessor_config.json
        without transformers (score: the canvas; speech: the log-mel features).

        Raises:
            ValueError: the file is missing or asks for what the preprocessing does not do.
        """
        ...

    def torch_model_class(self) -> type: ...

    def ort_model_class(self) -> type: ...

    def processor_class(self) -> type: ...

    def ort_encoder_inputs(self, x: Any) -> dict[str, Any]: ...


class BenchFace(Protocol):
    """bench@<track>: inputs, quality and the gate of the speed bench, and its peers."""

    name: str
    gate_metric: str  # the quality key the bench's gate reads (lower is better)

    def bench_inputs(self, folder: Path, data: Path, rows: list[dict]) -> tuple[Any, list[str]]: ...

    def quality(self, refs: list[str], texts: list[str]) -> dict[str, float]: ...

    def max_increase(self, gate: Any) -> float: ...

    def quality_tokens(self, model: Path, decode_max_tokens: int) -> int: ...

    def bench_peers(self, gate: Any) -> tuple[list[str], dict[str, str]]: ...

    def bench_peer_base(self, gate: Any) -> Path | None: ...


class Scorer(Protocol):
    """A track's scoring of one variant's outputs on one split (EvalFace.eval_scorer)."""

    def score(self, decoded: Decoded, folder: Path) -> dict[str, Any]:
        """The split's metrics; writes predictions.jsonl and the track's samples into folder."""
        ...


class EvalFace(Protocol):
    """eval@<track>: every variant scored on the same samples."""

    name: str
    eval_delta_keys: tuple[str, ...]  # compared with the reference; quality.csv's columns
    eval_csv_extra: str  # one more quality.csv column

    def decode_options(self, cfg: Any) -> dict[str, Any]:
        """Keyword arguments of Variant.generate from the track's eval section (score:
        `constrained`), {} where the track decodes greedily only."""
        ...

    def search_workers(self, cfg: Any) -> int:
        """Processes a batch's decoding may spread over (1: this one)."""
        ...

    def decode_workers(self, cfg: Any) -> int:
        """Batches decoded side by side, a thread each (Variant.generate_batches; 1: one at a
        time)."""
        ...

    def eval_baselines(self, cfg: Any, model: Path, work: Path) -> list[Any]: ...

    def eval_tool(self, params: Any) -> Any: ...  # what the scorer runs outside Python, or None

    def eval_inputs(self, variant: Any, rows: list[dict], data: Path) -> Any: ...

    def eval_scorer(self, cfg: Any, data: Path, tool: Any, work: Path) -> Scorer: ...

    # the track's own figures beside the variants' (score: whole pages), or None
    def eval_extra(self, params: Any, paths: Any) -> Callable[[Path], dict[str, Any]] | None: ...


class ReportFace(Protocol):
    """report: how the page shows a track's quality and samples."""

    name: str
    report_quality: tuple[str, ...]  # eval keys per split; the first is the headline
    report_quality_label: str  # axis label of the headline metric (lower is better)
    gate_metric: str  # the quality key the bench writes per variant
    eval_delta_keys: tuple[str, ...]  # the eval's differences from the reference
    eval_samples: str  # how its eval samples are shown: a key of sonfolio.report.samples.VIEWS


class InferFace(Protocol):
    """Reading with an exported model (sonfolio.variants, the CLI and the service): how the
    app serves the track, settings that cannot work with a model, and the grammar a track
    decodes under, if any."""

    name: str
    command: str  # the CLI command and the service's route that read with this track's model
    model_flag: str  # `sonfolio serve`'s option naming its model folder

    def check_infer(self, processor: Any, cfg: Any) -> None: ...

    def grammar(self) -> Any:
        """The module that decodes under the track's grammar (its `Vocab`, `Carry`,
        `GreedyConstraint` and `ctc_decode`), or None: the track decodes greedily only."""
        ...
