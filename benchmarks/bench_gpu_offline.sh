#!/usr/bin/env bash
# bench_gpu.py on a GPU machine that has its own python and torch but no network (as the
# machines lent to this project: Python 3.12, torch, nvcc, CMake, ninja, scikit-build-core
# and nanobind installed, nothing to download). Two steps:
#
#   benchmarks/bench_gpu_offline.sh wheels        # here, with network: .whl/ gets the
#                                                 # pure-Python dependencies torch lacks,
#                                                 # at the workspace venv's versions
#   benchmarks/bench_gpu_offline.sh run [ARGS]    # there, from the repository root (with
#                                                 # .whl/ copied along): installs them
#                                                 # under /tmp/site, puts the packages'
#                                                 # src folders on PYTHONPATH and runs
#                                                 # bench_gpu.py ARGS (default: all parts,
#                                                 # the report in $OUT or benchmarks/results)
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
wheels)
    names=(tensordict gymnasium pyvers farama-notifications tyro docstring-parser typeguard pygame)
    pins=()
    for name in "${names[@]}"; do
        pins+=("$name==$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('$name'))")")
    done
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl "${pins[@]}"
    ;;
run)
    shift
    export PYTHONUNBUFFERED=1 PATH="$PATH:/usr/local/cuda/bin"
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site
    for src in packages/*/src; do
        [ "$src" = packages/rl-cpp/src ] || PYTHONPATH="$PYTHONPATH:$PWD/$src"
    done
    export PYTHONPATH
    out="${OUT:-benchmarks/results}/gpu.md"
    python3 benchmarks/bench_gpu.py --out "$out" "$@"
    ;;
*)
    echo "usage: $0 wheels | run [bench_gpu.py arguments]" >&2
    exit 2
    ;;
esac
