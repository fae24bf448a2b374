"""HDP's datasets from a local path: CIFAR-10/100 python batches and
EMNIST by writer (LEAF json shards, TFF h5), generated here in their real layouts.

Every generated image encodes where it came from, so the tests can check that the pixel
written is the pixel read, in HWC layout: CIFAR image ``k`` of a file has, at row i, column j,
channel c, the byte ``(k + 7·i + 3·j + 85·c) mod 256``; EMNIST example ``k`` of writer ``w``
has pixel (i, j) = ``((w·31 + k·7 + i·28 + j) mod 997) / 996``.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from fedpriv.data import DataError, load_federated
from tests.simulate import run_fedpriv, to_override

CIFAR10 = "cifar-10-batches-py"
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))


# --- generated files in the real layouts ---------------------------------------------------------


def cifar_pixels(k: np.ndarray) -> np.ndarray:
    """(len(k), 32, 32, 3) uint8: the HWC image that generated row ``k`` encodes."""
    i, j, c = np.meshgrid(np.arange(32), np.arange(32), np.arange(3), indexing="ij")
    return ((k[:, None, None, None] + 7 * i + 3 * j + 85 * c) % 256).astype(np.uint8)


def _cifar_rows(offset: int, n: int) -> np.ndarray:
    """(n, 3072) uint8 rows, channels-first (R plane, G plane, B plane), as CIFAR stores them."""
    hwc = cifar_pixels(np.arange(offset, offset + n))
    return hwc.transpose(0, 3, 1, 2).reshape(n, 3072)


def _pickle(path: Path, obj: object, legacy: bool = False) -> None:
    """``obj`` pickled; ``legacy``: protocol 2 with numpy 1's module names, as in the
    archive (written by Python 2 and numpy 1: ``numpy.core.multiarray._reconstruct``)."""
    data = pickle.dumps(obj, protocol=2 if legacy else pickle.DEFAULT_PROTOCOL)
    path.write_bytes(data.replace(b"numpy._core.", b"numpy.core.") if legacy else data)


def write_cifar10(root: Path, per_batch: int = 40, legacy: bool = False) -> Path:
    """``root/cifar-10-batches-py`` with 5 training batches and a test batch (label = k mod 10)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for b, name in enumerate((*CIFAR10_TRAIN, "test_batch")):
        k = np.arange(b * per_batch, (b + 1) * per_batch)
        batch = {b"batch_label": name.encode(), b"labels": (k % 10).tolist()}
        rows = {**batch, b"data": _cifar_rows(b * per_batch, per_batch)}
        _pickle(folder / name, rows, legacy)
    _pickle(folder / "batches.meta", {b"label_names": [b"c%d" % i for i in range(10)]})
    return root


def write_cifar100(root: Path, n_train: int = 200, n_test: int = 50) -> Path:
    """``root/cifar-100-python`` with ``train``, ``test``, ``meta`` (fine label = k mod 100)."""
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    for name, offset, n in (("train", 0, n_train), ("test", n_train, n_test)):
        k = np.arange(offset, offset + n)
        labels = {b"fine_labels": (k % 100).tolist(), b"coarse_labels": (k % 20).tolist()}
        _pickle(folder / name, {b"data": _cifar_rows(offset, n), **labels})
    _pickle(folder / "meta", {b"fine_label_names": [b"f%d" % i for i in range(100)]})
    return root


def emnist_pixels(w: int, k: int) -> np.ndarray:
    i, j = np.meshgrid(np.arange(28), np.arange(28), indexing="ij")
    return (((w * 31 + k * 7 + i * 28 + j) % 997) / 996).astype(np.float32)


def _writer_examples(w: int, start: int, n: int, classes: int) -> tuple[list, list]:
    """Writer ``w``'s examples start..start+n: 784-float rows and labels (w + k) mod classes."""
    x = [emnist_pixels(w, k).reshape(-1).tolist() for k in range(start, start + n)]
    return x, [(w + k) % classes for k in range(start, start + n)]


def write_leaf(root: Path, writers: int = 6, classes: int = 62, shards: int = 2) -> Path:
    """``root/data/{train,test}/*.json``: writer w has 6 + w training and 2 test examples."""
    for split, start, size in (("train", 0, lambda w: 6 + w), ("test", 100, lambda w: 2)):
        folder = root / "data" / split
        folder.mkdir(parents=True)
        for s in range(shards):
            ids = [w for w in range(writers) if w % shards == s]
            users = [f"f{w:04d}_{w:02d}" for w in ids]
            data = {u: _writer_examples(w, start, size(w), classes) for u, w in zip(users, ids)}
            shard = {
                "users": users,
                "num_samples": [len(data[u][1]) for u in users],
                "user_data": {u: {"x": x, "y": y} for u, (x, y) in data.items()},
            }
            (folder / f"all_data_{s}_niid_0_keep_0_{split}_9.json").write_text(json.dumps(shard))
    return root


def write_h5(root: Path, writers: int = 5, classes: int = 10) -> Path:
    """TFF's ``fed_emnist_digitsonly_{train,test}.h5``: examples/<writer>/pixels, label."""
    h5py = pytest.importorskip("h5py")
    root.mkdir(parents=True, exist_ok=True)
    for split, start, size in (("train", 0, lambda w: 6 + w), ("test", 100, lambda w: 3)):
        with h5py.File(root / f"fed_emnist_digitsonly_{split}.h5", "w") as f:
            for w in range(writers):
                x, y = _writer_examples(w, start, size(w), classes)
                group = f.create_group(f"examples/f{w:04d}_{w:02d}")
                group["pixels"] = np.asarray(x, dtype=np.float32).reshape(-1, 28, 28)
                group["label"] = np.asarray(y, dtype=np.int32)
    return root


# --- CIFAR --------------------------------------------------------------------------------------


def _cifar_k(x: np.ndarray) -> np.ndarray:
    """The generator index of each HWC float image (its pixel (0, 0, 0) is k; k < 256 here)."""
    return np.rint(x[:, 0, 0, 0] * 255).astype(np.int64)


@pytest.mark.parametrize("where", ["parent", "folder"])
def test_cifar10_pixels_labels_and_iid_split(tmp_path, where):
    root = write_cifar10(tmp_path, legacy=where == "folder")
    path = root if where == "parent" else root / CIFAR10
    fd = load_federated("cifar10", partition="iid", num_clients=4, seed=1, data_path=str(path))
    assert (fd.num_clients, fd.num_classes, fd.input_shape) == (4, 10, (32, 32, 3))
    x_train = np.concatenate([c.x_train for c in fd.clients])
    y_train = np.concatenate([c.y_train for c in fd.clients])
    assert x_train.shape == (200, 32, 32, 3) and x_train.dtype == np.float32
    k = _cifar_k(x_train)
    assert sorted(k.tolist()) == list(range(200))  # every training image, once
    np.testing.assert_array_equal(np.rint(x_train * 255).astype(np.uint8), cifar_pixels(k))
    np.testing.assert_array_equal(y_train, k % 10)
    # IID: 50 training images a client, 5 of each class; the test batch dealt 10 a client
    for c in fd.clients:
        assert np.bincount(c.y_train, minlength=10).tolist() == [5] * 10
        assert len(c.y_test) == 10 and np.all(_cifar_k(c.x_test) >= 200)
        np.testing.assert_array_equal(c.y_test, _cifar_k(c.x_test) % 10)
    client_tests = np.concatenate([_cifar_k(c.x_test) for c in fd.clients])
    assert sorted(client_tests.tolist()) == list(range(200, 240))
    server = np.concatenate([_cifar_k(fd.x_val), _cifar_k(fd.x_test)])
    assert sorted(server.tolist()) == list(range(200, 240)) and len(fd.y_val) == 20


def test_cifar100_fine_labels_and_paper_shape(tmp_path):
    root = write_cifar100(tmp_path)
    fd = load_federated("cifar100", partition="iid", num_clients=2, seed=0, data_path=str(root))
    assert (fd.num_clients, fd.num_classes, fd.input_shape) == (2, 100, (32, 32, 3))
    for c in fd.clients:
        k = _cifar_k(c.x_train)
        np.testing.assert_array_equal(c.y_train, k % 100)  # fine, not coarse, labels
        np.testing.assert_array_equal(np.rint(c.x_train * 255).astype(np.uint8), cifar_pixels(k))
        assert len(c.y_train) == 100 and len(c.y_test) > 0
    assert sum(len(c.y_test) for c in fd.clients) == 50


def test_cifar100_iid_test_images_spread_over_all_clients():
    """CIFAR-100 IID at the paper's 500 clients: one training image of a class per client and
    100 test images of it, so every share ties; ties are broken at random, not by client id."""
    from fedpriv import seeds
    from fedpriv.data.cifar import deal_test_set

    y_test = np.repeat(np.arange(100), 100)
    parts = deal_test_set(y_test, np.ones((500, 100), dtype=np.int64), seeds.stream(0, "test-deal"))
    sizes = np.array([len(p) for p in parts])
    assert sizes.sum() == 10_000 and sizes.min() >= 5 and sizes.max() <= 40
    assert len(np.unique(np.concatenate(parts))) == 10_000


def test_cifar_dirichlet_deals_test_images_like_training_labels(tmp_path):
    root = write_cifar10(tmp_path, per_batch=100)
    fd = load_federated(
        "cifar10", partition="dirichlet", num_clients=3, seed=2, data_path=str(root),
        dirichlet_alpha=0.3,
    )  # fmt: skip
    for c in fd.clients:
        train = np.bincount(c.y_train, minlength=10)
        test = np.bincount(c.y_test, minlength=10)
        assert np.all(test[train == 0] == 0)  # no test class the client never trained on
    assert sum(len(c.y_test) for c in fd.clients) == 100


class _Evil:
    """A pickle that would run a shell command when loaded by ``pickle.load``."""

    def __reduce__(self):
        import os

        return (os.system, ("echo pwned",))


@pytest.mark.parametrize(
    "make,fragment",
    [
        (lambda p: p, "cifar-10-batches-py/data_batch_1"),
        (lambda p: (write_cifar10(p) / CIFAR10 / "test_batch").unlink(), "test_batch"),
        (
            lambda p: (write_cifar10(p) / CIFAR10 / "data_batch_3").write_bytes(b"x"),
            "data_batch_3 is not readable",
        ),
        (
            lambda p: _pickle(write_cifar10(p) / CIFAR10 / "data_batch_2", _Evil()),
            "data_batch_2 is not readable (UnpicklingError: global posix.system",
        ),
    ],
    ids=["empty", "no-test-batch", "corrupt-batch", "code-in-pickle"],
)
def test_cifar_missing_or_broken_files_are_named(tmp_path, make, fragment):
    make(tmp_path)
    with pytest.raises(DataError) as err:
        load_federated("cifar10", partition="iid", num_clients=2, seed=0, data_path=str(tmp_path))
    message = str(err.value)
    assert fragment in message and "\n" not in message and "data-path" in message
    expected = "CIFAR pickle" if "readable" in fragment else "data_batch_1..5, test_batch"
    assert expected in message.split("; expected")[1]


# --- EMNIST -------------------------------------------------------------------------------------


def _check_writers(fd, writer_ids: list[int], classes: int) -> None:
    """Client i is writer ``writer_ids[i]``: its own examples, pixels and labels as written."""
    for c, w in zip(fd.clients, writer_ids):
        assert len(c.y_train) == 6 + w
        for k in (0, 5 + w):
            np.testing.assert_allclose(c.x_train[k, :, :, 0], emnist_pixels(w, k), atol=1e-6)
        np.testing.assert_array_equal(c.y_train, [(w + k) % classes for k in range(6 + w)])
        np.testing.assert_allclose(c.x_test[0, :, :, 0], emnist_pixels(w, 100), atol=1e-6)


@pytest.mark.parametrize("where", ["root", "data"])
def test_leaf_femnist_one_client_per_writer(tmp_path, where):
    root = write_leaf(tmp_path / "femnist", writers=6)
    path = root if where == "root" else root / "data"
    fd = load_federated("emnist", partition="writer", num_clients=6, seed=0, data_path=str(path))
    assert (fd.num_clients, fd.num_classes, fd.input_shape) == (6, 62, (28, 28, 1))
    assert fd.info["writers"] == [f"f{w:04d}_{w:02d}" for w in range(6)]  # writers from 2 shards
    _check_writers(fd, list(range(6)), 62)
    assert len(fd.y_val) + len(fd.y_test) == 12  # the writers' 2 test examples each, halved


def test_leaf_fewer_clients_is_a_seeded_sample_of_writers(tmp_path):
    root = write_leaf(tmp_path, writers=6)
    first = load_federated("emnist", partition="writer", num_clients=3, seed=4, data_path=str(root))
    again = load_federated("emnist", partition="writer", num_clients=3, seed=4, data_path=str(root))
    ids = [int(w.split("_")[1]) for w in first.info["writers"]]
    assert first.info["writers"] == again.info["writers"] and ids == sorted(ids)
    _check_writers(first, ids, 62)
    with pytest.raises(DataError, match="num-clients = 7.*at most 6"):
        load_federated("emnist", partition="writer", num_clients=7, seed=0, data_path=str(root))


def test_tff_h5_digits_only_is_hdp_emnist(tmp_path):
    root = write_h5(tmp_path / "tff", writers=5)
    for path in (root, root / "fed_emnist_digitsonly_train.h5"):
        fd = load_federated(
            "emnist", partition="writer", num_clients=5, seed=0, data_path=str(path)
        )
        assert (fd.num_clients, fd.num_classes, fd.input_shape) == (5, 10, (28, 28, 1))
        _check_writers(fd, list(range(5)), 10)
        assert all(len(c.y_test) == 3 for c in fd.clients)


def _leaf_without_test(path: Path) -> None:
    for shard in (write_leaf(path) / "data" / "test").glob("*.json"):
        shard.unlink()


def _leaf_corrupt_shard(path: Path) -> None:
    (write_leaf(path) / "data" / "train" / "bad.json").write_text("{")


def _h5_without_test(path: Path) -> None:
    (write_h5(path) / "fed_emnist_digitsonly_test.h5").unlink()


@pytest.mark.parametrize(
    "make,fragment",
    [
        (Path.mkdir, "no data/train/*.json (LEAF) and no fed_emnist_digitsonly_train.h5"),
        (_leaf_without_test, "no data/test/*.json"),
        (_h5_without_test, "no fed_emnist_digitsonly_test.h5"),
        (_leaf_corrupt_shard, "bad.json is not readable"),
    ],
    ids=["empty", "leaf-no-test", "h5-no-test", "leaf-corrupt"],
)
def test_emnist_missing_or_broken_files_are_named(tmp_path, make, fragment):
    path = tmp_path / "d"
    make(path)
    with pytest.raises(DataError) as err:
        load_federated("emnist", partition="writer", num_clients=2, seed=0, data_path=str(path))
    assert fragment in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_emnist_refuses_other_partitions(tmp_path):
    with pytest.raises(DataError, match="partition = 'iid'.*writer"):
        load_federated("emnist", partition="iid", num_clients=2, seed=0, data_path=str(tmp_path))


# --- through `fedpriv run` ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        ({"dataset": "cifar10"}, "data-path = ''"),  # no path at all: the config check
        ({"dataset": "cifar10", "data-path": "EMPTY"}, "cifar-10-batches-py/data_batch_1"),
        ({"dataset": "cifar100", "data-path": "EMPTY"}, "cifar-100-python/train"),
        ({"dataset": "emnist", "partition": "writer", "data-path": "EMPTY"}, "data/train/*.json"),
    ],
    ids=["no-path", "cifar10", "cifar100", "emnist"],
)
def test_preflight_names_what_is_missing(tmp_path, monkeypatch, capsys, overrides, fragment):
    """`fedpriv run hdp-paper` with a bad data-path: exit 2, one line, before any simulation."""
    from fedpriv.scenarios.cli import launch
    from fedpriv.scenarios.cli import main as cli

    def tripwire(cfg, *args, **kwargs):
        raise AssertionError(f"a bad data-path reached the simulation: {cfg['data-path']}")

    monkeypatch.setattr(launch, "simulate", tripwire)
    (tmp_path / "empty").mkdir()
    overrides = {k: str(tmp_path / "empty") if v == "EMPTY" else v for k, v in overrides.items()}
    out = tmp_path / "out"
    items = {"scenario": "hdp-paper", **overrides, "output-dir": str(out)}
    rc = cli.main(["run", "--run-config", " ".join(to_override(k, v) for k, v in items.items())])
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1 and fragment in lines[0], lines
    assert not out.exists()


@pytest.mark.parametrize(
    "dataset,write,partition,clients",
    [
        ("cifar100", write_cifar100, "iid", 2),
        ("emnist", lambda p: write_leaf(p) / "data", "writer", 6),
        ("emnist", write_h5, "writer", 5),
    ],
    ids=["cifar100", "emnist-leaf", "emnist-h5"],
)
def test_hdp_paper_preflight_accepts_the_layouts(
    tmp_path, monkeypatch, dataset, write, partition, clients
):
    """`fedpriv run hdp-paper` with each layout passes every check (config, data loaded) and
    reaches the simulation launch, which is recorded here instead of run (the one real run is
    the next test)."""
    from fedpriv.scenarios.cli import launch
    from fedpriv.scenarios.cli import main as cli

    launched = []

    def record(cfg, overrides, federation, *, share=1, **kwargs):
        cmd = launch.simulation_command(dict(cfg), overrides, federation, share)
        launched.append([str(c) for c in cmd])
        return 0

    monkeypatch.setattr(launch, "simulate", record)
    path = write(tmp_path / "data")
    items = {
        "scenario": "hdp-paper",
        "dataset": dataset,
        "data-path": str(path),
        "partition": partition,
        "num-clients": clients,
        "clients-per-round": clients,
        "num-zones": 2,
        "output-dir": str(tmp_path / "out"),
    }
    rc = cli.main(["run", "--run-config", " ".join(to_override(k, v) for k, v in items.items())])
    assert rc != 2 and len(launched) == 1  # not refused (no summary: the launch is a stub)
    assert "fedpriv.scenarios.cli.simulation_runner" in launched[0] and str(path) in " ".join(
        launched[0]
    )


@pytest.mark.slow
def test_hdp_paper_runs_on_generated_cifar10(tmp_path):
    """One short `hdp-paper` simulation on the generated CIFAR-10 batches."""
    root = write_cifar10(tmp_path / "data")
    overrides = {
        "scenario": "hdp-paper",
        "dataset": "cifar10",
        "data-path": str(root),
        "partition": "iid",
        "num-clients": 4,
        "clients-per-round": 4,
        "num-zones": 2,
        "num-server-rounds": 2,
        "local-epochs": 1,
        "zonal-compare-placements": "none,hdp",
    }
    rc, summary, rounds, output = run_fedpriv(overrides, tmp_path / "out", timeout=300)
    assert rc == 0, output[-3000:]
    assert summary is not None, output[-3000:]
    assert summary["config"]["dataset"] == "cifar10" and summary["config"]["model"] == "digits-mlp"
    # the server's test set is half the generated test batch: 20 images, so accuracy = j / 20
    assert set(summary["final"]) == {"none", "hdp"}
    for accuracy in summary["final"].values():
        assert 0 <= accuracy <= 1 and abs(accuracy * 20 - round(accuracy * 20)) < 1e-6
    assert len(rounds) >= 2
