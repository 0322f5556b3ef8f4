"""Exploration: epsilon-greedy, additive Gaussian and Ornstein-Uhlenbeck noise, random policy.

Each module reads the action a policy wrote and perturbs it in place, only while the
exploration type is ``RANDOM`` (or unset): under ``set_exploration_type(DETERMINISTIC)``
they leave the action alone. Put them after the policy in a ``TensorDictSequential``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey, expand_as_right, expand_right
from torch import nn

from rl.core import (
    Binary,
    Composite,
    ExplorationType,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
    exploration_type,
)

from ._common import _forward_hook_safe_action
from ._probabilistic import (
    TensorForward,
    _missing_key_error,
    _plain_forward,
    _plain_keys,
)

__all__ = [
    "AdditiveGaussianModule",
    "EGreedyModule",
    "OrnsteinUhlenbeckProcessModule",
    "RandomPolicy",
    "set_exploration_modules_spec_from_env",
]


def _explores() -> bool:
    mode = exploration_type()
    return mode is None or mode is ExplorationType.RANDOM


def _as_composite(spec: TensorSpec | None, action_key: NestedKey) -> Composite | None:
    if spec is None or isinstance(spec, Composite):
        return spec
    return Composite({action_key: spec}, shape=spec.shape[:-1])


def _check_annealing(init: float, end: float, name: str) -> None:
    if end > init:
        raise ValueError(
            f"{name} must decrease over time or stay constant, got {name}_init={init} and "
            f"{name}_end={end}"
        )


class _AnnealedSpecModule(TensorDictModuleBase):
    """Shared parts: the action spec (``spec`` property) and a linearly annealed scalar."""

    _annealed: str

    def _init_annealing(self, name: str, init: float, end: float, steps: int, device: Any) -> None:
        _check_annealing(init, end, name)
        self._annealed = name
        self.register_buffer(f"{name}_init", torch.as_tensor(float(init), device=device))
        self.register_buffer(f"{name}_end", torch.as_tensor(float(end), device=device))
        self.register_buffer(name, torch.as_tensor(float(init), device=device))
        self.annealing_num_steps = annealing_num_steps = steps
        if annealing_num_steps <= 0:
            raise ValueError(f"annealing_num_steps must be positive, got {annealing_num_steps}")

    def step(self, frames: int = 1) -> None:
        """Anneals the noise scale linearly by ``frames`` steps, down to its end value.

        After ``annealing_num_steps`` steps in total it equals the end value.
        """
        name = self._annealed
        init, end = getattr(self, f"{name}_init"), getattr(self, f"{name}_end")
        value = getattr(self, name)
        delta = (init - end) / self.annealing_num_steps
        value.data.copy_(torch.maximum(end, value - frames * delta))

    @property
    def spec(self) -> Composite | None:
        return self._spec

    @spec.setter
    def spec(self, value: TensorSpec | None) -> None:
        self._spec = _as_composite(value, self.action_key)

    def _action_spec(self) -> TensorSpec:
        if self._spec is None:
            raise RuntimeError(
                f"{type(self).__name__}: the spec has not been set; pass spec= at construction, "
                "set module.spec, or call set_exploration_modules_spec_from_env(policy, env)"
            )
        return self._spec[self.action_key]


class EGreedyModule(_AnnealedSpecModule):
    """Epsilon-greedy exploration: replaces the action by a random one with probability eps.

    ``eps`` starts at ``eps_init`` and :meth:`step` lowers it linearly to ``eps_end`` over
    ``annealing_num_steps`` steps. Random actions are drawn from ``spec`` (among the
    allowed ones when ``action_mask_key`` is given).

    Args:
        spec: the action spec (``Categorical``, ``OneHot``, ``Bounded``, ...).
        eps_init: initial epsilon. Defaults to ``1.0``.
        eps_end: final epsilon. Defaults to ``0.1``.
        annealing_num_steps: steps from ``eps_init`` to ``eps_end``. Defaults to ``1000``.

    Keyword Args:
        action_key: the action to perturb. Defaults to ``"action"``.
        action_mask_key: optional key of the boolean mask of allowed actions.
        device: where the buffers live.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Categorical
        >>> from rl.modules import EGreedyModule
        >>> explore = EGreedyModule(Categorical(4), eps_init=1.0, eps_end=0.0, annealing_num_steps=4)
        >>> explore.step(2)
        >>> explore.eps
        tensor(0.5000)
        >>> td = TensorDict(action=torch.zeros(1000, dtype=torch.long), batch_size=[1000])
        >>> bool((explore(td)["action"] != 0).any())
        True
    """

    def __init__(
        self,
        spec: TensorSpec | None,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        *,
        action_key: NestedKey = "action",
        action_mask_key: NestedKey | None = None,
        device: torch.device | None = None,
    ):
        super().__init__()
        self.action_key = action_key
        self.action_mask_key = action_mask_key
        self.in_keys = [action_key] + ([action_mask_key] if action_mask_key is not None else [])
        self.out_keys = [action_key]
        self._init_annealing("eps", eps_init, eps_end, annealing_num_steps, device)
        if spec is not None and device is not None:
            spec = spec.to(device)
        self.spec = spec

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not _explores():
            return tensordict
        action = tensordict.get(self.action_key, None)
        if action is None:
            raise KeyError(
                f"EGreedyModule reads the action at {self.action_key!r}, which is not in the "
                f"input. Keys present: {[str(k) for k in tensordict.keys(True, True)]}"
            )
        masked = self.action_mask_key is not None
        spec, shape, _ = self._random_source(action, masked)
        if masked:
            mask = tensordict.get(self.action_mask_key, None)
            if mask is None:
                raise _missing_key_error(
                    tensordict, self.action_mask_key, "EGreedyModule", "Action mask key"
                )
            spec.update_mask(mask)
        parent = (
            tensordict.get(self.action_key[:-1])
            if isinstance(self.action_key, tuple) and len(self.action_key) > 1
            else tensordict
        )
        tensordict.set(self.action_key, self._choose(action, spec, shape, parent.batch_size))
        return tensordict

    def _random_source(
        self, action: torch.Tensor, masked: bool
    ) -> tuple[TensorSpec, torch.Size, int]:
        """``(spec, shape, lead)``: random actions are ``spec.rand(shape)``; ``lead`` is the
        number of the action's dims before the spec's own."""
        spec = self._action_spec()
        lead = action.ndim - spec.ndim
        if not masked and lead >= 0 and action.shape[lead:] == spec.shape:
            # the spec's own shape ends the action's: draw for the leading dims, no copy
            # of the spec (a copy per call costs eager steps, and torch 2.11's dynamo
            # cannot trace the copy.copy of a spec's expand)
            return spec, action.shape[:lead], lead
        if spec.shape != action.shape:
            # expand (a copy) to the action's shape; a copy also keeps the mask off self.spec
            try:
                spec = spec.expand(action.shape)
            except ValueError as err:
                raise ValueError(
                    f"Action spec shape does not match the action shape: the action at "
                    f"{self.action_key!r} has shape {tuple(action.shape)} ({err})"
                ) from None
            return spec, torch.Size(()), lead
        return spec.clone(), torch.Size(()), lead  # the mask is set on a copy

    def _choose(
        self, action: torch.Tensor, spec: TensorSpec, shape: torch.Size, batch: torch.Size
    ) -> torch.Tensor:
        """The action with each element of ``batch`` replaced, with probability eps, by a
        draw of ``spec``: the coins first, then the random actions (forward's order, which
        the tensor twin keeps)."""
        cond = torch.rand(batch, device=self.eps.device) < self.eps
        random_action = spec.rand(shape).to(action.device)
        if random_action.shape != action.shape:
            # a draw whose singleton dims the spec squeezes (MultiCategorical([n])):
            # the same values, at the action's shape
            random_action = random_action.reshape(action.shape)
        return torch.where(expand_as_right(cond, action), random_action, action)

    def tensor_forward(self) -> TensorForward | None:
        """The tensor-level twin of :meth:`forward` (the protocol of
        :func:`rl.core.tensor_policy`): ``fn(action[, action_mask]) -> (action,)``, with
        the same coins and random actions drawn in the same order, so that an
        epsilon-greedy Q policy (dqn.py's) is run by collectors on tensors.

        Forward draws one coin per element of the TensorDict's batch; the twin, which
        sees no TensorDict, takes the action's dims before the spec's. The two agree when
        the spec is an unbatched action's and the TensorDict's batch is the action's
        leading dims, as in a collector's root (the env's batch) with a single env's
        ``action_spec``; a caller whose TensorDict batch has fewer dims than the action's
        leading ones gets other draws from the twin.

        ``None`` where the spec could make them differ: dims before a vector action's
        last (``OneHot``, ``MultiOneHot``, ``MultiCategorical``, ``Binary``), any dim of
        a scalar action's spec (``Categorical``, ``Bounded``, ...: the env's or the
        action's, a shape cannot tell), a Composite's shape, a Composite without the
        action key; and with an action mask (forward reads it only while exploring),
        hooks (the module's or global ones), a subclass's ``forward``, a nested key.
        The spec is read at each
        call (one set later is used; none raises as forward does): the twin is checked
        against the spec it is built with, and collectors build it again at each batch."""
        if not _plain_forward(self, EGreedyModule):
            return None
        if self.action_mask_key is not None:
            # forward reads the mask only while exploring; a twin's inputs are all read
            return None
        if not _plain_keys([self.action_key]):
            return None
        if self._spec is not None:
            if self._spec.shape:
                return None
            leaf = self._spec.get(self.action_key, None)
            if leaf is None:  # forward raises when it explores; the general path does that
                return None
            if leaf.ndim > (1 if isinstance(leaf, _VECTOR_ACTIONS) else 0):
                return None
        source, choose = self._random_source, self._choose

        def forward(action: torch.Tensor) -> tuple:
            if not _explores():
                return (action,)
            spec, shape, lead = source(action, False)
            return (choose(action, spec, shape, action.shape[: max(lead, 0)]),)

        return [self.action_key], [self.action_key], forward


# the specs whose one action is a vector (its last dim); any other spec's action is a
# scalar, and its dims are batch dims (a batched env's) which the twin cannot tell apart
_VECTOR_ACTIONS = (OneHot, MultiOneHot, MultiCategorical, Binary)


class AdditiveGaussianModule(_AnnealedSpecModule):
    """Adds Gaussian noise ``sigma * N(mean, std)`` to a continuous action.

    ``sigma`` is annealed from ``sigma_init`` to ``sigma_end`` by :meth:`step`. The noisy
    action is projected back into the spec (clamped into its bounds).

    Args:
        spec: the action spec (may be set later, e.g. by
            :func:`set_exploration_modules_spec_from_env`).
        sigma_init: initial noise scale. Defaults to ``1.0``.
        sigma_end: final noise scale. Defaults to ``0.1``.
        annealing_num_steps: steps from ``sigma_init`` to ``sigma_end``. Defaults to ``1000``.
        mean: mean of the noise. Defaults to ``0.0``.
        std: standard deviation of the noise. Defaults to ``1.0``.

    Keyword Args:
        action_key: the action to perturb. Defaults to ``"action"``.
        safe: also project every output with a spec after the call. Defaults to ``False``.
        device: where the buffers (and the spec given) live.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Bounded
        >>> from rl.modules import AdditiveGaussianModule
        >>> noise = AdditiveGaussianModule(Bounded(-1.0, 1.0, shape=(2,)), sigma_init=10.0)
        >>> td = noise(TensorDict(action=torch.zeros(100, 2), batch_size=[100]))
        >>> bool(td["action"].abs().max() <= 1.0), bool(td["action"].std() > 0.5)
        (True, True)
    """

    def __init__(
        self,
        spec: TensorSpec | None = None,
        sigma_init: float = 1.0,
        sigma_end: float = 0.1,
        annealing_num_steps: int = 1000,
        mean: float = 0.0,
        std: float = 1.0,
        *,
        action_key: NestedKey = "action",
        safe: bool = False,
        device: torch.device | None = None,
    ):
        super().__init__()
        self.action_key = action_key
        self.in_keys = [action_key]
        self.out_keys = [action_key]
        self._init_annealing("sigma", sigma_init, sigma_end, annealing_num_steps, device)
        self.register_buffer("mean", torch.as_tensor(float(mean), device=device))
        self.register_buffer("std", torch.as_tensor(float(std), device=device))
        # the spec where the buffers are, as EGreedyModule's: the noise is clamped there
        self.spec = spec.to(device) if spec is not None and device is not None else spec
        self.safe = safe
        if safe:
            self.register_forward_hook(_forward_hook_safe_action)

    def _add_noise(self, action: torch.Tensor) -> torch.Tensor:
        """``action + sigma * N(mean, std)``, projected into the spec (any shape)."""
        spec = self._action_spec()
        noise = torch.randn_like(action) * self.std + self.mean
        return spec.project(action + noise * self.sigma)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not _explores():
            return tensordict
        tensordict.set(self.action_key, self._add_noise(tensordict.get(self.action_key)))
        return tensordict

    def tensor_forward(self) -> TensorForward | None:
        """The tensor-level twin of :meth:`forward` (the protocol of
        :func:`rl.core.tensor_policy`): ``fn(action) -> (noisy action,)``, the same noise
        drawn as forward draws it, so that DDPG's and TD3's acting policy (a deterministic
        actor, then this module) is run by collectors on tensors.

        The exploration type, ``sigma`` and the spec are read at each call, as forward
        reads them (a missing spec raises forward's ``RuntimeError``). ``None`` with
        ``safe=True`` (its projection is a forward hook), other hooks (the module's or
        global ones), a subclass's ``forward``, or a nested action key."""
        if self.safe or not _plain_forward(self, AdditiveGaussianModule):
            return None
        if not _plain_keys([self.action_key]):
            return None
        add_noise = self._add_noise

        def forward(action: torch.Tensor) -> tuple[torch.Tensor]:
            return (add_noise(action),) if _explores() else (action,)

        return [self.action_key], [self.action_key], forward


class _OrnsteinUhlenbeckProcess(nn.Module):
    """The Ornstein-Uhlenbeck process itself: its parameters and one step of it.

    ``x += theta * (mu - x) * dt + sigma_t * sqrt(dt) * N(0, 1)``, with ``sigma_t``
    going linearly from ``sigma`` to ``sigma_min`` over ``n_steps_annealing`` steps.
    :class:`OrnsteinUhlenbeckProcessModule` keeps one per module (``module.ou``) and
    reads and writes its state (``noise_key``, ``steps_key``) in the tensordict.
    """

    noise_key = "_ou_prev_noise"
    steps_key = "_ou_steps"

    def __init__(
        self,
        theta: float,
        mu: float = 0.0,
        sigma: float = 0.2,
        dt: float = 0.01,
        x0: torch.Tensor | np.ndarray | float | None = None,
        sigma_min: float | None = None,
        n_steps_annealing: int = 1000,
        *,
        device: torch.device | None = None,
    ):
        super().__init__()
        self.theta, self.mu, self.dt, self.sigma = theta, mu, dt, sigma
        if sigma_min is not None:
            self._sigma_slope = -float(sigma - sigma_min) / float(n_steps_annealing)
            self.sigma_min = sigma_min
        else:
            self._sigma_slope = 0.0
            self.sigma_min = sigma
        self.register_buffer("x0", torch.as_tensor(0.0 if x0 is None else x0, device=device))

    def current_sigma(self, n_steps: torch.Tensor) -> torch.Tensor:
        """The noise scale after ``n_steps`` steps of a trajectory."""
        return (self._sigma_slope * n_steps + self.sigma).clamp_min(self.sigma_min)

    def step(self, noise: torch.Tensor, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step from the stored noise (``x - x0``) and step count ``[*B]``.

        Returns:
            The new value of the process ``x`` and the step count plus one.
        """
        prev = noise + self.x0
        sigma = self.current_sigma(expand_as_right(steps, prev).to(prev.dtype))
        new = (
            prev
            + self.theta * (self.mu - prev) * self.dt
            + sigma * float(np.sqrt(self.dt)) * torch.randn_like(prev)
        )
        return new, steps + 1


class OrnsteinUhlenbeckProcessModule(_AnnealedSpecModule):
    """Temporally correlated (Ornstein-Uhlenbeck) exploration noise, as in DDPG.

    The noise follows ``x += theta * (mu - x) * dt + sigma_t * sqrt(dt) * N(0, 1)`` and the
    action becomes ``action + eps * x``. The noise and the step count live in the
    tensordict (``"_ou_prev_noise"``, ``"_ou_steps"``), so that each environment of a batch
    has its own process; both are reset to zero where ``is_init_key`` is ``True`` (add an
    ``InitTracker`` transform to the env). ``eps`` is annealed by :meth:`step`, ``sigma``
    from ``sigma`` to ``sigma_min`` over ``n_steps_annealing`` steps of each trajectory.
    The process (its parameters and one step of it) is the submodule :attr:`ou`.

    Args:
        spec: the action spec.
        eps_init, eps_end, annealing_num_steps: the noise weight's schedule
            (defaults ``1.0``, ``0.1``, ``1000``).
        theta: mean-reversion rate. Defaults to ``0.15``.
        mu: long-run mean. Defaults to ``0.0``.
        sigma: noise scale. Defaults to ``0.2``.
        dt: time step. Defaults to ``0.01``.
        x0: initial value of the process. Defaults to ``0``.
        sigma_min: final noise scale (``None``: constant ``sigma``).
        n_steps_annealing: steps from ``sigma`` to ``sigma_min``. Defaults to ``1000``.

    Keyword Args:
        action_key: the action to perturb. Defaults to ``"action"``.
        is_init_key: the reset marker. Defaults to ``"is_init"``.
        safe: project the noisy action into ``spec``. Defaults to ``True``.
        device: where the buffers live.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Bounded
        >>> from rl.modules import OrnsteinUhlenbeckProcessModule
        >>> ou = OrnsteinUhlenbeckProcessModule(Bounded(-1.0, 1.0, shape=(2,)))
        >>> td = TensorDict(
        ...     action=torch.zeros(3, 2), is_init=torch.ones(3, 1, dtype=torch.bool), batch_size=[3]
        ... )
        >>> td = ou(td)
        >>> td["_ou_steps"]
        tensor([1, 1, 1])
    """

    def __init__(
        self,
        spec: TensorSpec,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        theta: float = 0.15,
        mu: float = 0.0,
        sigma: float = 0.2,
        dt: float = 0.01,
        x0: torch.Tensor | np.ndarray | float | None = None,
        sigma_min: float | None = None,
        n_steps_annealing: int = 1000,
        *,
        action_key: NestedKey = "action",
        is_init_key: NestedKey = "is_init",
        safe: bool = True,
        device: torch.device | None = None,
    ):
        super().__init__()
        if spec is None:
            raise RuntimeError(
                "spec cannot be None. OrnsteinUhlenbeckProcessModule needs an action spec"
            )
        self.action_key = action_key
        self.is_init_key = is_init_key
        self.ou = _OrnsteinUhlenbeckProcess(
            theta, mu, sigma, dt, x0, sigma_min, n_steps_annealing, device=device
        )
        self.noise_key = self.ou.noise_key
        self.steps_key = self.ou.steps_key
        self.in_keys = [action_key]
        self.out_keys = [action_key, self.noise_key, self.steps_key]
        self._init_annealing("eps", eps_init, eps_end, annealing_num_steps, device)
        self.spec = spec
        self._spec.update({self.noise_key: None, self.steps_key: None})
        self.safe = safe
        if safe:
            self.register_forward_hook(_forward_hook_safe_action)

    def current_sigma(self, n_steps: torch.Tensor) -> torch.Tensor:
        """The noise scale after ``n_steps`` steps of a trajectory."""
        return self.ou.current_sigma(n_steps)

    def _is_init(self, tensordict: TensorDictBase, batch: torch.Size) -> torch.Tensor | None:
        is_init = tensordict.get(self.is_init_key, None)
        if is_init is None:
            return None
        if is_init.ndim > len(batch) and is_init.shape[-1] == 1:
            is_init = is_init.squeeze(-1)
        if is_init.ndim < len(batch):
            is_init = expand_right(is_init, batch)
        if is_init.shape != batch:
            raise ValueError(
                f"{self.is_init_key!r} has shape {tuple(is_init.shape)}, expected the batch shape "
                f"{tuple(batch)} (or with a trailing 1)"
            )
        return is_init

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not _explores():
            return tensordict
        action = tensordict.get(self.action_key)
        parent = (
            tensordict.get(self.action_key[:-1])
            if isinstance(self.action_key, tuple) and len(self.action_key) > 1
            else tensordict
        )
        batch = parent.batch_size
        noise = tensordict.get(self.noise_key, None)
        steps = tensordict.get(self.steps_key, None)
        if noise is None or steps is None:
            noise = torch.zeros_like(action)
            steps = torch.zeros(batch, dtype=torch.long, device=action.device)
        is_init = self._is_init(tensordict, batch)
        if is_init is not None:
            noise = noise.masked_fill(expand_right(is_init, noise.shape), 0)
            steps = steps.masked_fill(is_init, 0)
        noise, steps = self.ou.step(noise, steps)
        tensordict.set(self.noise_key, noise - self.ou.x0)
        tensordict.set(self.action_key, action + self.eps * noise)
        tensordict.set(self.steps_key, steps)
        return tensordict


class RandomPolicy:
    """A policy that writes a uniformly random action from ``action_spec``, ignoring the input.

    Args:
        action_spec: the action spec (a leaf spec, or a Composite whose entries are all
            written). May be left ``None`` and set later by
            :meth:`set_action_spec_from_env` (collectors do it).
        action_key: where a leaf spec's action goes. Defaults to ``"action"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Bounded
        >>> from rl.modules import RandomPolicy
        >>> policy = RandomPolicy(Bounded(-1.0, 1.0, shape=(2,)))
        >>> policy(TensorDict(batch_size=[5]))["action"].shape
        torch.Size([5, 2])
    """

    def __init__(self, action_spec: TensorSpec | None = None, action_key: NestedKey = "action"):
        self.action_spec = action_spec.clone() if action_spec is not None else None
        self.action_key = action_key

    def set_action_spec_from_env(self, env: Any) -> None:
        """Takes the env's full action spec when none was given."""
        if self.action_spec is None:
            self.action_spec = env.full_action_spec.clone()

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        spec = self.action_spec
        if spec is None:
            raise RuntimeError(
                "RandomPolicy action_spec is not set: pass one to the constructor, or call "
                "set_action_spec_from_env(env)"
            )
        batch = td.batch_size
        lead = () if tuple(spec.shape[: len(batch)]) == tuple(batch) else batch
        if isinstance(spec, Composite):
            return td.update(spec.rand(lead))
        return td.set(self.action_key, spec.rand(lead))


def set_exploration_modules_spec_from_env(policy: nn.Module, env: Any) -> None:
    """Gives the env's (unbatched) action spec to the exploration modules that have none.

    Args:
        policy: a module containing exploration modules.
        env: the environment whose ``action_spec`` (``action_spec_unbatched`` when it has
            one) is used.
    """
    action_spec = getattr(env, "action_spec_unbatched", None)
    if action_spec is None:
        action_spec = env.action_spec
    for submodule in policy.modules():
        if isinstance(submodule, _AnnealedSpecModule) and submodule.spec is None:
            submodule.spec = action_spec
