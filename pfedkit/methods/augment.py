"""Training-time image augmentation (`train.augment`), seeded like every other draw: FedPAC's CIFAR code trains on
RandomCrop(32, padding=4) and RandomHorizontalFlip, so its columns are compared with the same inputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

PAD = 4
BLACK = -1.0  # a black pixel after the data layer's normalization, (0 - 0.5) / 0.5: what a zero-padded image shows


def crop_flip_draws(n: int, gen: torch.Generator) -> torch.Tensor:
    """The draws of one batch of n images, as [n, 3] (row offset, column offset, flip), taken from `gen` in the order
    every path takes them, so a batch is augmented alike one client at a time and in a cohort."""
    dy = torch.randint(0, 2 * PAD + 1, (n,), generator=gen, device=gen.device)
    dx = torch.randint(0, 2 * PAD + 1, (n,), generator=gen, device=gen.device)
    flip = (torch.rand(n, generator=gen, device=gen.device) < 0.5).long()
    return torch.stack([dy, dx, flip], 1)


def apply_crop_flip(x: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """Images [..., C, H, W] cropped back to H x W from a black border of PAD pixels at the drawn offsets, then mirrored
    left-right where drawn (draws [..., 3] on x's device): one gather, no host sync, any leading batch dimensions."""
    *lead, c, h, w = x.shape
    x = x.reshape(-1, c, h, w)
    draws = draws.reshape(-1, 3)
    padded = F.pad(x, (PAD, PAD, PAD, PAD), value=BLACK)
    rows = draws[:, 0:1] + torch.arange(h, device=x.device)  # [N, H]
    cols = torch.arange(w, device=x.device)
    cols = torch.where(draws[:, 2:3].bool(), cols.flip(0), cols) + draws[:, 1:2]  # [N, W]
    n = torch.arange(x.shape[0], device=x.device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[n, rows[:, :, None], cols[:, None, :]]  # [N, H, W, C]
    return out.permute(0, 3, 1, 2).reshape(*lead, c, h, w)


def crop_flip(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Each image of an [N, C, H, W] batch cropped and flipped at random (torchvision's RandomCrop(padding=4) +
    RandomHorizontalFlip)."""
    return apply_crop_flip(x, crop_flip_draws(x.shape[0], gen).to(x.device))
