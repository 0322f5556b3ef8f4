"""``BatchedEnvBase``: what ``SerialEnv`` and ``ParallelEnv`` share.

The batched env has batch size ``[num_workers, *sub_env.batch_size]`` and the sub-env
specs expanded to it. Data goes through preallocated buffers (``_shm_buffers``): the parent
writes the actions into ``inputs``, the workers step their sub-env and write into
``out``, and the parent returns a copy of ``out``. Subclasses only say how the workers
run (in this process, or in worker processes).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from rl.core import Composite

from .._env_base import EnvBase, _state_entry
from .._partial_step import check_step_mask, peek_step_mask
from .._utils import step_mdp
from ..engine import RolloutKernel
from ._buffers import BufferLayout, allocate_buffers
from ._creator import EnvCreator
from ._dynamic import dynamic_spec_entry, dynamic_specs_error
from ._kernel import BatchedKernel

__all__ = ["BatchedEnvBase"]


def _per_worker(value: Any, num_workers: int, name: str, kind: str) -> list:
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        if len(value) != num_workers:
            raise ValueError(
                f"{name} has {len(value)} entries, expected one per worker "
                f"(num_workers={num_workers})"
            )
        return list(value)
    if value is not None and kind == "kwargs" and not isinstance(value, Mapping):
        raise TypeError(
            f"{name} must be a dict of keyword arguments or a list of {num_workers} dicts, "
            f"got {type(value).__name__} {value!r}"
        )
    if kind == "kwargs":  # one dict per worker (update_kwargs edits them one by one)
        return [dict(value) if value is not None else {} for _ in range(num_workers)]
    return [value] * num_workers


def _bind_workers(env: Any, num_workers: int, create_env_fn: Any, create_env_kwargs: Any) -> None:
    """Checks ``num_workers`` and sets ``num_workers``, ``create_env_fn`` and
    ``create_env_kwargs`` (one per worker) and the workers' ``_creators`` on ``env``."""
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers must be a positive int, got {num_workers!r}")
    env.num_workers = num_workers
    fns = _per_worker(create_env_fn, num_workers, "create_env_fn", "fn")
    kwargs = _per_worker(create_env_kwargs, num_workers, "create_env_kwargs", "kwargs")
    env.create_env_fn = fns
    env.create_env_kwargs = kwargs
    env._creators = [EnvCreator._plain(fn, kw) for fn, kw in zip(fns, kwargs, strict=True)]


def _views_td(
    buffers: dict, keys: list, batch_size: torch.Size, device: torch.device | None
) -> TensorDictBase:
    td = TensorDict({}, batch_size=batch_size, device=device)
    for key in keys:
        td.set(key, buffers[key])
    return td


def _rebuild(cls: type, num_workers: int, creators: list, kwargs: dict) -> BatchedEnvBase:
    return cls(num_workers, creators, **kwargs)


def _check_no_empty_spec(owner: str, env: Any) -> None:
    """TorchRL's check: a sub-env whose specs hold an empty ``Composite`` (no entry a
    rollout would write) is refused, with the transform that removes such entries."""
    for parent, name in (
        ("input_spec", "full_state_spec"),
        ("input_spec", "full_action_spec"),
        ("output_spec", "full_done_spec"),
        ("output_spec", "full_reward_spec"),
        ("output_spec", "full_observation_spec"),
    ):
        composite = getattr(env, parent)
        if name not in composite.keys():
            continue
        for key, spec in reversed(list(composite[name].items(True))):
            if isinstance(spec, Composite) and spec.is_empty():
                raise RuntimeError(
                    f"The environment passed to {owner} has empty specs in {key}. Consider "
                    "using rl.envs.transforms.RemoveEmptySpecs to remove the empty specs."
                )


class BatchedEnvBase(EnvBase):
    """Common machinery of :class:`SerialEnv` and :class:`ParallelEnv` (not for direct use).

    Args:
        num_workers: the number of sub-environments.
        create_env_fn: a callable returning a sub-env, or a list of ``num_workers``
            callables (all sub-envs must have the same specs).
        create_env_kwargs: keyword arguments of ``create_env_fn`` (a dict for all
            workers or a list of one dict per worker).
        device: the device of the tensors the batched env returns (default: the
            sub-env's).
        run_type_checks: check actions against ``action_spec`` at each step.
    """

    _share_memory = False
    # ``_reset`` reads every entry from the buffers, where workers outside the mask keep
    # their current values
    _reset_keeps_unmasked = True

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]],
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        device: torch.device | str | None = None,
        run_type_checks: bool = False,
    ) -> None:
        _bind_workers(self, num_workers, create_env_fn, create_env_kwargs)
        # what pickling sends (the sub-envs and buffers are rebuilt on the other side)
        self._init_kwargs = {"device": device, "run_type_checks": run_type_checks}
        meta = self._make_meta_env()
        _check_no_empty_spec(type(self).__name__, meta)
        entry = dynamic_spec_entry(meta)
        if entry is not None:  # the buffers need one shape per entry
            raise dynamic_specs_error(type(self).__name__, *entry)
        self.sub_batch_size = meta.batch_size
        if device is None:
            device = meta.device
        super().__init__(
            device=device,
            batch_size=(num_workers, *meta.batch_size),
            run_type_checks=run_type_checks,
        )
        shape = (num_workers, *meta.batch_size)
        output_spec = meta.output_spec.expand(*shape)
        input_spec = meta.input_spec.expand(*shape)
        if self.device is not None and meta.device != self.device:
            output_spec = output_spec.to(self.device)
            input_spec = input_spec.to(self.device)
        self.output_spec = output_spec
        self.input_spec = input_spec
        self._layout = BufferLayout.from_specs(
            self.full_action_spec,
            self.full_state_spec,
            self.full_observation_spec,
            self.full_reward_spec,
            self.full_done_spec,
            self.done_key,
        )
        if meta._step_reads_observations:
            # a sub-env's _step may read the root observations, as TorchRL hands it the
            # caller's root (simulator wrappers do not: no copy per step for them)
            in_keys = set(self._layout.in_keys)
            self._layout.obs_in_keys = [
                key for key in self.full_observation_spec.keys(True, True) if key not in in_keys
            ]
        self._shm_buffers = allocate_buffers(
            self._layout, self.input_spec, self.output_spec, share=self._share_memory
        )
        bufs = self._shm_buffers
        actions = set(self._layout.action_keys)
        self._in_pairs = [(key, bufs.inputs[key], key in actions) for key in self._layout.in_keys]
        self._obs_pairs = [
            (key, bufs.inputs[key], bufs.out[key]) for key in self._layout.obs_in_keys
        ]
        self._to_device = self.device is not None and self.device.type != "cpu"
        options = getattr(self, "batched_options", None) or {}
        self._non_blocking = bool(options.get("non_blocking", False))
        self._pin_memory = bool(options.get("pin_memory", False))
        self._share_individual_td = bool(options.get("share_individual_td") or False)
        # the buffers live on the CPU: their views carry the env's device when it is the
        # CPU, so that what reset/step return says where it is (``_read`` moves the rest)
        view_device = None if self._to_device else self.device
        self._next_td = _views_td(bufs.out, self._layout.step_keys, self.batch_size, view_device)
        self._reset_td = _views_td(bufs.out, self._layout.reset_keys, self.batch_size, view_device)
        # root keys that step_mdp drops (when they are plain strings; else step_mdp runs)
        # (the action stays in the next root, as in TorchRL's step_and_maybe_reset)
        not_carried = {"next", "_reset", *self.reward_keys}
        flat = all(isinstance(key, str) for key in not_carried)
        self._not_carried = not_carried if flat else None
        # workers whose current root entries are in ``_shm_buffers.reset``, not ``out``
        self._pending_promote: list[int] = []

    # ------------------------------------------------------------ subclass interface
    @staticmethod
    def _check_env(env: Any) -> EnvBase:
        from ..transforms import TransformedEnv

        if not isinstance(env, EnvBase):
            raise TypeError(
                f"create_env_fn must return an rl.envs.EnvBase, got {type(env).__name__}"
            )
        if isinstance(env, TransformedEnv):
            # a transform that would silently do nothing in a worker refuses (TorchRL)
            env.transform._check_batched_worker_compat()
        return env

    # The hooks SerialEnv (in process) and ParallelEnv (worker processes) implement.
    @abstractmethod
    def _make_meta_env(self) -> Any:
        """A sub-env (or its specs, batch size and device) to read the specs from."""

    @abstractmethod
    def _ensure_started(self) -> None:
        """Builds the sub-envs (starts the workers) if they are not running."""

    @abstractmethod
    def _do_step(self) -> None:
        """Steps every sub-env on the actions in the input buffers."""

    @abstractmethod
    def _do_reset(self, workers: list[int]) -> None:
        """Resets the sub-envs ``workers`` into the output buffers."""

    @abstractmethod
    def _do_step_and_maybe_reset(self) -> list[int]:
        """Steps every sub-env and resets the done ones; returns the reset indices."""

    @abstractmethod
    def _do_seed(self, index: int, seed: int | None, static_seed: bool) -> int | None:
        """Seeds sub-env ``index``; returns the next seed of the chain."""

    @abstractmethod
    def _do_env_state(self, index: int) -> dict[str, Any]:
        """Sub-env ``index``'s :meth:`EnvBase.env_state`."""

    @abstractmethod
    def _do_load_env_state(self, index: int, state: dict[str, Any]) -> None:
        """Restores sub-env ``index``'s state."""

    def start(self) -> None:
        """Builds the sub-envs (worker processes) now, if they are not running."""
        self._ensure_started()

    def update_kwargs(self, kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Updates the keyword arguments the sub-envs are built with (TorchRL's method).

        They apply to the sub-envs built from then on (after ``close()``, the next
        ``reset()`` builds new ones).

        Args:
            kwargs: a dict applied to every worker, or a list of one dict per worker.

        Raises:
            ValueError: a list without one dict per worker.
        """
        if isinstance(kwargs, Mapping):
            kwargs = [kwargs] * self.num_workers
        elif len(kwargs) != self.num_workers:
            raise ValueError(
                f"update_kwargs got {len(kwargs)} dicts, expected one per worker "
                f"(num_workers={self.num_workers})"
            )
        for current, new in zip(self.create_env_kwargs, kwargs, strict=True):
            current.update(new)
        self._creators = [
            EnvCreator._plain(fn, kw)
            for fn, kw in zip(self.create_env_fn, self.create_env_kwargs, strict=True)
        ]
        self._creators_changed()

    def _creators_changed(self) -> None:
        """Hook: the creators were rebuilt (``ParallelEnv`` re-pickles them)."""

    # ------------------------------------------------------------------ data movement
    def _write_inputs(self, tensordict: TensorDictBase) -> None:
        for key, buf, required in self._in_pairs:
            value = tensordict.get(key, None)
            if value is None:
                if required:
                    raise KeyError(key)
                continue
            if value.shape != buf.shape:
                raise ValueError(
                    f"{key!r} has shape {tuple(value.shape)}, expected {tuple(buf.shape)} "
                    f"from the spec of {type(self).__name__}"
                )
            buf.copy_(value)
        if self._obs_pairs:
            self._write_observations(tensordict)

    def _write_observations(self, tensordict: TensorDictBase) -> None:
        """Copies the caller's root observations where the sub-envs' ``_step`` reads them.

        An entry that is missing, or that a transform outside this env reshaped
        (``CatFrames``...), is taken from the last outputs instead.
        """
        for key, buf, last in self._obs_pairs:
            value = tensordict.get(key, None)
            if value is None or value.shape != buf.shape or value.dtype != buf.dtype:
                value = last
            buf.copy_(value)

    def _read(self, template: TensorDictBase) -> TensorDictBase:
        """A copy of the output buffers (``template``), as the options shape it:
        ``non_blocking`` device copies, ``pin_memory``, ``share_individual_td`` (a lazy
        stack of one tensordict per sub-env, as TorchRL returns then)."""
        if self._to_device:
            out = template.to(self.device, non_blocking=self._non_blocking)
        else:
            out = template.clone()
        if self._pin_memory:
            out = out.pin_memory()
        if self._share_individual_td:
            out = LazyStackedTensorDict(*out.unbind(0), stack_dim=0)
        return out

    def _promote_pending(self) -> None:
        """Makes ``out`` hold the current entries of the workers reset by an auto-reset."""
        if not self._pending_promote:
            return
        idx = torch.tensor(self._pending_promote)
        bufs = self._shm_buffers
        for key in self._layout.reset_keys:
            bufs.out[key][idx] = bufs.reset[key][idx]
        self.__dict__["_pending_promote"] = []  # per step: not nn.Module.__setattr__

    # ------------------------------------------------------------------- EnvBase hooks
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._ensure_started()
        self._write_inputs(tensordict)
        partial = peek_step_mask(tensordict)
        if partial is not None:
            return self._step_workers(tensordict, partial)
        self._do_step()
        self.__dict__["_pending_promote"] = []  # per step: not nn.Module.__setattr__
        return self._read(self._next_td)

    def _worker_mask(self, partial: torch.Tensor) -> torch.Tensor:
        """``[num_workers]`` bool from a ``"_step"`` mask that selects whole workers."""
        partial = check_step_mask(partial, self.batch_size).reshape(self.num_workers, -1)
        if not bool((partial == partial[:, :1]).all()):
            raise ValueError(
                f"{type(self).__name__}: a '_step' mask must select whole workers (all the "
                f"entries of a sub-env's batch {tuple(self.batch_size[1:])} alike); put the "
                "partial-step transform inside each worker to select entries of its batch"
            )
        return partial[:, 0]

    def _step_workers(self, tensordict: TensorDictBase, partial: torch.Tensor) -> TensorDictBase:
        """Steps the sub-envs a ``"_step"`` mask selects; the others' ``"next"`` holds
        their current values (see :meth:`EnvBase.step`), as TorchRL's batched envs."""
        selected = self._worker_mask(partial)
        workers = selected.nonzero().squeeze(-1).tolist()
        if workers:
            self._do_step_workers(workers)
        pending = [w for w in self._pending_promote if not bool(selected[w])]
        self.__dict__["_pending_promote"] = pending
        out = self._read(self._next_td)
        if len(workers) < self.num_workers:
            skipped = self._skip_tensordict(tensordict)
            keep = ~selected
            for key in out.keys(True, True):
                value = skipped.get(key, None)
                if value is not None:
                    out.get(key)[keep] = value[keep].to(out.get(key).device)
        return out

    def _do_step_workers(self, workers: list[int]) -> None:
        """Steps the sub-envs ``workers`` only (a partial step)."""
        raise NotImplementedError(f"{type(self).__name__} does not support partial steps")

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        self._ensure_started()
        self._promote_pending()
        mask_buf = self._shm_buffers.mask
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            mask_buf.fill_(True)
            workers = list(range(self.num_workers))
        else:
            if mask.shape != mask_buf.shape:
                if mask.numel() != mask_buf.numel():
                    raise ValueError(
                        f"'_reset' has shape {tuple(mask.shape)}, expected "
                        f"{tuple(mask_buf.shape)} (the batch size followed by 1)"
                    )
                mask = mask.reshape(mask_buf.shape)
            mask_buf.copy_(mask)
            workers = mask_buf.reshape(self.num_workers, -1).any(-1).nonzero()
            workers = workers.squeeze(-1).tolist()
        self._do_reset(workers)
        return self._read(self._reset_td)

    def _set_seed(self, seed: int | None) -> None:
        self.set_seed(seed)

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds each sub-env in turn with the seed the previous one returned.

        Worker ``i`` gets the ``i``-th seed of the chain ``seed, next(seed), ...`` (all
        the same seed with ``static_seed=True``), so a batched env and its sub-envs
        seeded by hand the same way produce the same episodes.

        Returns:
            the seed that follows the last worker's (to seed another env with).
        """
        self._ensure_started()
        for index in range(self.num_workers):
            new_seed = self._do_seed(index, seed, static_seed)
            if seed is not None:
                seed = new_seed
        return seed

    def env_state(self) -> dict[str, Any]:
        """The states of the sub-envs (see :meth:`EnvBase.env_state`), one per worker;
        a :class:`ParallelEnv`'s come back from its worker processes as tensors and
        plain data."""
        self._ensure_started()
        return {"envs": [self._do_env_state(index) for index in range(self.num_workers)]}

    def load_env_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`env_state` into each sub-env, in place.

        Raises:
            ValueError: ``state`` does not hold one state per worker.
        """
        states = _state_entry(self, state, "envs")
        if not isinstance(states, list) or len(states) != self.num_workers:
            got = f"{len(states)}" if isinstance(states, list) else f"a {type(states).__name__}"
            raise ValueError(
                f"cannot restore the state of {self!r}: expected the states of "
                f"{self.num_workers} sub-envs, got {got}"
            )
        self._ensure_started()
        for index, sub in enumerate(states):
            self._do_load_env_state(index, sub)

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Steps all sub-envs and resets the done ones in the same round trip.

        Returns:
            ``(tensordict, root_next)`` as :meth:`EnvBase.step_and_maybe_reset`.
        """
        self._check_batch(tensordict, "step_and_maybe_reset()")
        if peek_step_mask(tensordict) is not None:  # a partial step: the generic path
            return super().step_and_maybe_reset(tensordict)
        if self.run_type_checks:
            self.check_action(tensordict)
        self._ensure_started()
        try:
            self._write_inputs(tensordict)
        except KeyError:
            self._raise_missing_action(tensordict)
            raise
        reset_workers = self._do_step_and_maybe_reset()
        self.__dict__["_pending_promote"] = reset_workers  # per step: not nn.Module.__setattr__
        next_td = self._read(self._next_td)
        tensordict.set("next", next_td)
        root_next = self._root_next(tensordict, next_td)
        if reset_workers:
            idx = torch.tensor(reset_workers)
            reset_bufs = self._shm_buffers.reset
            for key in self._layout.reset_keys:
                value = root_next.get(key, None)
                value = self._shm_buffers.out[key] if value is None else value
                value = value.clone()
                value[idx] = reset_bufs[key][idx].to(value.device)
                root_next.set(key, value)
        return tensordict, root_next

    def _root_next(self, tensordict: TensorDictBase, next_td: TensorDictBase) -> TensorDictBase:
        """``step_mdp(tensordict)``; built directly when every entry is a plain tensor."""
        excluded = self._not_carried
        entries = {}
        if excluded is not None:
            for source in (tensordict, next_td):
                for key, value in source.items():
                    if key in excluded:
                        continue
                    if isinstance(value, TensorDictBase):
                        excluded = None
                        break
                    entries[key] = value
                if excluded is None:
                    break
        if excluded is None:
            return step_mdp(
                tensordict,
                keep_other=True,
                exclude_action=False,
                reward_keys=self.reward_keys,
                action_keys=self.action_keys,
            )
        return TensorDict._new_unsafe(
            entries, batch_size=tensordict.batch_size, device=tensordict.device
        )

    def rollout_kernel(self) -> RolloutKernel:
        """:class:`~rl.envs._batched._kernel.BatchedKernel`: the rollout reads and writes
        the shared buffers directly (the env's ``_step`` / ``reset`` for a device copy or
        type checks)."""
        if self._to_device or self.run_type_checks:
            return super().rollout_kernel()
        return BatchedKernel(self)

    def to(self, *args, **kwargs) -> BatchedEnvBase:
        """Casts buffers / parameters; the device is fixed at construction (``device=``).

        Raises:
            NotImplementedError: a device other than the env's.
        """
        device, *_ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None and torch.device(device) != torch.device(self.device or "cpu"):
            raise NotImplementedError(
                f"{type(self).__name__}.to({device}) is not supported: the shared buffers "
                f"live on {self.device or 'cpu'}; build the env with device={str(device)!r}"
            )
        return super().to(*args, **kwargs)

    def __reduce__(self):
        """Pickles the construction arguments: the copy builds its own sub-envs."""
        return _rebuild, (type(self), self.num_workers, self._creators, self._init_kwargs)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, "
            f"batch_size={self.batch_size}, device={self.device})"
        )
