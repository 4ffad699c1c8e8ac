"""Model cards (README.md in Hugging Face format) for the exported ONNX variants.

Rendered with huggingface_hub's ModelCard: YAML front matter (license, language, pipeline tag,
tags, and a `sonfolio` block with the base model, data, params and measured figures), then a
short body with how to load the folder and the numbers as a table.
"""

from __future__ import annotations

from typing import Any

from huggingface_hub import ModelCard, ModelCardData

from sonfolio.config import Export, TrackExport

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

## Measured (by the `{{ export_stage }}` stage)

| file | bytes |
|---|---|
{% for name, size in files.items() %}| {{ name }} | {{ size }} |
{% endfor %}| total | {{ total }} |

Size vs the FP32 ONNX export: {{ size_ratio }}x. MatMul / Gemm nodes with an FP32 weight:
{{ fp32_weights }}; quantized matmul nodes: {{ quantized }} (subgraphs included). Latency and
quality: `{{ bench_stage }}`'s metrics (`dvc metrics show`), measured on the same test inputs
for every variant.
"""


def render(
    track: Any, card: TrackExport, cfg: Export, variant: str, base_model: str, figures: dict
) -> str:
    """The README.md of one variant folder. `track` is a sonfolio.export.TrackSpec."""
    checks = figures.get("weight_check", {})
    data = ModelCardData(
        license=card.license,
        language=card.language or None,
        library_name="onnx",
        pipeline_tag=track.pipeline_tag,
        tags=["onnx", "optimum", "onnxruntime", variant, "sonfolio"],
        sonfolio={
            "base_model": base_model,
            "data": track.data,
            "variant": variant,
            "route": figures["route"],
            "export_params": cfg.model_dump(),
            "metrics": {
                "bytes": figures["bytes"],
                "size_ratio_to_fp32": figures["size_ratio"],
                "fp32_weight_matmuls": sum(c["fp32_weight_matmuls"] for c in checks.values()),
                "quantized_matmuls": sum(c["quantized_matmuls"] for c in checks.values()),
            },
        },
    )
    return ModelCard.from_template(
        data,
        template_str=TEMPLATE,
        title=f"{track.title} ({variant})",
        summary=track.summary,
        base_model=base_model,
        train_stage=track.train_stage,
        data=track.data,
        variant=variant,
        route=figures["route"],
        params=", ".join(f"{k}={v}" for k, v in cfg.model_dump().items()),
        ort_class=track.ort_class,
        hub_repo=card.hub_repo,
        export_stage=track.export_stage,
        bench_stage=track.bench_stage,
        files=figures["files"],
        total=figures["bytes"],
        size_ratio=figures["size_ratio"],
        fp32_weights=sum(c["fp32_weight_matmuls"] for c in checks.values()),
        quantized=sum(c["quantized_matmuls"] for c in checks.values()),
    ).content
