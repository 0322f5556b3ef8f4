#!/usr/bin/env bash
# bench_gpu.py on a GPU machine that has its own python and torch but no network (as the
# machines lent to this project: Python 3.12, torch, nvcc, CMake, ninja, scikit-build-core
# and nanobind installed, nothing to download). Two steps, and a rehearsal of the second:
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
#   benchmarks/bench_gpu_offline.sh rehearse      # here, before spending device time: the
#                                                 # GPU machine's Python and torch on this
#                                                 # CPU, the same install, then the CPU
#                                                 # parts on a tiny budget and the test
#                                                 # files of the tests part
#
# The rehearsal builds a virtual environment with the device's versions
# (REHEARSE_PYTHON, default 3.12; REHEARSE_TORCH, default 2.11.0: the H200 machine's of
# 2026-11-30), installs .whl/ as `run` does, builds rl-cpp without CUDA, and runs
# `bench_gpu.py --device cpu --quick` and, on 2 workers, the test files `run` tests on
# the device. What fails there for a reason of versions or missing packages fails on the
# device too (torch 2.11's dynamo, a package the device lacks), at no device time.
set -euo pipefail
cd "$(dirname "$0")/.."

# .whl/ under /tmp/site and the packages' src folders (rl-cpp is built, not imported from
# src) on PYTHONPATH, for the `python3` on PATH
install_carried() {
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site
    for src in packages/*/src; do
        [ "$src" = packages/rl-cpp/src ] || PYTHONPATH="$PYTHONPATH:$PWD/$src"
    done
    export PYTHONPATH
}

case "${1:-}" in
wheels)
    # the examples' learning-curve plot (matplotlib and its dependencies) and the
    # property tests (hypothesis) and the tests' timeouts (pytest-timeout) as well: a GPU
    # machine's Python may lack them
    names=(tensordict gymnasium pyvers farama-notifications tyro docstring-parser typeguard pygame
        matplotlib contourpy cycler fonttools kiwisolver pillow pyparsing python-dateutil six
        hypothesis attrs sortedcontainers pytest-timeout)
    pins=()
    for name in "${names[@]}"; do
        pins+=("$name==$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('$name'))")")
    done
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl "${pins[@]}"
    ;;
run)
    shift
    export PYTHONUNBUFFERED=1 PATH="$PATH:/usr/local/cuda/bin"
    install_carried
    out="${OUT:-benchmarks/results}/gpu.md"
    python3 benchmarks/bench_gpu.py --out "$out" "$@"
    ;;
rehearse)
    shift
    compgen -G ".whl/*.whl" >/dev/null || { echo "no .whl/*.whl: run '$0 wheels' first" >&2; exit 2; }
    command -v uv >/dev/null || { echo "rehearse needs uv on PATH (python3 -m pip install --user uv)" >&2; exit 2; }
    venv="${REHEARSE_VENV:-/tmp/rl_rehearse}"
    uv venv -q --seed --allow-existing -p "${REHEARSE_PYTHON:-3.12}" "$venv"
    # what the GPU machine has installed of its own (torch's, the build's and the tests'
    # tools, and the packages its 2026-11-30 runs imported without carrying them); torch
    # from PyPI is its CUDA build (several GiB the first time, from uv's cache after)
    uv pip install -q --python "$venv/bin/python" "torch==${REHEARSE_TORCH:-2.11.0}" numpy \
        pytest pytest-xdist scikit-build-core nanobind cmake ninja cloudpickle packaging \
        importlib-metadata rich
    export PATH="$venv/bin:$PATH" PYTHONUNBUFFERED=1
    rm -rf /tmp/site
    install_carried
    # rl-cpp into the venv as the build part installs it there, without CUDA kernels
    RL_CPP_CUDA=OFF python3 -m pip install -q --no-deps --no-index --no-build-isolation \
        --force-reinstall packages/rl-cpp
    python3 -c "import sys, torch; print('rehearsal: python', sys.version.split()[0], 'torch', torch.__version__)"
    python3 benchmarks/bench_gpu.py --device cpu --quick "$@"
    mapfile -t files < <(python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_gpu; print('\n'.join(bench_gpu.cuda_test_files()))")
    [ "${#files[@]}" -gt 0 ] || { echo "bench_gpu.cuda_test_files() found no test file" >&2; exit 1; }
    python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 2 "${files[@]}"
    ;;
*)
    echo "usage: $0 wheels | run [bench_gpu.py arguments] | rehearse [bench_gpu.py arguments]" >&2
    exit 2
    ;;
esac
