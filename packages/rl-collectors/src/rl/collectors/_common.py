"""Pieces every collector shares: building the env, wrapping the policy, trajectory ids."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn

from rl.core import Composite, StackedComposite, shape_fits
from rl.envs import EnvBase, StepCounter, TransformedEnv

__all__ = [
    "make_env",
    "auto_wrap_policy",
    "AutoWrappedPolicy",
    "wrap_policy",
    "TrajIds",
    "end_of_traj",
    "traj_end_keys",
    "check_batch_args",
    "check_actions",
    "rng_state",
    "set_rng_state",
    "load_weights",
]


def make_env(
    create_env_fn: EnvBase | Callable[..., EnvBase],
    create_env_kwargs: Mapping[str, Any] | None,
    max_frames_per_traj: int | None,
) -> EnvBase:
    """The collector's env: ``create_env_fn`` itself (an env) or what it returns."""
    if isinstance(create_env_fn, EnvBase):
        if create_env_kwargs:
            raise ValueError(
                "create_env_kwargs were given with an env instance; pass a factory "
                f"(e.g. EnvCreator) to use them, got {dict(create_env_kwargs)!r}"
            )
        env = create_env_fn
    elif callable(create_env_fn):
        env = create_env_fn(**(create_env_kwargs or {}))
        if not isinstance(env, EnvBase):
            raise TypeError(
                f"create_env_fn must return an rl.envs.EnvBase, got {type(env).__name__}"
            )
    else:
        raise TypeError(
            "create_env_fn must be an rl.envs.EnvBase or a callable returning one, "
            f"got {type(create_env_fn).__name__}"
        )
    if max_frames_per_traj is not None and max_frames_per_traj > 0:
        counted = [k for k in env.output_spec.keys(True, True) if "step_count" in _as_tuple(k)]
        if counted:
            raise ValueError(
                f"max_frames_per_traj={max_frames_per_traj} adds a StepCounter, but the env "
                f"already counts steps ({counted[0]!r}): the two limits may conflict. Set "
                "max_frames_per_traj to 0 (or None) or remove the StepCounter from the env"
            )
        env = TransformedEnv(env, StepCounter(max_steps=max_frames_per_traj))
    return env


def _as_tuple(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


class _DevicePolicy(nn.Module):
    """Runs ``policy`` on ``device``: moves the root there and the result back."""

    def __init__(self, policy: Callable, device: torch.device, env_device) -> None:
        super().__init__()
        self.policy = policy
        self.device = device
        self.env_device = env_device

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self.policy(tensordict.to(self.device))
        if out is None:
            raise RuntimeError("a policy on another device must return its output tensordict")
        back = out.to(self.env_device) if self.env_device is not None else out.cpu()
        tensordict.update(back)
        return tensordict


class AutoWrappedPolicy(TensorDictModule):
    """A policy on tensors that :func:`auto_wrap_policy` wrapped (its ``module`` is the
    user's policy, where weights are loaded)."""


def auto_wrap_policy(policy: Any, env: EnvBase, trust_policy: bool) -> Any:
    """TorchRL's automatic wrapping of a policy on tensors, done when the collector is
    built.

    A ``nn.Module`` that is no ``TensorDictModuleBase``, has no ``in_keys`` /
    ``out_keys`` and whose ``forward`` does not take a tensordict (one argument named
    ``tensordict`` / ``td``, or annotated as one) is wrapped in a ``TensorDictModule``
    that reads the observation entries its ``forward`` names (in its order) and writes
    the env's action keys, then ``"output1"``, ``"output2"``, ... for the further items
    of a tuple it returns (found with one call on a random observation, which moves no
    random generator). Anything else, or ``trust_policy``, is returned unchanged.

    Raises:
        TypeError: a required argument of ``forward`` is not an entry of the env's
            ``observation_spec``.
    """
    if (
        trust_policy
        or not isinstance(policy, nn.Module)
        or isinstance(policy, TensorDictModuleBase)
        or hasattr(policy, "in_keys")
        or hasattr(policy, "out_keys")
    ):
        return policy
    try:
        params = inspect.signature(policy.forward).parameters
    except (TypeError, ValueError):
        return policy
    names = list(params)
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    if (
        set(names) in ({"tensordict"}, {"td"})
        or (len(names) == 1 and is_tensor_collection(params[names[0]].annotation))
        # ``forward(*args, **kwargs)`` (a compiled module, a generic wrapper) names no
        # entry to read: it is left as given, to the rollout's own handling
        or any(p.kind in variadic for p in params.values())
    ):
        return policy
    spec = env.observation_spec
    entries = list(spec.keys())
    required = [name for name, p in params.items() if p.default is inspect.Parameter.empty]
    missing = [name for name in required if name not in entries]
    if missing:
        raise TypeError(
            f"the policy's forward takes {required} but the env's observation_spec has "
            f"entries {entries}: {missing} cannot be read from it. A policy on tensors is "
            "wrapped to read the observation entries its forward names; wrap it in a "
            "TensorDictModule with its in_keys, or pass trust_policy=True to run it as is"
        )
    in_keys = [name for name in names if name in entries]
    out_keys = list(env.action_keys)
    first = next(iter(policy.parameters()), None)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        sample = spec.rand() if first is None else spec.rand().to(first.device)
        output = policy(**{name: sample.get(name) for name in in_keys})
    if isinstance(output, tuple):
        out_keys.extend(f"output{i}" for i in range(1, len(output)))
    return AutoWrappedPolicy(policy, in_keys=in_keys, out_keys=out_keys)


def wrap_policy(
    policy: Callable | None,
    policy_device: torch.device | None,
    env_device: torch.device | None,
    compile_policy: bool | Mapping[str, Any] | None,
) -> Callable | None:
    """The callable the rollout runs (``None``: random actions from the action spec)."""
    if policy is None:
        return None
    if not callable(policy):
        raise TypeError(
            f"policy must be a callable on a TensorDict (e.g. a TensorDictModule), got "
            f"{type(policy).__name__}"
        )
    if compile_policy:
        kwargs = dict(compile_policy) if isinstance(compile_policy, Mapping) else {}
        policy = torch.compile(policy, **kwargs)
    if policy_device is not None:
        env_dev = torch.device(env_device) if env_device is not None else torch.device("cpu")
        if torch.device(policy_device) != env_dev:
            if isinstance(policy, nn.Module):
                policy = policy.to(policy_device)
            return _DevicePolicy(policy, torch.device(policy_device), env_device)
    return policy


def check_batch_args(env: EnvBase, frames_per_batch: int, total_frames: int) -> int:
    """Validates the frame arguments against the env batch; returns the steps per batch.

    As TorchRL, a ``frames_per_batch`` that is not a multiple of the env batch size is
    rounded up (with a warning): every env steps as many times in a batch.
    """
    if isinstance(frames_per_batch, bool) or not isinstance(frames_per_batch, int):
        raise TypeError(f"frames_per_batch must be an int, got {frames_per_batch!r}")
    if isinstance(total_frames, bool) or not isinstance(total_frames, int):
        raise TypeError(f"total_frames must be an int, got {total_frames!r}")
    if frames_per_batch < 1:
        raise ValueError(f"frames_per_batch must be a positive int, got {frames_per_batch}")
    if total_frames != -1 and total_frames <= 0:
        raise ValueError(
            f"total_frames={total_frames} must be -1 (collect until shutdown) or a positive int"
        )
    n_env = max(env.batch_size.numel(), 1)
    steps = -(-frames_per_batch // n_env)
    if frames_per_batch % n_env:
        warnings.warn(
            f"frames_per_batch ({frames_per_batch}) is not exactly divisible by the number of "
            f"batched environments ({n_env}): each batch holds {steps * n_env} frames "
            f"({steps} steps of each env)",
            UserWarning,
            stacklevel=3,
        )
    return steps


def traj_end_keys(done_keys: list) -> list:
    """The done flags that say where a trajectory ends: per group (the root, each nested
    group such as ``"agents"``), its ``"done"`` flag when it has one (``done`` is
    ``terminated | truncated`` there, the env contract), else every flag it has."""
    groups: dict[tuple, list] = {}
    for key in done_keys:
        path = (key,) if isinstance(key, str) else tuple(key)
        groups.setdefault(path[:-1], []).append(key)
    out = []
    for keys in groups.values():
        done = [k for k in keys if (k if isinstance(k, str) else k[-1]) == "done"]
        out.extend(done or keys)
    return out


def end_of_traj(tensordict: TensorDictBase, end_keys: list, ndim: int) -> torch.Tensor:
    """Where a trajectory ends: any of ``end_keys`` set (see :func:`traj_end_keys`), as a
    bool mask of the first ``ndim`` dims of ``tensordict`` (``[*B, T]`` for
    ``ndim = len(B) + 1``); with one bool flag of a step (``[*B, T, 1]``), a view of it
    (read it, do not write it).

    A flag with more dims (a nested group's ``[*B, T, n_agents, 1]``) counts as set
    where any of its entries is, as TorchRL's collectors aggregate the done flags.

    Args:
        tensordict: the ``"next"`` entries of a batch (``[*B, T]``).
        end_keys: the done flags to read.
        ndim: the number of leading dims the mask keeps.

    Returns:
        the bool mask ``[*B, T]``.

    Raises:
        KeyError: ``end_keys`` is empty, or a flag is missing.
    """
    mask = None
    for key in end_keys:
        flag = tensordict.get(key)
        if flag.ndim > ndim:
            if flag.shape[ndim:].numel() == 1:  # a step's flag ([*B, T, 1]): viewed
                flag = flag.view(flag.shape[:ndim])
            else:  # a group's flags ([*B, T, n, 1]): any of them
                flag = flag.flatten(ndim).any(-1)
        if flag.dtype != torch.bool:  # flags stored as integers or floats
            flag = flag.bool()
        mask = flag if mask is None else mask | flag
    if mask is None:
        raise KeyError(f"no done flag to end trajectories with: end_keys={end_keys!r}")
    return mask


class TrajIds:
    """Trajectory ids of ``[*B, T]`` batches, unique across batches (vectorized).

    Env ``i`` starts with id ``i``; each time an env is done, its next step gets the
    next free id, assigned in (step, env) order as a step-by-step collector would.
    """

    def __init__(self, batch_size: torch.Size) -> None:
        self.batch_size = torch.Size(batch_size)
        n = max(self.batch_size.numel(), 1)
        self.current = torch.arange(n)
        self.next_id = n

    def assign(self, done: torch.Tensor) -> torch.Tensor:
        """Ids of each step of a batch from where its trajectories end, ``[*B, T]`` (or
        ``[*B, T, 1]``: a ``("next", "done")`` flag)."""
        steps = done.shape[len(self.batch_size)]
        d = done.reshape(-1, steps)  # [n, T]
        if d.dtype != torch.bool:  # flags stored as integers or floats (bfloat16 too)
            d = d.bool()
        if self.current.device != d.device:  # the ids live where the env's flags do
            self.current = self.current.to(d.device)
        if self._numpy_path(d):
            # numpy from the flags on (a few us a batch against ~50 in torch ops)
            flags = d.detach().numpy()
            ends = int(np.count_nonzero(flags))
            if not ends:
                # no trajectory ends in this batch (most small batches): each env keeps its id
                ids = np.repeat(self.current.numpy()[:, None], steps, axis=1)
            else:
                ids = self._assign_numpy(flags, ends)
            return torch.from_numpy(ids).reshape(*self.batch_size, steps)
        ends = int(d.sum())
        if not ends:
            ids = self.current[:, None].expand(d.shape[0], steps)
            return ids.clone(memory_format=torch.contiguous_format).reshape(*self.batch_size, steps)
        return self._assign_torch(d, ends).reshape(*self.batch_size, steps)

    def _numpy_path(self, d: torch.Tensor) -> bool:
        """Whether a batch's ids are numbered in numpy: flags and ids on the CPU."""
        return d.device.type == "cpu" and self.current.dtype == torch.int64

    def _assign_torch(self, d: torch.Tensor, ends: int) -> torch.Tensor:
        """:meth:`assign`'s ids of a batch ``[n, T]`` with ``ends`` trajectory ends, in
        torch ops on the flags' device (no host read beyond ``ends``)."""
        n, steps = d.shape
        events = d.t().reshape(-1).cumsum(0).reshape(steps, n).t()
        events = torch.where(d, events, 0)
        upto = events.cummax(dim=1).values  # events up to and including t
        before = torch.cat([upto.new_zeros(n, 1), upto[:, :-1]], dim=1)
        ids = torch.where(before > 0, self.next_id + before - 1, self.current[:, None])
        last = upto[:, -1]
        self.current = torch.where(last > 0, self.next_id + last - 1, self.current)
        self.next_id += ends
        return ids

    def _assign_numpy(self, d: np.ndarray, ends: int) -> np.ndarray:
        """:meth:`assign`'s ids of a CPU batch ``[n, T]`` with ``ends`` trajectory ends,
        the same steps in numpy: the k-th end in (step, env) order starts id
        ``next_id + k - 1`` at the env's next step."""
        n, steps = d.shape
        events = np.cumsum(d.T.reshape(-1)).reshape(steps, n).T  # ends counted so far
        events = np.where(d, events, 0)
        upto = np.maximum.accumulate(events, axis=1)  # the last end up to and including t
        before = np.zeros_like(upto)
        before[:, 1:] = upto[:, :-1]
        current = self.current.numpy()
        ids = np.where(before > 0, self.next_id + before - 1, current[:, None])
        last = upto[:, -1]
        self.current = torch.from_numpy(np.where(last > 0, self.next_id + last - 1, current))
        self.next_id += ends
        return ids

    def state_dict(self) -> dict:
        return {"current": self.current.clone(), "next_id": self.next_id}

    def load_state_dict(self, state: Mapping) -> None:
        self.current = state["current"].clone()
        self.next_id = int(state["next_id"])


def check_actions(env: EnvBase, tensordict: TensorDictBase, steps: list[int] | None) -> None:
    """Reports, naming the key, spec and value, an action of the ``[*B, T]`` batch (at
    ``steps``, all when ``None``) outside ``env.full_action_spec``.

    A missing key or an action of another shape raises (the env cannot act on it); a
    shape that only differs by dims of one (``()`` for a ``(1,)`` spec) passes, as in
    TorchRL, which checks nothing, and a dynamic ``-1`` dim of the spec (``MultiAction``'s
    chunk) takes any size. An action outside its spec's values warns (once per key and
    call) and reaches the env as is (TorchRL's collectors pass it on silently):
    gymnasium clips continuous actions beyond a ``Bounded`` spec, an untrained linear
    policy writes them routinely, and an env may accept values its spec does not list.
    """
    nb = len(env.batch_size)
    spec = env.full_action_spec
    total = tensordict.batch_size[nb]
    steps = steps if steps is not None else range(total)
    # a heterogeneous group (members with different entries or shapes, e.g. agents) is
    # checked whole: its leaves have no dense value to read
    groups = _stacked_groups(spec)
    for key in groups:
        group = spec[key]
        value = _action_value(tensordict, key, group)
        for t in steps:
            if not group.is_in(value[(slice(None),) * nb + (t,)]):
                raise ValueError(
                    f"the policy wrote action group {key!r} (step {t}) outside action_spec "
                    f"{group!r}"
                )
    for key in spec.keys(True, True):
        if groups and any(_under(key, group) for group in groups):
            continue
        leaf = spec[key]
        value = _action_value(tensordict, key, leaf)
        for t in steps:
            step_value = value.select(nb, t)
            if not _shape_fits(step_value.shape, leaf.shape):
                raise ValueError(
                    f"the policy wrote action {key!r} with shape {tuple(step_value.shape)}, "
                    f"expected {tuple(leaf.shape)} from action_spec {leaf!r}"
                )
            if -1 not in leaf.shape and step_value.shape != leaf.shape:
                step_value = step_value.reshape(leaf.shape)
            if not leaf.is_in(step_value) and not _in_after_cast(leaf, step_value):
                warnings.warn(
                    f"the policy wrote action {key!r} = {step_value} (step {t}), outside "
                    f"action_spec {leaf!r}; the env receives it as is",
                    stacklevel=3,
                )
                break  # this key's other steps: one warning is enough


def _shape_fits(shape: torch.Size, spec_shape: torch.Size) -> bool:
    """Whether an action of ``shape`` is one of a spec of ``spec_shape``: the same dims
    but for dims of one; with a ``-1`` dim of the spec (which takes any size), the same
    dims (:func:`rl.core.shape_fits`)."""
    if -1 in spec_shape:
        return shape_fits(shape, spec_shape)
    return [d for d in shape if d != 1] == [d for d in spec_shape if d != 1]


def _stacked_groups(spec: Composite) -> list[tuple[str, ...]]:
    """The keys of the outermost ``StackedComposite`` entries of ``spec``."""
    groups: list[tuple[str, ...]] = []
    for key in spec.keys(True):
        key = (key,) if isinstance(key, str) else tuple(key)
        if isinstance(spec[key], StackedComposite) and not any(_under(key, g) for g in groups):
            groups.append(key)
    return groups


def _under(key, group: tuple[str, ...]) -> bool:
    key = (key,) if isinstance(key, str) else tuple(key)
    return key[: len(group)] == group


def _action_value(tensordict: TensorDictBase, key, spec: Any) -> Any:
    value = tensordict.get(key, None)
    if value is None:
        raise KeyError(
            f"the policy did not write the action key {key!r} (action_spec {spec!r}); "
            f"the batch has keys {sorted(map(str, tensordict.keys(True, True)))}"
        )
    return value


def _in_after_cast(leaf: Any, value: torch.Tensor) -> bool:
    """Whether ``value`` is in ``leaf`` once cast to the spec's dtype, the cast losing
    nothing (an ``int64`` one-hot for a ``bool`` ``OneHot``): the env stores it cast."""
    if value.dtype == leaf.dtype:
        return False
    cast = value.to(leaf.dtype)
    return bool(torch.equal(cast.to(value.dtype), value)) and bool(leaf.is_in(cast))


def rng_state() -> dict:
    """torch's and numpy's global generator states, as tensors and plain values."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
    }


def set_rng_state(state: Mapping) -> None:
    torch.set_rng_state(state["torch"])
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["name"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )


def load_weights(policy: Any, weights: Any) -> None:
    """Copies ``weights`` (a module, a state dict or a TensorDict of params) into ``policy``."""
    if weights is None:
        return
    if isinstance(weights, nn.Module):
        weights = TensorDict.from_module(weights)
    if isinstance(weights, TensorDictBase):
        # in place: the policy keeps its parameter objects (optimizers, other references)
        TensorDict.from_module(policy).data.update_(weights.data)
        return
    if isinstance(weights, Mapping) and isinstance(policy, nn.Module):
        policy.load_state_dict(weights)
        return
    raise TypeError(
        "policy weights must be an nn.Module, a state dict or a TensorDict of parameters, "
        f"got {type(weights).__name__}"
    )
