"""A convolutional encoder for staff systems: conv blocks, then sequence layers along the staff.

The ViT encoder reads a system as 80 whole-height columns and learns slowly from a few
thousand images on a CPU: nothing in it knows that a note head is a small blob at a height.
The readers of monophonic staves that learn fast (CRNN: Shi et al. 2016; Calvo-Zaragoza and
Rizo 2018 on printed incipits) put convolutions first: 3x3 blocks find heads, stems, beams
and staff lines wherever they are, pooling halves the height each block and the width only in
the first blocks, and the column that is left at each x is one frame for the sequence layers
and the CTC head. So the frames stay in reading order, one every 4 px of the image here: twice
the ViT's 80 over a 640-px line, room for a dense bar's symbols.

It is a transformers model (`ScoreConvConfig`, `ScoreConvModel`, registered with the Auto
classes as "sonfolio-conv"), so a VisionEncoderDecoderModel holds it as its encoder, saves and
loads with save_pretrained / from_pretrained, and the export stage exports it with optimum
(sonfolio.score.model.conv_onnx registers its ONNX config). Written here because transformers
has no CRNN-style vision encoder whose output is one sequence along the image's width.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel, ViTConfig
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.vit.modeling_vit import ViTEncoder

MODEL_TYPE = "sonfolio-conv"


class ScoreConvConfig(PretrainedConfig):
    """`channels`: a stem's width (a 3x3 conv with stride 2), then each block's (a depthwise
    3x3 conv with stride 2 in height, and in width for the first `width_pools` - 1 blocks,
    then a 1x1 conv: MobileNet's separable block, the cheap convolution CRNN readers use on a
    CPU); then `num_hidden_layers` transformer layers of `hidden_size` over the frames."""

    model_type = MODEL_TYPE

    # every setting and its default (what a saved config.json holds)
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "image_size": [96, 640],
        "num_channels": 1,
        "channels": [16, 32, 64, 96, 128],
        "width_pools": 2,
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "layer_norm_eps": 1e-6,
    }

    def __init__(self, **kwargs: Any) -> None:
        for key, default in self.DEFAULTS.items():
            value = kwargs.pop(key, default)
            setattr(self, key, list(value) if isinstance(value, tuple) else value)
        super().__init__(**kwargs)

    @property
    def frames(self) -> int:
        """Frames (sequence positions) per image: the width after the width pools."""
        return self.image_size[1] // 2**self.width_pools

    @property
    def rows_left(self) -> int:
        """Pixel rows left at the last block (folded into each frame)."""
        return max(1, self.image_size[0] // 2 ** len(self.channels))


def sequence_config(config: ScoreConvConfig) -> ViTConfig:
    """The ViT layers' own config, from the encoder's."""
    shared = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps")  # fmt: skip
    vit = ViTConfig(**{key: getattr(config, key) for key in shared})
    vit._attn_implementation = config._attn_implementation or "sdpa"
    return vit


class _Block(nn.Sequential):
    """A separable block: depthwise 3x3 (strided), then pointwise 1x1; batch norm and GELU."""

    def __init__(self, cin: int, cout: int, stride: tuple[int, int]) -> None:
        super().__init__(
            nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False),
            nn.BatchNorm2d(cin),
            nn.GELU(),
            nn.Conv2d(cin, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.GELU(),
        )


class ScoreConvModel(PreTrainedModel):
    config_class = ScoreConvConfig
    main_input_name = "pixel_values"
    base_model_prefix = "conv"
    _supports_sdpa = True

    def __init__(self, config: ScoreConvConfig) -> None:
        super().__init__(config)
        first = config.channels[0]
        blocks: list[nn.Module] = [
            nn.Sequential(
                nn.Conv2d(config.num_channels, first, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(first),
                nn.GELU(),
            )
        ]
        cin = first
        for k, cout in enumerate(config.channels[1:], 2):
            blocks.append(_Block(cin, cout, (2, 2) if k <= config.width_pools else (2, 1)))
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        # each frame: the last block's rows at one x, flattened (height stays meaningful:
        # the pitch of a note is where it is)
        self.project = nn.Linear(cin * config.rows_left, config.hidden_size)
        self.position = nn.Parameter(torch.zeros(1, config.frames, config.hidden_size))
        # the sequence layers are ViT's (pre-norm transformer layers with SDPA attention), which
        # optimum, the quantizers and the ONNX runtime know
        self.layers = ViTEncoder(sequence_config(config))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.trunc_normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, ScoreConvModel):
            nn.init.trunc_normal_(module.position, std=0.02)

    def get_input_embeddings(self) -> nn.Module:
        return self.blocks[0]

    def forward(
        self,
        pixel_values: torch.Tensor,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: object,
    ) -> BaseModelOutput | tuple[torch.Tensor]:
        x = self.blocks(pixel_values)  # (B, C, rows, frames)
        b, c, h, w = x.shape
        x = x.permute(0, 3, 1, 2).reshape(b, w, c * h)  # (B, frames, C * rows)
        x = self.project(x) + self.position[:, :w]
        x = self.norm(self.layers(x).last_hidden_state)
        if return_dict is False:
            return (x,)
        return BaseModelOutput(last_hidden_state=x)


AutoConfig.register(MODEL_TYPE, ScoreConvConfig)
AutoModel.register(ScoreConvConfig, ScoreConvModel)


def register_onnx() -> None:
    """Tell optimum how to export the encoder (as it exports ViT: pixel_values in,
    last_hidden_state out); the export stage calls it before optimum's main_export."""
    from optimum.exporters.onnx.model_configs import ViTOnnxConfig
    from optimum.exporters.tasks import TasksManager

    if MODEL_TYPE in TasksManager._SUPPORTED_MODEL_TYPE:  # noqa: SLF001 - optimum's registry
        return

    class ScoreConvOnnxConfig(ViTOnnxConfig):
        pass

    TasksManager.create_register("onnx")(MODEL_TYPE, "feature-extraction")(ScoreConvOnnxConfig)
