"""The built extension: no libtorch, no dynamic CUDA runtime, importable without torch."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import rl.cpp
from rl.cpp import _C, cuda_compiled, cuda_device_count

LIBRARY = Path(_C.__file__)
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
# What a manylinux-style extension may need from the system: the C/C++ runtimes.
ALLOWED = re.compile(r"^(libstdc\+\+|libgcc_s|libc|libm|libdl|librt|libpthread|ld-linux[-\w]*)\.so")


def _needed() -> list[str]:
    out = subprocess.run(
        ["readelf", "-d", str(LIBRARY)], check=True, capture_output=True, text=True
    ).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


class TestLinkage:
    def test_needs_only_the_c_and_cxx_runtimes(self):
        needed = _needed()
        assert needed, "readelf found no NEEDED entries"
        assert not [n for n in needed if re.search(r"torch|c10|python|cuda|cudart", n)], needed
        assert all(ALLOWED.match(n) for n in needed), needed

    def test_ldd_resolves_everything(self):
        out = subprocess.run(["ldd", str(LIBRARY)], capture_output=True, text=True).stdout
        assert "not found" not in out
        assert "libtorch" not in out and "libc10" not in out and "libcudart" not in out

    def test_cuda_runtime_is_static_and_private(self):
        dynsym = subprocess.run(
            ["readelf", "--dyn-syms", "-W", str(LIBRARY)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        # The statically linked runtime's symbols are not exported (no clash with torch's).
        assert not re.search(r"\bcuda(Malloc|Free|LaunchKernel|StreamSynchronize)\b", dynsym)
        if cuda_compiled():
            # The embedded runtime opens the driver itself, lazily, by name.
            assert b"libcuda.so" in LIBRARY.read_bytes()


def test_library_naming_follows_the_abi():
    # Stable ABI (abi3) from Python 3.12 on, a version-specific build before.
    if sys.version_info >= (3, 12):
        assert LIBRARY.name.endswith(".abi3.so"), LIBRARY.name
    else:
        assert f"cpython-{sys.version_info[0]}{sys.version_info[1]}" in LIBRARY.name
    config = tomllib.loads((PACKAGE_ROOT / "pyproject.toml").read_text())
    assert config["tool"]["scikit-build"]["wheel"]["py-api"] == "cp312"


def test_imports_and_works_without_torch_or_gpu():
    # torch is made unimportable; CUDA_VISIBLE_DEVICES hides any GPU, and on a machine
    # without a driver the statically linked CUDA runtime must still load.
    script = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None
        import numpy as np
        from rl.cpp import SumSegmentTree, MinSegmentTree, cuda_device_count
        t = SumSegmentTree(10, dtype="float64")
        t.update(np.arange(10), np.arange(10.0))
        assert t.total() == 45.0 and t.scan_lower_bound(np.array([0.5]))[0] == 1
        assert MinSegmentTree(3).min() == float("inf")
        assert cuda_device_count() == 0
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
        print("ok")
        """
    )
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_cuda_flags_are_consistent():
    assert isinstance(cuda_compiled(), bool)
    count = cuda_device_count()
    assert isinstance(count, int) and count >= 0
    if not cuda_compiled():
        assert count == 0
    assert rl.cpp.__version__ == "0.1.0"


def test_cuda_kernels_are_built_where_asked():
    # RL_CPP_CUDA=ON (CI sets it where nvcc is, so that the CUDA code never rots
    # unnoticed) builds the kernels; AUTO builds them only where a GPU is visible too
    # (a first install on a machine with nvcc and no GPU skips them); OFF never.
    assert hasattr(_C, "CudaSumTreeF32") == cuda_compiled()
    nvcc = shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").is_file()
    mode = os.environ.get("RL_CPP_CUDA", "AUTO").upper()
    if mode == "OFF":
        assert not cuda_compiled()
    elif nvcc and (mode == "ON" or _gpu_present()):
        assert cuda_compiled()
    elif mode == "AUTO" and not _gpu_present():
        assert not cuda_compiled()


def _gpu_present() -> bool:
    """Whether ``nvidia-smi`` lists a GPU (what the build's AUTO mode asks)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    return subprocess.run([smi, "-L"], capture_output=True, timeout=60).returncode == 0


CMAKE = shutil.which("cmake")
PLAN = PACKAGE_ROOT / "cmake" / "rl_cpp_cuda.cmake"
ALL_ARCHS = "75-real;80-real;86-real;89-real;90"
#: fake ``nvidia-smi`` programs: a machine with two kinds of GPU, one whose driver lists
#: its GPU without reporting compute capabilities, one with the tools but no driver
FAKE_SMI = {
    "two_gpus": """
        case "$1" in
          --query-gpu=compute_cap) printf '9.0\\n8.6\\n9.0\\n' ;;
          -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"; echo "GPU 1: NVIDIA A10 (UUID: GPU-1)" ;;
        esac
        """,
    "old_driver": """
        case "$1" in
          -L) echo "GPU 0: Tesla T4 (UUID: GPU-0)" ;;
          *) echo "Field compute_cap is not a valid field to query." >&2; exit 2 ;;
        esac
        """,
    "no_driver": """
        echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        exit 9
        """,
}


@pytest.mark.skipif(CMAKE is None, reason="the build decision runs in CMake (no cmake on PATH)")
class TestCudaBuildPlan:
    """``cmake/rl_cpp_cuda.cmake``: whether the build compiles the CUDA kernels, and for
    which architectures, with ``nvidia-smi`` (the probe) faked."""

    def _plan(self, tmp_path, mode, smi, archs=None):
        defines = [f"-DRL_CPP_CUDA={mode}"]
        if smi is None:  # no nvidia-smi anywhere
            defines.append("-DRL_CPP_NVIDIA_SMI=RL_CPP_NVIDIA_SMI-NOTFOUND")
        else:
            fake = tmp_path / "nvidia-smi"
            fake.write_text("#!/bin/sh\n" + textwrap.dedent(FAKE_SMI[smi]))
            fake.chmod(0o755)
            defines.append(f"-DRL_CPP_NVIDIA_SMI={fake}")
        if archs is not None:
            defines.append(f"-DRL_CPP_CUDA_ARCHS={archs}")
        out = subprocess.run(
            [CMAKE, *defines, "-P", str(PLAN)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        match = re.fullmatch(r"rl-cpp CUDA plan: build=(ON|OFF) archs=(.*)", out.stderr.strip())
        assert match, out.stderr
        return match.group(1), match.group(2)

    @pytest.mark.parametrize(
        ("smi", "expected"),
        [
            ("two_gpus", ("ON", "90-real;86-real")),  # each architecture present, once
            ("old_driver", ("ON", "native")),  # CMake asks the GPU itself
            ("no_driver", ("OFF", "")),
            (None, ("OFF", "")),
        ],
    )
    def test_auto_builds_for_the_visible_gpus_only(self, tmp_path, smi, expected):
        assert self._plan(tmp_path, "AUTO", smi) == expected
        assert self._plan(tmp_path, "auto", smi) == expected

    @pytest.mark.parametrize(
        ("smi", "archs"),
        [("two_gpus", "90-real;86-real"), ("no_driver", ALL_ARCHS), (None, ALL_ARCHS)],
    )
    def test_on_always_builds(self, tmp_path, smi, archs):
        # for the GPUs present, or every architecture from sm_75 (a wheel for others)
        assert self._plan(tmp_path, "ON", smi) == ("ON", archs)

    @pytest.mark.parametrize("smi", ["two_gpus", None])
    def test_off_never_builds(self, tmp_path, smi):
        assert self._plan(tmp_path, "OFF", smi) == ("OFF", "")

    def test_archs_override(self, tmp_path):
        assert self._plan(tmp_path, "ON", None, "80-real;90") == ("ON", "80-real;90")
        assert self._plan(tmp_path, "AUTO", "two_gpus", "native") == ("ON", "native")
        # the override never turns AUTO on without a GPU
        assert self._plan(tmp_path, "AUTO", "no_driver", "native") == ("OFF", "")

    def test_bad_mode_names_the_value(self):
        out = subprocess.run(
            [CMAKE, "-DRL_CPP_CUDA=maybe", "-P", str(PLAN)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode != 0
        assert "RL_CPP_CUDA must be AUTO, ON or OFF, got 'maybe'" in out.stderr
