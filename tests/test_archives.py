"""CIFAR-10 and CIFAR-100 from the shared image-archive copies: read from the .tar.gz, verified, cached."""

from __future__ import annotations

import dataclasses
import io
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pfedkit.data import archives
from pfedkit.data.sources import check_dataset, load_dataset
from pfedkit.errors import DataError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def colour(label: int, index: int) -> tuple[int, int, int]:
    """A pixel value that names the image's class and index, so labels can be checked from the pixels."""
    return (2 * label + 1, 7 * index, 200)


def make_archive(root: Path, name: str, per_class: int = 2, fmt: str = "png") -> Path:
    """A tiny archive in the shared copy's layout, registered with its own checksum."""
    spec = archives.ARCHIVES[name]
    classes = list(archives.CIFAR10_CLASSES) if name == "cifar10" else [f"class{k:03d}" for k in range(100)]
    folder = root / spec.folder
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / spec.file
    with tarfile.open(path, "w:gz") as tar:

        def add(member: str, data: bytes) -> None:
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        if spec.label_file:
            add(spec.label_file, "\n".join(classes).encode())
        for split, count in (("train", per_class), ("test", 1)):
            for label in reversed(range(len(classes))):  # out of order in the archive: the reader sorts
                for index in range(count):
                    buf = io.BytesIO()
                    Image.new("RGB", (32, 32), colour(label, index)).save(buf, format=fmt.upper())
                    add(f"{split}/{classes[label]}/{index:04d}.{fmt}", buf.getvalue())
    return path


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("PFEDKIT_CACHE", str(tmp_path / "cache"))

    def build(name: str) -> Path:
        path = make_archive(tmp_path / "data", name)
        monkeypatch.setitem(
            archives.ARCHIVES, name, dataclasses.replace(archives.ARCHIVES[name], sha256=archives.file_sha256(path))
        )
        return path

    return build


@pytest.mark.parametrize("name, classes", [("cifar10", 10), ("cifar100", 100)])
def test_the_reader_gives_labels_in_cifar_order_shapes_and_values(tiny, tmp_path, name, classes):
    tiny(name)
    source = load_dataset(name, tmp_path / "data")
    assert source.num_classes == classes and source.origin == archives.ARCHIVES[name].description
    assert tuple(source.train_x.shape) == (2 * classes, 3, 32, 32) and tuple(source.test_x.shape) == (
        classes,
        3,
        32,
        32,
    )
    assert source.train_y.tolist() == [k for k in range(classes) for _ in range(2)]
    pixels = ((source.train_x[:, :, 0, 0] * 0.5 + 0.5) * 255).round().long()  # back from the normalized values
    expected = [colour(k, i) for k in range(classes) for i in range(2)]
    assert pixels.tolist() == [list(c) for c in expected]
    assert float(source.train_x.min()) >= -1 and float(source.train_x.max()) <= 1
    assert check_dataset(name, tmp_path / "data")[0].startswith("ok  ")


def test_a_flipped_byte_is_refused(tiny, tmp_path):
    path = tiny("cifar10")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"corrupt file .*cifar10-jpeg.tar.gz: sha256 is [0-9a-f]{64}, expected"):
        load_dataset("cifar10", tmp_path / "data")
    with pytest.raises(DataError, match="corrupt file"):
        check_dataset("cifar10", tmp_path / "data")


def test_the_cache_serves_the_second_load_and_a_damaged_cache_is_rebuilt(tiny, tmp_path, monkeypatch):
    tiny("cifar10")
    first = load_dataset("cifar10", tmp_path / "data")
    cached = next((tmp_path / "cache").glob("cifar10-jpeg-*.npz"))
    with monkeypatch.context() as patch:
        patch.setattr(archives, "decode_archive", lambda *a: pytest.fail("decoded again"))
        second = load_dataset("cifar10", tmp_path / "data")  # from the cache: no decoding
    assert (second.train_x == first.train_x).all()
    for damage in ("truncate", "flip"):
        data = bytearray(cached.read_bytes())
        if damage == "truncate":
            data = data[: len(data) // 2]
        else:
            data[-200] ^= 0xFF  # inside the last array: the file still loads, its digest no longer matches
        cached.write_bytes(bytes(data))
        assert archives.read_cache(cached) is None
        again = load_dataset("cifar10", tmp_path / "data")  # rebuilt, never used
        assert (again.train_x == first.train_x).all() and archives.read_cache(cached) is not None


def test_no_copy_and_no_official_files_names_both(tmp_path):
    with pytest.raises(
        DataError, match=r"missing file .*data_batch_1.*or put the CIFAR-10, JPEG copy at .*cifar10-jpeg.tar.gz"
    ):
        load_dataset("cifar10", tmp_path)


CIFAR_MEANS = {"cifar10": (0.4914, 0.4822, 0.4465), "cifar100": (0.5071, 0.4865, 0.4409)}  # published train means


@pytest.mark.slow
@pytest.mark.parametrize("name, per_class", [("cifar10", (5000, 1000)), ("cifar100", (500, 100))])
def test_the_shared_copies(name, per_class):
    if not archives.archive_path(name, SHARED).is_file():
        pytest.skip(f"no shared {name} copy beside this checkout")
    start = time.perf_counter()
    source = load_dataset(name, SHARED)
    print(f"{name}: loaded in {time.perf_counter() - start:.1f} s")
    assert len(source.train_y) == 50_000 and len(source.test_y) == 10_000
    assert set(np.bincount(source.train_y.numpy()).tolist()) == {per_class[0]}
    assert set(np.bincount(source.test_y.numpy()).tolist()) == {per_class[1]}
    means = (source.train_x * 0.5 + 0.5).mean(dim=(0, 2, 3)).tolist()
    assert all(abs(m - p) < 0.01 for m, p in zip(means, CIFAR_MEANS[name])), means


def test_a_run_on_a_copy_names_it_and_its_checksum_in_summary_json(tiny, tmp_path):
    from pfedkit.engine.simulation import simulate
    from pfedkit.registry import build_config

    tiny("cifar10")
    config = build_config(
        {
            "data": {"dataset": "cifar10", "root": str(tmp_path / "data")},
            "partition": {"scheme": "iid", "clients": 2, "min_samples": 1},
            "model": {"name": "mlp", "options": {"hidden": 8}},
            "method": {"name": "fedavg"},
            "train": {"rounds": 1, "batch_size": 4},
            "run": {"workers": 1},
        }
    )
    summary = simulate(config, tmp_path / "run", progress=False)
    assert summary["data_origin"] == "CIFAR-10, JPEG copy"
    assert summary["data_file_sha256"] == archives.ARCHIVES["cifar10"].sha256  # the tiny archive's, registered above
    assert summary["data_checksum"].startswith("sha256:")
