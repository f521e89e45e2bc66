"""ResNets with PerAda residual adapters (HEART-PFL, PerAda) on a frozen, optionally pretrained backbone.

An adapter is `x + Conv1x1(Dropout(BN(x)))` with the 1x1 convolution initialised near zero, so a fresh adapter is
almost the identity. Each basic block gets `adapter1` after conv1 and `adapter2` after conv2 (before bn1/bn2).
Trainable: every adapter, every `bn1`/`bn2` (the blocks' and the stem's) and the classifier; the convolutions
and the downsample BatchNorms stay frozen (docs/methods.md 2.1). Pretrained weights come from a torchvision-format
ResNet state-dict file (`conv1.weight`, `layer1.0.bn1.bias`, ..., `fc.weight`); `fc` is never loaded.
"""

from __future__ import annotations

import functools
import os
from collections import OrderedDict
from pathlib import Path
from typing import Iterable, Optional, Sequence

import torch
from torch import nn

from pfedkit.errors import ConfigError
from pfedkit.models.base import SplitModel
from pfedkit.models.resnet import STEMS, BasicBlock

BN_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")
TRAINABLE_PARTS = ("bn1", "bn2")  # besides adapters and the head; the code's `update_layer_name`


class Adapter(nn.Module):
    """PerAda's residual adapter: out = x + Conv1x1(Dropout(BN(x)))."""

    def __init__(self, channels: int, dropout: float = 0.3):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.drop = nn.Dropout(dropout)
        self.conv = nn.Conv2d(channels, channels, 1, bias=False)
        nn.init.normal_(self.conv.weight, 0.0, 1e-4)  # starts at about the identity (docs/methods.md 2.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(self.drop(self.bn(x)))


class AdapterBlock(BasicBlock):
    """BasicBlock with `adapter1` after conv1 and `adapter2` after conv2, each before its BatchNorm."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1, dropout: float = 0.3):
        super().__init__(in_planes, planes, stride)
        self.adapter1 = Adapter(planes, dropout)
        self.adapter2 = Adapter(planes, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.adapter1(self.conv1(x))))
        out = self.bn2(self.adapter2(self.conv2(out)))
        return self.relu(out + identity)


class StagedResNet(SplitModel):
    """A ResNet split into body and head that can also return the pooled output of every stage (layer1..N)."""

    def stages(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(logits, [global-average-pooled output of each stage]) from one forward pass."""
        pooled = []
        for name, module in self.body.named_children():
            x = module(x)
            if name.startswith("layer"):
                pooled.append(x.mean(dim=(2, 3)))
        return self.head(x), pooled


def is_trainable(name: str) -> bool:
    """Adapters, bn1/bn2 (stem and blocks) and the head: the set HEART-PFL and PerAda train and communicate."""
    parts = name.split(".")
    return parts[0] == "head" or any(p.startswith("adapter") or p in TRAINABLE_PARTS for p in parts)


def trainable_names(model: nn.Module) -> list[str]:
    return [n for n, _ in model.named_parameters() if is_trainable(n)]


def batchnorm_buffer_names(model: nn.Module) -> list[str]:
    return [
        f"{prefix}.{b}"
        for prefix, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
        for b in BN_BUFFERS
    ]


def adapter_state_names(model: nn.Module) -> list[str]:
    """What an adapter state holds: the trainable parameters and every BatchNorm running statistic (our choice:
    the frozen downsample BatchNorms' statistics travel too, so eval-mode statistics follow the trained features)."""
    names = set(trainable_names(model)) | set(batchnorm_buffer_names(model))
    return [k for k in model.state_dict() if k in names]


def count_trainable(model: nn.Module) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if is_trainable(n))


@functools.lru_cache(maxsize=4)
def _read_state_dict(path: str, mtime: float) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a corrupt or non-torch file: say which and what it must be
        raise ConfigError(
            f"cannot read pretrained weights {path}: {err}; it must be a state dict saved by "
            "torch.save (e.g. by `pfedkit pretrain`)"
        ) from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"pretrained weights {path} are not a state dict (a mapping of names to tensors)")
    return state


def load_backbone(model: SplitModel, path: str | os.PathLike, bn_stats: bool = False) -> None:
    """Copy a torchvision-format state dict into the body (every parameter but `fc`, and the BatchNorm running
    statistics only if `bn_stats`: the HEART-PFL code does not copy them, docs/methods.md 2.1)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"pretrained weights {path} not found; give a torchvision-format ResNet state-dict file "
            'in model.options.pretrained (make one with `pfedkit pretrain`), or "" for random init'
        )
    state = _read_state_dict(str(path), path.stat().st_mtime)
    own = {k: v for k, v in model.body.state_dict().items() if "adapter" not in k}
    given = {k: v for k, v in state.items() if not k.startswith("fc.")}
    missing = sorted(k for k in own if k not in given and (bn_stats or k.rsplit(".", 1)[-1] not in BN_BUFFERS))
    unexpected = sorted(k for k in given if k not in own)
    mismatched = sorted(
        f"{k}: file {tuple(given[k].shape)} vs model {tuple(own[k].shape)}"
        for k in own
        if k in given and given[k].shape != own[k].shape
    )
    if missing or unexpected or mismatched:
        problems = [
            f"{label} ({len(keys)}): {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}"
            for label, keys in (
                ("missing keys", missing),
                ("unexpected keys", unexpected),
                ("shape mismatches", mismatched),
            )
            if keys
        ]
        raise ConfigError(
            f"pretrained weights {path} do not fit this model: "
            + "; ".join(problems)
            + ". The file must be a torchvision-format state dict of the same architecture "
            "(same widths and blocks; `fc.*` is ignored), e.g. saved by `pfedkit pretrain` with "
            "the same model options"
        )
    copied = {k: given[k] for k in own if k in given and (bn_stats or k.rsplit(".", 1)[-1] not in BN_BUFFERS)}
    model.body.load_state_dict({**model.body.state_dict(), **copied})


def backbone_state(model: SplitModel) -> dict[str, torch.Tensor]:
    """The model's weights in torchvision format (body keys unprefixed, the head as `fc`), adapters left out."""
    out = {k: v.detach().clone() for k, v in model.body.state_dict().items() if "adapter" not in k}
    out.update({f"fc.{k}": v.detach().clone() for k, v in model.head.state_dict().items()})
    return out


def _resnet(
    input_shape: tuple[int, int, int],
    num_classes: int,
    widths: Sequence[int],
    blocks: int,
    stem: str,
    adapters: bool,
    dropout: float,
    pretrained: str,
    pretrained_bn_stats: bool,
    stem_stride: int = 1,
    frozen_backbone: bool = False,
) -> StagedResNet:
    channels = input_shape[0]
    if stem == "imagenet":
        first = OrderedDict(
            conv1=nn.Conv2d(channels, widths[0], 7, stride=2, padding=3, bias=False),
            bn1=nn.BatchNorm2d(widths[0]),
            relu=nn.ReLU(inplace=True),
            maxpool=nn.MaxPool2d(3, stride=2, padding=1),
        )
    else:
        first = OrderedDict(
            conv1=nn.Conv2d(channels, widths[0], 3, stride=stem_stride, padding=1, bias=False),
            bn1=nn.BatchNorm2d(widths[0]),
            relu=nn.ReLU(inplace=True),
        )
    layers, in_planes = OrderedDict(), widths[0]
    for i, planes in enumerate(widths):
        stride = 1 if i == 0 else 2
        stage = []
        for b in range(blocks):
            args = (in_planes if b == 0 else planes, planes, stride if b == 0 else 1)
            stage.append(AdapterBlock(*args, dropout=dropout) if adapters else BasicBlock(*args))
        layers[f"layer{i + 1}"] = nn.Sequential(*stage)
        in_planes = planes
    body = nn.Sequential(OrderedDict(**first, **layers, avgpool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten()))
    for name, module in body.named_modules():  # torchvision's init; the adapters keep their near-zero init
        if isinstance(module, nn.Conv2d) and "adapter" not in name:
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    model = StagedResNet(body, nn.Linear(widths[-1], num_classes), feature_dim=widths[-1])
    if pretrained:
        load_backbone(model, pretrained, pretrained_bn_stats)
    if frozen_backbone:  # any method then trains what the adapter methods train (the frozen-backbone control)
        for name, param in model.named_parameters():
            param.requires_grad_(is_trainable(name))
    return model


def _check(
    name: str,
    dropout: float,
    pretrained: str,
    adapters: bool,
    stem: Optional[str] = None,
    frozen_backbone: bool = False,
) -> None:
    if not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ConfigError(f"model {name!r}: `dropout` must be in [0, 1), got {dropout!r}")
    if not isinstance(pretrained, str):
        raise ConfigError(f'model {name!r}: `pretrained` must be a file path string ("" for none), got {pretrained!r}')
    if not isinstance(adapters, bool):
        raise ConfigError(f"model {name!r}: `adapters` must be true or false, got {adapters!r}")
    if not isinstance(frozen_backbone, bool):
        raise ConfigError(f"model {name!r}: `frozen_backbone` must be true or false, got {frozen_backbone!r}")
    if stem is not None and stem not in STEMS:
        raise ConfigError(f"model {name!r}: `stem` must be one of {', '.join(STEMS)}, got {stem!r}")


def resnet18_adapter(
    input_shape: tuple[int, int, int],
    num_classes: int,
    stem: str = "imagenet",
    adapters: bool = True,
    dropout: float = 0.3,
    pretrained: str = "",
    pretrained_bn_stats: bool = False,
    frozen_backbone: bool = False,
) -> StagedResNet:
    """ResNet-18 (64/128/256/512, two blocks a stage) with 16 adapters; `adapters = false` gives the plain
    (optionally pretrained) ResNet-18 that full-model baselines fine-tune; `frozen_backbone = true` leaves only the
    adapters, bn1/bn2 and the head trainable for any method (HEART-PFL and PerAda freeze the rest themselves)."""
    _check("resnet18-adapter", dropout, pretrained, adapters, stem, frozen_backbone)
    return _resnet(
        input_shape,
        num_classes,
        (64, 128, 256, 512),
        2,
        stem,
        adapters,
        dropout,
        pretrained,
        pretrained_bn_stats,
        frozen_backbone=frozen_backbone,
    )


def small_resnet_adapter(
    input_shape: tuple[int, int, int],
    num_classes: int,
    widths: Iterable[int] = (8, 16, 32, 64),
    blocks: int = 1,
    stem_stride: int = 2,
    adapters: bool = True,
    dropout: float = 0.3,
    pretrained: str = "",
    pretrained_bn_stats: bool = False,
    frozen_backbone: bool = False,
) -> StagedResNet:
    """A narrow ResNet of the same adapter design for 28x28 inputs: a 3x3 stem (stride 2 by default: half the
    time of stride 1 on a CPU), one stage per width (stride 2 after the first), `blocks` basic blocks a stage.
    Our stand-in for ResNet-18 in CPU-sized runs; `frozen_backbone` as for resnet18-adapter."""
    _check("small-resnet-adapter", dropout, pretrained, adapters, frozen_backbone=frozen_backbone)
    widths = tuple(widths) if isinstance(widths, (list, tuple)) else ()
    if not 2 <= len(widths) <= 4 or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths):
        raise ConfigError(f"model 'small-resnet-adapter': `widths` must be 2 to 4 positive integers, got {widths!r}")
    if not isinstance(blocks, int) or isinstance(blocks, bool) or blocks < 1:
        raise ConfigError(f"model 'small-resnet-adapter': `blocks` must be a positive integer, got {blocks!r}")
    if stem_stride not in (1, 2) or isinstance(stem_stride, bool):
        raise ConfigError(f"model 'small-resnet-adapter': `stem_stride` must be 1 or 2, got {stem_stride!r}")
    return _resnet(
        input_shape,
        num_classes,
        widths,
        blocks,
        "cifar",
        adapters,
        dropout,
        pretrained,
        pretrained_bn_stats,
        stem_stride,
        frozen_backbone,
    )
