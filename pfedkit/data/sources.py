"""Read datasets from their standard distribution files into memory as normalized float32 NCHW tensors."""

from __future__ import annotations

import gzip
import hashlib
import inspect
import os
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from pfedkit.data import archives, fetch
from pfedkit.errors import DataError
from pfedkit.seeding import synthetic_generator

# Other places a dataset may already be installed, searched after <root>/<name>.
EXTRA_DIRS: dict[str, tuple[Path, ...]] = {
    "fashion-mnist": (Path("/usr/share/datasets/fashion-mnist"),),  # Debian's dataset-fashion-mnist package
}

# Where to get the datasets that `pfedkit data fetch` cannot download, and the layout we read.
MANUAL_SOURCES: dict[str, str] = {
    "flowers102": (
        "get Oxford Flowers-102 from https://www.robots.ox.ac.uk/~vgg/data/flowers/102/ and arrange it as "
        "<root>/flowers102/train/<class>/*.jpg (and test/<class>/), or <root>/flowers102/<class>/*.jpg"
    ),
    "caltech101": (
        "get Caltech-101 from https://data.caltech.edu/records/mzrjq-6wc02 and extract it so that "
        "<root>/caltech101/101_ObjectCategories/<class>/*.jpg exists"
    ),
    "tiny-imagenet": (
        "get http://cs231n.stanford.edu/tiny-imagenet-200.zip and unzip it so that "
        "<root>/tiny-imagenet/tiny-imagenet-200/train/ and val/ exist"
    ),
    "digits": "no download is needed: digits ships with scikit-learn",
    "synthetic": "no download is needed: synthetic data is generated in memory",
}

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}


@dataclass
class DataSource:
    name: str
    train_x: torch.Tensor  # float32 [N, C, H, W], already normalized
    train_y: torch.Tensor  # int64 [N], labels 0..num_classes-1
    test_x: torch.Tensor | None  # official test split, or None where the dataset has none
    test_y: torch.Tensor | None
    num_classes: int
    origin: str = ""  # which copy was read, where a data set has several ("CIFAR-10, JPEG copy")
    origin_sha256: str = ""  # the SHA-256 of the archive that copy was read from

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_x.shape[1:])  # type: ignore[return-value]


def resolve_data_root(root: str | os.PathLike | None) -> Path:
    """Explicit root, else $PFEDKIT_DATA, else ~/.cache/pfedkit."""
    if root is None or str(root) == "":
        root = os.environ.get("PFEDKIT_DATA") or Path.home() / ".cache" / "pfedkit"
    return Path(root).expanduser()


def normalize(images: np.ndarray) -> torch.Tensor:
    """uint8 [N, C, H, W] -> float32 scaled to [0, 1], then (x - 0.5) / 0.5 per channel (PFLlib's convention)."""
    x = torch.from_numpy(images.astype(np.float32, order="C")).div_(255.0)  # a writable copy
    return x.sub_(0.5).div_(0.5)


def content_checksum(source: DataSource) -> str:
    """sha256 over the loaded tensors (both splits, images and labels): the data a run used, wherever they were read."""
    digest = hashlib.sha256(f"{source.name} {source.num_classes}".encode())
    for tensor in (source.train_x, source.train_y, source.test_x, source.test_y):
        if tensor is not None:
            digest.update(str(tuple(tensor.shape)).encode())
            digest.update(memoryview(tensor.detach().cpu().contiguous().numpy()).cast("B"))
    return "sha256:" + digest.hexdigest()


def labels_tensor(labels) -> torch.Tensor:
    return torch.from_numpy(np.array(labels, dtype=np.int64))  # a writable int64 copy


# ---------------------------------------------------------------- MNIST and Fashion-MNIST (IDX .gz)

IDX_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """Parse a gzipped IDX file of unsigned bytes: magic 0x00 0x00 0x08 <ndim>, big-endian int32 dims, data."""
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as e:
        raise DataError(f"{path} is not a readable gzip file ({e}); delete it and fetch it again") from e
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08 or raw[3] != ndim:
        raise DataError(
            f"{path} has a bad IDX header {raw[:4].hex()} (expected 000008{ndim:02x}: "
            f"unsigned bytes, {ndim} dims); delete it and fetch it again"
        )
    header = 4 + 4 * ndim
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">i4", count=ndim, offset=4)) if len(raw) >= header else ()
    if len(dims) != ndim or len(raw) - header != int(np.prod(dims)):
        raise DataError(
            f"{path}: IDX dims {dims} do not match its {len(raw) - header} data bytes; delete it and fetch it again"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def idx_folder(name: str, root: Path) -> Path:
    """<root>/<name>, or an extra install location that has all four files."""
    for folder in (root / name, *EXTRA_DIRS.get(name, ())):
        if all((folder / f).is_file() for f in IDX_FILES):
            return folder
    return root / name  # reports the first missing file there


def load_idx_dataset(name: str, root: Path) -> DataSource:
    folder = idx_folder(name, root)
    arrays = {}
    for f in IDX_FILES:
        path = fetch.verify_file(name, root, f, folder / f)
        arrays[f] = read_idx(path, 3 if "images" in f else 1)
    splits = []
    for prefix in ("train", "t10k"):
        images, labels = arrays[f"{prefix}-images-idx3-ubyte.gz"], arrays[f"{prefix}-labels-idx1-ubyte.gz"]
        if len(images) != len(labels) or labels.max(initial=0) > 9:
            raise DataError(
                f"{name}: {folder}/{prefix}-* has {len(images)} images and {len(labels)} labels "
                f"(max {labels.max(initial=0)}), expected equal counts and labels 0..9; delete them and fetch again"
            )
        splits.append((normalize(images[:, None]), labels_tensor(labels)))
    (train_x, train_y), (test_x, test_y) = splits
    return DataSource(name, train_x, train_y, test_x, test_y, 10)


def load_mnist(root: Path) -> DataSource:
    return load_idx_dataset("mnist", root)


def load_fashion_mnist(root: Path) -> DataSource:
    return load_idx_dataset("fashion-mnist", root)


# ---------------------------------------------------------------- CIFAR-10/100 (python pickles)


def _numpy_reconstruct():
    try:
        from numpy._core.multiarray import _reconstruct  # numpy >= 2
    except ImportError:
        from numpy.core.multiarray import _reconstruct  # numpy 1.x
    return _reconstruct


# The only globals the CIFAR batches need: numpy array and dtype reconstruction (under numpy 1 and 2 names),
# plus _codecs.encode, which Python 3 uses for bytes in protocol-2 pickles.
_SAFE_GLOBALS: dict[tuple[str, str], Callable[[], object]] = {
    ("numpy.core.multiarray", "_reconstruct"): _numpy_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _numpy_reconstruct,
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
    ("_codecs", "encode"): lambda: __import__("codecs").encode,
}


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the globals in _SAFE_GLOBALS, so a crafted file cannot run code."""

    def find_class(self, module: str, name: str):
        factory = _SAFE_GLOBALS.get((module, name))
        if factory is None:
            raise DataError(
                f"forbidden global {module}.{name} in a dataset pickle; "
                "only numpy arrays are allowed, so the file is not a genuine CIFAR batch"
            )
        return factory()


def read_cifar_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR python batch: dict with data uint8 [n, 3072] (RGB planes) and a list of labels."""
    try:
        with open(path, "rb") as f:
            batch = RestrictedUnpickler(f, encoding="bytes").load()
    except DataError as e:
        raise DataError(f"{path}: {e}") from None
    except Exception as e:  # a truncated or garbled pickle can raise nearly anything
        raise DataError(
            f"{path} is not a readable CIFAR batch ({type(e).__name__}: {e}); delete it and fetch again"
        ) from e
    if not isinstance(batch, dict):
        raise DataError(f"{path} is not a CIFAR batch (a {type(batch).__name__}, expected a dict)")
    entries = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
    if "data" not in entries or label_key not in entries:
        raise DataError(f"{path} lacks the keys 'data' and {label_key!r} of a CIFAR batch; delete it and fetch again")
    data, labels = np.asarray(entries["data"]), np.asarray(entries[label_key], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise DataError(
            f"{path}: data {data.dtype} {data.shape} with {len(labels)} labels, expected uint8 [n, 3072] with n labels"
        )
    return data.reshape(-1, 3, 32, 32), labels


def official_cifar_folder(name: str, root: Path) -> Path:
    return root / name / next(iter(fetch.CHECKSUMS[name])).split("/")[0]


def reads_archive_copy(name: str, root: Path) -> bool:
    """True where the shared image-archive copy stands in: no official python batches, and the archive is there."""
    return (
        name in archives.ARCHIVES
        and not official_cifar_folder(name, root).is_dir()
        and archives.archive_path(name, root).is_file()
    )


def archive_copy_hint(name: str, root: Path) -> str:
    return f"; or put the {archives.ARCHIVES[name].description} at {archives.archive_path(name, root)}"


def load_cifar(name: str, root: Path, label_key: str, num_classes: int) -> DataSource:
    """The official python batches when they are under <root>/<name>/, else the shared image-archive copy."""
    official = official_cifar_folder(name, root)
    if reads_archive_copy(name, root):
        arrays = archives.load_archive(name, root, log=lambda line: print(line, file=sys.stderr))
        return DataSource(
            name,
            normalize(arrays["train_x"]),
            labels_tensor(arrays["train_y"]),
            normalize(arrays["test_x"]),
            labels_tensor(arrays["test_y"]),
            num_classes,
            origin=archives.ARCHIVES[name].description,
            origin_sha256=archives.ARCHIVES[name].sha256,
        )
    train, test = [], []
    for rel in fetch.CHECKSUMS[name]:
        try:
            path = fetch.verify_file(name, root, rel)
        except DataError as err:
            if official.is_dir():
                raise
            raise DataError(f"{err}{archive_copy_hint(name, root)}") from None
        (test if Path(rel).name in ("test", "test_batch") else train).append(read_cifar_batch(path, label_key))
    x_tr, y_tr = np.concatenate([b[0] for b in train]), np.concatenate([b[1] for b in train])
    x_te, y_te = np.concatenate([b[0] for b in test]), np.concatenate([b[1] for b in test])
    for y in (y_tr, y_te):
        if y.min(initial=0) < 0 or y.max(initial=0) >= num_classes:
            raise DataError(f"{name}: labels outside 0..{num_classes - 1} in {root / name}; delete it and fetch again")
    return DataSource(
        name,
        normalize(x_tr),
        labels_tensor(y_tr),
        normalize(x_te),
        labels_tensor(y_te),
        num_classes,
        origin=f"{'CIFAR-10' if name == 'cifar10' else 'CIFAR-100'}, official python batches",
    )


def load_cifar10(root: Path) -> DataSource:
    return load_cifar("cifar10", root, "labels", 10)


def load_cifar100(root: Path) -> DataSource:
    return load_cifar("cifar100", root, "fine_labels", 100)


# ---------------------------------------------------------------- folders of images per class


def class_folders(folder: Path, skip: tuple[str, ...] = ()) -> list[Path]:
    return sorted((p for p in folder.iterdir() if p.is_dir() and p.name not in skip), key=lambda p: p.name)


def image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def read_images(paths: list[Path], size: int) -> np.ndarray:
    """Decode each image as RGB, resized to size x size; uint8 [N, 3, size, size]."""
    from PIL import Image, UnidentifiedImageError

    out = np.empty((len(paths), size, size, 3), dtype=np.uint8)
    for i, path in enumerate(paths):
        try:
            with Image.open(path) as img:
                img = img.convert("RGB")
                if img.size != (size, size):
                    img = img.resize((size, size), Image.BILINEAR)
                out[i] = np.asarray(img)
        except (UnidentifiedImageError, OSError) as e:
            raise DataError(f"{path} is not a readable image ({e}); delete or replace it") from e
    return out.transpose(0, 3, 1, 2)


def read_image_folder(
    folder: Path, size: int, classes: list[str] | None = None, skip: tuple[str, ...] = ()
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """<folder>/<class>/*.{jpg,jpeg,png}, classes sorted by name (or the given list, e.g. the train split's)."""
    if classes is None:
        classes = [p.name for p in class_folders(folder, skip)]
    paths, labels = [], []
    for label, cls in enumerate(classes):
        if (folder / cls).is_dir():
            files = image_files(folder / cls)
            paths += files
            labels += [label] * len(files)
    unknown = sorted({p.name for p in class_folders(folder, skip)} - set(classes))
    if unknown:
        raise DataError(f"{folder} has class folders absent from the train split: {', '.join(unknown[:5])}")
    if not paths:
        raise DataError(f"{folder} has no .jpg/.jpeg/.png images in class sub-folders (<class>/<image>)")
    return normalize(read_images(paths, size)), labels_tensor(labels), classes


def require_dir(name: str, folder: Path) -> Path:
    if not folder.is_dir():
        raise DataError(f"{name}: folder {folder} not found; {MANUAL_SOURCES[name]}")
    return folder


def load_flowers102(root: Path, size: int = 32) -> DataSource:
    base = require_dir("flowers102", root / "flowers102")
    if (base / "train").is_dir():
        x, y, classes = read_image_folder(base / "train", size)
        if (base / "test").is_dir():
            tx, ty, _ = read_image_folder(base / "test", size, classes)
            return DataSource("flowers102", x, y, tx, ty, len(classes))
    else:
        x, y, classes = read_image_folder(base, size)
    return DataSource("flowers102", x, y, None, None, len(classes))


def load_caltech101(root: Path, size: int = 32) -> DataSource:
    folder = require_dir("caltech101", root / "caltech101" / "101_ObjectCategories")
    x, y, classes = read_image_folder(folder, size, skip=("BACKGROUND_Google",))
    return DataSource("caltech101", x, y, None, None, len(classes))


def load_tiny_imagenet(root: Path, size: int = 64) -> DataSource:
    base = require_dir("tiny-imagenet", root / "tiny-imagenet" / "tiny-imagenet-200")
    train = require_dir("tiny-imagenet", base / "train")
    wnids = [p.name for p in class_folders(train)]
    paths, labels = [], []
    for label, wnid in enumerate(wnids):
        files = image_files(train / wnid / "images") if (train / wnid / "images").is_dir() else []
        paths += files
        labels += [label] * len(files)
    if not paths:
        raise DataError(f"tiny-imagenet: no images under {train}/<wnid>/images/; {MANUAL_SOURCES['tiny-imagenet']}")
    source = DataSource(
        "tiny-imagenet", normalize(read_images(paths, size)), labels_tensor(labels), None, None, len(wnids)
    )
    annotations = base / "val" / "val_annotations.txt"
    if annotations.is_file():  # the official val split serves as the test split (the real test labels are withheld)
        index = {w: i for i, w in enumerate(wnids)}
        val_paths, val_labels = [], []
        for n, line in enumerate(annotations.read_text().splitlines(), 1):
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 2 or fields[1] not in index:
                raise DataError(
                    f"{annotations} line {n}: expected '<file>\\t<wnid>...' with a wnid from train/, got {line!r}"
                )
            val_paths.append(base / "val" / "images" / fields[0])
            val_labels.append(index[fields[1]])
        source.test_x, source.test_y = normalize(read_images(val_paths, size)), labels_tensor(val_labels)
    return source


# ---------------------------------------------------------------- offline data


def load_digits(root: Path) -> DataSource:
    from sklearn.datasets import load_digits as sk_digits

    bunch = sk_digits()
    x = torch.as_tensor(bunch.images, dtype=torch.float32).div_(16.0).sub_(0.5).div_(0.5).unsqueeze(1)
    return DataSource("digits", x.contiguous(), labels_tensor(bunch.target), None, None, 10)


def load_synthetic(
    root: Path,
    num_classes: int = 10,
    samples: int = 2000,
    test_samples: int = 500,
    shape: tuple[int, int, int] = (1, 8, 8),
    seed: int = 0,
) -> DataSource:
    """Gaussian classes around seeded random means: learnable well above chance by a small model in a few epochs."""
    shape = tuple(int(s) for s in shape)
    if len(shape) != 3 or min(shape) < 1 or num_classes < 2 or samples < 1 or test_samples < 0:
        raise DataError(
            f"synthetic: bad options num_classes={num_classes}, samples={samples}, "
            f"test_samples={test_samples}, shape={shape}; need shape (C, H, W) and at least 2 classes"
        )
    g = synthetic_generator(seed)
    means = torch.randn(num_classes, *shape, generator=g) * 0.5

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n) % num_classes
        y = y[torch.randperm(n, generator=g)]
        return means[y] + torch.randn(n, *shape, generator=g), y

    (x, y), (tx, ty) = draw(samples), draw(test_samples)
    return DataSource("synthetic", x, y, tx, ty, num_classes)


LOADERS: dict[str, Callable[..., DataSource]] = {
    "mnist": load_mnist,
    "fashion-mnist": load_fashion_mnist,
    "cifar10": load_cifar10,
    "cifar100": load_cifar100,
    "flowers102": load_flowers102,
    "caltech101": load_caltech101,
    "tiny-imagenet": load_tiny_imagenet,
    "digits": load_digits,
    "synthetic": load_synthetic,
}
DATASET_NAMES: tuple[str, ...] = tuple(LOADERS)  # the one list of data set names


def _check_name(name: str) -> None:
    if name not in LOADERS:
        raise DataError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASET_NAMES)}")


def dataset_options(name: str) -> dict[str, object]:
    """The options load_dataset accepts for `name`, with their defaults."""
    _check_name(name)
    params = list(inspect.signature(LOADERS[name]).parameters.values())[1:]
    return {p.name: p.default for p in params}


def load_dataset(name: str, root: str | os.PathLike | None = None, **options) -> DataSource:
    """Load `name` from <root>/<name>/ (root: see resolve_data_root); options are per dataset (dataset_options)."""
    allowed = dataset_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        takes = ", ".join(f"{k}={v!r}" for k, v in allowed.items()) or "no options"
        raise DataError(f"dataset {name!r} does not take option(s) {', '.join(unknown)}; it takes: {takes}")
    return LOADERS[name](resolve_data_root(root), **options)


# ---------------------------------------------------------------- fetch and check


def fetch_dataset(
    name: str, root: str | os.PathLike | None = None, base_url: str | None = None, progress: bool = True
) -> list[Path]:
    """Download `name`'s official files into <root>/<name>/, verify their md5s, return the verified paths."""
    _check_name(name)
    root = resolve_data_root(root)
    if name in ("digits", "synthetic"):
        return []  # bundled or generated: nothing to download
    if name not in fetch.BASE_URLS:
        raise DataError(f"{name} cannot be downloaded by `pfedkit data fetch`: {MANUAL_SOURCES[name]}")
    return fetch.fetch_files(name, root, base_url, progress)


def _count_images(folder: Path, skip: tuple[str, ...] = (), sub: str = "") -> tuple[int, int]:
    classes = class_folders(folder, skip)
    return len(classes), sum(len(image_files(c / sub)) for c in classes if (c / sub).is_dir())


def check_dataset(name: str, root: str | os.PathLike | None = None) -> list[str]:
    """One line per file or folder checked; DataError listing every problem (and only the problems; the good
    files are its `checked` lines) if anything is missing or corrupt."""
    _check_name(name)
    root = resolve_data_root(root)
    if name in ("digits", "synthetic"):
        return [f"ok  {name}: {MANUAL_SOURCES[name]}; nothing to check"]
    lines, problems = [], []
    if reads_archive_copy(name, root):
        try:  # the shared image-archive copy stands in for the official batches
            path = archives.verify_archive(name, root)
            lines.append(f"ok  {path}  sha256 {archives.ARCHIVES[name].sha256} ({archives.ARCHIVES[name].description})")
        except DataError as e:
            problems.append(str(e))
    elif name in fetch.CHECKSUMS:
        folder = idx_folder(name, root) if name in ("mnist", "fashion-mnist") else root / name
        for rel, md5 in fetch.CHECKSUMS[name].items():
            try:
                path = fetch.verify_file(name, root, rel, folder / rel)
                lines.append(f"ok  {path}  md5 {md5}")
            except DataError as e:
                problems.append(str(e))
        if problems and name in archives.ARCHIVES and not official_cifar_folder(name, root).is_dir():
            problems[-1] += archive_copy_hint(name, root)
    else:
        checks = {
            "flowers102": [
                (root / "flowers102" / s, "") for s in ("train", "test") if (root / "flowers102" / s).is_dir()
            ]
            or [(root / "flowers102", "")],
            "caltech101": [(root / "caltech101" / "101_ObjectCategories", "")],
            "tiny-imagenet": [(root / "tiny-imagenet" / "tiny-imagenet-200" / "train", "images")],
        }[name]
        for folder, sub in checks:
            if not folder.is_dir():
                problems.append(f"{name}: folder {folder} not found; {MANUAL_SOURCES[name]}")
                continue
            n_classes, n_images = _count_images(folder, ("BACKGROUND_Google",), sub)
            if n_images == 0:
                problems.append(f"{name}: no images in class folders under {folder}; {MANUAL_SOURCES[name]}")
            else:
                lines.append(f"ok  {folder}: {n_classes} classes, {n_images} images")
        if name == "tiny-imagenet":
            ann = root / "tiny-imagenet" / "tiny-imagenet-200" / "val" / "val_annotations.txt"
            lines.append(f"ok  {ann}" if ann.is_file() else f"--  {ann} not found: no test split")
    if problems:
        error = DataError("\n".join(problems))
        error.checked = lines  # the files that are fine, for a caller that lists them apart from the problems
        raise error
    return lines
