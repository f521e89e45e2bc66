"""CIFAR-10 and CIFAR-100 from the image-archive copies (`cifar10-jpeg/`, `cifar100-png/`), read straight from the
.tar.gz: checked against its SHA-256, decoded once, and cached as arrays keyed by that checksum.

Layout of an archive: `train/<class>/*.{jpg,png}`, `test/<class>/*`, and for CIFAR-100 `fine_label_names.txt` (the
label order). CIFAR-10's class folders are its label names, whose alphabetical order is CIFAR-10's own.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from pfedkit.errors import DataError
from pfedkit.io import atomic_write

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


@dataclass(frozen=True)
class ImageArchive:
    dataset: str  # the data set it stands in for
    folder: str  # under the data root
    file: str
    sha256: str  # of the archive as shared; SHA256SUMS beside it must agree
    description: str  # how results on it are named
    label_file: Optional[str] = None  # member listing the class names in label order; else CIFAR-10's names


ARCHIVES = {
    "cifar10": ImageArchive(
        "cifar10",
        "cifar10-jpeg",
        "cifar10-jpeg.tar.gz",
        "0bfcb68717a0ecb0d51ed61034906a773d48d424d94b766a46d7d1c55702a4d9",
        "CIFAR-10, JPEG copy",
    ),
    "cifar100": ImageArchive(
        "cifar100",
        "cifar100-png",
        "cifar100-png.tar.gz",
        "a2d2f5298a9042a2df3613c47b1b2d0358e634ebf47516778350336f3b12c8cf",
        "CIFAR-100, reconstructed PNG copy",
        label_file="fine_label_names.txt",
    ),
}


def archive_path(name: str, root: Path) -> Path:
    spec = ARCHIVES[name]
    return Path(root) / spec.folder / spec.file


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def verify_archive(name: str, root: Path) -> Path:
    """The archive's path once its SHA-256 is the expected one (and SHA256SUMS beside it, if any, agrees)."""
    spec, path = ARCHIVES[name], archive_path(name, root)
    if not path.is_file():
        raise DataError(
            f"{name}: missing file {path} (expected sha256 {spec.sha256}); it is the {spec.description} "
            f"kept in this project's shared data folder: pass --data-root pointing at the folder that holds "
            f"{spec.folder}/"
        )
    sums = path.parent / "SHA256SUMS"
    if sums.is_file():
        listed = {
            line.split()[-1].lstrip("*"): line.split()[0] for line in sums.read_text().splitlines() if line.strip()
        }
        if listed.get(spec.file, spec.sha256) != spec.sha256:
            raise DataError(
                f"{sums} lists {listed[spec.file]} for {spec.file}, not the {spec.sha256} this pfedkit "
                "expects: the copy was replaced; fetch the project's copy again"
            )
    actual = file_sha256(path)
    if actual != spec.sha256:
        raise DataError(
            f"{name}: corrupt file {path}: sha256 is {actual}, expected {spec.sha256}; replace it with the "
            "project's shared copy"
        )
    return path


def decode_archive(path: Path, label_file: Optional[str]) -> dict[str, np.ndarray]:
    """Every image of both splits as uint8 [N, 3, 32, 32] with int64 labels, in (split, class, file name) order."""
    from PIL import Image

    members: dict[tuple[str, str], list[tuple[str, bytes]]] = {}
    names: Optional[list[str]] = None
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            if not member.isfile():
                continue
            parts = Path(member.name).parts
            parts = parts[1:] if parts and parts[0] in (".",) else parts
            if label_file and parts and parts[-1] == label_file:
                names = tar.extractfile(member).read().decode().split()
            elif len(parts) >= 3 and parts[-3] in ("train", "test"):
                members.setdefault((parts[-3], parts[-2]), []).append((parts[-1], tar.extractfile(member).read()))
    classes = names if label_file else list(CIFAR10_CLASSES)
    if classes is None:
        raise DataError(f"{path} has no {label_file}: the label order is unknown; replace it with the project's copy")
    found = sorted({cls for _, cls in members})
    if sorted(classes) != found:
        raise DataError(f"{path}: class folders {found[:5]}... do not match the {len(classes)} expected classes")
    out: dict[str, np.ndarray] = {}
    for split in ("train", "test"):
        images, labels = [], []
        for label, cls in enumerate(classes):
            for file_name, data in sorted(members.get((split, cls), [])):
                try:
                    with Image.open(io.BytesIO(data)) as img:
                        images.append(np.asarray(img.convert("RGB")))
                except Exception as err:  # noqa: BLE001 - a damaged image can raise many kinds of error
                    raise DataError(f"{path}: {split}/{cls}/{file_name} is not a readable image ({err})") from None
                labels.append(label)
        shapes = {a.shape for a in images}
        if shapes != {(32, 32, 3)}:
            raise DataError(f"{path}: {split} images have shapes {sorted(shapes)[:3]}, expected 32x32 RGB")
        out[f"{split}_x"] = np.stack(images).transpose(0, 3, 1, 2).copy()
        out[f"{split}_y"] = np.array(labels, dtype=np.int64)
    return out


ARRAYS = ("train_x", "train_y", "test_x", "test_y")


def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for key in ARRAYS:
        digest.update(f"{key}{arrays[key].shape}{arrays[key].dtype}".encode())
        digest.update(memoryview(np.ascontiguousarray(arrays[key])).cast("B"))
    return digest.hexdigest()


def cache_dir() -> Path:
    """$PFEDKIT_CACHE, else ~/.cache/pfedkit/decoded (the shared data folder may be read-only)."""
    return Path(os.environ.get("PFEDKIT_CACHE") or Path.home() / ".cache" / "pfedkit" / "decoded")


def read_cache(path: Path) -> Optional[dict[str, np.ndarray]]:
    """The cached arrays, or None when the cache is absent, partial or damaged (it is then rebuilt, never used)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in (*ARRAYS, "digest")}
    except Exception:  # noqa: BLE001 - a truncated or garbled file can raise many kinds of error
        return None
    digest = str(arrays.pop("digest"))
    return arrays if digest == arrays_digest(arrays) else None


def load_archive(name: str, root: Path, log: Callable[[str], None] = lambda line: None) -> dict[str, np.ndarray]:
    """The copy's arrays: from the cache keyed by the archive's SHA-256 when it is intact, else decoded (and cached)."""
    spec = ARCHIVES[name]
    path = verify_archive(name, root)
    cached = cache_dir() / f"{spec.folder}-{spec.sha256[:16]}.npz"
    arrays = read_cache(cached)
    if arrays is not None:
        return arrays
    log(f"decoding {path} once (cached in {cached})")
    arrays = decode_archive(path, spec.label_file)

    def write(f) -> None:
        np.savez(f, **arrays, digest=np.array(arrays_digest(arrays)))

    atomic_write(cached, write)
    return arrays
