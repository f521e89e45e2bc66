#!/usr/bin/env bash
# Commit the finished cells of a suite running in the background (checkpoints stay out, see .gitignore; clients.csv
# as clients.csv.gz), with its table redrawn from them. Usage: bash benchmarks/commit_cells.sh SUITE [SCALE]   (e.g. fedafk-kt; fedafk-cifar10 long)
set -euo pipefail
cd "$(dirname "$0")/.."
suite=$1
scale=${2:-small}
out=benchmarks/results/${suite//-/_}
[ "$scale" = small ] || out=${out}_$scale
python3 benchmarks/reproduce.py "$suite" --scale "$scale" --table-only > /dev/null
finished=$(find "$out" -name summary.json -printf '%h\n' | sort)
[ -n "$finished" ] || { echo "no finished cell in $out yet"; exit 0; }
for cell in $finished; do  # per-client accuracies, compressed: the tree travels to GPU machines whole
    [ -f "$cell/clients.csv" ] && gzip -kn9f "$cell/clients.csv"
done
paths="$finished $out/table.md $out/table.csv $(find "$out" -maxdepth 1 -name 'curves_*.png')"
git add $paths
git diff --cached --quiet -- $paths && { echo "nothing new in $out"; exit 0; }
# only these paths: whatever else is staged while a suite runs in the background stays out of this commit
git commit -q -m "$suite${2:+ ($scale)}: finished cells $(echo "$finished" | sed "s|$out/||" | tr '\n' ' ')" -- $paths
echo "committed $(echo "$finished" | wc -l) finished cell(s) of $suite"
