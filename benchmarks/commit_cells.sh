#!/usr/bin/env bash
# Commit the finished cells of a suite running in the background (checkpoints stay out, see .gitignore; clients.csv
# as clients.csv.gz), with its table redrawn from them. Usage: bash benchmarks/commit_cells.sh SUITE [SCALE]   (e.g. fedafk-kt; fedafk-cifar10 long)
set -euo pipefail
cd "$(dirname "$0")/.."
suite=$1
scale=${2:-small}
out=results/${suite//-/_}
[ "$scale" = small ] || out=${out}_$scale
python3 benchmarks/reproduce.py "$suite" --scale "$scale" --table-only > /dev/null
finished=$(find "$out" -name summary.json -printf '%h\n' | sort)
[ -n "$finished" ] || { echo "no finished cell in $out yet"; exit 0; }
for cell in $finished; do  # per-client accuracies, compressed: the tree travels to GPU machines whole
    [ -f "$cell/clients.csv" ] && gzip -kn9f "$cell/clients.csv"
done
# the message names only the cells this commit adds (a finished cell already tracked is re-added unchanged)
added=$(for cell in $finished; do git ls-files --error-unmatch "$cell/summary.json" > /dev/null 2>&1 || echo "$cell"; done)
paths="$finished $out/table.md $out/table.csv $(find "$out" -maxdepth 1 -name 'curves_*.png')"
git add $paths
git diff --cached --quiet -- $paths && { echo "nothing new in $out"; exit 0; }
# only these paths: whatever else is staged while a suite runs in the background stays out of this commit
named=$(echo $added | sed "s|$out/||g")
what="finished cells $named"; [ -n "$named" ] || what="the table redrawn"
git commit -q -m "$suite${2:+ ($scale)}: $what" -- $paths
echo "committed $(echo "$added" | grep -c .) new finished cell(s) of $suite"
