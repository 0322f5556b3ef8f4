"""The rollout of heterogeneous data (lazy stacks), which preallocated buffers cannot hold.

Every other rollout runs the engine (:mod:`rl.envs.engine`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tensordict import LazyStackedTensorDict, TensorDictBase

from ._td_utils import _as_tuple
from .engine import declared_any_done

if TYPE_CHECKING:
    from ._env_base import EnvBase

__all__ = ["is_lazy", "rollout_stacked"]


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
    stop_when: Callable[[], bool] | None = None,
) -> TensorDictBase:
    """The rollout of heterogeneous data (lazy stacks): one tensordict per step, stacked.

    Entries that differ in shape between sub-envs (or agents) cannot go into
    preallocated ``[*B, T, ...]`` buffers: each step's tensordict is kept and they are
    stacked along the time dim at the end (lazily where they differ), as TorchRL does.
    ``stop_when`` as in :func:`rl.envs.engine.run_rollout`.
    """
    from ._utils import step_mdp

    nb = tensordict.batch_dims
    done_key = env.done_key
    td = tensordict
    steps: list[TensorDictBase] = []
    seen_done = None
    # an env that declares a constant any_done (an imagination env: False) is asked it
    # once, traced or not: no branch on data; other envs read ``done_key`` at each step
    declared = declared_any_done(env, tensordict)
    next_done_key = ("next", *_as_tuple(done_key))
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
        done = td.get(next_done_key)
        any_done = bool(done.any()) if declared is None else declared
        if any_done and break_when_any_done:
            break
        if break_when_all_done:
            seen_done = done.clone() if seen_done is None else seen_done | done
            if bool(seen_done.all()):
                break
        if t == max_steps - 1:
            break
        if stop_when is not None and stop_when():
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
