"""The rollout kernel of :class:`TransformedEnv` (see :mod:`rl.envs.engine`).

The base env's own kernel steps the simulator into buffers of raw outputs; at each step
the transforms' ordinary ``_step`` runs on a TensorDict of zero-copy views of them, and
their ``_reset`` where an episode restarted, exactly as ``TransformedEnv._step`` /
``reset`` do. Only transforms that leave the done flags and the actions alone and never
talk to the env are eligible (``Transform._rollout_safe``): the base kernel then resets
exactly when the step-by-step loop would.

Those transforms also declare a whole-rollout shortcut (``Transform._transform_rollout``):
a rollout without a policy or a callback runs the base kernel straight into the
engine's buffers and maps the whole ``[*B, T]`` trajectory at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensordict import TensorDict, TensorDictBase

from .._env_base import _merge_partial_reset
from ..engine import RolloutBuffers, RolloutKernel
from ..engine._buffers import StepViews, patched

if TYPE_CHECKING:
    from ._base import Transform
    from ._env import TransformedEnv

__all__ = ["TransformKernel"]


class TransformKernel(RolloutKernel):
    """Runs ``env``'s transforms over the ``base`` kernel of its base env.

    Args:
        env: the TransformedEnv.
        base: the kernel of ``env.base_env``.
        transforms: ``env``'s transforms, flattened.
        raw_root: the base env's outputs of the reset that started the rollout (what the
            whole-rollout shortcut starts from), or ``None`` (the transforms then run
            at each step).
    """

    def __init__(
        self,
        env: TransformedEnv,
        base: RolloutKernel,
        transforms: list[Transform],
        raw_root: TensorDictBase | None,
    ) -> None:
        self.env, self.base, self.transforms = env, base, transforms
        self.uses_begin = base.uses_begin
        self.raw_root = raw_root
        self.reads_root = raw_root is None

    def accepts(self, tensordict: TensorDictBase) -> bool:
        return self.base.accepts(tensordict)

    def start(self, buffers, tensordict, actions, *, eager, stops):
        self.lazy = not eager
        if self.lazy:  # the base kernel writes the engine's buffers; mapped at the end
            self.initial = tensordict
            root = self.base.start(buffers, self.raw_root, actions, eager=False, stops=stops)
            # the engine calls the base kernel's methods itself (no layer per step)
            self.begin, self.step, self.reset = self.base.begin, self.base.step, self.base.reset
            return self.raw_root if root is None else root
        self.raw = RolloutBuffers(buffers.batch_size, buffers.max_steps, buffers.device)
        self.base.start(self.raw, tensordict, actions, eager=True, stops=stops)
        self.batch_size = buffers.batch_size
        self.raw_keys = list(self.raw.next)
        self.flat = all(type(key) is str for key in self.raw_keys)
        self.views = StepViews(list(self.raw.next.values()), buffers.nb, buffers.max_steps)
        return None

    def begin(self, t: int, tensordict) -> None:
        self.base.begin(t, tensordict)

    def step(self, t: int, tensordict):
        result = self.base.step(t, tensordict)
        if self.lazy:
            return result
        if isinstance(result, TensorDictBase):
            raw = result
        elif self.flat:
            entries = dict(zip(self.raw_keys, self.views[t]))
            raw = TensorDict._new_unsafe(entries, batch_size=self.batch_size)
        else:
            raw = TensorDict({}, batch_size=self.batch_size)
            for key, value in zip(self.raw_keys, self.views[t]):
                raw.set(key, value)
        self.base_done = result
        return self.env.transform._step(tensordict, raw)

    def reset(self, t: int, done, tensordict):
        if self.lazy:
            return self.base.reset(t, done, tensordict)
        entries = self.base.reset(t, self.base_done, tensordict)
        raw = TensorDict({}, batch_size=self.batch_size)
        idx = (slice(None),) * len(self.batch_size) + (t - 1,)
        for key, value in entries.items():
            previous = self.raw.next.get(key)
            previous = tensordict.get(key) if previous is None else previous[idx]
            raw.set(key, patched(previous, value))
        # EnvBase.reset of the TransformedEnv with a "_reset" mask, on the raw reset
        mask = done.clone()
        tensordict.set("_reset", mask)
        td_reset = self.env.transform._reset(tensordict, raw)
        nb = len(self.batch_size)
        if nb and not self.env._reset_keeps_unmasked and not bool(mask.all()):
            _merge_partial_reset(td_reset, tensordict, mask, nb)
        if td_reset is not tensordict:
            tensordict.update(td_reset)
        if "_reset" in tensordict.keys():
            tensordict.del_("_reset")
        return tensordict

    def shared_next(self):
        # the base kernel's raw outputs, which a transform may pass through unchanged
        return None if self.lazy else (self.raw_keys, self.views)

    def finish(self, steps: int) -> None:
        self.base.finish(steps)

    def output(self, rollout: TensorDictBase) -> TensorDictBase:
        if not self.lazy:
            return rollout
        rollout = self.base.output(rollout)
        for transform in self.transforms:
            rollout = transform._transform_rollout(rollout, self.initial)
        return rollout
