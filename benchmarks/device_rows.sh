#!/usr/bin/env bash
# device_suite.sh with one process per row, all at once: batch-64 FedAvgCNN leaves most of a GPU idle, so several
# rows share it (4 clients at once ran 2.65x faster than 1 on the H200, benchmarks/results/gpu_sharing.txt).
# On the device, with carry [".devwheels", ".devdata", ".devruns"]:
#   bash benchmarks/device_rows.sh SECONDS SUITE ROW,ROW,... [reproduce options...]
# Each row's log is packed with the runs into $OUT/devruns.tgz on exit; back here: tar xzf /work/.device/N/devruns.tgz
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=$1; suite=$2; rows=$3; shift 3
mkdir -p /tmp/pylib .devruns/logs
tag=cp$(python3 -c 'import sys; print("%d%d" % sys.version_info[:2])')
python3 -m pip install -q --no-deps --no-index --target /tmp/pylib .devwheels/*-py3-none-any.whl \
    .devwheels/pydantic_core-*"$tag"*.whl > /dev/null 2>&1 || { echo "installing .devwheels failed"; exit 1; }
export PYTHONPATH=$PWD:/tmp/pylib PYTHONUNBUFFERED=1
count=$(echo "$rows" | tr ',' '\n' | wc -l)
export OMP_NUM_THREADS=$(( $(nproc) / count > 0 ? $(nproc) / count : 1 ))  # the CPU shared out, not oversubscribed
# decoded once here, not once per row at the same time
python3 -c "import sys; from pathlib import Path; from pfedkit.data import archives
for name in archives.ARCHIVES:
    if archives.archive_path(name, Path('.devdata')).is_file(): archives.load_archive(name, Path('.devdata'))"
trap 'tar czf "$OUT/devruns.tgz" --exclude=checkpoint.pt --exclude=.pfedkit.lock .devruns' EXIT
for row in ${rows//,/ }; do
    timeout "$seconds" python3 benchmarks/reproduce.py "$suite" --data-root "$PWD/.devdata" \
        --out ".devruns/${suite//-/_}_gpu" --set run.device=cuda --rows "$row" --quiet "$@" \
        > ".devruns/logs/$row.log" 2>&1 &
done
wait
tail -n 3 .devruns/logs/*.log
