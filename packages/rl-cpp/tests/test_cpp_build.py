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
    # unnoticed) builds the kernels; AUTO builds them only where a GPU is present too
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
