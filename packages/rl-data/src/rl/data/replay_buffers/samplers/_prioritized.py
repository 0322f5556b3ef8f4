"""Prioritized experience replay (Schaul et al., 2016, https://arxiv.org/abs/1511.05952)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl.data.replay_buffers._cpp import (
    HAS_CPP,
    MinSegmentTree,
    SumSegmentTree,
    prioritized_sample,
    prioritized_update,
    prioritized_update_at,
)
from rl.data.replay_buffers._utils import as_index_tensor
from rl.data.replay_buffers.samplers._prioritized_rows import FusedRows
from rl.data.replay_buffers.samplers._sampler import EMPTY_STORAGE_ERROR, Sampler
from rl.data.replay_buffers.storages._base import Storage
from rl.data.replay_buffers.storages._rows import RowPlan

_TREE_DTYPES = {torch.float32: "float32", torch.float64: "float64"}
_NP_DTYPES = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64)}


def _cpu_index(index: Any) -> np.ndarray | None:
    """A contiguous int64 numpy view of a CPU index tensor (``None`` for anything else)."""
    if type(index) is not torch.Tensor or index.device.type != "cpu":
        return None
    if index.dtype != torch.int64:
        if index.dtype.is_floating_point or index.dtype == torch.bool:
            raise TypeError(f"index must hold integers, got a tensor of dtype {index.dtype}")
        index = index.long()
    return np.ascontiguousarray(index.detach().numpy().reshape(-1))


def _check_priority(priority: torch.Tensor) -> None:
    """Rejects NaN, infinite and negative priorities with a message naming the first bad one."""
    ok = (priority >= 0) & (priority < math.inf)
    if bool(ok.all()):
        return
    bad = priority[~ok].reshape(-1)[0].item()
    raise ValueError(
        f"priorities must be finite and non-negative, got {bad} "
        f"({int((~ok).sum())} of {priority.numel()} values are invalid)"
    )


def importance_weights(priority: torch.Tensor, p_min: float, beta: float) -> torch.Tensor:
    """``(p_i / p_min) ** -beta``: ``(N P(i)) ** -beta`` normalised by its largest value.

    With a zero priority stored (``eps=0``), the largest weight is not defined by the
    tree; the weights are then normalised by the largest one in the batch.
    """
    if p_min > 0:
        weight = priority.div(p_min).pow_(-beta)
    else:
        weight = priority.pow(-beta)
        weight = weight.div_(weight.max())
    return weight.to(torch.float32)


class PrioritizedSampler(Sampler):
    """Samples item ``i`` with probability ``p_i^alpha / sum_j p_j^alpha``.

    Priorities (plus ``eps``) raised to ``alpha`` live in an rl-cpp sum tree (sampling in
    ``O(log N)``) and a min tree (the largest importance weight); torch trees stand in
    for them where rl-cpp is not installed. A sample carries the
    importance weights ``w_i = (N P(i))^-beta / max_j w_j = (p_i / min_j p_j)^-beta`` under
    ``"priority_weight"``. New items get the largest priority seen so far (1 at the start).
    The trees live on the device of the storage (a CUDA storage keeps them on the GPU).

    Args:
        max_capacity: the capacity of the trees (the storage's ``max_size``).
        alpha: how much prioritization is used (0 is uniform).
        beta: the importance-sampling correction exponent (1 fully corrects).
        eps: added to every priority so that no item has probability zero.
        dtype: ``torch.float32`` or ``torch.float64``, the trees' precision.
        device: where the trees live; the storage's device when omitted.

    Examples:
        >>> import torch
        >>> from rl.data import LazyTensorStorage, PrioritizedSampler, ReplayBuffer
        >>> rb = ReplayBuffer(
        ...     storage=LazyTensorStorage(8),
        ...     sampler=PrioritizedSampler(8, alpha=1.0, beta=1.0, eps=0.0),
        ... )
        >>> _ = rb.extend(torch.arange(2))
        >>> rb.update_priority(torch.tensor([0, 1]), torch.tensor([0.0, 2.0]))
        >>> data, info = rb.sample(4, return_info=True)
        >>> data.tolist(), info["priority_weight"].tolist()
        ([1, 1, 1, 1], [1.0, 1.0, 1.0, 1.0])
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        max_priority_within_buffer: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        if isinstance(max_capacity, bool) or not isinstance(max_capacity, int) or max_capacity <= 0:
            raise ValueError(f"max_capacity must be a positive int, got {max_capacity!r}")
        if not alpha >= 0:
            raise ValueError(f"alpha must be non-negative, got {alpha}")
        if not beta >= 0:
            raise ValueError(f"beta must be non-negative, got {beta}")
        if not eps >= 0:
            raise ValueError(f"eps must be non-negative, got {eps}")
        if dtype not in _TREE_DTYPES:
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self._max_capacity = max_capacity
        self._alpha = float(alpha)
        self._beta = float(beta)
        self._eps = float(eps)
        self.dtype = dtype
        self._np_dtype = _NP_DTYPES[dtype]
        self.reduction = reduction
        self._max_priority_within_buffer = bool(max_priority_within_buffer)
        self._max_index = -1  # where the largest priority lives (within-buffer tracking)
        self._device_given = device is not None
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        self._max_priority = 1.0
        self._pending_recompute = False
        self._fused: FusedRows | None = None
        self._init_trees()

    # -- trees -----------------------------------------------------------------------------------
    def _init_trees(self) -> None:
        # the compiled CPU steps; without rl-cpp, torch trees through the general path
        self._cpu = HAS_CPP and self._device.type == "cpu"
        self._fused = None  # holds the trees
        device = str(self._device) if self._device.type == "cuda" else "cpu"
        dtype = _TREE_DTYPES[self.dtype]
        self._sum_tree = SumSegmentTree(self._max_capacity, dtype=dtype, device=device)
        self._min_tree = MinSegmentTree(self._max_capacity, dtype=dtype, device=device)

    _storage: Storage | None = None

    def _attach_storage(self, storage: Storage) -> None:
        self._storage = storage
        if storage.max_size > self._max_capacity:
            raise ValueError(
                f"the storage holds {storage.max_size} items, more than the sampler's "
                f"max_capacity={self._max_capacity}"
            )
        device = storage.device
        if not self._device_given and device != self._device:
            self._device = device
            self._init_trees()

    @property
    def alpha(self) -> float:
        """The priority exponent; setting it re-exponentiates the stored priorities.

        The trees hold ``(p + eps) ** alpha``: a new ``alpha`` rewrites every stored value
        to ``(p + eps) ** new_alpha`` (one pass over the capacity), so that sampling follows
        the new exponent at once (as TorchRL does). From ``alpha=0`` the priorities cannot
        be recovered: the stored values are kept until each item is updated again.
        """
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        if not value >= 0:
            raise ValueError(f"alpha must be non-negative, got {value}")
        old, self._alpha = self._alpha, float(value)
        if old == self._alpha or old == 0:
            return
        everything = torch.arange(self._max_capacity, device=self._device)
        stored = torch.as_tensor(self._sum_tree[everything]).double()
        written = stored > 0
        if not bool(written.any()):
            return
        raw = (stored[written] ** (1.0 / old) - self._eps).clamp_min(0)
        new = ((raw + self._eps) ** self._alpha).to(self.dtype)
        self._sum_tree.update(everything[written], new)
        self._min_tree.update(everything[written], new)

    @property
    def beta(self) -> float:
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        if not value >= 0:
            raise ValueError(f"beta must be non-negative, got {value}")
        self._beta = float(value)

    @property
    def eps(self) -> float:
        return self._eps

    @property
    def max_capacity(self) -> int:
        return self._max_capacity

    @property
    def max_size(self) -> int:
        return self._max_capacity

    @property
    def device(self) -> torch.device:
        """Where the trees live."""
        return self._device

    def mark_update(self, index: Any) -> None:
        """Gives the items at ``index`` the default (largest) priority."""
        self.update_priority(index, self.default_priority)

    @property
    def default_priority(self) -> float:
        """The priority given to new items: the largest seen (or, with
        ``max_priority_within_buffer=True``, the largest stored); 1 at the start."""
        return self._max_priority

    # -- writes ----------------------------------------------------------------------------------
    def _flat(self, index: Any) -> Any:
        """Coordinates in a multi-dimensional storage to the trees' flat indices."""
        storage = self._storage
        if storage is not None and storage.ndim > 1:
            if isinstance(index, tuple) or (isinstance(index, torch.Tensor) and index.ndim == 2):
                return storage._flat_index(index)
        return index

    def _tree_index(self, index: Any) -> torch.Tensor:
        index = as_index_tensor(self._flat(index), self._device)
        index = index[index >= 0]  # a max-value writer marks dropped items with -1
        if index.numel() and int(index.max()) >= self._max_capacity:
            raise IndexError(
                f"index {int(index.max())} is out of range for max_capacity={self._max_capacity}"
            )
        return index

    def add(self, index: int | torch.Tensor) -> None:
        self.extend(index)

    def extend(self, index: torch.Tensor) -> None:
        index = self._tree_index(index)
        if index.numel():
            if self._max_priority_within_buffer and bool((index == self._max_index).any()):
                # the item holding the largest priority was overwritten
                self._recompute_max(exclude=index)
            value = (self._max_priority + self._eps) ** self._alpha
            self._sum_tree.update(index, value)
            self._min_tree.update(index, value)
            if self._max_priority_within_buffer and self._max_index < 0:
                self._max_index = int(index[-1])

    @property
    def max_priority_within_buffer(self) -> bool:
        return self._max_priority_within_buffer

    def _recompute_max(self, exclude: torch.Tensor | None = None) -> None:
        """The largest priority stored now (``max_priority_within_buffer=True``)."""
        everything = torch.arange(self._max_capacity, device=self._device)
        stored = torch.as_tensor(self._sum_tree[everything]).double()
        if exclude is not None:
            stored[exclude] = 0.0
        value, where = stored.max(0)
        if not value > 0:
            self._max_priority, self._max_index = 1.0, -1
            return
        if self._alpha > 0:
            value = (value ** (1.0 / self._alpha) - self._eps).clamp_min(0)
            self._max_priority = float(value)
        self._max_index = int(where)

    def update_priority(self, index: Any, priority: Any) -> None:
        """Sets the priorities of ``index`` (tensor, array or int) to ``priority``.

        Raises:
            ValueError: a priority is NaN, infinite or negative, or the sizes differ.
        """
        if (
            self._cpu
            and type(index) is torch.Tensor
            and type(priority) is torch.Tensor
            and index.dtype is torch.int64
            and priority.dtype is self.dtype
            and index.ndim == 1
            and index.shape == priority.shape
            and index.is_cpu
            and priority.is_cpu
            and index.is_contiguous()
            and priority.is_contiguous()
            and (self._storage is None or self._storage.ndim == 1)
        ):
            # the usual call, a sampled batch's "index" and its new priorities (checked
            # above) to rl-cpp's in-place update, which checks them again and every
            # index and priority before either tree changes
            try:
                high = prioritized_update_at(
                    self._sum_tree, self._min_tree, index, priority, self._eps, self._alpha
                )
            except (IndexError, ValueError):
                self._update_cpu_checked(index.numpy(), priority.detach().numpy())
                return
            if self._max_priority_within_buffer:
                self._track_max(index, priority, high)
                if self._pending_recompute:
                    self._pending_recompute = False
                    self._recompute_max()
            elif high > self._max_priority:
                self._max_priority = high
            return
        index = self._flat(index)
        if self._cpu:
            np_index = _cpu_index(index)
            if np_index is not None:
                self._update_cpu(np_index, priority)
                return
        index = as_index_tensor(index, self._device)
        priority = torch.as_tensor(priority, device=self._device).detach()
        if priority.dtype != self.dtype:
            priority = priority.to(self.dtype)
        priority = priority.reshape(-1)
        n = index.numel()
        if priority.numel() == 1 and n != 1:
            priority = priority.expand(n)
        elif priority.numel() != n:
            raise ValueError(
                f"got {priority.numel()} priorities for {n} indices; pass one per "
                "index or a single value"
            )
        if n == 0:
            return
        # one reduction each gives the checks (NaN propagates into the min) and the max
        low, high = (float(x) for x in torch.aminmax(priority))
        if not (low >= 0 and high < math.inf):
            _check_priority(priority)
        first, last = (int(x) for x in torch.aminmax(index))
        if first < 0:  # a max-value writer marks dropped items with -1
            keep = index >= 0
            index, priority = index[keep], priority[keep]
            if index.numel() == 0:
                return
            high = float(priority.max())
        if last >= self._max_capacity:
            raise IndexError(f"index {last} is out of range for max_capacity={self._max_capacity}")
        self._track_max(index, priority, high)
        value = (priority + self._eps).pow_(self._alpha)
        if not value.is_contiguous():
            value = value.contiguous()
        self._sum_tree.update(index, value)
        self._min_tree.update(index, value)
        if self._pending_recompute:
            self._pending_recompute = False
            self._recompute_max()

    def _update_cpu(self, index: np.ndarray, priority: Any) -> None:
        """``update_priority`` on CPU trees: one compiled call writes both trees."""
        if isinstance(priority, torch.Tensor):
            priority = priority.detach()
            if not priority.is_cpu:
                priority = priority.cpu()
            priority = priority.numpy()
        if type(priority) is not np.ndarray or priority.dtype != self._np_dtype:
            priority = np.asarray(priority, dtype=self._np_dtype)
        if priority.ndim != 1:
            priority = priority.reshape(-1)
        n = index.shape[0]
        if priority.shape[0] == 1 and n != 1:
            priority = np.broadcast_to(priority, (n,))
        elif priority.shape[0] != n:
            raise ValueError(
                f"got {priority.shape[0]} priorities for {n} indices; pass one per "
                "index or a single value"
            )
        if n == 0:
            return
        try:
            # checks indices and priorities itself; both trees are unchanged on error
            high = prioritized_update(
                self._sum_tree, self._min_tree, index, priority, self._eps, self._alpha
            )
        except (IndexError, ValueError):
            self._update_cpu_checked(index, priority)
            return
        self._track_max(index, priority, high)
        if self._pending_recompute:
            self._pending_recompute = False
            self._recompute_max()

    def _update_cpu_checked(self, index: np.ndarray, priority: np.ndarray) -> None:
        """The checks of :meth:`_update_cpu` with clear messages; drops ``-1`` indices."""
        low, high = float(priority.min()), float(priority.max())
        if not (low >= 0 and high < math.inf):
            _check_priority(torch.from_numpy(np.ascontiguousarray(priority)))
        first, last = int(index.min()), int(index.max())
        if first < 0:  # a max-value writer marks dropped items with -1
            keep = index >= 0
            index, priority = index[keep], priority[keep]
            if index.shape[0] == 0:
                return
            high = float(priority.max())
        if last >= self._max_capacity:
            raise IndexError(f"index {last} is out of range for max_capacity={self._max_capacity}")
        self._track_max(index, priority, high)
        value = priority + self._np_dtype.type(self._eps)
        if self._alpha != 1.0:
            np.power(value, self._np_dtype.type(self._alpha), out=value)
        self._sum_tree.update(index, value)
        self._min_tree.update(index, value)
        if self._pending_recompute:
            self._pending_recompute = False
            self._recompute_max()

    def _track_max(self, index: Any, priority: Any, high: float) -> None:
        if not self._max_priority_within_buffer:
            if high > self._max_priority:
                self._max_priority = high
            return
        if high >= self._max_priority:
            self._max_priority = high
            self._max_index = int(index[int(priority.argmax())])
        elif bool((index == self._max_index).any()):
            # the largest priority was lowered: after this write, look it up again
            self._pending_recompute = True

    # -- reads -----------------------------------------------------------------------------------
    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        n = len(storage)
        if n == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        if self._cpu:
            # one compiled call: total, minimum, scan, priorities and weights
            uniform = torch.rand(batch_size, dtype=self.dtype, generator=self._rng)
            try:
                index, weight, _ = prioritized_sample(
                    self._sum_tree, self._min_tree, n, uniform.numpy(), self._beta
                )
            except RuntimeError:
                self._raise_no_mass(n)
            index = torch.from_numpy(index)
            if storage.ndim > 1:
                index = storage._to_storage_index(index)
            return index, {"priority_weight": torch.from_numpy(weight)}
        p_sum = self._sum_tree.query(0, n)
        p_min = self._min_tree.query(0, n)
        if not p_sum > 0:
            self._raise_no_mass(n)
        mass = torch.rand(batch_size, dtype=self.dtype, device=self._device, generator=self._rng)
        index = self._sum_tree.scan_lower_bound(mass.mul_(p_sum)).clamp_(max=n - 1)
        priority = self._sum_tree[index]
        weight = importance_weights(priority, p_min, self._beta)
        return storage._to_storage_index(index), {"priority_weight": weight}

    def _sample_rows(
        self, n: int, plan: RowPlan, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor, TensorDictBase]:
        """:meth:`sample` on CPU trees fused with the gather of the batch (``plan``).

        One compiled call draws the indices among the ``n`` stored items, computes their
        importance weights and copies their rows out of the storage. The uniform draws
        come from the sampler's generator exactly as in :meth:`sample`. The caller
        holds the buffer's lock (the draws go through a scratch tensor of the sampler).

        Returns:
            ``(index, weight, batch)``: the batch holds ``"index"``, ``"priority_weight"``
            and ``"_weight"`` at its root.
        """
        if n == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        return self._fused_rows(plan, batch_size)(n)

    def _fused_rows(self, plan: RowPlan, batch_size: int) -> FusedRows:
        """The draw of ``batch_size`` rows of ``plan`` on these trees (built once)."""
        fused = self._fused
        if fused is None or fused.plan is not plan or fused.batch_size != batch_size:
            fused = self._fused = FusedRows(self, plan, batch_size)
        return fused

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # the last draw's outputs and views of the storage, rebuilt on the next one
        state["_fused"] = None
        return state

    def _raise_no_mass(self, n: int) -> None:
        p_sum = self._sum_tree.query(0, n)
        raise RuntimeError(f"cannot sample: the priorities of the {n} stored items sum to {p_sum}")

    # -- state -----------------------------------------------------------------------------------
    def _empty(self) -> None:
        self._max_priority = 1.0
        self._max_index = -1
        self._pending_recompute = False
        self._init_trees()

    def state_dict(self) -> dict[str, Any]:
        everything = torch.arange(self._max_capacity, device=self._device)
        return {
            "max_capacity": self._max_capacity,
            "max_priority": self._max_priority,
            "max_index": self._max_index,
            "alpha": self._alpha,
            "beta": self._beta,
            "eps": self._eps,
            "sum": self._sum_tree[everything].cpu().clone(),
            "min": self._min_tree[everything].cpu().clone(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if int(state_dict["max_capacity"]) != self._max_capacity:
            raise ValueError(
                f"checkpoint has max_capacity {state_dict['max_capacity']}, "
                f"this sampler {self._max_capacity}"
            )
        self._init_trees()
        self._max_priority = float(state_dict["max_priority"])
        self._max_index = int(state_dict.get("max_index", -1))
        self._alpha = float(state_dict.get("alpha", self._alpha))
        self._beta = float(state_dict.get("beta", self._beta))
        self._eps = float(state_dict.get("eps", self._eps))
        everything = torch.arange(self._max_capacity, device=self._device)
        self._sum_tree.update(everything, state_dict["sum"].to(self._device, self.dtype))
        min_values = state_dict["min"].to(self._device, self.dtype)
        finite = torch.isfinite(min_values)
        self._min_tree.update(everything[finite], min_values[finite])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_capacity={self._max_capacity}, alpha={self._alpha}, "
            f"beta={self._beta}, eps={self._eps}, dtype={self.dtype})"
        )
