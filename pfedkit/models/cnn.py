"""Small CNNs and an MLP from the pFL literature, each split into a feature body and a linear head."""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from pfedkit.errors import ConfigError
from pfedkit.models.base import SplitModel

# A spatial op is (kernel, stride, padding); convolutions and 2x2 max-pools both shrink H and W this way.
POOL = (2, 2, 0)


def spatial_out(size: int, ops: list[tuple[int, int, int]]) -> int:
    """Side length after `ops`, or 0 once any op gets an input smaller than its kernel."""
    for kernel, stride, padding in ops:
        padded = size + 2 * padding
        if padded < kernel:
            return 0
        size = (padded - kernel) // stride + 1
    return size


def check_size(name: str, input_shape: tuple[int, int, int], ops: list[tuple[int, int, int]]) -> tuple[int, int]:
    """Output (H, W) of the conv stack; a ConfigError naming the smallest side it accepts if the input is too small."""
    _, height, width = input_shape
    out = spatial_out(height, ops), spatial_out(width, ops)
    if min(out) < 1:
        smallest = next(s for s in range(1, 1024) if spatial_out(s, ops) >= 1)
        alternatives = "'mlp' (any shape)" if name == "smallcnn" else "'smallcnn' (>= 4x4) or 'mlp' (any shape)"
        raise ConfigError(
            f"model {name!r} cannot take input shape {tuple(input_shape)}: height and width must each be at least "
            f"{smallest}; use {alternatives} for smaller inputs"
        )
    return out


def fedavgcnn(input_shape: tuple[int, int, int], num_classes: int) -> SplitModel:
    """PFLlib's FedAvgCNN: two 5x5 convs and a 512-unit hidden layer; the hidden layer's ReLU output is the feature."""
    channels = input_shape[0]
    h, w = check_size("fedavgcnn", input_shape, [(5, 1, 0), POOL, (5, 1, 0), POOL])
    body = nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(channels, 32, 5),
            relu1=nn.ReLU(),
            pool1=nn.MaxPool2d(2),
            conv2=nn.Conv2d(32, 64, 5),
            relu2=nn.ReLU(),
            pool2=nn.MaxPool2d(2),
            flatten=nn.Flatten(),
            fc1=nn.Linear(64 * h * w, 512),
            relu3=nn.ReLU(),
        )
    )
    return SplitModel(body, nn.Linear(512, num_classes), feature_dim=512)


def fedpac_fmnist(input_shape: tuple[int, int, int], num_classes: int) -> SplitModel:
    """FedPAC's CNN_FMNIST (800-d flatten on 1x28x28); fc1's LeakyReLU output is the 128-d feature."""
    channels = input_shape[0]
    h, w = check_size("fedpac-fmnist", input_shape, [(5, 1, 0), POOL, (5, 1, 1), POOL])
    body = nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(channels, 16, 5),
            act1=nn.LeakyReLU(),
            pool1=nn.MaxPool2d(2),
            conv2=nn.Conv2d(16, 32, 5, padding=1),
            act2=nn.LeakyReLU(),
            pool2=nn.MaxPool2d(2),
            flatten=nn.Flatten(),
            fc1=nn.Linear(32 * h * w, 128),
            act3=nn.LeakyReLU(),
        )
    )
    return SplitModel(body, nn.Linear(128, num_classes), feature_dim=128)


def fedpac_cifar(input_shape: tuple[int, int, int], num_classes: int) -> SplitModel:
    """FedPAC's CifarCNN (576-d flatten on 3x32x32); fc1's LeakyReLU output is the 128-d feature."""
    channels = input_shape[0]
    h, w = check_size("fedpac-cifar", input_shape, [(5, 1, 0), POOL, (5, 1, 1), POOL, (3, 1, 1), POOL])
    body = nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(channels, 16, 5),
            act1=nn.LeakyReLU(),
            pool1=nn.MaxPool2d(2),
            conv2=nn.Conv2d(16, 32, 5, padding=1),
            act2=nn.LeakyReLU(),
            pool2=nn.MaxPool2d(2),
            conv3=nn.Conv2d(32, 64, 3, padding=1),
            act3=nn.LeakyReLU(),
            pool3=nn.MaxPool2d(2),
            flatten=nn.Flatten(),
            fc1=nn.Linear(64 * h * w, 128),
            act4=nn.LeakyReLU(),
        )
    )
    return SplitModel(body, nn.Linear(128, num_classes), feature_dim=128)


def smallcnn(input_shape: tuple[int, int, int], num_classes: int) -> SplitModel:
    """Two padded 3x3 convs: ~20k parameters on 8x8 digits, so a CPU demo trains in seconds."""
    channels = input_shape[0]
    h, w = check_size("smallcnn", input_shape, [(3, 1, 1), POOL, (3, 1, 1), POOL])
    body = nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(channels, 16, 3, padding=1),
            relu1=nn.ReLU(),
            pool1=nn.MaxPool2d(2),
            conv2=nn.Conv2d(16, 32, 3, padding=1),
            relu2=nn.ReLU(),
            pool2=nn.MaxPool2d(2),
            flatten=nn.Flatten(),
            fc1=nn.Linear(32 * h * w, 128),
            relu3=nn.ReLU(),
        )
    )
    return SplitModel(body, nn.Linear(128, num_classes), feature_dim=128)


def mlp(input_shape: tuple[int, int, int], num_classes: int, hidden: int = 128) -> SplitModel:
    """Two hidden ReLU layers on the flattened input; takes any shape."""
    channels, height, width = input_shape
    body = nn.Sequential(
        OrderedDict(
            flatten=nn.Flatten(),
            fc1=nn.Linear(channels * height * width, hidden),
            relu1=nn.ReLU(),
            fc2=nn.Linear(hidden, hidden),
            relu2=nn.ReLU(),
        )
    )
    return SplitModel(body, nn.Linear(hidden, num_classes), feature_dim=hidden)
