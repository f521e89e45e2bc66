"""Checksums, verified downloads and safe archive extraction for the datasets that have official files."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from tqdm import tqdm

from pfedkit.errors import DataError

MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/"

# Files each reader verifies before parsing: dataset -> {path relative to <root>/<dataset>: official md5}.
# Module-level so tests can swap in fixture checksums.
CHECKSUMS: dict[str, dict[str, str]] = {
    "mnist": {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
    },
    "cifar10": {
        "cifar-10-batches-py/data_batch_1": "c99cafc152244af753f735de768cd75f",
        "cifar-10-batches-py/data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
        "cifar-10-batches-py/data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
        "cifar-10-batches-py/data_batch_4": "634d18415352ddfa80567beed471001a",
        "cifar-10-batches-py/data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
        "cifar-10-batches-py/test_batch": "40351d587109b95175f43aff81a1287e",
    },
    "cifar100": {
        "cifar-100-python/train": "16019d7e3df5f24257cddd939b257f8d",
        "cifar-100-python/test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
    },
}

# md5 of the decompressed IDX files: a repackaged copy (Debian recompresses Fashion-MNIST) has other .gz bytes
# but the same content, and is accepted when that content matches.
CONTENT_CHECKSUMS: dict[str, dict[str, str]] = {
    "mnist": {
        "train-images-idx3-ubyte.gz": "6bbc9ace898e44ae57da46a324031adb",
        "train-labels-idx1-ubyte.gz": "a25bea736e30d166cdddb491f175f624",
        "t10k-images-idx3-ubyte.gz": "2646ac647ad5339dbf082846283269ea",
        "t10k-labels-idx1-ubyte.gz": "27ae3e4e09519cfbb04c329615203637",
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte.gz": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
        "train-labels-idx1-ubyte.gz": "9018921c3c673c538a1fc5bad174d6f9",
        "t10k-images-idx3-ubyte.gz": "8181f5470baa50b63fa0f6fddb340f0a",
        "t10k-labels-idx1-ubyte.gz": "15d484375f8d13e6eb1aabb0c3f46965",
    },
}

# Where the official files live: dataset -> base URL. Files in CHECKSUMS are fetched one by one
# from it unless the dataset has an archive in ARCHIVES.
BASE_URLS: dict[str, str] = {
    "mnist": MNIST_URL,
    "fashion-mnist": FASHION_MNIST_URL,
    "cifar10": CIFAR_URL,
    "cifar100": CIFAR_URL,
}

# Datasets distributed as one tarball: dataset -> (archive name, official md5, top folder inside it).
ARCHIVES: dict[str, tuple[str, str, str]] = {
    "cifar10": ("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a", "cifar-10-batches-py"),
    "cifar100": ("cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85", "cifar-100-python"),
}

# md5 of files already hashed in this process, keyed so that any rewrite of the file invalidates it.
_MD5_CACHE: dict[tuple[str, int, int], str] = {}


def md5_of(path: Path, decompressed: bool = False) -> str:
    """The file's md5 (of its gzip content if `decompressed`), cached by (path, size, mtime): no re-hashing."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, decompressed)
    if key not in _MD5_CACHE:
        h = hashlib.md5()
        try:
            with gzip.open(path, "rb") if decompressed else open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        except (OSError, EOFError, zlib.error):  # not gzip, truncated or damaged: no content digest can match
            return ""
        _MD5_CACHE[key] = h.hexdigest()
    return _MD5_CACHE[key]


def official_url(name: str, relpath: str) -> str:
    """Where a user can get this file by hand (the archive for tarball datasets)."""
    if name in ARCHIVES:
        return BASE_URLS[name] + ARCHIVES[name][0]
    return BASE_URLS[name] + Path(relpath).name


def fetch_hint(name: str, root: Path, relpath: str) -> str:
    return (
        f"fix: run `pfedkit data fetch {name} --data-root {root}` "
        f"or download {official_url(name, relpath)} into {root / name}"
    )


def verify_file(name: str, root: Path, relpath: str, path: Path | None = None) -> Path:
    """Check one file of `name` against CHECKSUMS; raise DataError naming file, md5 and fix otherwise."""
    expected = CHECKSUMS[name][relpath]
    path = path or root / name / relpath
    if not path.is_file():
        raise DataError(f"{name}: missing file {path} (expected md5 {expected}); {fetch_hint(name, root, relpath)}")
    actual = md5_of(path)
    content = CONTENT_CHECKSUMS.get(name, {}).get(relpath)
    if actual != expected and not (content and md5_of(path, decompressed=True) == content):
        raise DataError(
            f"{name}: corrupt file {path}: md5 is {actual}, expected {expected}; "
            f"delete it and {fetch_hint(name, root, relpath)}"
        )
    return path


def download(url: str, dest: Path, md5: str, progress: bool = True) -> Path:
    """Download url to dest through a temporary file in dest's folder: verified, then renamed into place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        digest = hashlib.md5()
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    total = int(response.headers.get("Content-Length") or 0) or None
                    with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, disable=not progress) as bar:
                        for chunk in iter(lambda: response.read(1 << 20), b""):
                            out.write(chunk)
                            digest.update(chunk)
                            bar.update(len(chunk))
            except (urllib.error.URLError, OSError) as e:  # HTTPError is a URLError; timeouts are OSErrors
                reason = (
                    f"HTTP {e.code} {e.reason}"
                    if isinstance(e, urllib.error.HTTPError)
                    else str(getattr(e, "reason", e))
                )
                raise DataError(
                    f"could not download {dest.name} from {url}: {reason}; "
                    f"check the network, or download it by hand into {dest.parent} (expected md5 {md5})"
                ) from e
        actual = digest.hexdigest()
        if actual != md5:
            raise DataError(
                f"downloaded {dest.name} from {url} is corrupt: md5 is {actual}, expected {md5}; "
                f"nothing was kept; retry, or download it by hand into {dest.parent}"
            )
        os.replace(tmp, dest)
        return dest
    finally:
        tmp.unlink(missing_ok=True)  # on success it was already renamed away


def _check_members(archive: Path, members: list[tarfile.TarInfo]) -> None:
    """Refuse anything but plain files and folders with relative, non-escaping names."""
    for m in members:
        parts = Path(m.name).parts
        if m.name.startswith(("/", "\\")) or ".." in parts or not (m.isfile() or m.isdir()):
            raise DataError(
                f"archive {archive} has an unsafe member {m.name!r} (absolute path, '..' or a link); "
                "refusing to extract it; delete the archive and download it again"
            )


def extract_tar(archive: Path, folder: Path, top: str) -> Path:
    """Extract `top` from archive into folder, via a staging folder so a failed extraction leaves nothing."""
    staging = Path(tempfile.mkdtemp(dir=folder, prefix=".extract-"))
    try:
        try:
            with tarfile.open(archive) as tar:
                members = tar.getmembers()
                _check_members(archive, members)
                if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4: the stdlib's own safety filter
                    tar.extractall(staging, filter="data")
                else:
                    tar.extractall(staging, members=members)
        except (tarfile.TarError, OSError) as e:
            raise DataError(f"could not extract {archive}: {e}; delete it and download it again") from e
        if not (staging / top).is_dir():
            raise DataError(f"archive {archive} has no folder {top!r}; delete it and download it again")
        target = folder / top
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging / top, target)
        return target
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def fetch_files(name: str, root: Path, base_url: str | None = None, progress: bool = True) -> list[Path]:
    """Download and verify `name`'s official files under root/name; files already valid are kept."""
    folder = root / name
    base = base_url or BASE_URLS[name]
    if not base.endswith("/"):
        base += "/"
    table = CHECKSUMS[name]

    def valid(rel: str) -> bool:
        path = folder / rel
        return path.is_file() and md5_of(path) == table[rel]

    if name in ARCHIVES:
        if not all(valid(rel) for rel in table):
            archive_name, archive_md5, top = ARCHIVES[name]
            archive = download(base + archive_name, folder / archive_name, archive_md5, progress)
            try:
                extract_tar(archive, folder, top)
            finally:
                archive.unlink(missing_ok=True)  # the extracted files are what we keep and verify
    else:
        for rel in table:
            if not valid(rel):
                download(base + Path(rel).name, folder / rel, table[rel], progress)
    return [verify_file(name, root, rel) for rel in table]
