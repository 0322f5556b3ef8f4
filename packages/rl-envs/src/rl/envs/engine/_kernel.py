"""The back-end seam of the rollout engine: :class:`RolloutKernel`, and :class:`EnvKernel`,
the kernel of any env (its ``_step`` and ``reset``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDictBase

from .._partial_step import peek_step_mask, step_masked
from .._td_utils import terminated_or_truncated

if TYPE_CHECKING:
    from .._env_base import EnvBase
    from ._buffers import RolloutBuffers

__all__ = ["BufferKernel", "EnvKernel", "RolloutKernel"]


class RolloutKernel:
    """What the rollout engine asks of a back-end: step into preallocated views, reset a
    masked subset.

    The engine (:func:`~rl.envs.engine.run_rollout`) owns the time loop, the policy, the
    carrying of ``"next"`` into the next root, the resets' bookkeeping, the early stops and
    the output; a kernel only moves its simulator. A simulator back-end implements one
    kernel and returns it from its env's :meth:`~rl.envs.EnvBase.rollout_kernel`.

    A kernel either writes each step into the ``"next"`` buffers it allocated in
    :meth:`start` and returns the step's done flags, or returns the step's ``"next"``
    TensorDict for the engine to record (:class:`EnvKernel` does: its outputs are only
    known once the env has stepped).

    Attributes:
        reads_root: whether :meth:`step` reads the root TensorDict of each step. When it
            does not, and no policy or callback runs, the engine never builds one (random
            actions are presampled into the action buffers, read by the kernel).
        root_inputs: the root entries :meth:`step` reads besides the actions, or ``None``
            (any). With a policy given as a tensor twin, the other carried entries are
            not kept in the root at each step.
        uses_begin: whether the kernel implements :meth:`begin` (declared, so that the
            engine never calls an empty one per step).
    """

    reads_root: bool = True
    #: the root entries :meth:`step` reads besides the actions (``None``: any of them)
    root_inputs: tuple | None = None
    #: whether :meth:`begin` does anything (the engine calls it at each step only then)
    uses_begin: bool = False

    def accepts(self, tensordict: TensorDictBase) -> bool:
        """Whether the kernel takes the first root (after the policy's first call): a
        policy writing ``"next"`` entries or a ``"_step"`` mask needs :class:`EnvKernel`.
        Asked once, before the env moved."""
        return True

    def start(
        self,
        buffers: RolloutBuffers,
        tensordict: TensorDictBase,
        actions: list | None,
        *,
        eager: bool,
        stops: bool,
    ) -> TensorDictBase | None:
        """Prepares a rollout; may return the root of step 0 to record instead of
        ``tensordict`` (a kernel whose buffers hold data below the env's, mapped by
        :meth:`output`).

        Args:
            buffers: the rollout's buffers (``buffers.next_buffer`` allocates outputs).
            tensordict: the root of step 0 (reset observations and flags, and what the
                policy wrote at step 0).
            actions: ``[(key, [*B, T, ...] buffer)]`` of presampled random actions, or
                ``None`` (the policy writes them into the root at each step).
            eager: the engine keeps a root TensorDict at every step (a policy or a
                callback runs, or the kernel reads it); ``step`` gets it.
            stops: the rollout may stop early (``break_when_any/all_done``).
        """

    def begin(self, t: int, tensordict: TensorDictBase | None) -> None:
        """Optional: starts step ``t`` (sends the action to workers); the engine records
        the root of step ``t`` while they step, then calls :meth:`step`."""

    def step(self, t: int, tensordict: TensorDictBase | None) -> Any:
        """Takes step ``t`` from the root ``tensordict`` (``None`` when not eager).

        Returns:
            the done flags of the step (a bool, a numpy / torch bool array of shape
            ``[*B]`` or ``[*B, 1]``; ``False`` where no sub-env is done) after writing
            row ``t`` of the ``"next"`` buffers; or
            the step's ``"next"`` TensorDict, which the engine records.
        """
        raise NotImplementedError

    def reset(self, t: int, done: Any, tensordict: TensorDictBase | None) -> Any:
        """Resets the sub-envs ``done`` (as :meth:`step` returned it) before step ``t``.

        Returns:
            a dict of the root entries of step ``t`` the reset set, each a value of shape
            ``[*B, ...]`` or ``(rows, values)``: the step's ``"next"`` value with the
            ``rows`` (an index of the batch dims, ``()`` for an unbatched env) replaced
            by ``values`` (numpy or torch); or, for a kernel that reads the root, the
            root TensorDict after the reset.
        """
        raise NotImplementedError

    def completed(self, next_td: TensorDictBase) -> None:
        """A ``"next"`` TensorDict :meth:`step` returned lacks an entry step 0 had: fill
        it (``EnvKernel`` completes done flags from the spec) or raise a ``KeyError``."""
        present = sorted(map(str, next_td.keys(True, True)))
        raise KeyError(f"a step's output lacks an entry of the first step's; it has {present}")

    def shared_next(self) -> tuple[list, Any] | None:
        """Optional, for a kernel whose :meth:`step` returns a TensorDict: ``(keys, views)``,
        where ``views[t]`` (a :class:`~rl.envs.engine.StepViews`) is the tuple of row-``t``
        views of ``[*B, T, ...]`` buffers that step ``t`` filled with the values of ``keys``.

        An entry of a step's TensorDict that is that very view object is already recorded:
        the engine makes the buffer its own and does not copy the entry (a transform that
        passes the base env's output through costs no write). From the first step where
        the entry is another tensor, the engine records it in a buffer of its own.
        Asked once, after step 0; the kernel never writes those buffers again after step
        ``t`` (they hold its raw outputs)."""
        return None

    def finish(self, steps: int) -> None:
        """Called once after the last step (``steps`` were taken): leave the env where a
        step-by-step loop would have left it."""

    def output(self, rollout: TensorDictBase) -> TensorDictBase:
        """Maps the assembled ``[*B, T]`` rollout (a whole-rollout transform)."""
        return rollout


class EnvKernel(RolloutKernel):
    """The kernel of any :class:`~rl.envs.EnvBase`: its ``_step`` on the root at each step,
    its ``reset`` with a ``"_reset"`` mask. It follows ``env.step`` (partial steps with a
    ``"_step"`` mask, ``"next"`` entries written by the policy, done flags completed from
    the spec) without building the step's output twice."""

    reads_root = True

    def __init__(self, env: EnvBase) -> None:
        self.env = env
        self._root_has_next = False
        self.complete = False

    def start(self, buffers, tensordict, actions, *, eager, stops) -> None:
        self._root_has_next = False
        self.complete = False

    def step(self, t: int, tensordict: TensorDictBase) -> TensorDictBase:
        env = self.env
        preset = tensordict.get("next", None) if t == 0 or self._root_has_next else None
        partial = peek_step_mask(tensordict)
        try:
            if partial is None:
                next_td = env._step(tensordict)
            else:  # a "_step" mask written by the policy (as env.step would take it)
                tensordict.del_("_step")
                next_td = step_masked(env, tensordict, partial)
        except KeyError:
            env._raise_missing_action(tensordict)
            raise
        if preset is not None:
            keys = set(next_td.keys(True, True))
            for key in preset.keys(True, True):
                if key not in keys:
                    next_td.set(key, preset[key])
            tensordict.del_("next")
        if t == 0:
            self._root_has_next = preset is not None
            keys = set(next_td.keys(True, True))
            self.complete = not all(key in keys for key in env.done_keys)
        if self.complete:  # _step leaves done entries out (TorchRL fills them)
            env._complete_done(next_td)
        return next_td

    def completed(self, next_td: TensorDictBase) -> None:
        """A step lacked a done entry that step 0 had: fill it, and from now on."""
        self.complete = True
        self.env._complete_done(next_td)

    def reset(self, t: int, done: torch.Tensor, tensordict: TensorDictBase) -> TensorDictBase:
        env = self.env
        keys = env.reset_keys
        if len(keys) == 1 and keys[0] == "_reset":
            tensordict.set("_reset", done.clone())
        else:  # one mask per group of done flags (("agents", "_reset")), as TorchRL
            terminated_or_truncated(tensordict, full_done_spec=env.full_done_spec)
        return env.reset(tensordict)


class BufferKernel(RolloutKernel):
    """Base of the kernels that write their simulator's outputs into the engine's
    ``"next"`` buffers themselves (gym, EnvPool, the batched envs).

    Such a kernel never reads the root (actions come presampled or through
    :meth:`begin` / :meth:`step`'s root argument), leaves a first root that carries
    ``"next"`` entries or a ``"_step"`` mask to :class:`EnvKernel`, and may share the
    reward and done-flag buffers (:meth:`flag_buffers`), the entries of a reset
    (:meth:`reset_entries`) and the ``done = terminated | truncated`` of :meth:`finish`.
    """

    reads_root = False
    root_inputs = ()
    flag_prefix: tuple | None = None  # set by flag_buffers

    def __init__(self, env: EnvBase) -> None:
        self.env = env

    def accepts(self, tensordict: TensorDictBase) -> bool:
        return "next" not in tensordict.keys() and peek_step_mask(tensordict) is None

    def flag_buffers(
        self,
        buffers: RolloutBuffers,
        reward_shape: tuple = (1,),
        reward_dtype: torch.dtype = torch.float32,
    ) -> None:
        """Allocates the ``"next"`` reward (``[*B, T, *reward_shape]``), ``done``,
        ``terminated`` and ``truncated`` (``[*B, T, 1]``) buffers and keeps numpy views of
        them as ``rew``, ``done``, ``term`` and ``trunc`` (written at ``[*B, t]``): the
        flags and a ``(1,)`` reward without their last dim, a vector reward (one entry per
        objective) whole, in ``reward_dtype``."""
        self.flag_prefix = (slice(None),) * buffers.nb
        reward_shape = tuple(reward_shape)
        rew = buffers.next_buffer("reward", reward_shape, reward_dtype).numpy()
        self.rew = rew[..., 0] if reward_shape == (1,) else rew
        self.done, self.term, self.trunc = (
            buffers.next_buffer(key, (1,), torch.bool).numpy()[..., 0]
            for key in ("done", "terminated", "truncated")
        )

    def reset_entries(self, idx, arrays: list) -> dict:
        """The root entries of a reset (see :meth:`RolloutKernel.reset`): the rows ``idx``
        of the observations ``obs_keys`` replaced by ``arrays`` (one per key), the done
        flags cleared."""
        entries = {key: (idx, rows) for key, rows in zip(self.obs_keys, arrays)}
        cleared = (idx, False)
        entries["done"] = entries["terminated"] = entries["truncated"] = cleared
        return entries

    def finish(self, steps: int) -> None:
        """``done = terminated | truncated`` over the steps taken (with :meth:`flag_buffers`)."""
        if self.flag_prefix is None:
            return
        rows = (*self.flag_prefix, slice(0, steps))
        np.logical_or(self.term[rows], self.trunc[rows], out=self.done[rows])
