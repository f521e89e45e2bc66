"""train.augment = "crop-flip": FedPAC's CIFAR augmentation, seeded, on training batches only."""

from __future__ import annotations

import torch

from pfedkit.methods.augment import BLACK, PAD, crop_flip
from pfedkit.records import ClientData
from tests.conftest import make


def test_crop_flip_equals_padding_cropping_and_mirroring_by_hand():
    x = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).reshape(2, 3, 6, 6)
    got = crop_flip(x, torch.Generator().manual_seed(7))
    draws = torch.Generator().manual_seed(7)  # the same draws, in the same order: rows, columns, flips
    dy = torch.randint(0, 2 * PAD + 1, (2,), generator=draws)
    dx = torch.randint(0, 2 * PAD + 1, (2,), generator=draws)
    flip = torch.rand(2, generator=draws) < 0.5
    for i in range(2):
        canvas = torch.full((3, 6 + 2 * PAD, 6 + 2 * PAD), BLACK)
        canvas[:, PAD : PAD + 6, PAD : PAD + 6] = x[i]
        crop = canvas[:, dy[i] : dy[i] + 6, dx[i] : dx[i] + 6]
        assert torch.equal(got[i], crop.flip(-1) if flip[i] else crop)
    assert got.shape == x.shape


def image_client() -> ClientData:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(12, 3, 8, 8, generator=g) * 2 - 1
    y = torch.randint(0, 2, (12,), generator=g)
    return ClientData(0, x, y, x.clone(), y.clone(), num_classes=2)


def test_batches_are_augmented_only_when_asked_and_in_the_same_order():
    data = image_client()
    plain = list(make("fedavg").minibatches(data, 3, "train"))
    augmented = list(make("fedavg", augment="crop-flip").minibatches(data, 3, "train"))
    again = list(make("fedavg", augment="crop-flip").minibatches(data, 3, "train"))
    assert all(torch.equal(p[1], a[1]) for p, a in zip(plain, augmented))  # the same samples in the same order
    assert not all(torch.equal(p[0], a[0]) for p, a in zip(plain, augmented))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(augmented, again))  # seeded: a rerun draws the same crops
    order = torch.cat([y for _, y in plain])
    assert torch.equal(order, torch.cat([y for _, y in augmented]))


def test_flat_inputs_are_never_augmented():
    data = ClientData(
        0,
        torch.randn(8, 4),
        torch.zeros(8, dtype=torch.long),
        torch.randn(2, 4),
        torch.zeros(2, dtype=torch.long),
        num_classes=2,
    )
    plain = list(make("fedavg").minibatches(data, 0, "train"))
    augmented = list(make("fedavg", augment="crop-flip").minibatches(data, 0, "train"))
    assert all(torch.equal(p[0], a[0]) for p, a in zip(plain, augmented))


def test_the_config_reaches_every_method():
    from pfedkit.registry import build_config, build_method

    config = build_config(
        {"data": {"dataset": "digits"}, "method": {"name": "fedafk"}, "train": {"augment": "crop-flip"}}
    )
    assert build_method(config, (1, 8, 8), 10).ctx.train.augment == "crop-flip"
