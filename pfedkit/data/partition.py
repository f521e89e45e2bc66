"""Split a labelled pool among clients (iid, Dirichlet, pathological, dominant classes) and draw their test sets.

Every function is deterministic in its inputs and `seed`, uses only `np.random.default_rng` (never the global
RNG), and returns one sorted int64 index array per client.

Dirichlet `min_samples`
-----------------------
PFLlib redraws the whole Dirichlet partition until every client holds at least
``min(batch / (1 - 0.75), N / n / 2)`` samples (batch size 10, 75% train split: ``min(40, N/n/2)``) and loops
forever when that is out of reach. We keep the same default (``pfllib_min_samples``, at least 1 so no client is
empty) but stop after `max_redraws` draws with a DataError giving the best minimum reached. Because clients that
already hold ``N/n`` samples get nothing more, the smallest client ends up much closer to ``N/n`` than the raw
Dirichlet draw suggests: at 500 clients, 50,000 labels, 100 classes and beta 0.3 the smallest client holds
44-73 samples (median 61), so the default of 40 is met on the first draw; at beta 0.05 it is never met (the
smallest client stays near 20), which is where PFLlib hangs and we raise.
"""

from __future__ import annotations

import numpy as np

from pfedkit.errors import DataError
from pfedkit.seeding import data_generator

SCHEMES = ("iid", "dirichlet", "pathological", "dominant-classes")

_MAX_BATCH_CELLS = 1 << 22  # bound on draws x classes x clients held at once while redrawing
_SPLIT_SALT, _TEST_SALT, _VALIDATION_SALT = 1, 2, 3  # keep the per-client streams of the splits apart


def pfllib_min_samples(num_labels: int, num_clients: int, batch_size: int = 10, train_fraction: float = 0.75) -> int:
    """PFLlib's least_samples, ``min(batch / (1 - train_fraction), N / n / 2)``, floored, and at least 1."""
    return max(1, int(min(batch_size / (1 - train_fraction), num_labels / num_clients / 2)))


def partition_labels(
    labels: np.ndarray,
    scheme: str,
    num_clients: int,
    seed: int,
    *,
    beta: float = 0.1,
    classes_per_client: int = 2,
    balanced: bool = False,
    min_samples: int | None = None,
    max_redraws: int = 1000,
    samples_per_client: int = 600,
    uniform_share: float = 0.2,
    reuse_samples: bool = False,
    num_classes: int | None = None,
) -> list[np.ndarray]:
    """One sorted int64 array of indices into `labels` per client.

    iid: a seeded shuffle cut into near-equal parts.
    dirichlet: PFLlib's "practical" scheme: per class, proportions ~ Dir(beta); clients holding >= N/n samples get
        none; redrawn until every client has `min_samples` (see the module docstring), at most `max_redraws` times.
    pathological: each client gets `classes_per_client` distinct classes, each class going to floor or ceil of
        n*cpc/C clients; a class is cut into equal shards (`balanced`) or shards proportional to uniform draws in
        PFLlib's range [max(per/10, min_samples/C), per), with every sample assigned.
    dominant-classes: FedPAC's noniid_s: `samples_per_client` each, `uniform_share` of them spread over all
        classes, the rest over 3 classes {2g, 2g+1, 2g+2} mod C of group g = i mod (C // 2); no sample reused, unless
        `reuse_samples`: then a class that runs out is dealt again from its start (FedPAC's code), and a client holds
        a sample twice only if it needs more of a class than the class has.
    """
    labels, num_classes = _check_labels(labels, num_classes, "labels")
    if scheme not in SCHEMES:
        raise DataError(f"unknown partition scheme {scheme!r}; use one of: {', '.join(SCHEMES)}")
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise DataError(f"num_clients must be a positive integer, got {num_clients!r}")
    rng = _rng(seed)
    n, total = int(num_clients), len(labels)
    if min_samples is None:
        min_samples = pfllib_min_samples(total, n)
    if min_samples < 0:
        raise DataError(f"min_samples must be >= 0, got {min_samples}")

    if scheme == "iid":
        if n > total:
            raise DataError(f"iid: {n} clients but only {total} samples; use at most {total} clients")
        return [np.sort(part) for part in np.array_split(rng.permutation(total).astype(np.int64), n)]
    if scheme == "dirichlet":
        counts = _dirichlet_counts(np.bincount(labels, minlength=num_classes), n, beta, min_samples, max_redraws, rng)
    elif scheme == "pathological":
        counts = _pathological_counts(labels, num_classes, n, classes_per_client, balanced, min_samples, rng)
    else:
        counts = _dominant_counts(labels, num_classes, n, samples_per_client, uniform_share, reuse_samples)
    return _assign(labels, num_classes, counts, rng)


def split_train_test(
    client_indices: list[np.ndarray], test_fraction: float, seed: int, *, salt: int = _SPLIT_SALT
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Protocol "pfllib": per client, a seeded shuffle puts round(test_fraction * n) samples in test.

    The test count is rounded half up and kept in [1, n - 1] when n >= 2 so both splits are non-empty; a client
    with a single sample keeps it for training.
    """
    if not 0 < test_fraction < 1:
        raise DataError(f"test_fraction must be between 0 and 1 (exclusive), got {test_fraction}")
    _rng(seed)  # validate once
    train, test = [], []
    for cid, idx in enumerate(client_indices):
        idx = np.asarray(idx, dtype=np.int64)
        size = len(idx)
        n_test = 0 if size < 2 else min(max(int(np.floor(test_fraction * size + 0.5)), 1), size - 1)
        shuffled = _rng(seed, salt, cid).permutation(idx)
        test.append(np.sort(shuffled[:n_test]))
        train.append(np.sort(shuffled[n_test:]))
    return train, test


def split_validation(
    train_indices: list[np.ndarray], share: float, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each client's training indices split into (train, validation): a seeded share, on its own random stream, so
    the same seed gives every tuning trial the same validation split."""
    return split_train_test(train_indices, share, seed, salt=_VALIDATION_SALT)


def draw_test_like(
    train_labels: np.ndarray,
    client_train_indices: list[np.ndarray],
    test_labels: np.ndarray,
    seed: int,
    *,
    per_client: int | None = None,
    ratio: float | None = None,
) -> list[np.ndarray]:
    """Protocol "official-test": per client, indices into the official test set with its training label mix.

    Size: `per_client`, else round(ratio * n_train), else n_train * len(test) / len(train) (rounded). Per-class
    counts follow the client's training proportions exactly up to largest-remainder rounding (within 1 sample).
    Drawn without replacement within a client; different clients may share test samples.
    """
    train_labels, c_train = _check_labels(train_labels, None, "train_labels")
    test_labels, c_test = _check_labels(test_labels, None, "test_labels")
    num_classes = max(c_train, c_test)
    if per_client is not None and per_client < 1:
        raise DataError(f"per_client must be >= 1, got {per_client}")
    if ratio is not None and not ratio > 0:
        raise DataError(f"ratio must be > 0, got {ratio}")
    _rng(seed)
    counts = label_counts(train_labels, client_train_indices, num_classes)
    available = np.bincount(test_labels, minlength=num_classes)
    starts = np.concatenate([[0], np.cumsum(available)[:-1]])
    out = []
    for cid, row in enumerate(counts):
        n_train = int(row.sum())
        if n_train == 0:
            out.append(np.empty(0, dtype=np.int64))
            continue
        if per_client is not None:
            size = int(per_client)
        elif ratio is not None:
            size = int(np.floor(ratio * n_train + 0.5))
        else:
            size = int(np.floor(n_train * len(test_labels) / len(train_labels) + 0.5))
        want = _largest_remainder(row.astype(float), size)
        short = np.flatnonzero(want > available)
        if short.size:
            k = int(short[0])
            raise DataError(
                f"client {cid} needs {want[k]} test samples of class {k} but the test set has only {available[k]}; "
                "lower per_client (partition.test_per_client) or ratio"
            )
        # A random key per test sample, sorted within each class, gives a fresh without-replacement draw per client.
        order = np.lexsort((_rng(seed, _TEST_SALT, cid).random(len(test_labels)), test_labels))
        out.append(np.sort(order[_first_per_class(starts, want, available)]).astype(np.int64))
    return out


def label_counts(labels: np.ndarray, client_indices: list[np.ndarray], num_classes: int) -> np.ndarray:
    """[clients, classes] int64 matrix of how many samples of each class each client holds."""
    labels = np.asarray(labels)
    n = len(client_indices)
    sizes = np.array([len(idx) for idx in client_indices], dtype=np.int64)
    flat = np.concatenate([np.asarray(idx, dtype=np.int64) for idx in client_indices]) if n else np.empty(0, np.int64)
    picked = labels[flat].astype(np.int64)
    if picked.size and (picked.min() < 0 or picked.max() >= num_classes):
        raise DataError(
            f"labels must lie in [0, {num_classes}); got {picked.min()}..{picked.max()}; pass the right num_classes"
        )
    owner = np.repeat(np.arange(n, dtype=np.int64), sizes)
    return np.bincount(owner * num_classes + picked, minlength=n * num_classes).reshape(n, num_classes)


# --- schemes: each returns a [classes, clients] matrix of how many samples of a class go to a client ---------------


def _dirichlet_counts(
    class_sizes: np.ndarray, n: int, beta: float, min_samples: int, max_redraws: int, rng: np.random.Generator
) -> np.ndarray:
    total = int(class_sizes.sum())
    if not np.isfinite(beta) or beta <= 0:
        raise DataError(f"dirichlet: beta must be a positive number, got {beta}")
    if max_redraws < 1:
        raise DataError(f"dirichlet: max_redraws must be >= 1, got {max_redraws}")
    if min_samples > total // n:
        raise DataError(
            f"dirichlet: min_samples={min_samples} is impossible: {total} samples over {n} clients leave at most "
            f"{total // n} for the smallest client; lower min_samples or use fewer clients"
        )
    cap = total / n  # PFLlib: clients holding N/n samples already take no more
    classes = np.flatnonzero(class_sizes)
    alpha = np.full(n, float(beta))
    done, best, batch = 0, -1, 1
    while done < max_redraws:
        # Draw several whole partitions at once (1, 2, 4, ... of them) so hopeless settings fail fast.
        b = max(1, min(batch, max_redraws - done, _MAX_BATCH_CELLS // (len(class_sizes) * n)))
        sizes = np.zeros((b, n), dtype=np.int64)
        counts = np.zeros((b, len(class_sizes), n), dtype=np.int64)
        for k in classes:
            p = rng.dirichlet(alpha, size=b)
            open_ = sizes < cap
            p *= open_
            mass = p.sum(axis=1, keepdims=True)
            empty = mass[:, 0] == 0  # every open client's share underflowed to 0: spread evenly over them instead
            if empty.any():
                p[empty] = open_[empty]
                mass[empty] = p[empty].sum(axis=1, keepdims=True)
            m = int(class_sizes[k])
            bounds = np.minimum(np.floor(np.cumsum(p / mass, axis=1) * m), m).astype(np.int64)
            bounds[:, -1] = m
            counts[:, k] = np.diff(bounds, axis=1, prepend=0)
            sizes += counts[:, k]
        smallest = sizes.min(axis=1)
        ok = np.flatnonzero(smallest >= min_samples)
        if ok.size:
            return counts[ok[0]]
        best = max(best, int(smallest.max()))
        done += b
        batch *= 2
    raise UnreachableMinimum(
        f"dirichlet: after {max_redraws} draws no partition gave every client min_samples={min_samples} samples "
        f"(best smallest client: {best}); raise beta (now {beta}), use fewer clients (now {n}), lower min_samples, "
        "or raise max_redraws",
        best,
    )


class UnreachableMinimum(DataError):
    """No Dirichlet draw gave every client the minimum; `best`: the largest smallest client any draw reached."""

    def __init__(self, message: str, best: int):
        super().__init__(message)
        self.best = best


def _pathological_counts(
    labels: np.ndarray, num_classes: int, n: int, cpc: int, balanced: bool, min_samples: int, rng: np.random.Generator
) -> np.ndarray:
    available = np.bincount(labels, minlength=num_classes)
    present = np.flatnonzero(available)
    if cpc < 1 or cpc > len(present):
        raise DataError(
            f"pathological: classes_per_client={cpc} but the labels hold {len(present)} classes; use 1..{len(present)}"
        )
    if n * cpc < len(present):
        raise DataError(
            f"pathological: {n} clients x {cpc} classes cannot cover all {len(present)} classes, so "
            "samples would be left out; use more clients or a larger classes_per_client"
        )
    # Cycling through one shuffled class list: any cpc consecutive slots are distinct, and each class fills
    # floor or ceil of n*cpc/C slots; shuffling the rows then hands the class sets to random clients.
    cycle = rng.permutation(present)
    slots = cycle[np.arange(n * cpc) % len(present)].reshape(n, cpc)[rng.permutation(n)]
    counts = np.zeros((num_classes, n), dtype=np.int64)
    for k in present:
        holders = np.flatnonzero((slots == k).any(axis=1))
        m, h = int(available[k]), len(holders)
        if m < h:
            raise DataError(
                f"pathological: class {k} has {m} samples but {h} clients need at least one each; "
                "use fewer clients or a smaller classes_per_client"
            )
        if balanced:
            shard = np.full(h, m // h) + (np.arange(h) < m % h)
        else:
            # PFLlib's size range, but used as weights for the whole class so leftovers are spread, not piled.
            per = m / h
            low = min(max(per / 10, min_samples / num_classes), per)
            shard = 1 + _largest_remainder(rng.uniform(low, per, h), m - h)
        counts[k, holders] = shard
    return counts


def _dominant_counts(
    labels: np.ndarray, num_classes: int, n: int, per_client: int, share: float, reuse: bool = False
) -> np.ndarray:
    if num_classes < 3:
        raise DataError(f"dominant-classes needs at least 3 classes, got {num_classes}; use another scheme")
    if per_client < 1:
        raise DataError(f"dominant-classes: samples_per_client must be >= 1, got {per_client}")
    if not 0 <= share <= 1:
        raise DataError(f"dominant-classes: uniform_share must be in [0, 1], got {share}")
    uniform = int(np.floor(share * per_client + 0.5))
    dominant = per_client - uniform
    clients = np.arange(n)
    demand = np.zeros((n, num_classes), dtype=np.int64)
    demand += uniform // num_classes
    extra = uniform % num_classes  # rotate the leftover uniform samples so every class gets its turn
    if extra:
        demand[clients[:, None], (clients[:, None] * extra + np.arange(extra)) % num_classes] += 1
    # FedPAC's groups: client i is in group i mod (C // 2), whose dominant classes are 2g, 2g+1, 2g+2 (mod C).
    group = clients % (num_classes // 2)
    dom = (2 * group[:, None] + np.arange(3)) % num_classes
    demand[clients[:, None], dom] += dominant // 3
    spare = dominant % 3
    if spare:
        demand[clients[:, None], dom[clients[:, None], (clients[:, None] + np.arange(spare)) % 3]] += 1
    need, available = demand.sum(axis=0), np.bincount(labels, minlength=num_classes)
    short = np.flatnonzero(need > available)
    if short.size and not reuse:
        k = int(short[0])
        raise DataError(
            f"dominant-classes: class {k} ran out: the clients need {need[k]} of its samples but there are only "
            f"{available[k]}; lower samples_per_client (now {per_client}) or use fewer clients (now {n})"
        )
    return demand.T


# --- helpers -----------------------------------------------------------------------------------------------------


def _assign(labels: np.ndarray, num_classes: int, counts: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Deal each class's shuffled samples out in client order following counts [classes, clients]."""
    n = counts.shape[1]
    available = np.bincount(labels, minlength=num_classes)
    starts = np.concatenate([[0], np.cumsum(available)[:-1]])
    order = np.lexsort((rng.random(len(labels)), labels))  # samples grouped by class, shuffled within each class
    idx = order[_first_per_class(starts, counts.sum(axis=1), available)].astype(np.int64)
    owner = np.repeat(np.tile(np.arange(n), num_classes), counts.ravel())
    by_client = idx[np.lexsort((idx, owner))]
    return np.split(by_client, np.cumsum(np.bincount(owner, minlength=n))[:-1])


def _first_per_class(starts: np.ndarray, take: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Positions of the first take[k] entries of each class block of sizes[k] beginning at starts[k], from its start
    again where take[k] exceeds sizes[k]."""
    offsets = np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take)
    return np.repeat(starts, take) + offsets % np.maximum(np.repeat(sizes, take), 1)


def _largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to weights that sum exactly to total (ties go to the lower index)."""
    quota = weights / weights.sum() * total
    base = np.floor(quota).astype(np.int64)
    left = total - int(base.sum())
    base[np.argsort(-(quota - base), kind="stable")[:left]] += 1
    return base


def _check_labels(labels, num_classes: int | None, name: str) -> tuple[np.ndarray, int]:
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise DataError(f"{name} must be a non-empty 1-D array of class ids, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{name} must hold integer class ids, got dtype {labels.dtype}; convert with .astype(int)")
    labels = labels.astype(np.int64, copy=False)
    low, high = int(labels.min()), int(labels.max())
    if low < 0:
        raise DataError(f"{name} holds the negative class id {low}; class ids must be 0..C-1")
    if num_classes is None:
        return labels, high + 1
    if high >= num_classes:
        raise DataError(f"{name} holds class id {high} but num_classes={num_classes}; pass num_classes > {high}")
    return labels, int(num_classes)


def _rng(seed: int, *stream: int) -> np.random.Generator:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise DataError(f"seed must be a non-negative integer, got {seed!r}")
    return data_generator(seed, *stream)
