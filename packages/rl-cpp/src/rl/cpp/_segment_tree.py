"""Sum and min segment trees for prioritized sampling, on the CPU or a CUDA device.

The trees are thin Python shells over the compiled ``rl.cpp._C`` module: they check
the input (library, device, dtype, contiguity, length) with clear messages, allocate
outputs with the caller's library (numpy in, numpy out; torch in, torch out on the same
device) and hand the arrays to C++ without copies (DLPack, or the buffer protocol for
CPU memory). The C++ side re-checks bounds and priorities before touching memory, so
bad input raises instead of corrupting the tree. torch is never imported by this module unless the caller passes a
torch tensor (or asks for a CUDA tree).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from rl.cpp import _C

__all__ = ["MinSegmentTree", "SumSegmentTree", "cuda_compiled", "cuda_device_count"]

_DTYPES = {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}
_INT64 = np.dtype(np.int64)
_INT64_MAX = np.iinfo(np.int64).max
_NUMBER = (int, float, np.integer, np.floating)


def _unit_free(shape: tuple) -> tuple:
    """``shape`` without its trailing dims of size 1 (``[B]`` and ``[B, 1]`` alike)."""
    end = len(shape)
    while end and shape[end - 1] == 1:
        end -= 1
    return tuple(shape[:end])


def check_layout(name: str, shape: tuple, reference: str, expected: tuple) -> None:
    """Raises unless ``shape`` is ``expected`` up to trailing dims of size 1.

    Arrays of one element per index must have the indices' layout: ``(2, 2)`` indices
    with ``(4,)`` values would pair them by memory order, silently. ``[B]`` indices
    with TorchRL's ``[B, 1]`` priorities are the same layout.
    """
    if shape != expected and _unit_free(tuple(shape)) != _unit_free(tuple(expected)):
        raise ValueError(
            f"{name} has shape {tuple(shape)}, expected {tuple(expected)} (the shape of "
            f"{reference}, up to trailing dims of size 1)"
        )


def check_big_ints(values: Any, capacity: int) -> None:
    """Raises for a list of Python ints that numpy could not hold as int64 (it made them
    floats or objects): the first index outside the tree is named, as the tree does."""
    flat = np.asarray(values, dtype=object).reshape(-1)
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in flat):
        for at, v in enumerate(flat):
            if not 0 <= v < capacity:
                raise IndexError(
                    f"index {int(v)} (at position {at}) is out of range for a tree of "
                    f"capacity {capacity}; expected 0 <= index < {capacity}"
                )


def check_unsigned_index(values: np.ndarray, capacity: int) -> None:
    """Rejects uint64 indices above the int64 range before they wrap to negatives.

    One vectorised comparison; called only on the conversion path of unsigned arrays.
    """
    flat = values.reshape(-1)
    big = np.flatnonzero(flat > _INT64_MAX)
    if big.size:
        at = int(big[0])
        raise IndexError(
            f"index {int(flat[at])} (at position {at}) is out of range for a tree of "
            f"capacity {capacity}; expected 0 <= index < {capacity}"
        )


def cuda_compiled() -> bool:
    """Whether this build of rl-cpp contains the CUDA kernels.

    Examples:
        >>> from rl.cpp import cuda_compiled
        >>> isinstance(cuda_compiled(), bool)
        True
    """
    return bool(_C.cuda_compiled())


def cuda_device_count() -> int:
    """Number of CUDA devices rl-cpp can use (0 without CUDA kernels, driver or GPU)."""
    return int(_C.cuda_device_count())


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _parse_dtype(dtype: Any) -> np.dtype:
    if _is_torch(dtype):  # torch.float32 -> "float32"
        name = str(dtype).rpartition(".")[2]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
    if name not in _DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}")
    return _DTYPES[name]


def _parse_device(device: Any) -> tuple[str, int]:
    text = str(device)
    if text == "cpu":
        return "cpu", -1
    if text == "cuda":
        # torch's current device when torch is in use, else the first device.
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            return "cuda", torch.cuda.current_device()
        return "cuda", 0
    kind, _, index = text.partition(":")
    if kind == "cuda" and index.isdigit():
        return "cuda", int(index)
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:<index>', got {device!r}")


_TORCH_DTYPES: dict[np.dtype, Any] = {}


def _torch_dtype(dtype: np.dtype) -> Any:
    """The torch dtype matching a numpy one (torch is imported by the caller by then)."""
    try:
        return _TORCH_DTYPES[dtype]
    except KeyError:
        _TORCH_DTYPES[dtype] = getattr(sys.modules["torch"], dtype.name)
        return _TORCH_DTYPES[dtype]


def _torch_bool() -> Any:
    return sys.modules["torch"].bool


class _SegmentTree:
    """Shared implementation of :class:`SumSegmentTree` and :class:`MinSegmentTree`."""

    _op = ""
    _cpu_classes: dict[str, Any] = {}
    _cuda_classes: dict[str, Any] = {}

    def __init__(self, capacity: int, dtype: Any = "float32", device: Any = "cpu") -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
            raise TypeError(f"capacity must be an int, got {type(capacity).__name__}")
        self._capacity = int(capacity)
        if self._capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {self._capacity}")
        self._dtype = _parse_dtype(dtype)
        self._device_type, self._device_index = _parse_device(device)
        self._cuda = self._device_type == "cuda"
        if self._cuda:
            if not _C.cuda_compiled():
                raise RuntimeError(
                    f"device {device!r} was requested but this build of rl-cpp has no CUDA "
                    "kernels; rebuild it with the CUDA toolkit installed (RL_CPP_CUDA=ON)"
                )
            cls = self._cuda_classes[self._dtype.name]
            self._impl = cls(self._capacity, self._device_index, 0)
            self._device = f"cuda:{self._device_index}"
        else:
            self._impl = self._cpu_classes[self._dtype.name](self._capacity)
            self._device = "cpu"
        self._torch_dtype = None  # resolved on first use of a torch tensor

    # ----------------------------------------------------------------- properties
    @property
    def capacity(self) -> int:
        """Number of leaves (priorities) the tree holds."""
        return self._capacity

    @property
    def dtype(self) -> np.dtype:
        """Dtype of the priorities, ``np.dtype('float32')`` or ``np.dtype('float64')``."""
        return self._dtype

    @property
    def device(self) -> str:
        """Device of the tree, ``"cpu"`` or ``"cuda:<index>"`` (pass to ``torch.device``)."""
        return self._device

    def __len__(self) -> int:
        return self._capacity

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self._capacity}, dtype={self._dtype.name}, "
            f"device={self._device!r})"
        )

    # -------------------------------------------------------------- operations
    def update(self, indices: Any, values: Any) -> None:
        """Sets the priorities at ``indices`` to ``values``.

        Args:
            indices: a Python int, or an integer array (numpy or torch, any shape,
                contiguous, on the tree's device; int64 passes without a copy, other
                integer dtypes are converted) or a list of ints.
            values: a number broadcast to every index, or an array of the shape of
                ``indices`` (a trailing dim of size 1 may differ: ``[B]`` indices take
                ``[B, 1]`` values). An array of the tree's dtype passes without a
                copy; other real dtypes (float64 for a float32 tree, ints, bools) are
                cast to the tree's dtype, as TorchRL's trees do. With repeated indices
                the last occurrence wins.

        Raises:
            IndexError: an index is outside ``[0, capacity)`` (a uint64 index above the
                int64 range included, reported with its value).
            ValueError: a priority is negative or NaN (or infinite for a sum tree),
                or ``values`` has the wrong length, shape or device; the tree is unchanged.
            TypeError: wrong dtype, non-contiguous array or unsupported type.
        """
        if isinstance(indices, (int, np.integer)):
            index = self._scalar_index(indices)
            value = self._scalar(values, "values")
            if self._cuda:
                self._impl.update_one(index, value, self._stream())
            else:
                self._impl.update_one(index, value)
            return
        idx, kind, idx_shape = self._array(indices, "indices", _INT64)
        if isinstance(values, _NUMBER):
            if self._cuda:
                self._impl.update_fill(idx, float(values), self._stream())
            else:
                self._impl.update_fill(idx, float(values))
            return
        vals, _, vals_shape = self._array(values, "values", self._dtype)
        if vals.shape[0] != idx.shape[0]:
            raise ValueError(
                f"values has {vals.shape[0]} elements, expected {idx.shape[0]} (one per index)"
            )
        if vals_shape != idx_shape:
            check_layout("values", vals_shape, "indices", idx_shape)
        if self._cuda:
            self._impl.update(idx, vals, self._stream())
        else:
            self._impl.update(idx, vals)

    __setitem__ = update

    def __getitem__(self, indices: Any) -> Any:
        """Priorities at ``indices``: a float for an int, else an array of the input's library."""
        if isinstance(indices, (int, np.integer)):
            index = self._scalar_index(indices)
            if self._cuda:
                return self._impl.get_one(index, self._stream())
            return self._impl.get_one(index)
        if isinstance(indices, slice):
            indices = self._arange(*indices.indices(self._capacity))
        idx, kind, shape = self._array(indices, "indices", _INT64)
        out = self._empty(kind, idx, idx.shape[0], self._dtype)
        if self._cuda:
            self._impl.get(idx, out, self._stream())
        else:
            self._impl.get(idx, out)
        return self._result(out, kind, shape)

    def query(self, start: Any, end: Any) -> Any:
        """Reduction (sum or min) of the priorities in the half-open range ``[start, end)``.

        Args:
            start: an int, or an int64 array of range starts.
            end: an int, or an int64 array of range ends, as many as ``start``.

        Returns:
            A Python float for ints, else an array (of the input's library and shape)
            holding one reduction per range. An empty range gives 0 (sum) or +inf (min).

        Raises:
            IndexError: a range is not within ``0 <= start <= end <= capacity``.
        """
        if isinstance(start, (int, np.integer)) and isinstance(end, (int, np.integer)):
            start, end = int(start), int(end)
            if not 0 <= start <= end <= self._capacity:
                raise IndexError(
                    f"query range [{start}, {end}) is invalid for a tree of capacity "
                    f"{self._capacity}; expected 0 <= start <= end <= {self._capacity}"
                )
            if self._cuda:
                return self._impl.query_one(start, end, self._stream())
            return self._impl.query_one(start, end)
        starts, kind, shape = self._array(start, "start", _INT64)
        ends, _, _ = self._array(end, "end", _INT64)
        if ends.shape[0] != starts.shape[0]:
            raise ValueError(
                f"end has {ends.shape[0]} elements, expected {starts.shape[0]} (as many as start)"
            )
        out = self._empty(kind, starts, starts.shape[0], self._dtype)
        if self._cuda:
            self._impl.query(starts, ends, out, self._stream())
        else:
            self._impl.query(starts, ends, out)
        return self._result(out, kind, shape)

    def __getstate__(self) -> dict[str, Any]:
        leaves = np.empty(self._capacity, dtype=self._dtype)
        if self._cuda:
            self._impl.copy_leaves(leaves, self._stream())
        else:
            self._impl.copy_leaves(leaves)
        return {
            "capacity": self._capacity,
            "dtype": self._dtype.name,
            "device": self._device,
            "leaves": leaves,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["capacity"], state["dtype"], state["device"])
        leaves = np.ascontiguousarray(state["leaves"], dtype=self._dtype)
        if self._cuda:
            self._impl.load_leaves(leaves, self._stream())
        else:
            self._impl.load_leaves(leaves)

    # ---------------------------------------------------------------- helpers
    def _root(self) -> float:
        if self._cuda:
            return self._impl.root(self._stream())
        return self._impl.root()

    def _stream(self) -> int:
        # Kernels run on the caller's current torch stream, ordered with its work.
        torch = sys.modules.get("torch")
        if torch is None:
            return 0
        return torch.cuda.current_stream(self._device_index).cuda_stream

    def _scalar_index(self, index: Any) -> int:
        index = int(index)
        if not 0 <= index < self._capacity:
            raise IndexError(
                f"index {index} is out of range for a tree of capacity {self._capacity}; "
                f"expected 0 <= index < {self._capacity}"
            )
        return index

    @staticmethod
    def _scalar(value: Any, name: str) -> float:
        if not isinstance(value, _NUMBER):
            raise TypeError(
                f"{name} must be a number when the index is an int, got {type(value).__name__}"
            )
        return float(value)

    def _arange(self, start: int, stop: int, step: int) -> Any:
        if self._cuda:
            import torch

            return torch.arange(start, stop, step, device=self._device)
        return np.arange(start, stop, step, dtype=np.int64)

    def _array(self, x: Any, name: str, dtype: np.dtype) -> tuple[Any, str, tuple]:
        """Checks ``x`` and returns it flattened (a view), its library and its shape."""
        if isinstance(x, np.ndarray):
            if self._cuda:
                raise ValueError(
                    f"{name} is a numpy array (on cpu), expected a torch tensor on "
                    f"{self._device} (the tree's device)"
                )
            if x.dtype != dtype:
                if x.dtype.kind == "u" and x.dtype.itemsize == 8 and dtype == _INT64:
                    check_unsigned_index(x, self._capacity)
                x = self._convert_numpy(x, name, dtype)
            if not x.flags.c_contiguous:
                raise TypeError(
                    f"{name} is not contiguous (strides {x.strides}); expected a C-contiguous "
                    "array (use np.ascontiguousarray)"
                )
            return x.reshape(-1), "numpy", x.shape
        if _is_torch(x) and hasattr(x, "is_contiguous"):
            return self._tensor(x, name, dtype)
        if isinstance(x, (list, tuple, range)):
            arr = np.asarray(x)  # its natural dtype: uint64 for 2**64 - 1
            if dtype == _INT64 and arr.size:
                if arr.dtype.kind in "fO":  # floats, or ints beyond int64 among others
                    check_big_ints(x, self._capacity)
                elif arr.dtype.kind == "u" and arr.dtype.itemsize == 8:
                    check_unsigned_index(arr, self._capacity)
                if arr.dtype.kind not in "iu":
                    self._convert_numpy(arr, name, dtype)  # raises the dtype error
            if self._cuda:
                import torch

                kind = torch.int64 if dtype == _INT64 else getattr(torch, dtype.name)
                return self._tensor(torch.tensor(x, dtype=kind, device=self._device), name, dtype)
            if arr.size == 0 or dtype != _INT64:
                arr = np.asarray(x, dtype=dtype)
            return self._array(arr, name, dtype)
        raise TypeError(
            f"{name} must be a numpy array, a torch tensor, a list or an int, "
            f"got {type(x).__name__}"
        )

    @staticmethod
    def _convert_numpy(x: np.ndarray, name: str, dtype: np.dtype) -> np.ndarray:
        # As TorchRL's trees: priorities of any real dtype (float64, int, bool) are cast to
        # the tree's dtype, indices of any integer dtype to int64; other dtypes are refused.
        kinds = "iu" if dtype == _INT64 else "biuf"
        if x.dtype.kind not in kinds:
            what = "an integer" if dtype == _INT64 else "a real (float, int or bool)"
            raise TypeError(
                f"{name} has dtype {x.dtype}, expected {dtype} or {what} dtype to convert from"
            )
        return np.ascontiguousarray(x, dtype=dtype)

    def _tensor(self, x: Any, name: str, dtype: np.dtype) -> tuple[Any, str, tuple]:
        expected = _torch_dtype(dtype)
        if x.dtype != expected:
            if dtype == _INT64:
                ok = not (x.is_floating_point() or x.is_complex() or x.dtype is _torch_bool())
            else:
                ok = not x.is_complex()
            if not ok:
                what = "an integer" if dtype == _INT64 else "a real (float, int or bool)"
                raise TypeError(
                    f"{name} has dtype {x.dtype}, expected {expected} or {what} dtype to "
                    "convert from"
                )
            if dtype == _INT64 and x.dtype is getattr(sys.modules["torch"], "uint64", None):
                check_unsigned_index(x.detach().cpu().numpy(), self._capacity)
            x = x.detach().to(expected).contiguous()
        if self._cuda:
            wrong_device = not x.is_cuda or x.device.index != self._device_index
        else:
            wrong_device = not x.is_cpu
        if wrong_device:
            raise ValueError(
                f"{name} is on {x.device}, expected {self._device} (the tree's device)"
            )
        if not x.is_contiguous():
            raise TypeError(
                f"{name} is not contiguous (stride {tuple(x.stride())}); expected a contiguous "
                "tensor (use .contiguous())"
            )
        if x.requires_grad:
            x = x.detach()
        if not self._cuda:
            # A CPU tensor crosses as its zero-copy numpy view: the buffer protocol is
            # cheaper per call than a DLPack capsule; the result goes back to torch.
            return x.numpy().reshape(-1), "torch-cpu", tuple(x.shape)
        return x.reshape(-1), "torch", tuple(x.shape)

    @staticmethod
    def _result(out: Any, kind: str, shape: tuple) -> Any:
        out = out.reshape(shape)
        if kind == "torch-cpu":
            return sys.modules["torch"].from_numpy(out)
        return out

    @staticmethod
    def _empty(kind: str, like: Any, n: int, dtype: np.dtype) -> Any:
        if kind != "torch":
            return np.empty(n, dtype=dtype)
        return sys.modules["torch"].empty(n, dtype=_torch_dtype(dtype), device=like.device)


class SumSegmentTree(_SegmentTree):
    """Sum segment tree over ``capacity`` priorities, for proportional prioritized sampling.

    Leaves start at 0. ``total()`` is the sum of all priorities and
    ``scan_lower_bound(u * total())`` with ``u ~ U[0, 1)`` draws index ``i`` with
    probability ``priority[i] / total()``, in O(log capacity). On a CUDA device the
    tree lives in GPU memory and operations run on the current torch stream; batched
    calls synchronize that stream once, to check the input on the device.
    See `Prioritized Experience Replay <https://arxiv.org/abs/1511.05952>`_.

    Args:
        capacity: number of priorities (any int >= 1).
        dtype: ``"float32"`` or ``"float64"`` (a numpy or torch dtype works too).
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:<index>"``.

    Examples:
        >>> import numpy as np
        >>> from rl.cpp import SumSegmentTree
        >>> tree = SumSegmentTree(4, dtype="float64")
        >>> tree.update(np.array([0, 1, 3]), np.array([1.0, 2.0, 3.0]))
        >>> tree.total()
        6.0
        >>> tree.query(1, 4)
        5.0
        >>> tree.scan_lower_bound(np.array([0.5, 1.0, 2.9, 3.0]))
        array([0, 1, 1, 3])
        >>> tree[np.array([3, 2])]
        array([3., 0.])
    """

    _op = "sum"
    _cpu_classes = {"float32": _C.SumTreeF32, "float64": _C.SumTreeF64}
    _cuda_classes = (
        {"float32": _C.CudaSumTreeF32, "float64": _C.CudaSumTreeF64} if _C.cuda_compiled() else {}
    )

    def total(self) -> float:
        """Sum of all priorities, as a Python float (on CUDA this synchronizes the stream)."""
        return self._root()

    def scan_lower_bound(self, values: Any) -> Any:
        """Smallest index ``i`` with ``priority[0] + ... + priority[i] > value``, per value.

        Args:
            values: a number, or an array (numpy or torch, on the tree's device; other
                real dtypes than the tree's are cast to it, as in :meth:`update`),
                compared in the tree's dtype. Values should lie in ``[0, total())``; a value at or
                above ``total()`` (float rounding) maps to the last index with a nonzero
                priority, so every result is a valid index.

        Returns:
            A Python int for a number, else an int64 array of the input's library and shape
            (an empty array for no values, whatever the tree holds).

        Raises:
            ValueError: a value is negative or NaN, or every priority is zero (nothing
                can be drawn; TorchRL's tree returned index 0 or ``capacity`` there).
        """
        if isinstance(values, _NUMBER):
            if self._cuda:
                return self._impl.scan_one(float(values), self._stream())
            return self._impl.scan_one(float(values))
        vals, kind, shape = self._array(values, "values", self._dtype)
        out = self._empty(kind, vals, vals.shape[0], _INT64)
        if self._cuda:
            self._impl.scan(vals, out, self._stream())
        else:
            self._impl.scan(vals, out)
        return self._result(out, kind, shape)


class MinSegmentTree(_SegmentTree):
    """Min segment tree over ``capacity`` priorities (for importance-weight normalization).

    Leaves start at ``+inf`` (the identity of ``min``; setting a leaf to ``+inf``
    clears it). ``min()`` is the smallest priority; ``query(start, end)`` the smallest
    in ``[start, end)``. Same arguments and device rules as :class:`SumSegmentTree`.

    Examples:
        >>> import numpy as np
        >>> from rl.cpp import MinSegmentTree
        >>> tree = MinSegmentTree(4)
        >>> tree.min()
        inf
        >>> tree.update(np.array([0, 2]), np.array([0.5, 0.25], dtype=np.float32))
        >>> tree.min(), tree.query(0, 2)
        (0.25, 0.5)
    """

    _op = "min"
    _cpu_classes = {"float32": _C.MinTreeF32, "float64": _C.MinTreeF64}
    _cuda_classes = (
        {"float32": _C.CudaMinTreeF32, "float64": _C.CudaMinTreeF64} if _C.cuda_compiled() else {}
    )

    def min(self) -> float:
        """Smallest priority (``+inf`` when empty), as a Python float; syncs on CUDA."""
        return self._root()
