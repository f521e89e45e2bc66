#!/usr/bin/env bash
# The GPU speed benchmark (benchmarks/speed/gpu_speed.py) on a lent GPU machine, in one device call.
#
# Here, once per machine (what it makes is ignored by git through .git/info/exclude):
#   bash benchmarks/speed/gpu_speed_device.sh --prepare [PFLLIB]
#     PFLLIB: a PFLlib checkout (a folder holding system/main.py) or its git directory (its newest commit is used);
#     without it (a sitting that runs only benchmarks/device_suite.sh, or gpu_speed.py with --pfllib none) no peer.
#     A CPU rehearsal of the benchmark itself: python3 benchmarks/speed/gpu_speed.py --check --out /tmp/gpu_speed_check
#     Copies the CIFAR-10 JPEG copy into .devdata/ (19 MB), PFLlib's system/ folder into .peers/PFLlib/ (0.6 MB), and
#     downloads into .devwheels/ the wheels the GPU machine lacks (10 MB): pydantic for pfedkit; cvxpy (with clarabel,
#     osqp, qdldl) and calmsize, which PFLlib's main.py imports. With the 30 MB of tracked files: 60 MB of the 64 MiB
#     a call carries.
# There (device run, carry [".devwheels", ".devdata", ".peers"], timeout_s 560):
#   bash benchmarks/speed/gpu_speed_device.sh [BUDGET_SECONDS [GPU_SPEED_OPTIONS...]]      (default 400: the benchmark's own
#   limit, after at most two minutes of wheels and `pytest -m gpu` on tests/test_cohort.py: equality of the cohort, its
#   captured steps and its runs trained together, on the GPU). Options go to gpu_speed.py, e.g. a second call for the
#   methods a first one cut: `... 200 --only fedafk,pgfedsplit,fedpac --pfllib none`; GPU_SPEED_OUT names the folder;
#   GPU_STREAMS=1 adds benchmarks/speed/gpu_streams.py after it (packs of two methods at once: streams or processes).
# Back here: tar xzf /work/.device/<N>/gpu_speed.tgz (in the repository root: results/gpu_speed/), commit.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = --prepare ]; then
    source=${2:-}
    for ignored in /.devdata/ /.devwheels/ /.peers/ /.devruns/; do
        grep -qxF "$ignored" .git/info/exclude || echo "$ignored" >> .git/info/exclude
    done
    # afresh: partitions and models a --check wrote are not to be carried, nor two versions of one wheel
    rm -rf .peers/PFLlib .devwheels
    mkdir -p .devdata .devwheels
    cp -r ../shared/data/cifar10-jpeg .devdata/
    if [ -z "$source" ]; then
        echo "no PFLlib given: .peers/ left out (gpu_speed.py then needs --pfllib none)"
    elif [ -f "$source/system/main.py" ]; then
        mkdir -p .peers/PFLlib && cp -r "$source/system" .peers/PFLlib/
    else
        mkdir -p .peers/PFLlib && git --git-dir="$source" archive HEAD system | tar -x -C .peers/PFLlib
    fi
    platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
               --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
        -d .devwheels pydantic pydantic-core annotated-types typing-inspection typing-extensions tomli-w cvxpy clarabel osqp \
        qdldl
    python3 -m pip wheel -q --no-deps -w .devwheels calmsize  # published as a source archive only
    du -sh .devdata .devwheels; [ -d .peers ] && du -sh .peers
    exit
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devwheels/*.whl \
    || { echo "installing .devwheels failed"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
out=${GPU_SPEED_OUT:-results/gpu_speed}
mkdir -p "$out"
trap 'tar czf "$OUT/gpu_speed.tgz" "$out"' EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/nvidia_smi.txt" 2>&1
# first the cohort's equality checks on the GPU (tests/test_cohort.py's gpu-marked ones), then the side-by-side
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cohort.py tests/test_conv_forms.py > "$out/pytest_gpu.txt" 2>&1
tail -n 2 "$out/pytest_gpu.txt"
python3 benchmarks/speed/gpu_speed.py --data-root .devdata --pfllib .peers/PFLlib --budget "${1:-400}" --out "$out" "${@:2}" 2>&1 \
    | tee "$out/log.txt"
# GPU_STREAMS=1: then several methods' packs at once, on streams or as processes (gpu_streams.py, about 3 minutes)
if [ "${GPU_STREAMS:-0}" = 1 ]; then
    timeout 240 python3 benchmarks/speed/gpu_streams.py --data-root .devdata --out "$out" 2>&1 | tee "$out/streams_log.txt"
fi
