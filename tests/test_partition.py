"""Partition schemes, train/test protocols, label counts and the partition heatmap."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pfedkit.data.partition import (
    SCHEMES,
    draw_test_like,
    label_counts,
    partition_labels,
    pfllib_min_samples,
    split_train_test,
)
from pfedkit.errors import DataError
from pfedkit.reports.partition_plot import save_partition_heatmap

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_labels(num_classes: int, per_class: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), per_class))


def assert_disjoint(parts: list[np.ndarray], total: int | None = None) -> None:
    flat = np.concatenate(parts)
    assert len(np.unique(flat)) == len(flat), "a sample is in two clients"
    for p in parts:
        assert p.dtype == np.int64 and np.all(np.diff(p) > 0)
    if total is not None:
        assert np.array_equal(np.sort(flat), np.arange(total)), "not every sample is assigned"


# --- properties of the schemes ------------------------------------------------------------------------------------


@FAST
@given(classes=st.integers(1, 12), per_class=st.integers(1, 40), clients=st.integers(1, 20), seed=st.integers(0, 2**31))
def test_iid_splits_everything_evenly(classes, per_class, clients, seed):
    labels = make_labels(classes, per_class)
    assume(clients <= len(labels))
    parts = partition_labels(labels, "iid", clients, seed)
    assert_disjoint(parts, len(labels))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


@FAST
@given(
    classes=st.integers(1, 12),
    per_class=st.integers(10, 60),
    clients=st.integers(1, 15),
    beta=st.floats(0.05, 5.0),
    min_frac=st.floats(0.0, 0.5),
    seed=st.integers(0, 2**31),
)
def test_dirichlet_assigns_everything_and_meets_the_minimum(classes, per_class, clients, beta, min_frac, seed):
    labels = make_labels(classes, per_class)
    minimum = int(min_frac * len(labels) / clients)
    try:
        parts = partition_labels(labels, "dirichlet", clients, seed, beta=beta, min_samples=minimum, max_redraws=200)
    except DataError as err:  # an unreachable minimum must be reported, never looped on
        assert "raise beta" in str(err)
        assume(False)
    assert_disjoint(parts, len(labels))
    assert min(len(p) for p in parts) >= minimum


@FAST
@given(
    classes=st.integers(2, 12),
    clients=st.integers(1, 25),
    cpc=st.integers(1, 12),
    balanced=st.booleans(),
    per_class=st.integers(25, 80),
    seed=st.integers(0, 2**31),
)
def test_pathological_gives_each_client_exactly_cpc_classes(classes, clients, cpc, balanced, per_class, seed):
    assume(cpc <= classes and clients * cpc >= classes)
    labels = make_labels(classes, per_class)
    parts = partition_labels(labels, "pathological", clients, seed, classes_per_client=cpc, balanced=balanced)
    assert_disjoint(parts, len(labels))
    counts = label_counts(labels, parts, classes)
    assert np.all((counts > 0).sum(axis=1) == cpc)
    holders = (counts > 0).sum(axis=0)  # each class is used by floor or ceil of n*cpc/C clients
    assert holders.min() >= clients * cpc // classes and holders.max() <= -(-clients * cpc // classes)
    if balanced:
        for row in counts.T:
            shards = row[row > 0]
            assert shards.max() - shards.min() <= 1


def test_pathological_spreads_leftovers_instead_of_piling_them_on_one_client():
    # PFLlib draws h-1 shard sizes in [per/10, per) and gives the last holder the rest, which is always > per.
    labels = make_labels(10, 1000)
    for seed in range(5):
        parts = partition_labels(labels, "pathological", 20, seed, classes_per_client=2, balanced=False)
        assert_disjoint(parts, len(labels))
        for row in label_counts(labels, parts, 10).T:
            shards = row[row > 0]
            h = len(shards)
            assert shards.sum() == 1000
            assert shards.max() <= 10 * shards.min() + 2  # sizes stay within PFLlib's [per/10, per) ratio
            assert shards.max() <= 1000 * 10 / (h + 9) + 2  # so no holder can take more than this share


@FAST
@given(clients=st.integers(1, 20), per_client=st.integers(1, 100), share=st.floats(0.0, 1.0), seed=st.integers(0, 99))
def test_dominant_classes_hold_the_non_uniform_share(clients, per_client, share, seed):
    labels = make_labels(10, 400)  # enough: a class is dominant in 2 groups of at most 4 clients each
    parts = partition_labels(
        labels, "dominant-classes", clients, seed, samples_per_client=per_client, uniform_share=share
    )
    assert_disjoint(parts)
    counts = label_counts(labels, parts, 10)
    uniform = int(np.floor(share * per_client + 0.5))
    groups = [{0, 1, 2}, {2, 3, 4}, {4, 5, 6}, {6, 7, 8}, {8, 9, 0}]
    for i, row in enumerate(counts):
        dom = sorted(groups[i % 5])
        assert row.sum() == per_client
        assert row[dom].sum() >= per_client - uniform
        others = np.delete(row, dom)
        assert others.max(initial=0) <= -(-uniform // 10)


def test_dominant_classes_generalizes_and_reports_the_class_that_ran_out():
    labels = make_labels(7, 100)
    counts = label_counts(
        labels, partition_labels(labels, "dominant-classes", 6, 0, samples_per_client=30, uniform_share=0.0), 7
    )
    for i, row in enumerate(counts):  # 7 // 2 = 3 groups: {0,1,2}, {2,3,4}, {4,5,6}
        assert set(np.flatnonzero(row)) == {(2 * (i % 3) + j) % 7 for j in range(3)}
    scarce = np.concatenate([np.repeat([0, 1, 2, 3, 5, 6, 7, 8, 9], 100), np.full(5, 4)])
    with pytest.raises(DataError, match="class 4 ran out.*need 20.*only 5.*lower samples_per_client"):
        partition_labels(scarce, "dominant-classes", 6, 0, samples_per_client=30, uniform_share=0.0)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_same_seed_same_partition_other_seed_other_partition(scheme):
    labels = make_labels(10, 200)
    kwargs = dict(samples_per_client=100, beta=0.5)
    a = partition_labels(labels, scheme, 8, 3, **kwargs)
    b = partition_labels(labels, scheme, 8, 3, **kwargs)
    c = partition_labels(labels, scheme, 8, 4, **kwargs)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


# --- the Dirichlet redraw loop terminates ---------------------------------------------------------------------------


def test_unreachable_minimum_raises_quickly_with_the_best_reached():
    labels = np.random.default_rng(0).integers(0, 10, 1000)
    start = time.perf_counter()
    with pytest.raises(DataError, match=r"min_samples=8.*best smallest client: \d+.*raise beta.*fewer clients"):
        partition_labels(labels, "dirichlet", 100, 0, beta=0.01, min_samples=8)
    assert time.perf_counter() - start < 3


def test_impossible_minimum_is_refused_before_drawing():
    with pytest.raises(DataError, match="at most 10"):
        partition_labels(make_labels(10, 100), "dirichlet", 100, 0, min_samples=11)


def test_default_minimum_is_pfllibs_rule():
    assert pfllib_min_samples(50_000, 500) == 40  # min(10 / 0.25, 50)
    assert pfllib_min_samples(1_000, 100) == 5  # N / n / 2
    assert pfllib_min_samples(10, 100) == 1  # never an empty client


def test_dirichlet_at_benchmark_scale_is_fast_and_meets_the_default():
    labels = make_labels(100, 500)
    start = time.perf_counter()
    parts = partition_labels(labels, "dirichlet", 500, 0, beta=0.3)
    assert time.perf_counter() - start < 5
    assert_disjoint(parts, len(labels))
    assert min(len(p) for p in parts) >= 40


# --- input errors ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "labels, kwargs, message",
    [
        (make_labels(3, 5), dict(scheme="dirichlett"), "unknown partition scheme"),
        (make_labels(3, 5).astype(float), {}, "integer class ids"),
        (np.array([0, -1, 2]), {}, "negative"),
        (make_labels(3, 5), dict(num_classes=2), "num_classes"),
        (make_labels(3, 5), dict(scheme="pathological", classes_per_client=4), "classes_per_client=4"),
        (make_labels(10, 5), dict(scheme="pathological", num_clients=2), "cannot cover"),
        (make_labels(3, 5), dict(scheme="iid", num_clients=20), "at most 15"),
        (make_labels(3, 5), dict(seed=-1), "seed"),
    ],
)
def test_user_errors_name_the_problem(labels, kwargs, message):
    args = dict(scheme="dirichlet", num_clients=2, seed=0, min_samples=0) | kwargs
    with pytest.raises(DataError, match=message):
        partition_labels(labels, args.pop("scheme"), args.pop("num_clients"), args.pop("seed"), **args)


# --- train/test protocols -------------------------------------------------------------------------------------------


@FAST
@given(
    sizes=st.lists(st.integers(0, 50), min_size=1, max_size=10),
    fraction=st.floats(0.01, 0.99),
    seed=st.integers(0, 2**31),
)
def test_split_train_test_fractions_and_disjointness(sizes, fraction, seed):
    bounds = np.cumsum([0, *sizes])
    clients = [np.arange(a, b, dtype=np.int64) for a, b in zip(bounds[:-1], bounds[1:])]
    train, test = split_train_test(clients, fraction, seed)
    again = split_train_test(clients, fraction, seed)
    for idx, tr, te, tr2 in zip(clients, train, test, again[0]):
        n = len(idx)
        expected = 0 if n < 2 else min(max(int(np.floor(fraction * n + 0.5)), 1), n - 1)
        assert len(te) == expected and len(tr) == n - expected
        assert np.array_equal(np.sort(np.concatenate([tr, te])), idx)
        assert np.array_equal(tr, tr2)


@FAST
@given(clients=st.integers(1, 8), per_client=st.one_of(st.none(), st.integers(1, 60)), seed=st.integers(0, 2**31))
def test_draw_test_like_follows_training_proportions(clients, per_client, seed):
    train = make_labels(6, 100, seed=1)
    test = make_labels(6, 80, seed=2)
    parts = partition_labels(train, "dirichlet", clients, seed, beta=0.3, min_samples=1)
    drawn = draw_test_like(train, parts, test, seed, per_client=per_client)
    train_counts, test_counts = label_counts(train, parts, 6), label_counts(test, drawn, 6)
    for row, got, idx in zip(train_counts, test_counts, drawn):
        size = per_client if per_client is not None else int(np.floor(row.sum() * len(test) / len(train) + 0.5))
        assert got.sum() == size
        assert np.all(np.abs(got - size * row / row.sum()) < 1)  # within one sample per class
        assert len(np.unique(idx)) == len(idx)  # without replacement within a client
    assert all(
        np.array_equal(a, b) for a, b in zip(drawn, draw_test_like(train, parts, test, seed, per_client=per_client))
    )


def test_draw_test_like_ratio_and_shortage():
    train, test = make_labels(4, 100), make_labels(4, 10)
    parts = partition_labels(train, "pathological", 4, 0, classes_per_client=1, balanced=True)
    assert [len(d) for d in draw_test_like(train, parts, test, 0, ratio=0.05)] == [5, 5, 5, 5]
    with pytest.raises(DataError, match="test set has only 10"):
        draw_test_like(train, parts, test, 0, per_client=11)


def test_label_counts_matches_a_loop():
    labels = make_labels(5, 30)
    parts = partition_labels(labels, "dirichlet", 4, 0, beta=0.5, min_samples=1)
    expected = np.array([[np.sum(labels[p] == k) for k in range(5)] for p in parts])
    assert np.array_equal(label_counts(labels, parts, 5), expected)


# --- heatmap --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("clients, classes", [(3, 10), (500, 100)])
def test_heatmap_writes_a_png(tmp_path, clients, classes):
    counts = np.random.default_rng(0).integers(0, 50, size=(clients, classes))
    path = save_partition_heatmap(counts, tmp_path / "sub" / "map.png", title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_heatmap_rejects_a_bad_matrix(tmp_path):
    with pytest.raises(DataError, match="clients, classes"):
        save_partition_heatmap(np.zeros(5), tmp_path / "x.png")


def test_data_fraction_keeps_each_class_share_of_each_split_seeded():
    import torch

    from pfedkit.data.federated import build_federated, keep_fraction
    from pfedkit.data.sources import load_dataset
    from pfedkit.registry import build_config

    source = load_dataset("synthetic", samples=2000, test_samples=500)
    small = keep_fraction(source, 0.2, seed=0)
    for full_y, part_y in ((source.train_y, small.train_y), (source.test_y, small.test_y)):
        expected = np.floor(0.2 * np.bincount(full_y.numpy(), minlength=10) + 0.5)
        np.testing.assert_array_equal(np.bincount(part_y.numpy(), minlength=10), expected)
    assert torch.equal(keep_fraction(source, 0.2, seed=0).train_x, small.train_x)
    assert not torch.equal(keep_fraction(source, 0.2, seed=1).train_x, small.train_x)
    config = build_config(
        {"data": {"dataset": "synthetic", "fraction": 0.2}, "partition": {"scheme": "iid", "clients": 4}}
    )
    assert sum(build_federated(config).train_sizes()) + sum(build_federated(config).test_sizes()) == len(
        small.train_y
    ) + len(small.test_y)


def test_dominant_classes_can_deal_a_class_again_as_fedpacs_code_does():
    labels = np.repeat(np.arange(10), 500)  # CIFAR-10's shape at a tenth: 500 per class
    with pytest.raises(DataError, match="class 0 ran out"):
        partition_labels(labels, "dominant-classes", 20, 0, samples_per_client=600)
    clients = partition_labels(labels, "dominant-classes", 20, 0, samples_per_client=600, reuse_samples=True)
    assert [len(c) for c in clients] == [600] * 20
    for cid, idx in enumerate(clients):
        counts = np.bincount(labels[idx], minlength=10)
        group = cid % 5
        assert set(np.flatnonzero(counts > 12)) == {2 * group % 10, (2 * group + 1) % 10, (2 * group + 2) % 10}
        assert len(np.unique(idx)) == 600  # a client never holds a sample twice here
    uses = np.bincount(np.concatenate(clients), minlength=len(labels)).reshape(10, 500)
    assert all(row.max() - row.min() <= 1 for row in uses)  # each class dealt evenly from its start again


@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_dirichlet_shares_follow_beta(beta):
    """One class over n clients is split by p ~ Dir(beta, ..., beta): E[sum p_i^2] = (beta + 1) / (n beta + 1), the
    skew beta sets (the balance cap and the minimum cannot act on a single class with min_samples 0)."""
    labels, n, seeds = np.zeros(20000, dtype=np.int64), 10, 300
    concentration = []
    for seed in range(seeds):
        parts = partition_labels(labels, "dirichlet", n, seed, beta=beta, min_samples=0)
        shares = np.array([len(part) for part in parts]) / len(labels)
        concentration.append(float((shares**2).sum()))
    error = np.std(concentration) / np.sqrt(seeds)
    assert abs(np.mean(concentration) - (beta + 1) / (n * beta + 1)) < 4 * error
