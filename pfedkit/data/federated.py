"""FederatedDataset: one in-memory tensor pool, per-client train/test indices, and their statistics."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import numpy as np
import torch

from pfedkit.config import Config
from pfedkit.data.partition import (
    UnreachableMinimum,
    draw_test_like,
    label_counts,
    partition_labels,
    pfllib_min_samples,
    split_train_test,
    split_validation,
)
from pfedkit.data.sources import DataSource, content_checksum, load_dataset
from pfedkit.errors import ConfigError, DataError
from pfedkit.records import ClientData, ServerData


@dataclass
class FederatedDataset:
    name: str
    protocol: str
    num_classes: int
    input_shape: tuple[int, int, int]
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor  # the same tensors as train_* under the pfllib protocol (merged pool) or eval.validation
    test_y: torch.Tensor
    train_idx: list[np.ndarray]
    test_idx: list[np.ndarray]  # each client's evaluation split: test, or validation under eval.validation
    server: ServerData | None = None  # validation and proxy data held by the server ([proxy] section)
    checksum: str = ""  # content_checksum of the data set as loaded (before data.fraction)
    origin: str = ""  # which copy of the data set was read, where there are several (DataSource.origin)
    origin_sha256: str = ""

    @property
    def num_clients(self) -> int:
        return len(self.train_idx)

    def to(self, device: torch.device) -> "FederatedDataset":
        """The same data set with its tensors (and the server's) on `device`."""
        if self.train_x.device == device:
            return self
        train_x, train_y = self.train_x.to(device), self.train_y.to(device)
        pooled = self.test_x is self.train_x  # protocol pfllib: train and test indices share one pool
        server = self.server and replace(
            self.server, **{k: getattr(self.server, k).to(device) for k in ("val_x", "val_y", "proxy_x", "proxy_y")}
        )
        return replace(
            self,
            train_x=train_x,
            train_y=train_y,
            server=server,
            test_x=train_x if pooled else self.test_x.to(device),
            test_y=train_y if pooled else self.test_y.to(device),
        )

    def client(self, cid: int) -> ClientData:
        tr, te = torch.from_numpy(self.train_idx[cid]), torch.from_numpy(self.test_idx[cid])
        return ClientData(cid, self.train_x[tr], self.train_y[tr], self.test_x[te], self.test_y[te], self.num_classes)

    def train_sizes(self) -> np.ndarray:
        return np.array([len(i) for i in self.train_idx])

    def test_sizes(self) -> np.ndarray:
        return np.array([len(i) for i in self.test_idx])

    def label_counts(self, split: str = "train") -> np.ndarray:
        labels = (self.train_y if split == "train" else self.test_y).cpu().numpy()
        return label_counts(labels, self.train_idx if split == "train" else self.test_idx, self.num_classes)


def default_min_samples(config: Config, pool_size: int) -> int:
    return pfllib_min_samples(
        pool_size, config.partition.clients, config.train.batch_size, train_fraction=1 - config.partition.test_fraction
    )


def partition_clients(y: np.ndarray, config: Config, seed: int, pool_size: int, **options) -> list[np.ndarray]:
    """partition_labels with the configured minimum; where none is configured, PFLlib's (batch / 0.25, capped at
    half a client's share) or, when no draw reaches it (1,797 digits over 20 clients at beta 0.1), the largest
    minimum a draw reached, said in a note: the default config runs on the default data set."""
    part = config.partition
    if part.min_samples is not None:
        return partition_labels(y, part.scheme, part.clients, seed, min_samples=part.min_samples, **options)
    derived = default_min_samples(config, pool_size)
    try:
        return partition_labels(y, part.scheme, part.clients, seed, min_samples=derived, **options)
    except UnreachableMinimum as err:
        if err.best < 1:
            raise
        print(
            f"note: no Dirichlet draw gave all {part.clients} clients PFLlib's minimum of {derived} samples; "
            f"partitioned with at least {err.best} each (set partition.min_samples to choose)",
            file=sys.stderr,
        )
        return partition_labels(y, part.scheme, part.clients, seed, min_samples=err.best, **options)


def check_every_client_trains(train_idx: list[np.ndarray], config: Config) -> None:
    """A client without training samples would be counted as trained while learning nothing: refused."""
    empty = [cid for cid, idx in enumerate(train_idx) if len(idx) == 0]
    if empty:
        shown = ", ".join(map(str, empty[:8])) + (", ..." if len(empty) > 8 else "")
        raise ConfigError(
            f"{len(empty)} of {len(train_idx)} clients have no training samples (clients {shown}); set "
            "partition.min_samples to at least 1 (left out, PFLlib's minimum applies), or use fewer "
            "partition.clients"
        )


def keep_fraction(source: DataSource, fraction: float, seed: int) -> DataSource:
    """The same share of every class of each split, seeded: a smaller data set with the same label mix."""
    from pfedkit.data.proxy import holdout_indices

    if fraction >= 1:
        return source

    def kept(x: torch.Tensor, y: torch.Tensor, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        pick = torch.from_numpy(holdout_indices(y.numpy(), fraction, seed, stream=f"data-fraction-{split}")[0])
        return x[pick], y[pick]

    train_x, train_y = kept(source.train_x, source.train_y, "train")
    test_x, test_y = (
        (source.test_x, source.test_y) if source.test_x is None else kept(source.test_x, source.test_y, "test")
    )
    return replace(source, train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y)


def check_finite(source: DataSource, name: str, chunk: int = 4096) -> None:
    """A NaN or infinity among the inputs is named (split and sample) before any training, not met as a diverged
    loss rounds later; checked in chunks so a large data set needs no second copy."""
    for split, x in (("training", source.train_x), ("test", source.test_x)):
        if x is None or not torch.is_floating_point(x):
            continue
        for start in range(0, len(x), chunk):
            bad = (~torch.isfinite(x[start : start + chunk])).flatten(1).any(1).nonzero().flatten()
            if len(bad):
                where = [start + int(i) for i in bad[:5]]
                raise DataError(
                    f"{name}: {split} sample {where[0]} holds a NaN or infinite input value"
                    f"{' (also ' + ', '.join(map(str, where[1:])) + ')' if len(where) > 1 else ''}; "
                    "fix or drop those samples in the data set's files"
                )


def build_federated(config: Config, source: DataSource | None = None) -> FederatedDataset:
    fed = partitioned(config, source)
    untested = [cid for cid, n in enumerate(fed.test_sizes()) if n == 0]
    if untested:  # said, not silent: they count in neither accuracy
        shown = ", ".join(map(str, untested[:10])) + (", ..." if len(untested) > 10 else "")
        print(
            f"note: {len(untested)} of {fed.num_clients} clients have no "
            f"{'validation' if config.eval.validation else 'test'} samples (clients {shown}); they are left out of "
            f"both accuracies, which average the other {fed.num_clients - len(untested)}",
            file=sys.stderr,
        )
    return fed


def partitioned(config: Config, source: DataSource | None = None) -> FederatedDataset:
    from pfedkit.data.proxy import split_server_data

    source = source or load_dataset(config.data.dataset, config.data.root, **config.data.options)
    check_finite(source, source.name or config.data.dataset)
    checksum = content_checksum(source)
    total = len(source.train_y)
    source = keep_fraction(source, config.data.fraction, config.run.seed)
    if len(source.train_y) < config.partition.clients:
        smallest = config.partition.clients / max(total, 1)
        fix = (
            f"use a data.fraction of at least {smallest:.2g} (a few times that for a useful run)"
            if smallest <= 1
            else f"all {total} of them are fewer than that: use fewer clients (at most {total}, far fewer for a "
            "useful run) or a larger data set"
        )
        raise ConfigError(
            f"data.fraction = {config.data.fraction:g} keeps {len(source.train_y)} of the {total} training "
            f"samples of {config.data.dataset}, fewer than partition.clients = {config.partition.clients}; {fix}"
        )
    source, server = split_server_data(config.proxy, source, config.run.seed, config.data.root)
    part, seed = config.partition, config.run.seed
    options = dict(
        beta=part.beta,
        classes_per_client=part.classes_per_client,
        balanced=part.balanced,
        max_redraws=part.max_redraws,
        samples_per_client=part.samples_per_client,
        uniform_share=part.uniform_share,
        reuse_samples=part.reuse_samples,
        num_classes=source.num_classes,
    )
    if config.eval.protocol == "pfllib":
        # Merge the official splits, partition, then split each client 75/25 (PFLlib, "following FedALA").
        if source.test_x is not None:
            x, y = torch.cat([source.train_x, source.test_x]), torch.cat([source.train_y, source.test_y])
        else:
            x, y = source.train_x, source.train_y
        clients = partition_clients(y.numpy(), config, seed, len(y), **options)
        train_idx, test_idx = split_train_test(clients, part.test_fraction, seed)
        check_every_client_trains(train_idx, config)
        if config.eval.validation > 0:  # the test indices are dropped: nothing in a tuning run can read them
            train_idx, test_idx = split_validation(train_idx, config.eval.validation, seed)
        return FederatedDataset(
            source.name,
            "pfllib",
            source.num_classes,
            source.input_shape,
            x,
            y,
            x,
            y,
            train_idx,
            test_idx,
            server,
            checksum,
            source.origin,
            source.origin_sha256,
        )
    if source.test_x is None:
        raise ConfigError(
            f'dataset {source.name} has no official test split, so `eval.protocol = "official-test"` cannot be used; '
            'use `eval.protocol = "pfllib"`'
        )
    y = source.train_y.numpy()
    train_idx = partition_clients(y, config, seed, len(y), **options)
    check_every_client_trains(train_idx, config)
    if config.eval.validation > 0:  # the official test split is not kept: a tuning run evaluates on training data
        train_idx, val_idx = split_validation(train_idx, config.eval.validation, seed)
        return FederatedDataset(
            source.name,
            "official-test",
            source.num_classes,
            source.input_shape,
            source.train_x,
            source.train_y,
            source.train_x,
            source.train_y,
            train_idx,
            val_idx,
            server,
            checksum,
            source.origin,
            source.origin_sha256,
        )
    test_idx = draw_test_like(y, train_idx, source.test_y.numpy(), seed, per_client=part.test_per_client)
    return FederatedDataset(
        source.name,
        "official-test",
        source.num_classes,
        source.input_shape,
        source.train_x,
        source.train_y,
        source.test_x,
        source.test_y,
        train_idx,
        test_idx,
        server,
        checksum,
        source.origin,
        source.origin_sha256,
    )
