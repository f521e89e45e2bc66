"""Downloads against a local HTTP server, archive safety, and errors for missing or corrupt files."""

from __future__ import annotations

import functools
import io
import shutil
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_sources import IDX_NAMES, md5, write_cifar10, write_idx_dataset

from pfedkit.data import fetch
from pfedkit.data.sources import check_dataset, fetch_dataset, load_dataset
from pfedkit.errors import DataError


class _QuietHandler(SimpleHTTPRequestHandler):
    requests: list[str] = []

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        _QuietHandler.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def server(tmp_path: Path):
    """Serve tmp_path/served on 127.0.0.1 (a free port) from a background thread; yields (folder, base URL)."""
    served = tmp_path / "served"
    served.mkdir()
    _QuietHandler.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(served)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*")) if folder.exists() else []


def test_good_download(server, tmp_path: Path, monkeypatch):
    served, url = server
    monkeypatch.setitem(fetch.CHECKSUMS, "mnist", write_idx_dataset(served))
    root = tmp_path / "root"
    paths = fetch_dataset("mnist", root, base_url=url, progress=False)
    assert [p.name for p in paths] == list(IDX_NAMES)
    for p in paths:
        assert p.read_bytes() == (served / p.name).read_bytes()
    assert leftovers(root / "mnist") == sorted(IDX_NAMES)  # no temporary files
    assert load_dataset("mnist", root=root).train_x.shape == (12, 1, 28, 28)
    fetch_dataset("mnist", root, base_url=url, progress=False)  # valid files are kept, not fetched again
    assert len(_QuietHandler.requests) == 4
    assert len(check_dataset("mnist", root)) == 4


def test_corrupt_download_leaves_nothing(server, tmp_path: Path, monkeypatch):
    served, url = server
    table = write_idx_dataset(served)
    expected = "0123456789abcdef0123456789abcdef"
    table[IDX_NAMES[0]] = expected
    monkeypatch.setitem(fetch.CHECKSUMS, "mnist", table)
    root = tmp_path / "root"
    with pytest.raises(DataError) as e:
        fetch_dataset("mnist", root, base_url=url, progress=False)
    msg = str(e.value)
    assert IDX_NAMES[0] in msg and expected in msg and md5(served / IDX_NAMES[0]) in msg and url in msg
    assert leftovers(root / "mnist") == []


def test_404(server, tmp_path: Path, monkeypatch):
    served, url = server
    monkeypatch.setitem(fetch.CHECKSUMS, "mnist", {"train-images-idx3-ubyte.gz": "0" * 32})
    with pytest.raises(DataError, match=r"could not download train-images-idx3-ubyte.gz from .*: HTTP 404"):
        fetch_dataset("mnist", tmp_path / "root", base_url=url, progress=False)
    assert leftovers(tmp_path / "root" / "mnist") == []


def test_unreachable_host(tmp_path: Path, monkeypatch):
    monkeypatch.setitem(fetch.CHECKSUMS, "mnist", {"train-images-idx3-ubyte.gz": "0" * 32})
    with pytest.raises(DataError, match="could not download"):
        fetch_dataset("mnist", tmp_path, base_url="http://127.0.0.1:9/", progress=False)  # discard port: refused
    assert leftovers(tmp_path / "mnist") == []


def make_tar(path: Path, source: Path, top: str) -> str:
    with tarfile.open(path, "w:gz") as tar:
        tar.add(source / top, arcname=top)
    return md5(path)


def test_cifar_archive_fetch(server, tmp_path: Path, monkeypatch):
    served, url = server
    table = write_cifar10(tmp_path / "build")
    archive_md5 = make_tar(served / "cifar-10-python.tar.gz", tmp_path / "build", "cifar-10-batches-py")
    monkeypatch.setitem(fetch.CHECKSUMS, "cifar10", table)
    monkeypatch.setitem(fetch.ARCHIVES, "cifar10", ("cifar-10-python.tar.gz", archive_md5, "cifar-10-batches-py"))
    root = tmp_path / "root"
    paths = fetch_dataset("cifar10", root, base_url=url, progress=False)
    assert len(paths) == 6 and all(p.is_file() for p in paths)
    assert leftovers(root / "cifar10") == sorted(["cifar-10-batches-py"] + [Path(r).name for r in table])
    assert load_dataset("cifar10", root=root).train_x.shape == (20, 3, 32, 32)


def test_unsafe_archive_refused(server, tmp_path: Path, monkeypatch):
    served, url = server
    archive = served / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    monkeypatch.setitem(fetch.ARCHIVES, "cifar10", ("cifar-10-python.tar.gz", md5(archive), "cifar-10-batches-py"))
    root = tmp_path / "root"
    with pytest.raises(DataError, match="unsafe member '../escaped.txt'"):
        fetch_dataset("cifar10", root, base_url=url, progress=False)
    assert not (root / "escaped.txt").exists() and leftovers(root / "cifar10") == []


@pytest.mark.parametrize("name", ["flowers102", "caltech101", "tiny-imagenet"])
def test_not_fetchable(name: str, tmp_path: Path):
    with pytest.raises(DataError, match="cannot be downloaded") as e:
        fetch_dataset(name, tmp_path)
    assert "http" in str(e.value)


@pytest.mark.parametrize("name", ["digits", "synthetic"])
def test_nothing_to_fetch_for_bundled_data(name: str, tmp_path: Path):
    assert fetch_dataset(name, tmp_path) == []
    assert not any(tmp_path.iterdir())


def test_missing_mnist_file(tmp_path: Path):
    with pytest.raises(DataError) as e:
        load_dataset("mnist", root=tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "mnist" / "train-images-idx3-ubyte.gz") in msg
    assert "f68b3c2dcbeaaa9fbdd348bbdeb94873" in msg and "pfedkit data fetch mnist" in msg
    with pytest.raises(DataError, match="missing file"):
        check_dataset("mnist", tmp_path)


def test_corrupt_mnist_file(shared_data: Path, tmp_path: Path):
    shutil.copytree(shared_data / "mnist", tmp_path / "mnist")
    (tmp_path / "mnist").chmod(0o755)  # the shared copy is read-only
    labels = tmp_path / "mnist" / "train-labels-idx1-ubyte.gz"
    labels.chmod(0o644)
    data = bytearray(labels.read_bytes())
    data[100] ^= 0xFF
    labels.write_bytes(bytes(data))
    with pytest.raises(DataError) as e:
        load_dataset("mnist", root=tmp_path)
    msg = str(e.value)
    assert str(labels) in msg and "corrupt" in msg and "d53e105ee54ea40749a09fcbcd1e9432" in msg
    with pytest.raises(DataError, match="d53e105ee54ea40749a09fcbcd1e9432") as e:
        check_dataset("mnist", tmp_path)
    assert "ok  " not in str(e.value) and len(e.value.checked) == 3  # the good files apart from the problem
    from click.testing import CliRunner

    from pfedkit.cli import main

    result = CliRunner().invoke(main, ["data", "check", "mnist", "--data-root", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stdout.count("ok  ") == 3 and "error: ok" not in result.output  # good files are not errors
    assert result.stderr.startswith("error: ") and "d53e105ee54ea40749a09fcbcd1e9432" in result.stderr


def test_recompressed_copy_with_official_content_is_accepted(shared_data, tmp_path):
    """Debian's dataset-fashion-mnist recompresses the .gz files: other bytes, the same content."""
    import gzip as gz

    from pfedkit.data import fetch

    for rel in ("t10k-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        content = gz.decompress((shared_data / "fashion-mnist" / rel).read_bytes())
        copy = tmp_path / "fashion-mnist" / rel
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(gz.compress(content, mtime=0))
        assert fetch.md5_of(copy) != fetch.CHECKSUMS["fashion-mnist"][rel]
        assert fetch.verify_file("fashion-mnist", tmp_path, rel) == copy
        copy.write_bytes(
            gz.compress(content[:-1] + bytes([(content[-1] + 1) % 256]), mtime=0)
        )  # one label changed: refused
        with pytest.raises(DataError, match="corrupt"):
            fetch.verify_file("fashion-mnist", tmp_path, rel)
