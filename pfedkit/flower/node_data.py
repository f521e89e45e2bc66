"""The data a Flower node trains on, named by its node config (`--node-config "key=value ..."`).

- `client-id=K` alone (or Flower's `partition-id=K`): client K of the run config's own partition spec, for
  experiments; every node rebuilds the same partition from the same config and seed.
- `data-dir=PATH`: a folder of the node's own, for real deployments. Either images per class
  (`train/<class>/*.png`, optional `test/<class>/`), or arrays (`train.npz`, optional `test.npz`, each with
  `x` [N, C, H, W] float32 (used as is) or uint8 (scaled like the built-in datasets) and `y` int labels).
  Without a test split, the run config's `partition.test_fraction` of the samples is held out, seeded.
  Image options: `image-size` (default 32), `classes` (comma-separated, in label order; default the sorted
  class folders, which must then be the same on every node). Arrays: `num-classes` (default max label + 1).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from pfedkit.config import Config
from pfedkit.data.partition import split_train_test
from pfedkit.data.sources import labels_tensor, normalize, read_image_folder
from pfedkit.errors import ConfigError, DataError
from pfedkit.records import ClientData

NODE_KEYS = (
    "client-id",
    "partition-id",
    "num-partitions",
    "data-dir",
    "image-size",
    "classes",
    "num-classes",
    "state-dir",
    "threads",
)


def client_id(config: Config, node_config: Mapping[str, Any]) -> int:
    """The stable client id (Flower's node ids change when a node restarts)."""
    unknown = sorted(set(node_config) - set(NODE_KEYS))
    if unknown:
        raise ConfigError(f"unknown node config key(s) {', '.join(unknown)}; valid keys: {', '.join(NODE_KEYS)}")
    raw = node_config.get("client-id", node_config.get("partition-id"))
    if raw is None:
        raise ConfigError(
            'the node config names no client: start the SuperNode with --node-config "client-id=K" '
            f"(K in 0..{config.partition.clients - 1})"
        )
    cid = int(raw)
    if not 0 <= cid < config.partition.clients:
        raise ConfigError(
            f"client-id={cid} is outside 0..{config.partition.clients - 1} "
            f"(the run config's partition.clients = {config.partition.clients})"
        )
    parts = node_config.get("num-partitions")
    if parts is not None and int(parts) != config.partition.clients:
        raise ConfigError(
            f"num-partitions={parts} in the node config, but the run config has partition.clients = "
            f"{config.partition.clients}; make them equal"
        )
    return cid


def load_node_data(config: Config, node_config: Mapping[str, Any]) -> ClientData:
    cid = client_id(config, node_config)
    if "data-dir" in node_config:
        return _own_folder(config, cid, node_config)
    return _partition(config.model_dump_json(), cid)


@functools.lru_cache(maxsize=2)
def _partition(config_json: str, cid: int) -> ClientData:
    from pfedkit.data.federated import build_federated

    return build_federated(Config.model_validate_json(config_json)).client(cid)


def _own_folder(config: Config, cid: int, node_config: Mapping[str, Any]) -> ClientData:
    folder = Path(str(node_config["data-dir"])).expanduser()
    if not folder.is_dir():
        raise DataError(f"data-dir {folder} (node config) is not a folder")
    if (folder / "train.npz").is_file():
        x, y = _arrays(folder / "train.npz")
        test = _arrays(folder / "test.npz") if (folder / "test.npz").is_file() else None
        num_classes = (
            int(node_config.get("num-classes", 0)) or int(torch.cat([y] + ([test[1]] if test else [])).max()) + 1
        )
    elif (folder / "train").is_dir():
        size = int(node_config.get("image-size", 32))
        classes = [c.strip() for c in str(node_config["classes"]).split(",")] if "classes" in node_config else None
        x, y, classes = read_image_folder(folder / "train", size, classes)
        test = read_image_folder(folder / "test", size, classes)[:2] if (folder / "test").is_dir() else None
        num_classes = len(classes)
    else:
        raise DataError(
            f"{folder} holds neither train.npz nor train/<class>/ image folders; see `pfedkit.flower.node_data`"
        )
    if test is None:  # hold out a seeded share, as the pfllib protocol does per client
        train_idx, test_idx = split_train_test([np.arange(len(y))], config.partition.test_fraction, config.run.seed)
        tr, te = torch.from_numpy(train_idx[0]), torch.from_numpy(test_idx[0])
        test, (x, y) = (x[te], y[te]), (x[tr], y[tr])
    top = int(torch.cat([y, test[1]]).max())
    if top >= num_classes:
        raise DataError(
            f"{folder}: labels reach {top} but num-classes is {num_classes}; set num-classes in the node config"
        )
    return ClientData(cid, x, y, test[0], test[1], num_classes)


def _arrays(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    with np.load(path, allow_pickle=False) as f:
        if "x" not in f or "y" not in f:
            raise DataError(f"{path} must hold arrays named x and y; it has {', '.join(f.files)}")
        x, y = f["x"], f["y"]
    if x.dtype == np.uint8:
        x = normalize(x if x.ndim == 4 else x[:, None])
    elif x.dtype == np.float32:
        x = torch.from_numpy(np.array(x, copy=True))
    else:
        raise DataError(f"{path}: x has dtype {x.dtype}; give float32 (used as is) or uint8 images")
    if x.ndim != 4 or len(x) != len(y):
        raise DataError(
            f"{path}: x must be [N, C, H, W] (or uint8 [N, H, W]) with one label per sample; "
            f"got x {tuple(x.shape)}, y {tuple(y.shape)}"
        )
    return x, labels_tensor(y)
