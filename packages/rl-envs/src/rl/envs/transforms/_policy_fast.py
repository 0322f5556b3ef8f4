"""The policy rollout fast path of :class:`TransformedEnv` over a gym env.

The base gym env runs its own policy fast path (gymnasium stepped directly, outputs
written with numpy into preallocated buffers). :class:`TransformedPolicyActions` plugs
into it as the per-step action source: before step ``t`` it reads the raw outputs of step
``t - 1`` from those buffers (zero-copy views), runs the transforms' ``_step`` on them and
their ``_reset`` where an episode restarted, exactly as the generic loop does, and calls
the policy on the transformed root. It records what the generic loop records: the
transformed ``"next"`` entries that differ from the raw ones, the entries the policy
writes, and the root entries replaced by a reset or by the policy; the raw entries come
from the base env's buffers, untouched.

Only transforms that leave the done flags and the actions alone and that never talk to
the env are eligible (``Transform._rollout_safe``): the base loop then resets exactly
when the generic loop would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from .._common import _merge_partial_reset
from .._gym_policy import PolicyActions
from .._rollout import build_output
from ._spec_utils import tget
from ._utils import carry_preset

if TYPE_CHECKING:
    from .._gym import GymWrapper
    from ._env import TransformedEnv

__all__ = ["PolicyDriver", "TransformedPolicyActions", "UseTransformedLoop"]

_RAW_FLAGS = ("done", "terminated", "truncated")


class UseTransformedLoop(Exception):
    """Raised before the env moved: the TransformedEnv runs its generic loop instead.

    Args:
        driver: the :class:`PolicyDriver` of the rollout that gives up.
        tensordict: the root after the policy's first call (``None``: not called yet).
    """

    def __init__(self, driver: PolicyDriver, tensordict: TensorDictBase | None) -> None:
        super().__init__("the transformed policy rollout needs the generic loop")
        self.driver = driver
        self.tensordict = tensordict


class PolicyDriver:
    """Passed as the ``policy`` of the base env's fast path; carries the real policy.

    The base fast path builds its action source with ``_rl_policy_actions``. If the base
    env runs its own generic loop instead, that loop calls the driver on a raw root before
    its first step: the driver then raises :class:`UseTransformedLoop`.
    """

    _rl_policy_actions = None  # set below (the class is defined after this one)

    def __init__(
        self,
        env: TransformedEnv,
        policy: Callable[[TensorDictBase], TensorDictBase],
        tensordict: TensorDictBase,
    ) -> None:
        self.env = env
        self.policy = policy
        self.root = tensordict
        self.actions: TransformedPolicyActions | None = None

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise UseTransformedLoop(self, None)


class TransformedPolicyActions(PolicyActions):
    """``actions[t]`` for a TransformedEnv: transforms step ``t - 1``, runs the policy."""

    def __init__(
        self,
        env: GymWrapper,
        policy: PolicyDriver,
        tensordict: TensorDictBase,
        next_obs: list[torch.Tensor],
        overrides: list,
        max_steps: int,
        step_outputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    ) -> None:
        super().__init__(env, policy, tensordict, next_obs, overrides, max_steps, step_outputs)
        policy.actions = self
        self.driver = policy
        tenv = policy.env
        self.tenv = tenv
        self.transform = tenv.transform
        self.policy = policy.policy
        self.root = policy.root
        self.batch_size = env.batch_size
        reward, terminated, truncated = step_outputs
        done_np = np.zeros(terminated.shape, dtype=np.bool_)
        self.term_np, self.trunc_np, self.done_np = terminated.numpy(), truncated.numpy(), done_np
        # raw "next" sources of GymWrapper._step, time-first: (key, buffer)
        raw = [(key, buf) for key, buf in self.obs]
        raw.append(("reward", reward.unsqueeze(-1)))
        raw.append(("done", torch.from_numpy(done_np).unsqueeze(-1)))
        raw.append(("terminated", terminated.unsqueeze(-1)))
        raw.append(("truncated", truncated.unsqueeze(-1)))
        self.raw = raw
        self.raw_keys = [key for key, _ in raw]
        self.raw_by_key = dict(raw)
        self.flat = all(isinstance(key, str) for key, _ in raw)
        reward_keys = set(tenv.reward_keys)
        self.reward_keys = reward_keys
        self.done_key = tenv.done_key
        # filled at step 0 / 1 (when the policy's and the transforms' keys are known)
        self.root_bufs: dict = {}  # key -> time-first buffer, row 0 written at step 0
        self.root_writes: list = []  # (key, buf): root entries copied at every step
        self.carried_keys: list = []  # root entries equal to the previous "next" ones
        self.carried: dict = {}
        self.root_overrides_t: list = []  # (t, key, value)
        self.next_keys: list | None = None
        self.next_bufs: dict = {}  # transformed "next" entries that differ from the raw ones
        self.recorded: list = []  # (key, buf): the next_bufs items, copied at every step
        self.unchanged: list = []  # (key, index in raw): raw "next" entries not replaced yet
        self.seen_steps = 0  # "next" rows transformed so far

    # ------------------------------------------------------------------ per step
    def _raw_next(self, s: int) -> tuple[TensorDictBase, list]:
        """The raw ``"next"`` of step ``s`` (what ``GymWrapper._step`` returned)."""
        self.done_np[s] = self.term_np[s] | self.trunc_np[s]
        values = [buf[s] for _, buf in self.raw]
        if self.flat:
            td = TensorDict._new_unsafe(
                dict(zip(self.raw_keys, values)), batch_size=self.batch_size
            )
        else:
            td = TensorDict({}, batch_size=self.batch_size)
            for key, value in zip(self.raw_keys, values):
                td.set(key, value)
        return td, values

    def _transform_next(self, s: int) -> TensorDictBase:
        """Runs the transforms on step ``s`` (as ``TransformedEnv._step``) and records it."""
        root = self.root
        next_td, raw = self._raw_next(s)
        carry_preset(next_td, tget(root, "next"))
        next_td = self.transform._step(root, next_td)
        if s == 0:
            self._discover_next(next_td)
        for key, buf in self.recorded:
            buf[s] = _get(next_td, key)
        replaced = [
            (key, value) for key, i in self.unchanged if (value := _get(next_td, key)) is not raw[i]
        ]
        for key, value in replaced:
            # first step where a transform replaced this raw entry: earlier rows are raw
            buf = torch.empty((self.max_steps, *value.shape), dtype=value.dtype)
            if s:
                buf[:s] = self.raw_by_key[key][:s]
            buf[s] = value
            self.next_bufs[key] = buf
            self.recorded.append((key, buf))
        if replaced:
            self.unchanged = [item for item in self.unchanged if item[0] not in self.next_bufs]
        self.seen_steps = s + 1
        return next_td

    def _discover_next(self, next_td: TensorDictBase) -> None:
        raw_index = {key: i for i, key in enumerate(self.raw_keys)}
        keys = list(next_td.keys(True, True))
        # (key, index of the raw entry or None)
        self.next_keys = [(key, raw_index.get(key)) for key in keys]
        for key in keys:
            if key in raw_index:
                self.unchanged.append((key, raw_index[key]))
            else:
                value = next_td[key]
                buf = torch.empty((self.max_steps, *value.shape), dtype=value.dtype)
                self.next_bufs[key] = buf
                self.recorded.append((key, buf))
        for key, buf in self.root_bufs.items():
            if key in keys and key not in self.reward_keys:
                self.carried_keys.append(key)
            else:
                self.root_writes.append((key, buf))

    def _reset_patch(self, t: int) -> bool:
        """Consumes the base loop's resets of step ``t``; returns whether there were any."""
        patches = self._take_resets(t)
        if not patches:
            return False
        # what GymWrapper._reset returns: the current observations, reset rows fresh
        entries = dict(self._obs_before(t, patches))
        flags = torch.zeros((3, *self.batch_size, 1), dtype=torch.bool).unbind(0)
        entries.update(zip(_RAW_FLAGS, flags))
        raw = TensorDict({}, batch_size=self.batch_size)
        for key, value in entries.items():
            raw.set(key, value)
        self.reset_raw = raw
        return True

    def _reset_root(self, done: torch.Tensor) -> None:
        """``EnvBase.reset`` of the TransformedEnv with a ``"_reset"`` mask, on ``reset_raw``."""
        root = self.root
        mask = done.clone()
        root.set("_reset", mask)
        td_reset = self.transform._reset(root, self.reset_raw)
        tenv = self.tenv
        if self.batch_size and not tenv._reset_keeps_unmasked and not bool(mask.all()):
            _merge_partial_reset(td_reset, root, mask, len(self.batch_size))
        if td_reset is not root:
            root.update(td_reset)
        if "_reset" in root.keys():
            root.del_("_reset")

    def __getitem__(self, t: int):
        if t > 0:
            s = t - 1
            overrides = self.overrides
            reset = (
                self.seen_overrides < len(overrides)
                and overrides[self.seen_overrides][0] == t
                and self._reset_patch(t)
            )
            next_td = self._transform_next(s)
            root = self.root
            carried = self.carried
            for key in self.carried_keys:
                value = _get(next_td, key)
                _set_trusted(root, key, value)
                carried[key] = value
            if reset:
                self._reset_root(next_td[self.done_key])
                for key in self.carried_keys:
                    value = root[key]
                    if value is not carried[key]:
                        self.root_overrides_t.append((t, key, value.clone()))
                        carried[key] = value
        out = self.policy(self.root)
        if out is not None:
            self.root = out
        td = self.root
        if t == 0:
            self._discover_root(td)
        else:
            carried = self.carried
            for key in self.carried_keys:
                value = _get(td, key)
                if value is not carried[key]:
                    self.root_overrides_t.append((t, key, value.clone()))
            for key, buf in self.root_writes:
                buf[t] = _get(td, key)
        return self.env._action_from_td(td)

    def _discover_root(self, td: TensorDictBase) -> None:
        if "next" in td.keys():
            raise UseTransformedLoop(self.driver, td)
        self.tenv._raise_missing_action(td)
        for key in td.keys(True, True):
            if key == "_reset":
                continue
            value = td[key]
            buf = torch.empty((self.max_steps, *value.shape), dtype=value.dtype)
            buf[0] = value
            self.root_bufs[key] = buf

    # ---------------------------------------------------------------------- output
    def finish(self, raw_rollout: TensorDictBase) -> TensorDictBase:
        """The TransformedEnv rollout from the base env's rollout of the same steps."""
        nb = len(self.batch_size)
        steps = raw_rollout.batch_size[nb]
        if self.seen_steps < steps:
            # the last step (no policy call followed it): transform it, no carry
            self._transform_next(steps - 1)
        raw_next = raw_rollout.get("next")
        nxt = {}
        for key, _ in self.next_keys:
            buf = self.next_bufs.get(key)
            nxt[key] = raw_next.get(key) if buf is None else _layout(buf, nb, steps)
        root = {}
        for key, buf in self.root_writes:
            root[key] = _layout(buf, nb, steps)
        prefix = (slice(None),) * nb
        for key in self.carried_keys:
            source = nxt[key]
            value = torch.empty_like(source)
            value[(*prefix, 0)] = self.root_bufs[key][0]
            if steps > 1:
                value[(*prefix, slice(1, steps))] = source[(*prefix, slice(0, steps - 1))]
            root[key] = value
        for t, key, value in self.root_overrides_t:
            if t < steps:
                root[key][(*prefix, t)] = value
        return build_output(root, nxt, self.batch_size, steps, self.tenv.device, nb)


def _get(td: TensorDictBase, key):
    """``td[key]`` (KeyError when absent) without the public method's overhead."""
    value = tget(td, key)
    return td[key] if value is None else value


def _set_trusted(td: TensorDictBase, key, value: torch.Tensor) -> None:
    """``td.set(key, value)`` for a value taken from a tensordict of the same batch size."""
    if type(key) is str and type(td) is TensorDict:
        td._set_str(key, value, inplace=False, validated=True)
    else:
        td.set(key, value)


def _layout(buf: torch.Tensor, nb: int, steps: int) -> torch.Tensor:
    """A time-first buffer as ``[*B, T', ...]``."""
    buf = buf[:steps]
    return buf.movedim(0, nb).contiguous() if nb else buf


PolicyDriver._rl_policy_actions = TransformedPolicyActions
