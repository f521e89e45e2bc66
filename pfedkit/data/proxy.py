"""Server-side data: a per-class held-out split of the training data (validation, and the in-domain proxy), or
another data set as an out-of-domain proxy. Built once per run, before the clients' partition."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import numpy as np
import torch

from pfedkit.config import ProxySection
from pfedkit.data.sources import DataSource, load_dataset
from pfedkit.errors import ConfigError
from pfedkit.records import ServerData
from pfedkit.seeding import numpy_generator


def holdout_indices(
    labels: np.ndarray, fraction: float, seed: int, stream: str = "server-holdout"
) -> tuple[np.ndarray, np.ndarray]:
    """(held out, kept): round(fraction * n_c) random samples of each class c held out, seeded; sorted indices."""
    rng = numpy_generator(seed, -1, -1, stream)
    held = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        held.append(rng.permutation(members)[: int(np.floor(fraction * len(members) + 0.5))])
    held_idx = np.sort(np.concatenate(held)) if held else np.empty(0, dtype=np.int64)
    keep = np.ones(len(labels), dtype=bool)
    keep[held_idx] = False
    return held_idx, np.flatnonzero(keep)


def out_of_domain_proxy(
    proxy: ProxySection, root: Optional[str], like: DataSource
) -> tuple[torch.Tensor, torch.Tensor]:
    """The named data set's training split, classes beyond the clients' dropped (the labels only steer PGD)."""
    other = load_dataset(proxy.dataset, root, **proxy.options)
    if other.input_shape != like.input_shape:
        raise ConfigError(
            f"proxy data set {proxy.dataset!r} has inputs of shape {other.input_shape} but {like.name} has "
            f"{like.input_shape}; choose a proxy with the same shape (e.g. through its size option)"
        )
    inside = (
        other.train_y < like.num_classes
    )  # the HEART code keeps the first C classes of its proxy (docs/methods.md 2.4)
    if not bool(inside.any()):
        raise ConfigError(f"proxy data set {proxy.dataset!r} has no samples with labels below {like.num_classes}")
    return other.train_x[inside], other.train_y[inside]


def split_server_data(
    proxy: ProxySection, source: DataSource, seed: int, root: Optional[str] = None
) -> tuple[DataSource, Optional[ServerData]]:
    """(the clients' source without the held-out samples, the server's data); (source, None) without a holdout."""
    if proxy.holdout == 0:
        if proxy.dataset:
            raise ConfigError(
                "proxy.dataset is set but proxy.holdout is 0: the server also needs a validation split "
                "held out from the training data; set e.g. proxy.holdout = 0.1"
            )
        return source, None
    held, kept = holdout_indices(source.train_y.numpy(), proxy.holdout, seed)
    if len(held) == 0 or len(kept) == 0:
        raise ConfigError(
            f"proxy.holdout = {proxy.holdout} leaves {len(held)} server and {len(kept)} client "
            f"training samples of {source.name}; choose a fraction that leaves both non-empty"
        )
    held_t, kept_t = torch.from_numpy(held), torch.from_numpy(kept)
    val_x, val_y = source.train_x[held_t], source.train_y[held_t]
    clients = replace(source, train_x=source.train_x[kept_t], train_y=source.train_y[kept_t])
    if proxy.dataset:
        proxy_x, proxy_y = out_of_domain_proxy(proxy, root, source)
        name = proxy.dataset
    else:
        proxy_x, proxy_y, name = val_x, val_y, f"{source.name} (held out)"
    if proxy.max_samples and len(proxy_y) > proxy.max_samples:
        pick = torch.from_numpy(
            np.sort(
                numpy_generator(seed, -1, -1, "proxy-subset").choice(len(proxy_y), proxy.max_samples, replace=False)
            )
        )
        proxy_x, proxy_y = proxy_x[pick], proxy_y[pick]
    return clients, ServerData(val_x, val_y, proxy_x, proxy_y, name)
