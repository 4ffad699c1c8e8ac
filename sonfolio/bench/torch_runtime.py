"""The torch runtime of the bench: a saved model's HF generate (FP32 or bf16) in a worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sonfolio.bench.case import Spec


class TorchRuntime:
    """A torch folder through the track's model class and HF generate (or its CTC head)."""

    def __init__(self, spec: Spec) -> None:
        import torch

        from sonfolio import ctc_head as ctc
        from sonfolio import tracks

        torch.set_num_threads(spec.threads)
        cls = tracks.face(spec.track, "export").torch_model_class()
        self.dtype = torch.bfloat16 if spec.case.dtype == "bf16" else torch.float32
        model = cls.from_pretrained(spec.case.folder, dtype=self.dtype)
        self.model = ctc.load_head(model, Path(spec.case.folder)).eval()
        self.torch = torch
        # sonfolio.train.ctc where the model is read by its CTC head, else None
        self.ctc = ctc if ctc.decodes_with_ctc(model.config) else None

    def tensor(self, x: np.ndarray) -> Any:
        return self.torch.from_numpy(x).to(self.dtype)

    def encode(self, x: np.ndarray) -> None:
        with self.torch.inference_mode():
            self.model.get_encoder()(self.tensor(x))

    def generate(self, x: np.ndarray, new: int, forced: bool) -> list[list[int]]:
        if self.ctc is not None:  # read by the CTC head: no decoder steps to force
            return self.ctc.greedy(self.model, self.tensor(x), new)
        kw = {"min_new_tokens": new} if forced else {}
        with self.torch.inference_mode():
            ids = self.model.generate(
                self.tensor(x), max_new_tokens=new, num_beams=1, do_sample=False, **kw
            )
        return ids.tolist()


def bf16_support() -> tuple[bool, str]:
    """(available, reason): torch bf16 on this device."""
    import torch

    if torch.cuda.is_available():
        ok = torch.cuda.is_bf16_supported()
        return ok, f"CUDA device {'supports' if ok else 'lacks'} bf16"
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    native = [f for f in ("amx_bf16", "avx512_bf16") if f in flags.split()]
    if native:
        return True, f"CPU has {', '.join(native)}"
    return False, "this CPU has neither avx512_bf16 nor amx_bf16: bf16 matmuls would be emulated"
