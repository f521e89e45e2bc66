"""Training-time image augmentation (`train.augment`), seeded like every other draw: FedPAC's CIFAR code trains on
RandomCrop(32, padding=4) and RandomHorizontalFlip, so its columns are compared with the same inputs."""
from __future__ import annotations

import torch
import torch.nn.functional as F

PAD = 4
BLACK = -1.0  # a black pixel after the data layer's normalization, (0 - 0.5) / 0.5: what a zero-padded image shows


def crop_flip(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Each image of an [N, C, H, W] batch cropped back to H x W from a black border of PAD pixels at a random offset,
    then mirrored left-right with probability 1/2 (torchvision's RandomCrop(padding=4) + RandomHorizontalFlip)."""
    n, _, h, w = x.shape
    padded = F.pad(x, (PAD, PAD, PAD, PAD), value=BLACK)
    dy = torch.randint(0, 2 * PAD + 1, (n,), generator=gen, device=gen.device).tolist()
    dx = torch.randint(0, 2 * PAD + 1, (n,), generator=gen, device=gen.device).tolist()
    flip = (torch.rand(n, generator=gen, device=gen.device) < 0.5).tolist()
    crops = [padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)]
    return torch.stack([c.flip(-1) if f else c for c, f in zip(crops, flip)])
