"""Dataset readers: real MNIST/Fashion-MNIST, tiny IDX/CIFAR/image-folder fixtures built here, offline data."""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from pfedkit.data import fetch
from pfedkit.data.sources import (
    DATASET_NAMES,
    RestrictedUnpickler,
    check_dataset,
    dataset_options,
    load_dataset,
    resolve_data_root,
)
from pfedkit.errors import DataError

IDX_NAMES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


# ---------------------------------------------------------------- fixture builders (also used by test_fetch)


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def idx_bytes(array: np.ndarray) -> bytes:
    """Gzipped IDX: 0x0000, type 0x08 (uint8), ndim, big-endian dims, data."""
    header = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def write_idx_dataset(folder: Path, n_train: int = 12, n_test: int = 5) -> dict[str, str]:
    """A tiny MNIST-layout folder; returns {file name: md5} to patch into fetch.CHECKSUMS."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    arrays = {
        IDX_NAMES[0]: rng.integers(0, 256, (n_train, 28, 28)),
        IDX_NAMES[1]: np.arange(n_train) % 10,
        IDX_NAMES[2]: rng.integers(0, 256, (n_test, 28, 28)),
        IDX_NAMES[3]: np.arange(n_test) % 10,
    }
    for name, array in arrays.items():
        (folder / name).write_bytes(idx_bytes(array))
    return {name: md5(folder / name) for name in IDX_NAMES}


def cifar_batch_bytes(n: int, label_key: bytes, num_classes: int, fill: int = 0) -> bytes:
    """A CIFAR python batch in the official layout: a dict with bytes keys, data uint8 [n, 3072], label list."""
    data = np.full((n, 3072), fill, dtype=np.uint8)
    data[:, :1024] = 255  # red plane saturated, so the channel order is checkable
    batch = {
        b"batch_label": b"testing batch",
        b"data": data,
        label_key: [i % num_classes for i in range(n)],
        b"filenames": [b"img%d.png" % i for i in range(n)],
    }
    return pickle.dumps(batch, protocol=2)


def write_cifar10(folder: Path, n: int = 4) -> dict[str, str]:
    """<folder>/cifar-10-batches-py/data_batch_1..5 and test_batch; returns the CHECKSUMS table for them."""
    (folder / "cifar-10-batches-py").mkdir(parents=True, exist_ok=True)
    table = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        rel = f"cifar-10-batches-py/{name}"
        (folder / rel).write_bytes(cifar_batch_bytes(n, b"labels", 10))
        table[rel] = md5(folder / rel)
    return table


def write_png_tree(folder: Path, classes: dict[str, int], size: tuple[int, int] = (10, 7)) -> None:
    from PIL import Image

    for c, (cls, count) in enumerate(sorted(classes.items())):
        (folder / cls).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            Image.new("RGB", size, (20 * c, 100, 200)).save(folder / cls / f"img{i}.png")


# ---------------------------------------------------------------- real MNIST / Fashion-MNIST


def test_real_mnist(shared_data: Path):
    src = load_dataset("mnist", root=shared_data)
    assert src.train_x.shape == (60000, 1, 28, 28) and src.test_x.shape == (10000, 1, 28, 28)
    assert src.train_x.dtype == torch.float32 and src.train_y.dtype == torch.int64
    assert src.train_x.min() == -1.0 and src.train_x.max() == 1.0
    # MNIST's published class counts: labels read in their own order, not just 70,000 of them
    train_counts = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    test_counts = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert torch.bincount(src.train_y, minlength=10).tolist() == train_counts
    assert torch.bincount(src.test_y, minlength=10).tolist() == test_counts
    assert src.num_classes == 10 and src.input_shape == (1, 28, 28)
    assert len(check_dataset("mnist", shared_data)) == 4


def test_real_fashion_mnist(shared_data: Path):
    src = load_dataset("fashion-mnist", root=shared_data)
    assert src.train_x.shape == (60000, 1, 28, 28) and src.test_x.shape == (10000, 1, 28, 28)
    assert torch.equal(torch.bincount(src.train_y), torch.full((10,), 6000))


def test_md5_cached_and_invalidated_by_rewrite(tmp_path: Path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    assert fetch.md5_of(path) == hashlib.md5(b"abc").hexdigest()
    assert any(k[0] == str(path.resolve()) for k in fetch._MD5_CACHE)
    path.write_bytes(b"abcd")  # new size (and mtime): the cached digest must not be reused
    assert fetch.md5_of(path) == hashlib.md5(b"abcd").hexdigest()


# ---------------------------------------------------------------- IDX fixtures


def test_idx_fixture_loads(tmp_path: Path, monkeypatch):
    monkeypatch.setitem(fetch.CHECKSUMS, "mnist", write_idx_dataset(tmp_path / "mnist"))
    src = load_dataset("mnist", root=tmp_path)
    assert src.train_x.shape == (12, 1, 28, 28) and src.test_x.shape == (5, 1, 28, 28)
    assert src.train_y.tolist() == [i % 10 for i in range(12)]


def test_idx_bad_header(tmp_path: Path, monkeypatch):
    table = write_idx_dataset(tmp_path / "mnist")
    bad = tmp_path / "mnist" / IDX_NAMES[0]
    bad.write_bytes(gzip.compress(b"\x00\x00\x0d\x03" + b"\x00" * 40))  # type 0x0d (float), not uint8
    table[IDX_NAMES[0]] = md5(bad)
    monkeypatch.setitem(fetch.CHECKSUMS, "mnist", table)
    with pytest.raises(DataError, match="bad IDX header"):
        load_dataset("mnist", root=tmp_path)
    bad.write_bytes(gzip.compress(bytes([0, 0, 8, 3]) + struct.pack(">3i", 5, 28, 28) + b"\x00" * 100))
    table[IDX_NAMES[0]] = md5(bad)
    with pytest.raises(DataError, match="do not match"):
        load_dataset("mnist", root=tmp_path)


def test_fashion_mnist_found_in_extra_dir(tmp_path: Path, monkeypatch):
    system = tmp_path / "usr-share"
    monkeypatch.setitem(fetch.CHECKSUMS, "fashion-mnist", write_idx_dataset(system))
    from pfedkit.data import sources

    monkeypatch.setitem(sources.EXTRA_DIRS, "fashion-mnist", (system,))
    src = load_dataset("fashion-mnist", root=tmp_path / "empty-root")
    assert src.train_x.shape == (12, 1, 28, 28)
    assert all(str(system) in line for line in check_dataset("fashion-mnist", tmp_path / "empty-root"))


# ---------------------------------------------------------------- CIFAR


def test_cifar10_fixture(tmp_path: Path, monkeypatch):
    monkeypatch.setitem(fetch.CHECKSUMS, "cifar10", write_cifar10(tmp_path / "cifar10"))
    src = load_dataset("cifar10", root=tmp_path)
    assert src.train_x.shape == (20, 3, 32, 32) and src.test_x.shape == (4, 3, 32, 32)
    assert (src.train_x[:, 0] == 1.0).all() and (src.train_x[:, 1:] == -1.0).all()
    assert src.num_classes == 10 and src.train_y.dtype == torch.int64


def test_cifar100_fine_labels(tmp_path: Path, monkeypatch):
    folder = tmp_path / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    table = {}
    for name, n in (("train", 6), ("test", 3)):
        (folder / name).write_bytes(cifar_batch_bytes(n, b"fine_labels", 100))
        table[f"cifar-100-python/{name}"] = md5(folder / name)
    monkeypatch.setitem(fetch.CHECKSUMS, "cifar100", table)
    src = load_dataset("cifar100", root=tmp_path)
    assert src.train_x.shape == (6, 3, 32, 32) and src.test_y.tolist() == [0, 1, 2] and src.num_classes == 100


class _Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_refused(tmp_path: Path, monkeypatch):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({b"data": _Evil(marker), b"labels": []}, protocol=2)
    with pytest.raises(DataError, match=r"forbidden global (posix|os|nt)\.system"):
        RestrictedUnpickler(__import__("io").BytesIO(payload), encoding="bytes").load()
    # the same file through the loader, with its checksum admitted so that only the unpickler stands guard
    table = write_cifar10(tmp_path / "cifar10")
    evil = tmp_path / "cifar10" / "cifar-10-batches-py" / "data_batch_1"
    evil.write_bytes(payload)
    table["cifar-10-batches-py/data_batch_1"] = md5(evil)
    monkeypatch.setitem(fetch.CHECKSUMS, "cifar10", table)
    with pytest.raises(DataError, match="forbidden global") as e:
        load_dataset("cifar10", root=tmp_path)
    assert "data_batch_1" in str(e.value)
    assert not marker.exists()


def test_cifar_bad_layout(tmp_path: Path, monkeypatch):
    table = write_cifar10(tmp_path / "cifar10")
    path = tmp_path / "cifar10" / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]}, protocol=2))
    table["cifar-10-batches-py/test_batch"] = md5(path)
    monkeypatch.setitem(fetch.CHECKSUMS, "cifar10", table)
    with pytest.raises(DataError, match=r"expected uint8 \[n, 3072\]"):
        load_dataset("cifar10", root=tmp_path)


def test_cifar_missing_names_checksum_and_fetch(tmp_path: Path):
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", root=tmp_path)
    msg = str(e.value)
    assert "data_batch_1" in msg and "c99cafc152244af753f735de768cd75f" in msg and "pfedkit data fetch cifar10" in msg


# ---------------------------------------------------------------- image folders


def test_caltech101_skips_background(tmp_path: Path):
    cats = tmp_path / "caltech101" / "101_ObjectCategories"
    write_png_tree(cats, {"BACKGROUND_Google": 2, "ant": 2, "bee": 3})
    src = load_dataset("caltech101", root=tmp_path, size=16)
    assert src.train_x.shape == (5, 3, 16, 16) and src.test_x is None
    assert src.train_y.tolist() == [0, 0, 1, 1, 1] and src.num_classes == 2
    assert src.train_x.min() >= -1 and src.train_x.max() <= 1
    assert check_dataset("caltech101", tmp_path) == [f"ok  {cats}: 2 classes, 5 images"]


def test_flowers102_splits_and_single_folder(tmp_path: Path):
    base = tmp_path / "flowers102"
    write_png_tree(base / "train", {"a": 2, "b": 1, "c": 1})
    write_png_tree(base / "test", {"b": 1, "c": 2})  # a class absent from test keeps the train mapping
    src = load_dataset("flowers102", root=tmp_path)
    assert src.input_shape == (3, 32, 32) and src.num_classes == 3
    assert src.test_y.tolist() == [1, 2, 2]
    single = tmp_path / "single"
    write_png_tree(single / "flowers102", {"x": 1, "y": 1})
    src = load_dataset("flowers102", root=single)
    assert src.train_x.shape == (2, 3, 32, 32) and src.test_x is None


def test_tiny_imagenet_val_as_test(tmp_path: Path):
    from PIL import Image

    base = tmp_path / "tiny-imagenet" / "tiny-imagenet-200"
    for wnid in ("n01", "n02"):
        (base / "train" / wnid / "images").mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (64, 64), (i, 0, 0)).save(base / "train" / wnid / "images" / f"{wnid}_{i}.JPEG")
    (base / "val" / "images").mkdir(parents=True)
    for i in range(3):
        Image.new("RGB", (64, 64)).save(base / "val" / "images" / f"val_{i}.JPEG")
    (base / "val" / "val_annotations.txt").write_text(
        "val_0.JPEG\tn02\t0\t0\t63\t63\nval_1.JPEG\tn01\t0\t0\t63\t63\nval_2.JPEG\tn02\t0\t0\t63\t63\n"
    )
    src = load_dataset("tiny-imagenet", root=tmp_path)
    assert src.train_x.shape == (4, 3, 64, 64) and src.train_y.tolist() == [0, 0, 1, 1]
    assert src.test_x.shape == (3, 3, 64, 64) and src.test_y.tolist() == [1, 0, 1]


def test_image_folder_errors(tmp_path: Path):
    with pytest.raises(DataError, match="101_ObjectCategories not found.*data.caltech.edu"):
        load_dataset("caltech101", root=tmp_path)
    with pytest.raises(DataError, match="not found"):
        check_dataset("caltech101", tmp_path)
    cats = tmp_path / "caltech101" / "101_ObjectCategories" / "ant"
    cats.mkdir(parents=True)
    (cats / "broken.jpg").write_bytes(b"not an image")
    with pytest.raises(DataError, match="broken.jpg is not a readable image"):
        load_dataset("caltech101", root=tmp_path)


# ---------------------------------------------------------------- offline data and the API surface


def test_digits():
    src = load_dataset("digits")
    assert src.train_x.shape == (1797, 1, 8, 8) and src.test_x is None and src.test_y is None
    assert src.train_x.min() == -1.0 and src.train_x.max() == 1.0
    assert sorted(src.train_y.unique().tolist()) == list(range(10))
    assert check_dataset("digits") and "no download" in check_dataset("digits")[0]


def test_synthetic_deterministic_and_learnable():
    a, b = load_dataset("synthetic"), load_dataset("synthetic")
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.test_y, b.test_y)
    assert not torch.equal(a.train_x, load_dataset("synthetic", seed=1).train_x)
    assert a.train_x.shape == (2000, 1, 8, 8) and a.test_x.shape == (500, 1, 8, 8)
    other = load_dataset("synthetic", num_classes=3, samples=30, test_samples=6, shape=[3, 4, 4])  # TOML gives lists
    assert other.input_shape == (3, 4, 4) and other.num_classes == 3 and other.train_y.max() == 2

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        for i in range(0, 2000, 50):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(a.train_x[i : i + 50]), a.train_y[i : i + 50]).backward()
            opt.step()
    acc = (model(a.test_x).argmax(1) == a.test_y).float().mean().item()
    assert acc > 0.5  # chance is 0.1


def test_unknown_dataset_and_option():
    with pytest.raises(DataError) as e:
        load_dataset("imagenet-1k")
    assert all(name in str(e.value) for name in DATASET_NAMES)
    with pytest.raises(DataError, match="does not take option.*size"):
        load_dataset("digits", size=32)
    assert dataset_options("flowers102") == {"size": 32}
    assert dataset_options("tiny-imagenet") == {"size": 64}


def test_resolve_data_root(tmp_path: Path, monkeypatch):
    assert resolve_data_root(tmp_path) == tmp_path
    monkeypatch.setenv("PFEDKIT_DATA", str(tmp_path / "env"))
    assert resolve_data_root(None) == tmp_path / "env"
    monkeypatch.delenv("PFEDKIT_DATA")
    assert resolve_data_root(None) == Path.home() / ".cache" / "pfedkit"
