"""ResNet-18 (BasicBlock, [2, 2, 2, 2]) with the standard layout and init; body ends at the pooled 512-d feature."""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from pfedkit.models.base import SplitModel

STEMS = ("imagenet", "cifar")


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 conv-BN when the shape changes) shortcut."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


def _layer(in_planes: int, planes: int, stride: int) -> nn.Sequential:
    return nn.Sequential(BasicBlock(in_planes, planes, stride), BasicBlock(planes, planes, 1))


def resnet18(input_shape: tuple[int, int, int], num_classes: int, stem: str = "imagenet") -> SplitModel:
    """`stem="imagenet"`: 7x7/2 conv + 3x3/2 max-pool (as PFLlib uses even on 32x32); `"cifar"`: one 3x3/1 conv."""
    channels = input_shape[0]
    if stem == "imagenet":
        first = OrderedDict(
            conv1=nn.Conv2d(channels, 64, 7, stride=2, padding=3, bias=False),
            bn1=nn.BatchNorm2d(64),
            relu=nn.ReLU(inplace=True),
            maxpool=nn.MaxPool2d(3, stride=2, padding=1),
        )
    else:
        first = OrderedDict(
            conv1=nn.Conv2d(channels, 64, 3, stride=1, padding=1, bias=False),
            bn1=nn.BatchNorm2d(64),
            relu=nn.ReLU(inplace=True),
        )
    body = nn.Sequential(
        OrderedDict(
            **first,
            layer1=_layer(64, 64, 1),
            layer2=_layer(64, 128, 2),
            layer3=_layer(128, 256, 2),
            layer4=_layer(256, 512, 2),
            avgpool=nn.AdaptiveAvgPool2d(1),
            flatten=nn.Flatten(),
        )
    )
    # Same init as torchvision: He-normal (fan_out) convs, BN at identity; the Linear head keeps its default init.
    for module in body.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    return SplitModel(body, nn.Linear(512, num_classes), feature_dim=512)
