"""Model cards (README.md in Hugging Face format) for the exported ONNX variants.

Rendered with huggingface_hub's ModelCard: YAML front matter (license, language, pipeline tag,
tags, and a `sonfolio` block with the base model, data, params and measured figures), then a
short body with how to load the folder and the numbers as a table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from huggingface_hub import ModelCard, ModelCardData

from sonfolio import cpu

if TYPE_CHECKING:
    from sonfolio.config.export import Export, TrackExport

TEMPLATE = """---
{{ card_data }}
---

# {{ title }}

{{ summary }}

- Base model: `{{ base_model }}` (trained by this project's `{{ train_stage }}` stage)
- Data: {{ data }}
- Variant: `{{ variant }}`: {{ route }}
- Export params: {{ params }}

## Load it

```python
from optimum.onnxruntime import {{ ort_class }}

model = {{ ort_class }}.from_pretrained("{{ hub_repo }}", subfolder="{{ variant }}")
```
{% if ctc %}
This model reads with its encoder's CTC head (`ctc_decoding: true` in config.json), not with
its decoder: `encoder_model.onnx` has a second output, `ctc_logits`; take the best label per
column, merge repeats and drop the pad id (the blank):

```python
import numpy as np, onnxruntime as ort
from transformers import AutoTokenizer

tok = AutoTokenizer.from_pretrained("{{ hub_repo }}", subfolder="{{ variant }}")
enc = ort.InferenceSession("encoder_model.onnx")  # the file from this folder
# pixels: (B, 1, H, W) float32 in [0, 1], ink = 1, padded to the processor's size
best = enc.run(["ctc_logits"], {"pixel_values": pixels})[0].argmax(-1)
ids = [[t for i, t in enumerate(r) if t != tok.pad_token_id and (i == 0 or t != r[i - 1])]
       for r in best]
print(tok.batch_decode(ids, skip_special_tokens=True))
```
{% endif %}
## Measured (by the `{{ export_stage }}` stage)

| file | bytes |
|---|---|
{% for name, size in files.items() %}| {{ name }} | {{ size }} |
{% endfor %}| total | {{ total }} |

Size vs the FP32 ONNX export: {{ size_ratio }}x. MatMul / Gemm nodes with an FP32 weight:
{{ fp32_weights }}; quantized matmul nodes: {{ quantized }} (subgraphs included). Latency and
quality: `{{ bench_stage }}`'s metrics (`dvc metrics show`), measured on the same test inputs
for every variant.
{% if int8_weights %}
int8 weights: {{ int8_weights }}. A model with 8-bit weights reads worse on x86 CPUs without
VNNI or AMX (ONNX Runtime's int8 MatMul saturates there); `sonfolio doctor` says whether the
CPU at hand is one.
{% endif %}
Exported on: {{ exported_on }}.
"""


def render(
    track: Any, card: TrackExport, cfg: Export, variant: str, base_model: str, figures: dict
) -> str:
    """The README.md of one variant folder of `track` (its export face)."""
    checks = figures.get("weight_check", {})
    data = ModelCardData(
        license=card.license,
        language=card.language or None,
        library_name="onnx",
        pipeline_tag=track.pipeline_tag,
        tags=["onnx", "optimum", "onnxruntime", variant, "sonfolio"],
        sonfolio={
            "base_model": base_model,
            "data": track.card_data,
            "variant": variant,
            "route": figures["route"],
            "decoding": figures.get("decoding", "attention"),
            "export_params": cfg.model_dump(),
            "metrics": {
                "bytes": figures["bytes"],
                "size_ratio_to_fp32": figures["size_ratio"],
                "fp32_weight_matmuls": sum(c["fp32_weight_matmuls"] for c in checks.values()),
                "quantized_matmuls": sum(c["quantized_matmuls"] for c in checks.values()),
                "int8_weights": figures.get("int8_weights"),
            },
            "exported_on_cpu": figures.get("exported_on"),
        },
    )
    return ModelCard.from_template(
        data,
        template_str=TEMPLATE,
        title=f"{track.card_title} ({variant})",
        summary=track.card_summary,
        base_model=base_model,
        train_stage=f"train@{track.name}",
        data=track.card_data,
        variant=variant,
        route=figures["route"],
        params=", ".join(f"{k}={v}" for k, v in cfg.model_dump().items()),
        ort_class=track.ort_model_class().__name__,
        hub_repo=card.hub_repo,
        export_stage=f"export@{track.name}",
        bench_stage=f"bench@{track.name}",
        files=figures["files"],
        total=figures["bytes"],
        size_ratio=figures["size_ratio"],
        fp32_weights=sum(c["fp32_weight_matmuls"] for c in checks.values()),
        quantized=sum(c["quantized_matmuls"] for c in checks.values()),
        ctc=figures.get("decoding") == "ctc",
        int8_weights=cpu.describe(figures.get("int8_weights")),
        exported_on=figures.get("exported_on", "not recorded"),
    ).content
