"""How concentrated FedPAC's head-combination weights are: for each round of a run, the mean over clients of the
largest weight, of the client's own weight, and of the weights' entropy (uniform over m clients = log m).

Usage: python benchmarks/fedpac_head_weights.py CONFIG OUT_DIR ROUNDS [--set section.key=value ...]
(CONFIG is a fedpac or fedpac-proto run config, e.g. results/fedpac_table1/fmnist20/fedpac/seed0/config.toml)
"""

import math
import sys

import torch

from pfedkit.config import apply_overrides, tomllib
from pfedkit.experiments import run_experiment
from pfedkit.methods.fedpac import FedPAC
from pfedkit.registry import build_config

plain_weights = FedPAC.head_weights


def logged_weights(self, replies):
    rows = plain_weights(self, replies)
    weights = torch.stack([w for w in rows if w is not None]).double()
    entropy = -(weights.clamp_min(1e-12) * weights.clamp_min(1e-12).log()).sum(1)
    print(
        f"{self.params.collaboration}: largest weight {weights.max(1).values.mean():.3f}, own weight "
        f"{weights.diag().mean():.3f}, entropy {entropy.mean():.2f} (uniform {math.log(weights.shape[1]):.2f})",
        flush=True,
    )
    return rows


if __name__ == "__main__":
    config, out, rounds, *rest = sys.argv[1:]
    overrides = [rest[i + 1] for i in range(0, len(rest), 2) if rest[i] == "--set"]
    raw = apply_overrides(tomllib.loads(open(config).read()), overrides)
    raw["train"]["rounds"] = int(rounds)
    FedPAC.head_weights = logged_weights
    run_experiment(build_config(raw), out, progress=False)
