#!/usr/bin/env bash
# Run a suite on the lent GPU machine so that its finished run folders come back. .devdata holds copies of the data
# folders: CIFAR-10's JPEG copy (19 MB) fits the 64 MiB a call carries; CIFAR-100's PNG archive (161 MB) does not.
# The device tool returns only files at most two folders under $OUT, so the runs live in .devruns/ (ignored, carried)
# and are packed into $OUT/devruns.tgz on exit, also when SECONDS runs out. Checkpoints stay behind (one FedAFK cell's
# is about 70 MB, over the 16 MiB a returned file may have), so a cell must finish inside one call: a second call on
# the same warm machine started unfinished cells from round 0 (2026-11-26 H100 and 2026-11-27 H200, .devruns left out
# of carry both times: the device's run folders had been emptied).
# Here first: bash benchmarks/speed/gpu_speed_device.sh --prepare (makes .devwheels and .devdata; no PFLlib needed).
# On the device, with carry [".devwheels", ".devdata", ".devruns"]:
#   bash benchmarks/device_suite.sh SECONDS SUITE [reproduce options...]      (data root .devdata, run.device cuda)
#   bash benchmarks/device_suite.sh gpu-tests [SECONDS SUITE ...]   python3 -m pytest -m gpu first (the wheels installed)
#   ROWS_AT_ONCE=a,b,c bash benchmarks/device_suite.sh ...   one process per row, all at once: batch-64 FedAvgCNN
#       leaves most of a GPU idle (six rows at once ran 3.2-3.6 s a round each on an H100, NOTES.md of
#       results/pgfedsplit_cifar_h100_2026-11-26/); each row's log is packed beside the runs, in .devruns/logs/
# Back here: tar xzf /work/.device/N/devruns.tgz   (in the repository root), then move .devruns/<suite>[_<scale>]_gpu's
#   cells into results/ beside the CPU's folder and commit them: the claims table judges them apart, as
#   `suite#N/gpu` (`suite#N/<scale>-gpu`), with a floor from noise rows run there too (a GPU's numbers are not a CPU's)
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p /tmp/pylib .devruns/logs
tag=cp$(python3 -c 'import sys; print("%d%d" % sys.version_info[:2])')
python3 -m pip install -q --no-deps --no-index --target /tmp/pylib .devwheels/*-py3-none-any.whl \
    .devwheels/pydantic_core-*"$tag"*.whl > /dev/null || { echo "installing .devwheels failed"; exit 1; }
export PYTHONPATH=$PWD:/tmp/pylib PYTHONUNBUFFERED=1
if [ "${1:-}" = gpu-tests ]; then  # the device has torch but not our other dependencies: pytest alone fails to collect
    python3 -m pytest -q -m gpu -p no:cacheprovider 2>&1 | tail -n 3
    tests_status=${PIPESTATUS[0]}
    shift
    [ $# -gt 0 ] || exit "$tests_status"  # alone, the call's exit status is the tests'
fi
seconds=$1; suite=$2; shift 2
# decoded once here, not once per row at the same time
python3 -c "from pathlib import Path; from pfedkit.data import archives
for name in archives.ARCHIVES:
    if archives.archive_path(name, Path('.devdata')).is_file(): archives.load_archive(name, Path('.devdata'))"
trap 'tar czf "$OUT/devruns.tgz" --exclude=checkpoint.pt --exclude=.pfedkit.lock .devruns' EXIT
scale=small
for ((i = 1; i < $#; i++)); do [ "${!i}" = --scale ] && { next=$((i + 1)); scale=${!next}; }; done
folder=${suite//-/_}
[ "$scale" = small ] || folder=${folder}_$scale
run() {  # the folder the claims table reads as this scale's GPU runs (pfedkit.papers.reproduce.evidence_folders)
    timeout "$seconds" python3 benchmarks/reproduce.py "$suite" --data-root "$PWD/.devdata" \
        --out ".devruns/${folder}_gpu" --set run.device=cuda --quiet "$@"
}
if [ -z "${ROWS_AT_ONCE:-}" ]; then
    run "$@"
    exit
fi
rows=(${ROWS_AT_ONCE//,/ })
export OMP_NUM_THREADS=$(( $(nproc) / ${#rows[@]} > 0 ? $(nproc) / ${#rows[@]} : 1 ))  # the cores shared out
for row in "${rows[@]}"; do
    run --rows "$row" "$@" > ".devruns/logs/$row.log" 2>&1 &
done
wait
tail -n 3 .devruns/logs/*.log
