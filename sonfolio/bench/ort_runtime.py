"""The ORT runtime of the bench: an ONNX variant through optimum's ORTModel and HF generate."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sonfolio.bench.case import Spec
from sonfolio.bench.torch_runtime import TorchRuntime
from sonfolio.ctc_format import folder_decoding
from sonfolio.infer.ortloop import OrtCtc, set_spinning


class OrtRuntime(TorchRuntime):
    """An ONNX folder through optimum's ORTModel: HF generate over ORT sessions (or the
    encoder's ctc_logits output for a model read by its CTC head)."""

    def __init__(self, spec: Spec) -> None:
        import onnxruntime
        import torch

        from sonfolio import tracks
        from sonfolio.export.layout import validate_variant

        validate_variant(Path(spec.case.folder))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = spec.threads
        options.inter_op_num_threads = 1
        set_spinning(options, spec.spin_wait)
        self.face = tracks.face(spec.track, "export")
        self.model = self.face.ort_model_class().from_pretrained(
            spec.case.folder, session_options=options, use_io_binding=spec.io_binding
        )
        self.torch, self.dtype = torch, torch.float32
        reads, blank = folder_decoding(Path(spec.case.folder))
        self.ctc = OrtCtc(self.model.encoder.session, blank) if reads else None

    def encode(self, x: np.ndarray) -> None:
        self.model.encoder(**self.face.ort_encoder_inputs(self.tensor(x)))

    def generate(self, x: np.ndarray, new: int, forced: bool) -> list[list[int]]:
        if self.ctc is not None:  # the encoder session's ctc_logits output
            return self.ctc.generate(x, new)
        return super().generate(x, new, forced)
