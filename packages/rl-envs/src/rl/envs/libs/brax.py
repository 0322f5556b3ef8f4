"""``BraxWrapper`` and ``BraxEnv``: Google's Brax (JAX) physics environments as
:class:`~rl.envs.EnvBase` environments, optionally differentiable.

Brax (https://github.com/google/brax, paper: https://arxiv.org/abs/2106.13281) is
imported on first use; ``pip install "rl-envs[brax]"`` installs it (with JAX).
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Bounded, Categorical, Composite, Unbounded
from rl.envs._env_base import EnvBase

from ._common import ClassProperty, ForwardsEnvAttributes
from ._jax import (
    JaxKey,
    JaxStateMixin,
    build_functions,
    check_batch_size,
    compiled_functions,
    import_jax,
    strong_types,
    to_jax,
    to_torch,
)

__all__ = ["BraxEnv", "BraxWrapper"]

_has_brax = importlib.util.find_spec("brax") is not None
_INSTALL = 'pip install "rl-envs[brax]"'


def _import_brax():
    if not _has_brax:
        raise ImportError(f"Brax is not installed: {_INSTALL}")
    import brax
    import brax.envs

    return brax


class BraxWrapper(JaxStateMixin, ForwardsEnvAttributes, EnvBase):
    """Wraps a Brax environment (``brax.envs.get_environment(name)``) as an env.

    ``batch_size=[*B]`` runs ``prod(B)`` copies in one ``jax.vmap`` of Brax's ``reset``
    / ``step``, each compiled once with ``jax.jit``. The Brax ``State`` of every copy and
    the PRNG key live in the wrapper; the observation, the reward and the done flags
    cross to torch (through DLPack, without a copy on CPU).

    Specs come from the env's sizes: ``"observation"`` is ``Unbounded([*B,
    observation_size])``, ``"action"`` ``Bounded(-1, 1, [*B, action_size])``, the reward
    ``[*B, 1]``. Brax's ``done`` is ``terminated``; an env wrapped in Brax's
    ``EpisodeWrapper`` (its ``info["truncation"]``) also reports ``truncated`` (the time
    limit), and then ``terminated = done & ~truncation``.

    With ``requires_grad=True`` a step is differentiable: the observation and reward
    carry the gradient of Brax's step with respect to the action and to the previous
    state (``jax.vjp`` through a torch ``autograd.Function``), so a loss on a rollout
    backpropagates into the policy through the physics. The gradient history of the
    state continues from one step to the next while the input's ``"observation"``
    carries a gradient (as the one the previous step wrote does); a detached input
    (``td.detach()``, the way to cut it in TorchRL, where the state sits in the
    tensordict), a reset or :meth:`detach_state` cuts it.

    Attributes the wrapper lacks are read from the Brax env (``env.sys``).

    Seeding: :meth:`set_seed` sets the key (``jax.random.PRNGKey(seed)``); each reset
    splits it into the next key and one key per copy, as TorchRL does. An env never
    seeded draws its seed from torch's global generator.

    Args:
        env: the Brax environment (a ``brax.envs.Env``).
        categorical_action_encoding: TorchRL's argument; Brax actions are continuous, so
            it changes nothing.
        cache_clear_frequency: with ``requires_grad``, call :meth:`clear_cache` every
            that many steps (``None`` / ``False``: never, the default). Clearing JAX's
            caches makes the jitted functions compile again; the differentiable step
            here keeps nothing beyond the autograd graph, so it is rarely needed.

    Keyword Args:
        batch_size: the number of copies, as a shape (``[]``: one env).
        device: where the tensors are written (``None``: CPU).
        requires_grad: make :meth:`step` differentiable (see above).
        from_pixels: not supported (``NotImplementedError``).
        frame_skip: not supported beyond 1; append a ``FrameSkipTransform``.
        allow_done_after_reset: as in :class:`~rl.envs.EnvBase`.
        run_type_checks: as in :class:`~rl.envs.EnvBase`.

    Raises:
        TypeError: ``env`` is not a ``brax.envs.Env``.
        ValueError: ``batch_size`` is not a shape of positive ints.
        NotImplementedError: the env's observation is a dict (Brax's dict observation
            modes).

    Examples:
        >>> import brax.envs
        >>> from rl.envs import BraxWrapper
        >>> env = BraxWrapper(brax.envs.get_environment("fast"), batch_size=[4])
        >>> _ = env.set_seed(0)
        >>> rollout = env.rollout(3)
        >>> rollout["next", "observation"].shape
        torch.Size([4, 3, 2])
    """

    _step_reads_observations = False  # steps from the action and the held Brax state

    git_url = "https://github.com/google/brax"
    libname = "brax"

    def __init__(
        self,
        env: Any = None,
        categorical_action_encoding: bool = False,
        cache_clear_frequency: int | None = None,
        *,
        batch_size=None,
        device=None,
        requires_grad: bool = False,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int | None = None,
        allow_done_after_reset: bool = False,
        run_type_checks: bool = False,
    ) -> None:
        brax = _import_brax()
        jax = import_jax("brax")
        if not isinstance(env, brax.envs.Env):
            raise TypeError(
                "env must be a Brax environment (brax.envs.get_environment(name)), "
                f"got {type(env).__name__}"
            )
        if from_pixels or pixels_only:
            raise NotImplementedError(
                "BraxWrapper does not render pixels (from_pixels), as in TorchRL: build it "
                "with from_pixels=False"
            )
        if frame_skip not in (None, 1):
            raise NotImplementedError(
                f"BraxWrapper takes frame_skip=1 only, got {frame_skip!r}: append a "
                "FrameSkipTransform to repeat actions"
            )
        if cache_clear_frequency is not None and not isinstance(cache_clear_frequency, bool):
            if not isinstance(cache_clear_frequency, int) or cache_clear_frequency < 1:
                raise ValueError(
                    "cache_clear_frequency must be a positive int, None or False, got "
                    f"{cache_clear_frequency!r}"
                )
        super().__init__(
            device=device,
            batch_size=check_batch_size(batch_size),
            allow_done_after_reset=allow_done_after_reset,
            run_type_checks=run_type_checks,
        )
        self._env = env
        self.categorical_action_encoding = categorical_action_encoding
        self.requires_grad = bool(requires_grad)
        # None / False: never; True: TorchRL's default period
        self._cache_clear_frequency = 20 if cache_clear_frequency is True else cache_clear_frequency
        self._step_count = 0
        self.from_pixels = False
        self.pixels_only = False
        self._prng = JaxKey("brax")
        self._state = None  # the Brax State of the prod(batch_size) copies
        self._grad_leaves = None  # requires_grad: the state's float leaves, in torch
        self._grad_outputs = None  # requires_grad: the flags of the step being written
        self._make_specs(env)
        n, outputs = self.numel(), functools.partial(_outputs, self._has_truncation)
        self._fns = compiled_functions(
            env,
            ("brax", n, self._has_truncation),
            lambda env_ref: build_functions(env_ref, n, _reset_one, _step_one, outputs),
        )
        self._vjp_fn = compiled_functions(
            env,
            ("brax-vjp", n, self._has_truncation),
            lambda env_ref: jax.jit(functools.partial(_step_vjp, env_ref, outputs)),
        )
        self._backward_fn = _apply_vjp

    # ------------------------------------------------------------------------ attributes
    @property
    def lib(self):
        """The ``brax`` module."""
        return _import_brax()

    @ClassProperty
    def available_envs(cls) -> list[str]:
        """The names ``brax.envs.get_environment`` takes (``[]`` when Brax is not
        installed)."""
        if not _has_brax:
            return []
        import brax.envs

        return list(brax.envs._envs)

    # TorchRL's BraxWrapper keeps its key as ``_key``; code that reads it carries over
    _key = JaxStateMixin.key

    # --------------------------------------------------------------------------- specs
    def _make_specs(self, env) -> None:
        jax = import_jax("brax")
        bs, device = self.batch_size, self.device
        obs_size = env.observation_size
        if not isinstance(obs_size, int | np.integer):
            raise NotImplementedError(
                f"BraxWrapper reads array observations only; this env's observation is "
                f"a dict of sizes {obs_size}: build it with obs_mode='ndarray'"
            )
        # the structure of Brax's State, traced without running or compiling anything
        example = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), np.uint32))
        self._has_truncation = "truncation" in example.info
        # where the observation and the reward sit among the state's float leaves
        fields = [
            getattr(path[0], "name", None)
            for path, leaf in jax.tree_util.tree_leaves_with_path(example)
            if _is_float(leaf)
        ]
        self._obs_leaf, self._reward_leaf = fields.index("obs"), fields.index("reward")
        self.action_spec = Bounded(low=-1.0, high=1.0, shape=(*bs, env.action_size), device=device)
        self.observation_spec = Composite(
            observation=Unbounded(shape=(*bs, int(obs_size)), device=device),
            shape=bs,
            device=device,
        )
        self.reward_spec = Unbounded(shape=(*bs, 1), device=device)
        flag = Categorical(2, shape=(*bs, 1), dtype=torch.bool, device=device)
        flags = {"done": flag, "terminated": flag.clone()}
        if self._has_truncation:
            flags["truncated"] = flag.clone()
        self.full_done_spec = Composite(flags, shape=bs, device=device)

    # ------------------------------------------------------------------------ torch side
    def _write(self, outputs, reset: bool = False) -> TensorDict:
        obs, reward, terminated, truncated = outputs
        bs, device = self.batch_size, self.device
        out = {"observation": to_torch(obs, device).reshape(*bs, -1)}
        if reset:
            terminated = torch.zeros((*bs, 1), dtype=torch.bool, device=device)
            truncated = terminated.clone()
        else:
            out["reward"] = to_torch(reward, device).reshape(*bs, 1)
            terminated = to_torch(terminated, device).reshape(*bs, 1)
            truncated = to_torch(truncated, device).reshape(*bs, 1)
        out["terminated"] = terminated
        if self._has_truncation:
            out["truncated"] = truncated
        out["done"] = terminated | truncated
        return TensorDict(out, batch_size=bs, device=device)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None or self._state is None or bool(mask.all()):
            key, self._state, outputs = self._fns.reset(self._prng.current())
            self._grad_leaves = None
        else:
            flat_mask = mask.reshape(self.numel())
            key, self._state, outputs = self._fns.reset_some(
                self._prng.current(), self._state, to_jax(flat_mask, np.bool_)
            )
            if self._grad_leaves is not None:  # the copies not reset keep their history
                fresh = _float_leaves(self._state, self.device)
                self._grad_leaves = [
                    torch.where(flat_mask.reshape(-1, *[1] * (new.ndim - 1)), new, old)
                    for new, old in zip(fresh, self._grad_leaves)
                ]
        self._prng.set(key)
        return self._write(outputs, reset=True)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._state is None:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset()")
        action = tensordict.get("action")
        flat = action.reshape(self.numel(), -1)
        if self.requires_grad:
            observation = tensordict.get("observation", None)
            if observation is None or not observation.requires_grad:
                self.detach_state()  # a detached input cuts the history, as in TorchRL
            out = self._step_with_grad(flat)
        else:
            self._state, outputs = self._fns.step(self._state, to_jax(flat, np.float32))
            out = self._write(outputs)
        self._step_count += 1
        if (
            self.requires_grad
            and self._cache_clear_frequency
            and self._step_count % self._cache_clear_frequency == 0
        ):
            self.clear_cache()
        return out

    def _step_with_grad(self, action: torch.Tensor) -> TensorDict:
        if self._grad_leaves is None:
            self._grad_leaves = _float_leaves(self._state, self.device)
        leaves = _BraxStep.apply(self, action, *self._grad_leaves)
        self._grad_leaves = list(leaves)
        bs = self.batch_size
        out = self._write(self._grad_outputs)
        self._grad_outputs = None
        # copies: the leaves are the state the next step reads
        out["observation"] = leaves[self._obs_leaf].reshape(*bs, -1).clone()
        out["reward"] = leaves[self._reward_leaf].reshape(*bs, 1).to(torch.float32).clone()
        return out

    def detach_state(self) -> None:
        """Cuts the gradient history of the held state (``requires_grad``): losses
        computed later backpropagate to the current step and no further, as a
        ``tensordict.detach()`` of TorchRL's ``"state"`` entry does. Call it after a
        ``backward()`` to keep stepping without ``retain_graph=True`` (truncated
        backpropagation through time); a full reset does it too."""
        if self._grad_leaves is not None:
            self._grad_leaves = [leaf.detach() for leaf in self._grad_leaves]

    def clear_cache(self) -> None:
        """Clears JAX's caches (``jax.clear_caches()``): compiled functions compile again
        at their next call. TorchRL's way to bound memory in long differentiable runs."""
        import_jax("brax").clear_caches()

    # ------------------------------------------------------------------------- state
    def _state_loaded(self) -> None:
        self._grad_leaves = None  # a loaded state has no gradient history

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={type(self._env).__name__}, batch_size={self.batch_size})"
        )


def _is_float(leaf) -> bool:
    return np.issubdtype(np.dtype(leaf.dtype), np.floating)


def _float_leaves(state, device) -> list[torch.Tensor]:
    """The float leaves of a Brax state as torch tensors (the differentiable ones)."""
    import jax

    return [to_torch(leaf, device) for leaf in jax.tree_util.tree_leaves(state) if _is_float(leaf)]


def _reset_one(env, key):
    state = env.reset(key)
    return state, state


def _step_one(env, state, action):
    state = env.step(state, action)
    return state, state


def _outputs(has_truncation: bool, state):
    """What crosses to torch: the observation (an array of its own: the next step reads
    the state's), the reward and the flags."""
    import jax.numpy as jnp

    done = state.done > 0
    truncated = state.info["truncation"] > 0 if has_truncation else jnp.zeros_like(done)
    obs = jnp.array(state.obs, copy=True)
    return obs, state.reward.astype(jnp.float32), done & ~truncated, truncated


def _step_vjp(env_ref, outputs, state, action):
    """The next state, the pullback of the vmapped step (a pytree: jit returns it) and
    the outputs."""
    import jax

    def step(state, action):
        state = strong_types(jax.vmap(env_ref().step)(state, action))
        return state, outputs(state)

    return jax.vjp(step, state, action, has_aux=True)


@functools.cache
def _apply_vjp_jitted():
    import jax

    return jax.jit(lambda pullback, cotangent: pullback(cotangent))


def _apply_vjp(pullback, cotangent):
    """``pullback(cotangent)``, compiled (once per pullback structure)."""
    return _apply_vjp_jitted()(pullback, cotangent)


class _BraxStep(torch.autograd.Function):
    """One vmapped Brax step as an autograd node: inputs the action ``[N, A]`` and the
    float leaves of the state, outputs the float leaves of the next state. Backward pulls
    the gradients back through Brax with the ``jax.vjp`` pullback kept from forward."""

    @staticmethod
    def forward(ctx, env: BraxWrapper, action: torch.Tensor, *leaves: torch.Tensor):
        import jax

        next_state, pullback, outputs = env._vjp_fn(env._state, to_jax(action, np.float32))
        env._state, env._grad_outputs = next_state, outputs
        ctx.pullback = pullback
        ctx.backward_fn = env._backward_fn
        ctx.device = action.device
        ctx.action_dtype = action.dtype
        ctx.templates = [(leaf.shape, leaf.dtype) for leaf in jax.tree_util.tree_leaves(next_state)]
        ctx.treedef = jax.tree_util.tree_structure(next_state)
        return tuple(_float_leaves(next_state, action.device))

    @staticmethod
    def backward(ctx, *grads):
        import jax

        if ctx.pullback is None:
            raise RuntimeError(
                "BraxWrapper: backward through the same step twice; pass retain_graph=True "
                "to the first backward() call"
            )
        grads = iter(grads)
        cotangent = []
        for shape, dtype in ctx.templates:
            if np.issubdtype(np.dtype(dtype), np.floating):
                g = next(grads)
                cotangent.append(
                    np.zeros(shape, dtype) if g is None else to_jax(g.reshape(shape), dtype)
                )
            else:
                cotangent.append(np.zeros(shape, jax.dtypes.float0))
        ct_state, ct_action = ctx.backward_fn(
            ctx.pullback, jax.tree_util.tree_unflatten(ctx.treedef, cotangent)
        )
        grad_action = to_torch(ct_action, ctx.device).to(ctx.action_dtype)
        grad_leaves = [
            to_torch(leaf, ctx.device)
            for leaf in jax.tree_util.tree_leaves(ct_state)
            if _is_float(leaf)
        ]
        return (None, grad_action, *grad_leaves)


class BraxEnv(BraxWrapper):
    """A Brax environment built by name: ``BraxWrapper(brax.envs.get_environment(env_name,
    **kwargs))``.

    ``num_workers=N > 1`` returns a :class:`~rl.envs.ParallelEnv` of ``N`` such envs
    (each in its own spawned process, batch ``[N, *batch_size]``), as in TorchRL; it
    waits for the workers without a time limit, as their first reset and step compile.

    Args:
        env_name: a Brax environment name (see :attr:`available_envs`).
        categorical_action_encoding: as in :class:`BraxWrapper`.
        cache_clear_frequency: as in :class:`BraxWrapper`.

    Keyword Args:
        num_workers: the number of worker processes (``None`` / 1: this env itself).
        batch_size, device, requires_grad, from_pixels, frame_skip,
        allow_done_after_reset, run_type_checks: as in :class:`BraxWrapper`.
        **kwargs: passed to ``brax.envs.get_environment`` (the env's own arguments,
            e.g. ``backend``); TorchRL refuses them.

    Raises:
        ValueError: ``env_name`` is not a Brax environment (the message lists the close
            names), or ``num_workers`` is not a positive int.

    Examples:
        >>> from rl.envs import BraxEnv
        >>> env = BraxEnv("fast", batch_size=[2])
        >>> env.action_spec.shape
        torch.Size([2, 1])
        >>> env.observation_spec["observation"].shape
        torch.Size([2, 2])
    """

    def __new__(cls, *args, num_workers: int | None = None, **kwargs):
        if num_workers is not None and num_workers != 1:
            if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
                raise ValueError(f"num_workers must be a positive int, got {num_workers!r}")
            from rl.envs import ParallelEnv

            # spawned workers: forking a process where JAX runs deadlocks (the parent
            # builds one env for the specs); no reply time limit, as the first reset and
            # step compile, which takes minutes for the larger envs on CPU
            return ParallelEnv(
                num_workers,
                functools.partial(cls, *args, **kwargs),
                mp_start_method="spawn",
                timeout=None,
            )
        return super().__new__(cls, *args, **kwargs)

    def __init__(
        self,
        env_name: str,
        categorical_action_encoding: bool = False,
        cache_clear_frequency: int | None = None,
        *,
        num_workers: int | None = None,
        batch_size=None,
        device=None,
        requires_grad: bool = False,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int | None = None,
        allow_done_after_reset: bool = False,
        run_type_checks: bool = False,
        **kwargs,
    ) -> None:
        brax = _import_brax()
        available = self.available_envs
        if env_name not in available:
            close = difflib.get_close_matches(str(env_name), available, n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"env_name {env_name!r} is not a Brax environment{hint}")
        self.env_name = env_name
        super().__init__(
            brax.envs.get_environment(env_name, **kwargs),
            categorical_action_encoding,
            cache_clear_frequency,
            batch_size=batch_size,
            device=device,
            requires_grad=requires_grad,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=frame_skip,
            allow_done_after_reset=allow_done_after_reset,
            run_type_checks=run_type_checks,
        )

    def __repr__(self) -> str:
        return f"BraxEnv(env={self.env_name}, batch_size={self.batch_size})"
