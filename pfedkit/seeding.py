"""Random generators derived from (seed, round, client id, purpose), so results never depend on order."""

from __future__ import annotations

import threading
import zlib
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch


def derive_seed(seed: int, round: int, cid: int, purpose: str) -> int:
    words = [seed & 0xFFFFFFFF, round + 1, cid + 1, zlib.crc32(purpose.encode())]
    return int(np.random.SeedSequence(words).generate_state(1, dtype=np.uint64)[0] >> 1)


def torch_generator(seed: int, round: int, cid: int, purpose: str) -> torch.Generator:
    """On the default device (the run's, inside a simulation), so that seeded draws land where the data is."""
    return torch.Generator(device=torch.get_default_device()).manual_seed(derive_seed(seed, round, cid, purpose))


# torch's global generator is one per process: runs trained together, each in a thread (engine/together.py), take
# their seeded blocks one at a time, or one run's draws would come from another's seed
_GLOBAL_GENERATOR = threading.RLock()


@contextmanager
def seeded_torch(seed: int, round: int, cid: int, purpose: str) -> Iterator[None]:
    """torch's global CPU generator seeded from (seed, round, client, purpose) inside the block, restored after: for
    draws that cannot take a generator (a model's initialisation, dropout). One thread at a time."""
    with _GLOBAL_GENERATOR, torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, round, cid, purpose))
        yield


def numpy_generator(seed: int, round: int, cid: int, purpose: str) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, round, cid, purpose))


def data_generator(seed: int, *stream: int) -> np.random.Generator:
    """The data's draws (a data fraction, a partition, a split), one stream per tuple of integers after the seed:
    older than derive_seed and kept as it is, so that every partition drawn before stays the same."""
    return np.random.default_rng([int(seed), *stream])


def synthetic_generator(seed: int) -> torch.Generator:
    """The synthetic data set's draws, from its own `seed` option (not the run's)."""
    return torch.Generator(device="cpu").manual_seed(int(seed))
