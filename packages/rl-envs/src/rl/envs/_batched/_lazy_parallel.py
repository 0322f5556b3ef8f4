"""``ParallelEnv(..., use_buffers=False)``: worker processes whose entries may differ in shape.

Each sub-env runs in its own one-worker :class:`ParallelEnv` (its own process and
shared-memory buffers, laid out from its own specs); a step sends the command to every
worker before waiting for any, and the outputs are stacked (lazily where they differ),
as with ``SerialEnv(..., use_buffers=False)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from .._env_base import EnvBase
from .._partial_step import peek_step_mask
from ..engine import EnvKernel, RolloutKernel
from ._base import _bind_workers
from ._options import batched_options
from ._parallel import ParallelEnv
from ._worker import OP_STEP

__all__ = ["LazyParallelEnv"]


def _stack(items: list[TensorDictBase]) -> TensorDictBase:
    return LazyStackedTensorDict.maybe_dense_stack(items, 0)


class LazyParallelEnv(ParallelEnv):
    """The ``ParallelEnv`` built by ``ParallelEnv(..., use_buffers=False)`` (see the module doc).

    Examples:
        >>> from rl.envs import ParallelEnv, PendulumEnv
        >>> env = ParallelEnv(2, PendulumEnv, use_buffers=False, mp_start_method="fork")
        >>> env.rollout(4)["next", "observation"].shape
        torch.Size([2, 4, 3])
        >>> env.close()
    """

    def rollout_kernel(self) -> RolloutKernel:
        """The env's own ``_step`` / ``reset`` (its outputs are stacked, not buffered)."""
        return EnvKernel(self)

    _reset_keeps_unmasked = True

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]],
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        device: torch.device | str | None = None,
        mp_start_method: str | None = None,
        num_sub_threads: int = 1,
        run_type_checks: bool = False,
        timeout: float | None = 30.0,
        **options: Any,
    ) -> None:
        self.batched_options = batched_options(type(self).__name__, options)
        _bind_workers(self, num_workers, create_env_fn, create_env_kwargs)
        sub = {
            "device": device,
            "mp_start_method": mp_start_method,
            "num_sub_threads": num_sub_threads,
            "run_type_checks": run_type_checks,
            "timeout": timeout,
        }
        self._init_kwargs = {**sub, **options}
        self.mp_start_method = mp_start_method
        self.timeout = timeout
        self._pool = None
        output_specs, input_specs, batch = [], [], None
        for index, creator in enumerate(self._creators):
            meta = self._check_env(creator())
            try:
                if batch is not None and meta.batch_size != batch:
                    raise ValueError(
                        f"sub-env {index} has batch_size {tuple(meta.batch_size)}, expected "
                        f"{tuple(batch)} (that of sub-env 0)"
                    )
                batch = meta.batch_size
                output_specs.append(meta.output_spec.clone())
                input_specs.append(meta.input_spec.clone())
                if device is None:
                    device = meta.device
            finally:
                meta.close()
        self.sub_batch_size = batch
        EnvBase.__init__(
            self, device=device, batch_size=(num_workers, *batch), run_type_checks=run_type_checks
        )
        self.__dict__["_output_spec"] = torch.stack(output_specs, 0)
        self.__dict__["_input_spec"] = torch.stack(input_specs, 0)
        self._workers = [ParallelEnv(1, creator, **sub) for creator in self._creators]
        self._pending_promote = []
        self.is_closed = False

    def _check_composite(self, name: str, value: Any):
        return value  # stacked specs: checked by the sub-envs

    @property
    def worker_pids(self) -> list[int]:
        return [pid for worker in self._workers for pid in worker.worker_pids]

    def _ensure_started(self) -> None:
        for worker in self._workers:
            if not worker._running():
                worker._start()
        self.is_closed = False

    def start(self) -> None:
        self._ensure_started()

    def close(self, *, raise_if_closed: bool = True) -> None:
        for worker in self._workers:
            worker.close()
        self.is_closed = True

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._ensure_started()
        workers = self._workers
        partial = peek_step_mask(tensordict)
        selected = [True] * len(workers) if partial is None else self._worker_mask(partial).tolist()
        try:
            for i, worker in enumerate(workers):  # every worker steps before any is awaited
                if selected[i]:
                    worker._write_inputs(tensordict[i].unsqueeze(0))
                    worker._pool.send([0], OP_STEP)
            outs = []
            for i, worker in enumerate(workers):
                if not selected[i]:  # a partial step skips it: its current values
                    outs.append(worker._skip_tensordict(tensordict[i].unsqueeze(0))[0])
                    continue
                worker._pool.collect([0], "step")
                worker.__dict__["_pending_promote"] = []
                outs.append(worker._read(worker._next_td)[0])
        except BaseException:
            self.close()  # answers may be pending: no worker is reused
            raise
        return _stack(outs)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        self._ensure_started()
        mask = None if tensordict is None else tensordict.get("_reset", None)
        outs = []
        for i, worker in enumerate(self._workers):
            if mask is not None and not bool(mask[i].any()):
                outs.append(tensordict[i].exclude("_reset", "next"))
                continue
            sub = None
            if tensordict is not None:
                sub = tensordict[i].exclude("_reset", "next").unsqueeze(0)
                if mask is not None and self.sub_batch_size:
                    sub.set("_reset", mask[i].unsqueeze(0))
            outs.append(worker.reset(sub)[0])
        return _stack(outs)

    def reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        """Resets the sub-envs (those of the ``"_reset"`` mask); returns a new tensordict."""
        if kwargs:
            raise TypeError(
                f"{type(self).__name__}.reset got unexpected arguments {sorted(kwargs)}"
            )
        if tensordict is not None:
            self._check_batch(tensordict, "reset()")
        return self._reset(tensordict)

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        for worker in self._workers:
            new_seed = worker.set_seed(seed, static_seed)
            if seed is not None and not static_seed:
                seed = new_seed
        return seed

    def step_and_maybe_reset(self, tensordict: TensorDictBase):
        return EnvBase.step_and_maybe_reset(self, tensordict)
