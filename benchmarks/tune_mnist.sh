#!/usr/bin/env bash
# Issue 27's demonstration: FedAFK, PGFedSplit and FedRep tuned on a validation split of a small MNIST setting
# (benchmarks/configs/tune_mnist.toml), the best and the default values re-run on the test split (seeds 0 and 1).
# Results in results/tune_mnist/<method>/ (tune.md, trials.csv, search.png, best.toml). Resumable.
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${TRIALS:-8}
for method in fedafk pgfedsplit fedrep; do
  python3 -m pfedkit tune benchmarks/configs/tune_mnist.toml --method "$method" --trials "$trials" --seeds 0,1 \
    --out "results/tune_mnist/$method" --data-root ../shared/data --quiet
done
