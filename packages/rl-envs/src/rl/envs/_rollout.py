"""The generic preallocated rollout loop of :class:`~rl.envs.EnvBase`.

It only uses the subclass contract (``_step``, ``reset`` with a ``"_reset"`` mask and the
specs), so ``TransformedEnv``, ``SerialEnv`` and ``ParallelEnv`` share it. The output
buffers are allocated after the first step (when the keys written by the policy and the
env are known) and each step is copied into them; no per-step TensorDict is
built or stacked. Buffers are laid out ``[*B, T, ...]`` from the start (no transposition
at the end). Root entries that are carried over from the previous ``"next"``
(observations, done flags) are not copied per step: they are filled from the ``"next"``
buffers in one copy at the end, except where a reset (or the policy) replaced them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from ._partial_step import peek_step_mask, step_masked
from ._utils import _merge_plain

if TYPE_CHECKING:
    from ._common import EnvBase

__all__ = ["rollout_generic", "rollout_stacked", "build_output", "presample_actions", "is_lazy"]


def presample_actions(
    env: EnvBase, max_steps: int, extra: tuple = ()
) -> list[tuple[Any, torch.Tensor]]:
    """Draws the random actions of all steps at once: ``[(key, tensor[T, *B, *F])]``.

    ``extra``: leading batch dims of the input beyond the env's (non batch-locked envs).
    """
    actions = env.full_action_spec.rand((max_steps, *extra))
    return [(key, actions[key]) for key in actions.keys(True, True)]


def _alloc(value: torch.Tensor, nb: int, max_steps: int) -> torch.Tensor:
    shape = (*value.shape[:nb], max_steps, *value.shape[nb:])
    return torch.empty(shape, dtype=value.dtype, device=value.device)


def build_output(
    root: dict,
    nxt: dict,
    batch_size: torch.Size,
    steps: int,
    device,
    time_dim: int,
) -> TensorDictBase:
    """Assembles ``{key: buffer}`` dicts into the ``[*B, T]`` rollout TensorDict.

    ``time_dim`` is where the buffers hold time: ``0`` (time-first buffers, moved to
    ``len(batch_size)`` here) or ``len(batch_size)`` (already laid out ``[*B, T]``).
    """
    nb = len(batch_size)

    def layout(buf: torch.Tensor) -> torch.Tensor:
        if buf.shape[time_dim] != steps:
            buf = buf.narrow(time_dim, 0, steps)
        if time_dim != nb:
            buf = buf.movedim(time_dim, nb).contiguous()
        return buf

    out = TensorDict({}, batch_size=(*batch_size, steps), device=device)
    for key, buf in root.items():
        out.set(key, layout(buf))
    next_td = TensorDict({}, batch_size=(*batch_size, steps), device=device)
    for key, buf in nxt.items():
        next_td.set(key, layout(buf))
    out.set("next", next_td)
    return out


def _flat_leaves(td: TensorDictBase) -> dict:
    """``{key: tensor}`` of the leaves of ``td``, keyed as ``td.keys(True, True)`` names
    them. Plain TensorDicts of tensors are walked through their dicts (a fraction of the
    cost of one ``td.get`` per key); anything else goes through ``items``."""
    out: dict = {}
    if type(td) is TensorDict and _walk(td, (), out):
        return out
    return dict(td.items(True, True))


def _walk(td: TensorDict, path: tuple, out: dict) -> bool:
    for name, value in td._tensordict.items():
        if type(value) is TensorDict:
            if not _walk(value, (*path, name), out):
                return False
        elif isinstance(value, torch.Tensor):
            out[(*path, name) if path else name] = value
        else:  # a tensorclass, a lazy stack, non-tensor data: the generic path
            return False
    return True


def _write_step(slots, t: int, srcs: list, writes: list, views: bool, idx: tuple) -> bool:
    """Copies step ``t``'s values into their buffers; returns whether views still serve.

    One ``_foreach_copy_`` into the step's views, unless a value needs grad: views made by
    ``unbind`` cannot be written in place by autograd, so from then on the rollout writes
    ``buf[idx] = value`` (gradients flow through the rollout, as before).
    """
    if views and torch.is_grad_enabled() and any(v.requires_grad for v in srcs):
        views = False
    if views:
        torch._foreach_copy_(slots[t], srcs)
    else:
        for (_, buf), value in zip(writes, srcs):
            buf[idx] = value
    return views


class _Slots:
    """The per-step views ``buf[..., t, ...]`` of a list of ``[*B, T, ...]`` buffers, made
    in chunks of steps by ``unbind`` (one call per buffer and chunk, not one indexing per
    buffer and step); ``slots[t]`` is the tuple of step ``t``'s views, in buffer order."""

    CHUNK = 32

    def __init__(self, bufs: list, nb: int, steps: int) -> None:
        self.bufs, self.nb, self.steps = bufs, nb, steps
        self.start, self.views = 0, []

    def __getitem__(self, t: int) -> tuple:
        i = t - self.start
        if not 0 <= i < len(self.views):
            size = min(self.CHUNK, self.steps - t)
            chunks = [buf.narrow(self.nb, t, size).unbind(self.nb) for buf in self.bufs]
            self.start, self.views, i = t, list(zip(*chunks)), 0
        return self.views[i]


def rollout_generic(
    env: EnvBase,
    max_steps: int,
    tensordict: TensorDictBase,
    *,
    policy: Callable[[TensorDictBase], TensorDictBase] | None,
    callback: Callable[[EnvBase, TensorDictBase], Any] | None,
    break_when_any_done: bool,
    break_when_all_done: bool,
    skip_first_policy: bool = False,
) -> TensorDictBase:
    """Steps ``env`` up to ``max_steps`` times from ``tensordict`` (already reset).

    ``skip_first_policy``: ``tensordict`` already went through ``policy`` for step 0.
    """
    batch_size = tensordict.batch_size  # env.batch_size, or more when not batch-locked
    nb = len(batch_size)
    prefix = (slice(None),) * nb
    done_key = env.done_key
    reward_keys = set(env.reward_keys)
    reward_drop = {(k,) if isinstance(k, str) else tuple(k) for k in reward_keys}
    extra = batch_size[: nb - len(env.batch_size)]
    actions = presample_actions(env, max_steps, extra) if policy is None else None
    complete_done = False
    td = tensordict
    root_bufs: dict = {}
    next_bufs: dict = {}
    root_writes: list = []  # root entries copied at every step
    root_carried: list = []  # root entries equal to the previous "next" ones
    next_writes: list = []
    carry_keys: list = []
    carried: dict = {}  # key -> the tensor object set in the root by the last carry
    overrides: list = []  # (t, key, value): carried root entries replaced by a reset/policy
    seen_done = None
    views = True  # steps are written through per-step views (until a value needs grad)
    root_has_next = False
    steps = max_steps
    for t in range(max_steps):
        if actions is None:
            if t > 0 or not skip_first_policy:
                out_td = policy(td)
                if out_td is not None:
                    td = out_td
        else:
            for key, value in actions:
                td.set(key, value[t])
        next_preset = td.get("next", None) if t == 0 or root_has_next else None
        partial = peek_step_mask(td)
        try:
            if partial is None:
                next_td = env._step(td)
            else:  # a "_step" mask written by the policy (as env.step would take it)
                td.del_("_step")
                next_td = step_masked(env, td, partial)
        except KeyError:
            env._raise_missing_action(td)
            raise
        if next_preset is not None:
            for key in next_preset.keys(True, True):
                if key not in next_td.keys(True, True):
                    next_td.set(key, next_preset[key])
            td.del_("next")
        if t == 0:
            keys = next_td.keys(True, True)
            complete_done = not all(key in keys for key in env.done_keys)
        if complete_done:  # _step leaves out done entries (TorchRL fills them)
            env._complete_done(next_td)
        if t == 0:
            root_has_next = next_preset is not None
            nested = {
                **{k: v for k, v in _nested_batch_dims(td, nb).items() if k[0] != "next"},
                **{("next", *k): v for k, v in _nested_batch_dims(next_td, nb).items()},
            }
            presampled = dict(actions) if actions is not None else {}
            for key in next_td.keys(True, True):
                buf = _alloc(next_td[key], nb, max_steps)
                next_bufs[key] = buf
                next_writes.append((key, buf))
                if key not in reward_keys:
                    carry_keys.append(key)
            for key in td.keys(True, True):
                if key == "_reset":
                    continue
                if key in presampled:
                    value = presampled[key]
                    root_bufs[key] = value.movedim(0, nb).contiguous() if nb else value
                    continue
                buf = _alloc(td[key], nb, max_steps)
                buf[(*prefix, 0)] = td[key]
                root_bufs[key] = buf
                if key in next_bufs and key not in reward_keys:
                    root_carried.append((key, buf))
                else:
                    root_writes.append((key, buf))
            idx = (*prefix, 0)
            # a root buffer written with grad at step 0: no views (see _write_step)
            views = not any(buf.requires_grad for buf in root_bufs.values())
            root_slots = _Slots([buf for _, buf in root_writes], nb, max_steps)
            next_slots = _Slots([buf for _, buf in next_writes], nb, max_steps)
            next_flat = _flat_leaves(next_td)
            srcs = [next_flat[key] for key, _ in next_writes]
            views = _write_step(next_slots, 0, srcs, next_writes, views, idx)
        else:
            idx = (*prefix, t)
            root_flat = _flat_leaves(td)
            for key, _ in root_carried:
                value = root_flat[key]
                if value is not carried[key]:
                    overrides.append((t, key, value.clone()))
            if root_writes:
                srcs = [root_flat[key] for key, _ in root_writes]
                views = _write_step(root_slots, t, srcs, root_writes, views, idx)
            next_flat = _flat_leaves(next_td)
            try:
                srcs = [next_flat[key] for key, _ in next_writes]
            except KeyError:
                # next_writes holds every done key (step 0 was completed): reading them
                # all proves a step complete, so only a step lacking one pays the check
                complete_done = True  # this env leaves a flag out on some steps
                env._complete_done(next_td)
                next_flat = _flat_leaves(next_td)
                srcs = [next_flat[key] for key, _ in next_writes]
            views = _write_step(next_slots, t, srcs, next_writes, views, idx)
        if callback is not None:
            td.set("next", next_td)
            callback(env, td)
            td.del_("next")
        done = next_flat[done_key]
        any_done = bool(done.any())
        if any_done and break_when_any_done:
            steps = t + 1
            break
        if break_when_all_done:
            seen_done = done.clone() if seen_done is None else seen_done | done
            if bool(seen_done.all()):
                steps = t + 1
                break
        if t == max_steps - 1:
            break
        # the next root: the step's "next" entries (but the rewards) over the current root
        entries = None
        if type(td) is TensorDict and type(next_td) is TensorDict:
            entries = _merge_plain(next_td, td, reward_drop, set(), set(), ())
        if entries is not None:
            td = TensorDict._new_unsafe(
                entries, batch_size=td.batch_size, device=td.device, nested=False
            )
            carried = {key: next_flat[key] for key in carry_keys}
        else:
            for key in carry_keys:
                value = next_flat[key]
                td.set(key, value)
                carried[key] = value
        if any_done:
            td.set("_reset", done.clone())
            td = env.reset(td)
            for key, _ in root_carried:
                value = td[key]
                if value is not carried[key]:
                    overrides.append((t + 1, key, value.clone()))
                    carried[key] = value
    for key, buf in root_carried:
        if steps > 1:
            buf[(*prefix, slice(1, steps))] = next_bufs[key][(*prefix, slice(0, steps - 1))]
    for t, key, value in overrides:
        root_bufs[key][(*prefix, t)] = value
    out = build_output(root_bufs, next_bufs, batch_size, steps, env.device, nb)
    if nested:
        _restore_nested_batch(out, nested, nb)
    return out


def _nested_batch_dims(td: TensorDictBase, nb: int, prefix: tuple = ()) -> dict:
    """``{path: extra batch dims}`` of the sub-tensordicts batched beyond ``[*B]``."""
    found = {}
    for name, value in td.items():
        if isinstance(value, TensorDictBase):
            path = (*prefix, name)
            if value.batch_dims > nb:
                found[path] = value.batch_size[nb:]
            found.update(_nested_batch_dims(value, nb, path))
    return found


def _restore_nested_batch(out: TensorDictBase, nested: dict, nb: int) -> None:
    """Gives the rollout's groups (``("agents", ...)``) their ``[*B, T, n_agents]`` batch."""
    for path, extra in sorted(nested.items(), key=lambda item: len(item[0])):
        sub = out.get(path, None)
        if sub is not None:
            sub.batch_size = (*sub.batch_size[: nb + 1], *extra)


def is_lazy(tensordict: TensorDictBase) -> bool:
    """Whether ``tensordict`` is (or holds) a lazy stack: heterogeneous data."""
    if isinstance(tensordict, LazyStackedTensorDict):
        return True
    return any(
        isinstance(value, LazyStackedTensorDict)
        for value in tensordict.values(include_nested=True)
        if isinstance(value, TensorDictBase)
    )


def rollout_stacked(
    env: EnvBase,
    max_steps: int,
    tensordict: TensorDictBase,
    *,
    policy: Callable[[TensorDictBase], TensorDictBase] | None,
    callback: Callable[[EnvBase, TensorDictBase], Any] | None,
    break_when_any_done: bool,
    break_when_all_done: bool,
) -> TensorDictBase:
    """The rollout of heterogeneous data (lazy stacks): one tensordict per step, stacked.

    Entries that differ in shape between sub-envs (or agents) cannot go into
    preallocated ``[*B, T, ...]`` buffers: each step's tensordict is kept and they are
    stacked along the time dim at the end (lazily where they differ), as TorchRL does.
    """
    from ._utils import step_mdp

    nb = tensordict.batch_dims
    done_key = env.done_key
    td = tensordict
    steps: list[TensorDictBase] = []
    seen_done = None
    for t in range(max_steps):
        if policy is None:
            td = env.rand_action(td)
        else:
            out_td = policy(td)
            if out_td is not None:
                td = out_td
        td = env.step(td)
        steps.append(td)
        if callback is not None:
            callback(env, td)
        done = td.get(("next", *((done_key,) if isinstance(done_key, str) else done_key)))
        any_done = bool(done.any())
        if any_done and break_when_any_done:
            break
        if break_when_all_done:
            seen_done = done.clone() if seen_done is None else seen_done | done
            if bool(seen_done.all()):
                break
        if t == max_steps - 1:
            break
        td = step_mdp(
            td,
            keep_other=True,
            exclude_action=False,
            reward_keys=env.reward_keys,
            action_keys=env.action_keys,
        )
        if any_done:
            td.set("_reset", done.clone())
            td = env.reset(td)
    return LazyStackedTensorDict.maybe_dense_stack(steps, nb)
